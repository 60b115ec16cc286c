"""Fixtures for the ZooKeeper layer: one real ZooKeeper per test session, a chroot per test.

`zk_server` (session) is shared and never disrupted; tests that stop, kill or restart
ZooKeeper take `own_zk_server` (function scope) instead. `zk_hosts` is a
`zookeeper.connect` string with a fresh chroot, so tests are isolated without restarts.
"""

import pytest

from fastlog.testing import ZooKeeperServer, make_chroot, zookeeper_available
from tests.zk_fixture import zk_server_fixture

zk_server = zk_server_fixture()


@pytest.fixture
def zk_hosts(zk_server):
    return make_chroot(zk_server.hosts)


@pytest.fixture(scope="module")
def _restartable_zk_server(tmp_path_factory):
    if not zookeeper_available():
        pytest.skip("Debian package 'zookeeper' (and java) not installed")
    server = ZooKeeperServer(tmp_path_factory.mktemp("own-zookeeper"))
    yield server
    server.kill()


@pytest.fixture
def own_zk_server(_restartable_zk_server):
    """A server the test may stop, kill and restart (the shared one is never disrupted);
    shared by the tests of one module, each in its own chroot, running when handed out."""
    return _restartable_zk_server.start()


@pytest.fixture
def kazoo(zk_hosts):
    """A plain kazoo client inside the test's chroot, for inspecting what the code wrote."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_hosts, timeout=5.0)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()
