"""perf/tls_consume.py against a real broker with a plaintext and a TLS listener: a short
run reads every record over both and reports the ratio; bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import tls_consume
from tests.perf.scripts import assert_refused

SCRIPT = Path(tls_consume.__file__)


def test_small_run_reads_over_both_listeners():
    r = subprocess.run([sys.executable, str(SCRIPT), "--records", "20000", "--reps", "1",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.strip().splitlines()]
    reads, summary = lines[:-1], lines[-1]
    assert [x["listener"] for x in reads] == ["plaintext", "tls"]
    assert all("records_per_s" in x and "mb_per_s" in x for x in reads)
    assert summary["tls_vs_plaintext"] > 0


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--reps", "0", needle="--reps")
