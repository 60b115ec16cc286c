"""perf/two_brokers.py with a real ZooKeeper: a short run reports both clusters and their
ratios; bad options are one sentence."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastlog.testing import zookeeper_available
from perf import two_brokers
from tests.perf.scripts import assert_figures, assert_refused

SCRIPT = Path(two_brokers.__file__)


@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed "
                    "(scripts/install-system-deps.sh)")
def test_short_run_reports_both_clusters_and_the_ratios():
    r = subprocess.run([sys.executable, str(SCRIPT), "--reps", "1", "--records", "2000"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    one, two, med_one, med_two, ratios = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert (one["brokers"], two["brokers"]) == (1, 2)
    for run in (one, two):
        assert run["produce_records"] == 2000 and run["consume_records"] == 2000
        assert_figures(run, "produce_records_per_s", "produce_broker_cpu_us_per_record")
    assert (med_one["cluster"], med_two["cluster"]) == ("one", "two")
    assert_figures(ratios, "two_vs_one_produce_records_per_s")


def test_bad_options_are_one_sentence_and_exit_2():
    assert_refused(SCRIPT, "--records", "5", needle="--records")
    assert_refused(SCRIPT, "--linger-ms", "-1", needle="--linger-ms")
