"""Fixtures for replication tests: a real ZooKeeper (one per session, a chroot per test)
and three real fastlog-server processes (tests/replication/cluster.py)."""

import pytest

from tests.replication.cluster import Cluster
from tests.zk_fixture import ZooKeeperServer, make_chroot, zookeeper_available


@pytest.fixture(scope="session")
def repl_zk_server(tmp_path_factory):
    if not zookeeper_available():
        pytest.skip("Debian package 'zookeeper' (and java) not installed: "
                    "run scripts/install-system-deps.sh")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.kill()


@pytest.fixture
def cluster_factory(repl_zk_server, tmp_path):
    made = []

    def make(**extra) -> Cluster:
        c = Cluster(tmp_path / f"c{len(made)}", make_chroot(repl_zk_server.hosts), **extra)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def zk_hosts(repl_zk_server):
    return make_chroot(repl_zk_server.hosts)
