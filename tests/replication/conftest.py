"""Fixtures for replication tests: a real ZooKeeper (tests/zk/conftest.py's `zk_server`,
one per session, and `zk_hosts`, a chroot per test) and `cluster_factory`, three real
fastlog-server processes per cluster (tests/replication/cluster.py); a failed test
shows the tail of every broker's log."""

import pytest

from fastlog.testing import make_chroot
from tests.cluster.harness import attach_broker_logs
from tests.replication.cluster import Cluster
from tests.zk.conftest import zk_hosts, zk_server  # noqa: F401 - shared fixtures


@pytest.fixture
def cluster_factory(zk_server, tmp_path):  # noqa: F811 - the imported fixture
    made = []

    def make(**extra) -> Cluster:
        c = Cluster(tmp_path / f"c{len(made)}", make_chroot(zk_server.hosts), **extra)
        made.append(c)
        return c.start()

    make.made = made
    yield make
    for c in made:
        c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A failed replication test shows the tail of every broker's log next to the assertion.
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        attach_broker_logs(rep, getattr(item.funcargs.get("cluster_factory"), "made", []))
