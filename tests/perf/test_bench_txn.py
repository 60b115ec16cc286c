"""perf/bench_txn.py: a short in-process run reports every step of a transaction and the
transaction's cost beyond its records; bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import bench_txn
from tests.perf.scripts import assert_refused

SCRIPT = Path(bench_txn.__file__)


def test_small_run_reports_each_step():
    r = subprocess.run([sys.executable, str(SCRIPT), "--txns", "20", "--records", "50"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    steps = [line.split("  ")[0].strip() for line in lines[:-1]]
    assert steps == ["AddPartitionsToTxn", "Produce (transactional)", "EndTxn",
                     "completion after EndTxn", "Produce (idempotent)"]
    summary = json.loads(lines[-1])
    assert summary["per_txn_us"] > 0 and summary["idempotent_produce_us"] > 0
    # (each figure rounded to 0.1 us on its own)
    assert abs(summary["txn_extra_us"] - (summary["per_txn_us"]
                                          - summary["idempotent_produce_us"])) <= 0.11


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--txns", "0", needle="--txns")
    assert_refused(SCRIPT, "--records", "1000000", needle="--records")
