"""ZkClusterMember: a broker's startup sequence in cluster mode, from its KafkaConfig."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fastlog.server.config import KafkaConfig
from fastlog.testing import wait_until
from fastlog.zk.client import BrokerIdInUseError
from fastlog.zk.cluster import SESSION_FILE, BrokerIdError, ZkClusterMember
from fastlog.zk.meta_properties import InconsistentClusterIdError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config(zk_hosts, log_dir, **extra):
    props = {"zookeeper.connect": zk_hosts, "log.dirs": str(log_dir),
             "zookeeper.session.timeout.ms": "4000"}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return KafkaConfig(props)


@pytest.fixture
def members():
    made = []

    def make(cfg):
        m = ZkClusterMember(cfg)
        made.append(m)
        return m
    yield make
    for m in made:
        try:
            m.close()
        except Exception:
            pass


def start(member, port, stored=()):
    member.connect()
    member.resolve_broker_id(stored)
    member.register([("PLAINTEXT", "127.0.0.1", port)])
    member.start_metadata()
    member.start_controller()
    return member


def test_members_share_cluster_id_generate_ids_and_elect_a_controller(zk_hosts, tmp_path,
                                                                      members, kazoo):
    a = start(members(config(zk_hosts, tmp_path / "a")), 9201)
    b = start(members(config(zk_hosts, tmp_path / "b")), 9202)
    assert a.cluster_id == b.cluster_id
    assert (a.broker_id, b.broker_id) == (1001, 1002)
    assert sorted(int(c) for c in kazoo.get_children("/brokers/ids")) == [1001, 1002]
    wait_until(lambda: a.controller.is_active != b.controller.is_active, what="one controller")
    assert oct(os.stat(tmp_path / "a" / SESSION_FILE).st_mode & 0o777) == "0o600"
    with pytest.raises(InconsistentClusterIdError):
        a.check_log_dir("someOtherClusterId0000", str(tmp_path / "a"))
    assert a.check_log_dir(None) == a.cluster_id


def test_broker_id_sources(zk_hosts, tmp_path, members):
    m = members(config(zk_hosts, tmp_path / "x", broker_id=5))
    m.connect()
    assert m.resolve_broker_id([5]) == 5
    with pytest.raises(BrokerIdError, match="does not match"):
        m.resolve_broker_id([6])
    with pytest.raises(BrokerIdError, match="different broker ids"):
        m.resolve_broker_id([6, 7])
    n = members(config(zk_hosts, tmp_path / "y"))
    n.connect()
    assert n.resolve_broker_id([7]) == 7
    with pytest.raises(BrokerIdError, match="reserved.broker.max.id"):
        members(config(zk_hosts, tmp_path / "z", broker_id=1001)).resolve_broker_id()


def test_duplicate_configured_id_fails_clearly(zk_hosts, tmp_path, members):
    start(members(config(zk_hosts, tmp_path / "a", broker_id=1)), 9211)
    dup = members(config(zk_hosts, tmp_path / "b", broker_id=1))
    dup.connect()
    dup.resolve_broker_id()
    with pytest.raises(BrokerIdInUseError, match="broker.id 1 is already registered"):
        dup.register([("PLAINTEXT", "127.0.0.1", 9212)])


CRASHING_BROKER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from fastlog.server.config import KafkaConfig
    from fastlog.zk.cluster import ZkClusterMember
    m = ZkClusterMember(KafkaConfig({{"zookeeper.connect": {hosts!r}, "log.dirs": {d!r},
                                      "broker.id": "3",
                                      "zookeeper.session.timeout.ms": "30000"}}))
    m.connect(); m.resolve_broker_id(); m.register([("PLAINTEXT", "127.0.0.1", 9221)])
    print("registered", flush=True)
    time.sleep(60)
""")


def test_restart_after_crash_ends_the_stale_session_and_registers(zk_hosts, tmp_path, members,
                                                                  kazoo):
    log_dir = tmp_path / "d"
    os.makedirs(log_dir)
    code = CRASHING_BROKER.format(root=ROOT, hosts=zk_hosts, d=str(log_dir))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "registered"
        old_owner = kazoo.exists("/brokers/ids/3").ephemeralOwner
    finally:
        proc.send_signal(signal.SIGKILL)  # crash: its 30 s session stays alive on the server
        proc.wait(10)
        proc.stdout.close()
    assert kazoo.exists("/brokers/ids/3").ephemeralOwner == old_owner
    m = members(config(zk_hosts, log_dir, broker_id=3))
    m.connect()
    m.resolve_broker_id()
    m.register([("PLAINTEXT", "127.0.0.1", 9221)])  # no wait for the old session to time out
    assert kazoo.exists("/brokers/ids/3").ephemeralOwner == m.zk.session_id != old_owner


