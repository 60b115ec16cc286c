"""Fixtures for cluster-mode tests: one real ZooKeeper per test session (a fresh chroot per
cluster), `cluster` (three brokers shared by a module; tests that kill or stop a broker
start it again before they end) and `fresh_cluster` (per test)."""

import pytest

from fastlog.testing import ZooKeeperServer, make_chroot
from tests.cluster.harness import ClusterHarness, attach_broker_logs
from tests.zk_fixture import zk_server_fixture

zk_server = zk_server_fixture()


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = ClusterHarness(tmp_path_factory.mktemp("cluster"), make_chroot(zk_server.hosts))
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture
def fresh_cluster(zk_server, tmp_path):
    made = []

    def make(zk_hosts=None, **extra) -> ClusterHarness:
        c = ClusterHarness(tmp_path, zk_hosts or make_chroot(zk_server.hosts), **extra)
        made.append(c)
        return c.start()

    make.made = made
    yield make
    for c in made:
        c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A failed cluster test shows the tail of every broker's log next to the assertion.
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" or not rep.failed:
        return
    clusters = []
    if isinstance(item.funcargs.get("cluster"), ClusterHarness):
        clusters.append(item.funcargs["cluster"])
    clusters.extend(getattr(item.funcargs.get("fresh_cluster"), "made", []))
    attach_broker_logs(rep, clusters)


@pytest.fixture
def own_zk_server(zk_server, tmp_path_factory):
    """A ZooKeeper the test may stop and restart (the shared one is never disrupted).
    Request it before `fresh_cluster`, so the brokers stop before it goes."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("own-zookeeper")).start()
    yield server
    server.kill()
