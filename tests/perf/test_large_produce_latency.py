"""perf/large_produce_latency.py against a real broker: a short run reports the idle and
loaded probes, the large requests answered and the ratio; bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import large_produce_latency
from tests.perf.scripts import assert_refused

SCRIPT = Path(large_produce_latency.__file__)


def _short_run(*extra: str) -> list[dict]:
    """The JSON lines of a one-second run with 300 KB batches."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--batch-records", "300",
                        "--record-size", "1000", "--rate", "300", "--probe-seconds", "1",
                        "--json", *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.strip().splitlines()]


def test_small_run_reports_both_probes_and_the_large_stream():
    lines = _short_run("--codec", "zstd")
    (run,), summary = lines[:-1], lines[-1]
    assert run["codec"] == "zstd" and run["batch_raw_bytes"] == 300_000
    assert run["large_requests"] > 0   # the large stream was answered meanwhile
    for probe in ("idle", "loaded"):
        assert run[probe]["p99_ms"] >= run[probe]["p50_ms"] > 0
    assert summary == {"p99_loaded_vs_idle": run["p99_loaded_vs_idle"]}


def test_override_runs_the_broker_with_a_config_key():
    run = _short_run("--override", "num.network.threads=2")[0]
    assert run["large_requests"] > 0


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--streams", "0", needle="--streams")
    assert_refused(SCRIPT, "--batch-records", "100000", "--record-size", "1000",
                   needle="60 MiB")
