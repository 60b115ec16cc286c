"""perf/cleaner_latency.py's own parts: it sees a cleaning pass end in the checkpoint the
cleaner writes, a small run reports both probes and the pass against a real broker, and
a bad option is one sentence with exit 2. (The full run is a benchmark: perf/README.md.)"""

import json
import subprocess
import sys
from pathlib import Path

from fastlog.server.log.checkpoint import OffsetCheckpointFile
from fastlog.server.log.cleaner import CLEANER_OFFSET_CHECKPOINT
from perf import cleaner_latency
from tests.perf.scripts import assert_refused

SCRIPT = Path(cleaner_latency.__file__)


def test_pass_end_is_read_from_the_cleaners_checkpoint(tmp_path):
    assert cleaner_latency._cleaned_offset(tmp_path) is None
    OffsetCheckpointFile(str(tmp_path / CLEANER_OFFSET_CHECKPOINT)).write(
        {("other", 0): 5, (cleaner_latency.TOPIC, 1): 6})
    assert cleaner_latency._cleaned_offset(tmp_path) is None
    OffsetCheckpointFile(str(tmp_path / CLEANER_OFFSET_CHECKPOINT)).write(
        {("other", 0): 5, (cleaner_latency.TOPIC, 0): 1234})
    assert cleaner_latency._cleaned_offset(tmp_path) == 1234


def test_small_run_reports_idle_and_cleaning_probes():
    r = subprocess.run([sys.executable, str(SCRIPT), "--records", "30000", "--segment-mib", "1",
                        "--rate", "500",
                        "--probe-seconds", "1", "--intervals", "0.1", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.strip().splitlines()]
    (run,), summary = lines[:-1], lines[-1]
    assert run["switch_interval_ms"] == 0.1
    assert run["pass_s"] is not None and run["pass_s"] > 0   # the compaction pass was seen
    for probe in ("idle", "cleaning"):
        assert run[probe]["p99_ms"] >= run[probe]["p50_ms"] > 0
    assert summary == {"p99_cleaning_vs_idle_0.1ms": run["p99_cleaning_vs_idle"]}


def test_bad_intervals_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--intervals", "fast", needle="--intervals")
