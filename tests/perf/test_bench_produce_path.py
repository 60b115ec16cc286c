"""perf/bench_produce_path.py runs this tree on a few partitions and prints its figures for
both request shapes (no speed is asserted: only that the script works and refuses bad
options with one sentence)."""

import json
import pathlib
import subprocess
import sys

from tests.perf.scripts import assert_refused

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "perf" / "bench_produce_path.py"


def test_script_prints_both_shapes_for_the_tree():
    r = subprocess.run([sys.executable, str(SCRIPT), f"this={ROOT}", "--reps", "1",
                        "--partitions", "4", "--passes", "2"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.strip().splitlines()]
    runs = {row["shape"]: row for row in rows if "rep" in row}
    assert runs["one"]["requests"] == 8 and runs["all"]["requests"] == 2
    summary = [row for row in rows if "median_cpu_us_per_partition" in row]
    assert [(s["shape"], s["tree"], s["ratio_to_first"]) for s in summary] == [
        ("one", "this", 1.0), ("all", "this", 1.0)]


def test_bad_options_are_refused():
    assert_refused(SCRIPT, "--partitions", "0", needle="--partitions")
    assert_refused(SCRIPT, "--shapes", "some", needle="--shapes")
