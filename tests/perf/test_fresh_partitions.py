"""perf/fresh_partitions.py against this tree's broker: a short run reports per-partition
CPU and the files a fresh partition costs (its directory, .log and leader-epoch
checkpoint when created, nothing more with the first write: index files come with a
first entry, the .txnindex with a first aborted transaction);
bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import fresh_partitions
from tests.perf.scripts import assert_figures, assert_refused

SCRIPT = Path(fresh_partitions.__file__)
TREE = f"new={SCRIPT.parent.parent}"


def test_short_run_reports_cpu_and_files():
    r = subprocess.run([sys.executable, str(SCRIPT), TREE, "--reps", "1", "--partitions", "20",
                        "--topics", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run, summary = [json.loads(line) for line in r.stdout.strip().splitlines()]
    # the partition dir, its .log and the leader-epoch checkpoint; nothing with the
    # first write (no .txnindex without an aborted transaction)
    assert run["files_created"] == 3.0 and run["files_written"] == 3.0
    assert_figures(run, "create_ms", "first_write_ms", "second_write_ms")
    assert run["create_s"] > 0
    assert summary["median_files_written"] == 3.0


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, TREE, "--partitions", "0", needle="--partitions")
    assert_refused(SCRIPT, TREE, "--topics", "21", needle="--topics")
