"""perf/large_produce_latency.py against a real broker: a short run reports, per segment,
the quiet and loaded windows of the raw probe and the large requests answered, then the
median ratios; the echo probe (the machine's floor) and a paced load; bad options are one
sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import large_produce_latency
from tests.perf.scripts import assert_refused

SCRIPT = Path(large_produce_latency.__file__)


def _short_run(*extra: str) -> list[dict]:
    """The JSON lines of a run of two one-second segments with 300 KB batches."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--batch-records", "300",
                        "--record-size", "1000", "--rate", "300", "--segments", "2",
                        "--window", "1", "--settle", "0.2", *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.strip().splitlines()]


def test_small_run_reports_both_windows_of_each_segment_and_the_ratios():
    lines = _short_run("--codec", "zstd")
    segments, summary = lines[:-1], lines[-1]
    assert [s["segment"] for s in segments] == [0, 1]
    for seg in segments:
        assert seg["loaded"]["large_requests"] > 0   # the large stream was answered meanwhile
        for window in ("quiet", "loaded"):
            w = seg[window]
            assert w["count"] > 100   # about 300 probe requests per one-second window
            assert w["p99_ms"] >= w["p50_ms"] > 0 and w["rtt_p99_ms"] >= w["rtt_p50_ms"] > 0
    assert summary["codec"] == "zstd" and summary["batch_raw_bytes"] == 300_000
    ratios = sorted(s["p99_ratio"] for s in segments)
    assert summary["p99_ratio_range"] == ratios
    assert summary["p99_ratio"] == round((ratios[0] + ratios[1]) / 2, 2)


def test_apiversions_probe_and_override():
    lines = _short_run("--probe", "apiversions", "--override", "num.network.threads=2")
    assert lines[-1]["probe"] == "apiversions"
    assert all(s["loaded"]["large_requests"] > 0 for s in lines[:-1])


def test_echo_probe_answered_by_its_own_process_under_a_paced_load():
    lines = _short_run("--probe", "echo", "--load-rate", "4")
    summary = lines[-1]
    assert summary["probe"] == "echo" and summary["load_rate"] == 4
    for seg in lines[:-1]:
        assert seg["quiet"]["count"] > 100 and seg["loaded"]["count"] > 100
        # paced at 4 a second: at most 4 answered in the one-second window (+1 in flight)
        assert seg["loaded"]["large_requests"] <= 5
    # and the load ran (in one window or both: on a busy machine a 300 KB batch's answer
    # can take a window's second, as the broker checks it in a worker process)
    assert sum(seg["loaded"]["large_requests"] for seg in lines[:-1]) > 0


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--streams", "0", needle="--streams")
    assert_refused(SCRIPT, "--batch-records", "100000", "--record-size", "1000",
                   needle="60 MiB")
    assert_refused(SCRIPT, "--window", "0.1", needle="--window")
    assert_refused(SCRIPT, "--load-rate", "-1", needle="--load-rate")
