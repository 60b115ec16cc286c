"""perf/txn_throughput.py against a real broker: a short run produces with librdkafka's
idempotent and transactional producers, reads the transactional topic at both isolation
levels and reports what it says; bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import txn_throughput
from tests.perf.scripts import assert_figures, assert_refused

SCRIPT = Path(txn_throughput.__file__)


def test_small_run_reports_both_ratios():
    r = subprocess.run([sys.executable, str(SCRIPT), "--records", "4000", "--txn-records",
                        "1000", "--reps", "1", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.strip().splitlines()]
    phases, summary = lines[:-1], lines[-1]
    assert sorted(x["phase"] for x in phases) == [
        "consume read_committed", "consume read_uncommitted", "produce idempotent",
        "produce transactional"]
    for x in phases:
        assert_figures(x, "records_per_s")
    assert summary["records"] == 4000 and summary["txn_records"] == 1000
    assert_figures(summary, "transactional_cpu_us_per_record", "read_committed_vs_uncommitted")
    assert "txn_vs_idempotent_cpu" in summary


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--reps", "0", needle="--reps")
    assert_refused(SCRIPT, "--records", "10", "--txn-records", "20", needle="--txn-records")
