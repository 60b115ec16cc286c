# pytest side of a real Apache ZooKeeper (fastlog.testing.ZooKeeperServer): the
# session-scoped `zk_server` fixture, and expire_session(), which ends a kazoo client's
# session for real on the server (kazoo's own test harness only fakes it client-side).
# ZooKeeperServer, make_chroot, zookeeper_available and wait_until are fastlog.testing's.
# Used from the pytest main thread only.

from __future__ import annotations

import time

from fastlog.testing import ZooKeeperServer, zookeeper_available


def expire_session(client, hosts: str, timeout: float = 10.0) -> None:
    """End `client`'s session on the server for real: connect a second client with the same
    session id and password and close it. The server deletes the session's ephemeral nodes
    and `client` sees LOST, then reconnects with a new session."""
    from kazoo.client import KazooClient

    old_session = client.client_id[0]
    clone = KazooClient(hosts=hosts.split("/", 1)[0], client_id=client.client_id, timeout=5.0)
    clone.start(timeout=timeout)
    clone.stop()
    clone.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cid = client.client_id
        if cid is not None and cid[0] != old_session and client.connected:
            return
        time.sleep(0.02)
    raise TimeoutError("client did not reconnect with a new session after expiry")


def zk_server_fixture():
    """A session-scoped `zk_server` fixture (one real ZooKeeper, killed at the end);
    assign it in a conftest.py: ``zk_server = zk_server_fixture()``."""
    import pytest

    @pytest.fixture(scope="session")
    def zk_server(tmp_path_factory):
        if not zookeeper_available():
            pytest.skip("Debian package 'zookeeper' (and java) not installed: "
                        "run scripts/install-system-deps.sh")
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
        yield server
        server.kill()

    return zk_server
