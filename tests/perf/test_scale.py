"""perf/scale.py with tiny sizes: every figure line, then one JSON line with the issue's
keys (no speed is asserted); bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

from perf import scale
from tests.perf.scripts import assert_refused

SCRIPT = Path(scale.__file__)
KEYS = {"create_s", "restart_clean_s", "restart_unclean_s", "rss_after_restart_mb",
        "produce_cpu_vs_peer_1000p", "consume_cpu_vs_peer_1000p", "idle_conn_p99_ratio",
        "fetch_session_idle_cpu_ratio"}


def test_quick_run_ends_with_one_json_line_of_every_figure():
    r = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--partitions", "12"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert KEYS <= set(out) and out["partitions"] == 12
    for key in ("create_s", "restart_clean_s", "restart_unclean_s", "rss_after_restart_mb"):
        assert isinstance(out[key], float) and out[key] > 0
    # the ratios are numbers, or null when an anchor read zero CPU or tansu is absent
    for key in KEYS - {"create_s", "restart_clean_s", "restart_unclean_s",
                       "rss_after_restart_mb"}:
        assert out[key] is None or out[key] >= 0
    text = "\n".join(lines[:-1])
    for needle in ("create 12 partitions", "metadata for all: 12/12", "restart after SIGTERM",
                   "restart after SIGKILL", "idle connections", "an idle fetch"):
        assert needle in text


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--partitions", "0", needle="--partitions")
    assert_refused(SCRIPT, "--recovery-threads", "0", needle="--recovery-threads")
