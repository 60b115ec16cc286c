"""perf/txn_wakeups.py against a real broker: a short run reports the broker's CPU per
transaction back to back and with pauses, and with --floor the goal's allowance and a
null server's cost of the same requests; bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import txn_wakeups
from tests.perf.scripts import assert_refused

SCRIPT = Path(txn_wakeups.__file__)


def test_small_run_reports_both_phases():
    r = subprocess.run([sys.executable, str(SCRIPT), "--txns", "5", "--records", "10",
                        "--reps", "2", "--pause-ms", "1"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert sum("back_to_back" in line for line in lines[:-1]) == 2
    assert sum("paused" in line for line in lines[:-1]) == 2
    summary = json.loads(lines[-1])
    assert summary["txns"] == 5 and summary["records"] == 10
    assert summary["back_to_back_us_per_txn"] >= 0 and summary["paused_us_per_txn"] >= 0


def test_floor_reports_the_allowance_and_the_null_servers_cost():
    r = subprocess.run([sys.executable, str(SCRIPT), "--txns", "5", "--records", "10",
                        "--reps", "2", "--pause-ms", "1", "--floor", "--anchor-records", "100"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    floor_lines = [line for line in lines[:-1] if "null_txn_us=" in line]
    assert len(floor_lines) == 2 and all("broker_anchor_us_per_1000_records=" in line
                                         for line in floor_lines)
    summary = json.loads(lines[-1])
    # The allowance is a quarter of the anchor's cost of the same records.
    assert summary["broker_anchor_us_per_txn_records"] >= 0
    assert abs(summary["goal_allowance_us_per_txn"]
               - summary["broker_anchor_us_per_txn_records"] / 4) <= 1
    assert "null_server_extra_us_per_txn" in summary
    assert summary["null_server_txn_vs_anchor"] >= 0


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--txns", "0", needle="--txns")
    assert_refused(SCRIPT, "--pause-ms", "0", needle="--pause-ms")
    assert_refused(SCRIPT, "--anchor-records", "0", needle="--anchor-records")