def test_close_resigns_and_deregisters(zk_hosts, tmp_path, members, kazoo):
    a = start(members(config(zk_hosts, tmp_path / "a", broker_id=1)), 9231)
    b = start(members(config(zk_hosts, tmp_path / "b", broker_id=2)), 9232)
    wait_until(lambda: a.controller.is_active, what="a is controller")
    assert a.controlled_shutdown_local() == set()
    assert b.controlled_shutdown_local() is None
    a.close()
    assert kazoo.exists("/brokers/ids/1") is None
    assert not os.path.exists(tmp_path / "a" / SESSION_FILE)
    wait_until(lambda: b.controller.is_active, timeout=5, what="b takes over")


def tree(kz, root="/"):
    out = []
    for child in kz.get_children(root):
        path = root.rstrip("/") + "/" + child
        out.append(path)
        out.extend(tree(kz, path))
    return out


def test_whole_tree_is_kafkas_layout(zk_hosts, tmp_path, members, kazoo):
    a = start(members(config(zk_hosts, tmp_path / "a", broker_id=1)), 9241)
    start(members(config(zk_hosts, tmp_path / "b", broker_id=2)), 9242)
    wait_until(lambda: kazoo.exists("/controller"), what="controller")
    a.controller.create_topic("orders", 2, 2, {"retention.ms": "60000"})
    got = set(tree(kazoo))
    expected = {
        "/admin", "/admin/delete_topics", "/brokers", "/brokers/ids", "/brokers/ids/1",
        "/brokers/ids/2", "/brokers/seqid", "/brokers/topics", "/brokers/topics/orders",
        "/brokers/topics/orders/partitions", "/brokers/topics/orders/partitions/0",
        "/brokers/topics/orders/partitions/0/state", "/brokers/topics/orders/partitions/1",
        "/brokers/topics/orders/partitions/1/state", "/cluster", "/cluster/id", "/config",
        "/config/brokers", "/config/changes", "/config/clients", "/config/ips",
        "/config/topics", "/config/topics/orders", "/config/users", "/consumers",
        "/controller", "/controller_epoch", "/feature", "/isr_change_notification",
        "/latest_producer_id_block", "/log_dir_event_notification",
    }
    assert got == expected
    assert kazoo.exists("/controller").ephemeralOwner != 0
    assert kazoo.exists("/brokers/ids/1").ephemeralOwner == a.zk.session_id
    assert kazoo.exists("/brokers/topics/orders/partitions/0/state").ephemeralOwner == 0


CONTROLLER_PROCESS = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from fastlog.server.config import KafkaConfig
    from fastlog.zk.cluster import ZkClusterMember
    m = ZkClusterMember(KafkaConfig({{"zookeeper.connect": {hosts!r}, "log.dirs": {d!r},
                                      "broker.id": "1",
                                      "zookeeper.session.timeout.ms": "2000"}}))
    m.connect(); m.resolve_broker_id(); m.register([("PLAINTEXT", "127.0.0.1", 9251)])
    m.start_metadata(); c = m.start_controller()
    deadline = time.monotonic() + 20
    while not c.is_active and time.monotonic() < deadline:
        time.sleep(0.01)
    print("controller" if c.is_active else "not controller", c.epoch.epoch if c.epoch else -1,
          flush=True)
    time.sleep(60)
""")


def test_sigkilled_controller_is_replaced_within_its_session_timeout(zk_hosts, tmp_path,
                                                                     members, kazoo):
    code = CONTROLLER_PROCESS.format(root=ROOT, hosts=zk_hosts, d=str(tmp_path / "p"))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        role, epoch = proc.stdout.readline().split()
        assert role == "controller"
        b = start(members(config(zk_hosts, tmp_path / "b", broker_id=2)), 9252)
        assert not b.controller.is_active
        proc.send_signal(signal.SIGKILL)  # no closeSession: ZooKeeper must time it out
        proc.wait(10)
        # session timeout 2 s (+ one 0.5 s tick), with slack for a busy machine
        wait_until(lambda: b.controller.is_active, timeout=8, what="takeover")
        assert b.controller.epoch.epoch == int(epoch) + 1
        assert kazoo.exists("/brokers/ids/1") is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
