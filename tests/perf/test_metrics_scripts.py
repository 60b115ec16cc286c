"""perf/bench_metrics.py (the collector over a synthetic state, also beside a busy loop)
and perf/metrics_scrape.py (a real broker of this tree) in short runs: each prints its
JSON line with the figures of the run (a smoke test: the scripts keep working as the
collector changes; no speed is asserted); metrics_scrape.py refuses a --tree that is not
a checkout."""

import json
import subprocess
import sys
from pathlib import Path

from perf import bench_metrics, metrics_scrape
from tests.perf.scripts import assert_refused

BENCH = Path(bench_metrics.__file__)
SCRAPE = Path(metrics_scrape.__file__)


def test_bench_collects_every_partitions_lines():
    r = subprocess.run([sys.executable, str(BENCH), "--partitions", "300", "--reps", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    row, summary = r.stdout.strip().splitlines()
    # 4 log families and 2 offset families per partition, plus the rest
    assert int(row.split(" lines;")[0].rsplit(" ", 1)[1]) > 6 * 300
    figures = json.loads(summary)
    assert figures["partitions"] == 300 and figures["collect_cpu_ms_median"] > 0


def test_bench_beside_a_busy_loop_collects_every_partitions_lines():
    r = subprocess.run([sys.executable, str(BENCH), "--partitions", "300", "--reps", "1",
                        "--busy-loop"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    row, summary = r.stdout.strip().splitlines()
    assert "beside a busy loop" in row
    figures = json.loads(summary)
    assert figures["partitions"] == 300 and figures["busy_loop_collect_wall_ms_median"] > 0


def test_short_scrape_run_of_this_trees_broker():
    r = subprocess.run([sys.executable, str(SCRAPE), "--partitions", "40", "--scrapes", "2",
                        "--tree", str(SCRAPE.parent.parent)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["partitions"] == 40 and figures["scrape_broker_cpu_ms_median"] >= 0
    assert figures["body_mb"] > 0 and len(figures["probe_ms_in_scrapes_p50_p90_max"]) == 3
    # the null server's scrapes beside the broker's, the same body served
    assert figures["probe"] == "produce"
    assert len(figures["probe_ms_in_null_scrapes_p50_p90_max"]) == 3
    null_rows = [line for line in r.stdout.splitlines() if line.startswith("null scrape")]
    broker_rows = [line for line in r.stdout.splitlines() if line.startswith("broker scrape")]
    assert len(null_rows) == len(broker_rows) == 2
    # (the body the broker gave before the probe began: fewer request series than later)
    assert all(int(row.split(" MB, ")[1].split()[0]) > 0 for row in null_rows)


def test_short_scrape_run_with_a_fetch_probe_and_no_anchor():
    r = subprocess.run([sys.executable, str(SCRAPE), "--partitions", "20", "--scrapes", "2",
                        "--probe", "fetch", "--no-anchor"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["probe"] == "fetch" and "probes_in_null_scrapes" not in figures
    assert not any(line.startswith("null scrape") for line in r.stdout.splitlines())


def test_a_tree_that_is_not_a_checkout_is_refused(tmp_path):
    assert_refused(SCRAPE, "--tree", str(tmp_path), needle=str(tmp_path))
