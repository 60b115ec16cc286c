"""perf/fetch_sessions.py against this tree's broker: a short consumer run and a short
--wire run report what they measured (the wire run through a real session); bad options
are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import fetch_sessions
from tests.perf.scripts import assert_figures, assert_refused

SCRIPT = Path(fetch_sessions.__file__)
TREE = f"new={SCRIPT.parent.parent}"


def _run(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), TREE, "--reps", "1", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.strip().splitlines()]


def test_short_consumer_run_reports_broker_cpu():
    run, summary = _run("--partitions", "20", "--rate", "5", "--seconds", "2", "--warmup", "1")
    assert run["tree"] == "new"
    assert_figures(run, "broker_cpu_s_per_s")
    assert run["sent"] > 0 and 0 <= run["received_by_end"] <= run["sent"]
    assert summary["ratio_to_new"] in (1.0, None)


def test_wire_run_uses_a_session():
    run, summary = _run("--wire", "--partitions", "50", "--fetches", "20")
    assert run["session_id"] != 0 and run["last_error"] == 0
    assert_figures(run, "full_fetch_ms", "incremental_fetch_ms")
    assert "incremental_to_full" in summary


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, TREE, "--reps", "0", needle="--reps")
    assert_refused(SCRIPT, "x=/nonexistent", needle="NAME=PATH")
