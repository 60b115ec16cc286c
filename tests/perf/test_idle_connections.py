"""perf/idle_connections.py against this tree: a short broker run with a few idle
connections and a short --loop run report what they measured; bad options are one
sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import idle_connections
from tests.perf.scripts import assert_figures, assert_refused

SCRIPT = Path(idle_connections.__file__)
TREE = f"new={SCRIPT.parent.parent}"


def _run(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), TREE, *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.strip().splitlines()]


def test_short_broker_run_reports_latency_memory_and_cpu():
    run, summary = _run("--segments", "2", "--idle", "50", "--rate", "100",
                        "--seconds", "1", "--warmup", "1", "--quiet", "1")
    assert run["tree"] == "new" and run["segments"] == 2
    assert run["idle_alive"] == 50   # none was closed while idle for a few seconds
    assert run["p99_ms"] > 0 and run["p99_idle_ms"] > 0 and len(run["p99_ratios"]) == 2
    assert_figures(run, "quiet_cpu_ms_per_s", "quiet_cpu_idle_ms_per_s")
    assert summary["idle_conn_p99_ratio"] > 0 and "kib_per_idle_conn" in summary


def test_loop_run_reports_cpu_per_idle_connection():
    run, summary = _run("--loop", "--reps", "1", "--idle", "100", "--quiet", "1")
    assert run["tree"] == "new"
    assert_figures(run, "with_ms_per_s")
    assert "us_per_idle_conn_per_s" in run
    assert summary["all"] == [run["us_per_idle_conn_per_s"]]


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, TREE, "--segments", "0", needle="--segments")
    assert_refused(SCRIPT, "x=/nonexistent", needle="NAME=PATH")
