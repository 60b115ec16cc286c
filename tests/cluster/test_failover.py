"""Failures and orderly stops in a three-broker ZooKeeper-mode cluster (shared by this
module; every test restarts what it stopped): SIGKILL of the controller, SIGKILL of a
broker that leads partitions (RF=3 leadership moves to a live ISR member, RF=1 partitions
go offline until it returns), SIGTERM's controlled shutdown, and ZooKeeper itself stopped
and restarted under a running cluster."""

import json
import threading
import time

import pytest
from kazoo.client import KazooClient

from fastlog.protocol import ApiKey
from fastlog.testing import make_chroot, wait_until
from tests.cluster.harness import BROKER_IDS, SESSION_TIMEOUT_MS
from tests.server.wire import Wire

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

# Crash detection is the ZooKeeper session timeout plus a tick; leave room on a busy box.
FAILOVER_S = SESSION_TIMEOUT_MS / 1000 + 10


def create_topic(cluster, name, partitions, rf):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=10)[name].result(15)
    return cluster.wait_leaders(name, partitions)


def bootstrap_of(cluster, exclude=()):
    return ",".join(b.bootstrap for i, b in cluster.brokers.items()
                    if i not in exclude and b.alive())


def test_controller_sigkill_elects_a_new_controller_with_a_higher_epoch(cluster):
    old = cluster.controller()
    epoch = cluster.controller_epoch()
    cluster.kill(old)
    new = wait_until(lambda: (c := cluster.controller()) not in (None, old) and c,
                     FAILOVER_S, what="a new controller")
    assert new in BROKER_IDS and new != old
    assert cluster.controller_epoch() > epoch
    assert cluster.json("/controller")["brokerid"] == new
    wait_until(lambda: str(old) not in cluster.zk.get_children("/brokers/ids"), FAILOVER_S,
               what="the killed broker's registration gone")
    cluster.start_broker(old)
    wait_until(lambda: cluster.registered() == [1, 2, 3], 60, what="it registers again")
    assert cluster.controller() == new  # the office stays where it is


def test_broker_sigkill_moves_rf3_leadership_and_takes_rf1_offline_until_back(cluster):
    rf3 = create_topic(cluster, "kill-rf3", 3, 3)
    rf1 = create_topic(cluster, "kill-rf1", 6, 1)
    victim = next(b for b in BROKER_IDS if b != cluster.controller()
                  and b in rf3.values() and b in rf1.values())
    mine3 = [p for p, lead in rf3.items() if lead == victim]
    mine1 = [p for p, lead in rf1.items() if lead == victim]
    epochs = {p: cluster.state("kill-rf3", p)["leader_epoch"] for p in mine3}
    cluster.kill(victim)

    def moved():
        states = {p: cluster.state("kill-rf3", p) for p in mine3}
        return all(st["leader"] not in (victim, -1) for st in states.values()) and states
    states = wait_until(moved, FAILOVER_S, what="RF=3 leadership moved off the killed broker")
    for p, st in states.items():
        assert st["leader"] in st["isr"] and victim not in st["isr"]
        assert st["leader_epoch"] > epochs[p]
    offline = wait_until(lambda: all(cluster.state("kill-rf1", p)["leader"] == -1
                                     for p in mine1), FAILOVER_S,
                         what="RF=1 partitions of the killed broker offline")
    assert offline
    for p in mine1:
        assert cluster.state("kill-rf1", p)["isr"] == [victim]  # kept: who may lead again
    others = {p: lead for p, lead in rf1.items() if lead != victim}
    assert {p: cluster.state("kill-rf1", p)["leader"] for p in others} == others

    # Metadata from a live broker says so; a producer still reaches the live partitions
    # (each broker applies the new states from its own ZooKeeper watch, a moment after
    # ZooKeeper has them)
    admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster)})

    def offline_in_metadata():
        md = admin.list_topics("kill-rf1", timeout=10)
        return (sorted(md.brokers) == sorted(set(BROKER_IDS) - {victim})
                and all(md.topics["kill-rf1"].partitions[p].leader == -1 for p in mine1))

    wait_until(offline_in_metadata, 60, what="the offline partitions in live brokers' metadata")
    prod = Producer({"bootstrap.servers": bootstrap_of(cluster)})
    for p in others:
        prod.produce("kill-rf1", value=b"while-down", partition=p)
    assert prod.flush(60) == 0

    cluster.start_broker(victim)
    wait_until(lambda: all(cluster.state("kill-rf1", p)["leader"] == victim for p in mine1),
               FAILOVER_S, what="RF=1 partitions back online on their broker")
    prod = Producer({"bootstrap.servers": cluster.bootstrap})
    for p in mine1:
        prod.produce("kill-rf1", value=b"after", partition=p)
    assert prod.flush(60) == 0


def test_sigterm_moves_leadership_off_the_broker_before_it_exits(cluster):
    rf3 = create_topic(cluster, "term-rf3", 6, 3)
    for stopping_controller in (False, True):
        ctl = cluster.controller()
        target = ctl if stopping_controller else next(
            b for b in BROKER_IDS if b != ctl and b in rf3.values())
        led = [p for p in range(6) if cluster.state("term-rf3", p)["leader"] == target]
        assert led, "the broker leads something"
        # Watch ZooKeeper while the broker stops: leadership must leave it while its
        # registration is still there, not after (that would be a crash-style failover).
        seen = {}
        done = threading.Event()

        def watch(target=target, led=led, seen=seen, done=done):
            zk = KazooClient(hosts=cluster.zk_hosts, timeout=5.0)
            zk.start(timeout=10)
            try:
                while not done.is_set():
                    registered = zk.exists(f"/brokers/ids/{target}") is not None
                    leaders = [json.loads(zk.get(
                        f"/brokers/topics/term-rf3/partitions/{p}/state")[0])["leader"]
                        for p in led]
                    if all(lead != target for lead in leaders):
                        seen["registered_when_moved"] = registered
                        return
                    time.sleep(0.005)
            finally:
                zk.stop()
                zk.close()

        t = threading.Thread(target=watch)
        t.start()
        try:
            assert cluster.stop(target) == 0
            t.join(60)
        finally:
            done.set()
            t.join(5)
        assert seen.get("registered_when_moved") is True, seen
        lines = [ln for ln in cluster.brokers[target].log_path.read_text().splitlines()
                 if "controlled shutdown:" in ln]
        assert len(lines) == 1 and "term-rf3" not in lines[0], lines
        for p in led:
            st = cluster.state("term-rf3", p)
            assert st["leader"] not in (target, -1) and target not in st["isr"]
        cluster.start_broker(target)
        wait_until(lambda: cluster.registered() == [1, 2, 3], 60, what="broker back")
        wait_until(lambda: cluster.controller() is not None, FAILOVER_S, what="a controller")


def test_zookeeper_stopped_and_restarted_under_a_running_cluster(own_zk_server, fresh_cluster):
    zk = own_zk_server
    cluster = fresh_cluster(zk_hosts=make_chroot(zk.hosts))
    create_topic(cluster, "zkdown", 3, 1)
    prod = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(30):
        prod.produce("zkdown", value=b"before-%d" % i, partition=i % 3)
    assert prod.flush(60) == 0
    sessions = {i: cluster.zk.exists(f"/brokers/ids/{i}").ephemeralOwner for i in BROKER_IDS}

    cluster.reset_zk()
    zk.stop()
    # Leaders keep serving what they lead while ZooKeeper is away (sessions live on).
    for i in range(30):
        prod.produce("zkdown", value=b"during-%d" % i, partition=i % 3)
    assert prod.flush(60) == 0
    time.sleep(SESSION_TIMEOUT_MS / 1000 + 0.5)  # longer than the session timeout
    zk.start()

    # ZooKeeper reloads the sessions; one whose broker reconnected too late for the session
    # timeout expired, and that broker registered again: either way all are back.
    wait_until(lambda: _registered_quietly(cluster) == [1, 2, 3], 60, what="registrations")
    owners = {i: cluster.zk.exists(f"/brokers/ids/{i}").ephemeralOwner for i in BROKER_IDS}
    assert all(owners[i] == sessions[i] or _renewed(cluster, i) for i in BROKER_IDS), owners
    # The cluster takes metadata changes again: a new topic gets leaders and traffic
    leaders = wait_until(lambda: _try_create(cluster, "zkback"), 30, interval=0.5,
                         what="topic creation after ZooKeeper is back")
    assert set(leaders.values()) <= set(BROKER_IDS)
    for i in range(30):
        prod.produce("zkback", value=b"after-%d" % i, partition=i % 3)
    assert prod.flush(60) == 0

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "zk-restart",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["zkdown"])
        got = set()
        deadline = time.monotonic() + 30
        while len(got) < 60 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.add(m.value())
    finally:
        c.close()
    assert got == {b"before-%d" % i for i in range(30)} | {b"during-%d" % i for i in range(30)}

    # SIGTERM while ZooKeeper is away: no controlled shutdown possible, yet a prompt exit
    cluster.reset_zk()
    zk.stop()
    for i in BROKER_IDS:
        started = time.monotonic()
        assert cluster.stop(i) == 0
        assert time.monotonic() - started < 8
        assert "controlled shutdown skipped: ZooKeeper is unreachable" in \
            cluster.brokers[i].log_path.read_text()


def _registered_quietly(cluster):
    try:
        return cluster.registered()
    except Exception:  # noqa: BLE001 - the inspecting client is reconnecting
        return None


def _renewed(cluster, node_id):
    return f"re-registered broker {node_id} after session expiry" in \
        cluster.brokers[node_id].log_path.read_text()


def _try_create(cluster, name):
    try:
        if not cluster.zk.exists(f"/brokers/topics/{name}"):
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept alive
            admin.create_topics([NewTopic(name, 3, 1)], operation_timeout=10)[name].result(15)
        return cluster.wait_leaders(name, 3, timeout=5)
    except Exception as e:  # noqa: BLE001 - retried until the cluster answers again
        print(f"creating {name}: {e!r}")
        return None


def test_restart_within_the_session_timeout_replaces_its_own_stale_registration(fresh_cluster):
    # Sessions of 8 s, not the module cluster's 2 s: the restart (~0.7 s of Python start-up
    # on an idle machine, more on a loaded one) must land before the crashed session ends.
    cluster = fresh_cluster(**{"zookeeper.session.timeout.ms": 8000})
    victim = next(b for b in BROKER_IDS if b != cluster.controller())
    old_owner = cluster.zk.exists(f"/brokers/ids/{victim}").ephemeralOwner
    cluster.kill(victim)
    cluster.start_broker(victim)  # at once: ZooKeeper still holds the crashed session
    new_owner = cluster.zk.exists(f"/brokers/ids/{victim}").ephemeralOwner
    assert new_owner != old_owner
    assert "ending our previous session" in cluster.brokers[victim].log_path.read_text()
    wait_until(lambda: cluster.registered() == [1, 2, 3], 60, what="all registered")


def test_expired_session_stops_writes_then_the_broker_registers_and_leads_again(cluster):
    leaders = create_topic(cluster, "expiry", 6, 1)
    victim = next(b for b in BROKER_IDS if b != cluster.controller())
    mine = [p for p, lead in leaders.items() if lead == victim]
    epochs = {p: cluster.state("expiry", p)["leader_epoch"] for p in mine}
    creds = _load_session(cluster.brokers[victim].data_dir / "zk-session")
    clone = KazooClient(hosts=cluster.zk_hosts.split("/", 1)[0], client_id=creds, timeout=5.0)
    clone.start(timeout=10)
    clone.stop()  # ends the broker's session on the server, as an expiry does
    clone.close()

    log_path = cluster.brokers[victim].log_path
    wait_until(lambda: f"re-registered broker {victim} after session expiry"
               in log_path.read_text(), 60, what="registration after expiry")
    assert "ZooKeeper session expired: refusing writes" in log_path.read_text()
    wait_until(lambda: all((st := cluster.state("expiry", p))["leader"] == victim
                           and st["leader_epoch"] > epochs[p] for p in mine),
               FAILOVER_S, what="leadership given back at a new epoch")
    prod = Producer({"bootstrap.servers": cluster.bootstrap})
    for p in mine:
        prod.produce("expiry", value=b"after-expiry", partition=p)
    assert prod.flush(60) == 0


def _load_session(path):
    from fastlog.zk.client import load_session
    creds = load_session(str(path))
    assert creds is not None, f"no saved session in {path}"
    return creds


def test_group_coordinator_hands_the_group_on_when_its_broker_stops(own_zk_server,
                                                                  fresh_cluster):
    cluster = fresh_cluster(zk_hosts=make_chroot(own_zk_server.hosts),
                            **{"offsets.topic.replication.factor": 3,
                               "min.insync.replicas": 1,
                               "leader.imbalance.check.interval.seconds": 1})
    create_topic(cluster, "handover", 3, 3)
    prod = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(30):
        prod.produce("handover", value=b"first-%d" % i, partition=i % 3)
    assert prod.flush(60) == 0

    group = "handover-group"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["handover"])
        got = _poll_values(c, 30)
        assert len(got) == 30
        c.commit(asynchronous=False)
    finally:
        c.close()

    from fastlog.server.group.offsets import partition_for
    op = partition_for(group, 6)
    coordinator = cluster.state("__consumer_offsets", op)["leader"]
    # the commits reached every replica of the group's partition before the leader stops
    wait_until(lambda: len({_log_bytes(b, f"__consumer_offsets-{op}")
                            for b in cluster.brokers.values()}) == 1, 15,
               what="__consumer_offsets replicated")
    assert cluster.stop(coordinator) == 0
    new = wait_until(lambda: (lead := cluster.state("__consumer_offsets", op)["leader"])
                     not in (coordinator, -1) and lead, FAILOVER_S, what="a new coordinator")

    for i in range(30):
        prod.produce("handover", value=b"second-%d" % i, partition=i % 3)
    assert prod.flush(60) == 0
    c = Consumer({"bootstrap.servers": bootstrap_of(cluster), "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["handover"])
        got = _poll_values(c, 30)
    finally:
        c.close()
    # the new coordinator loaded the committed offsets: only the second batch is read
    assert sorted(got) == sorted(b"second-%d" % i for i in range(30)), (new, got[:5])

    # Back, in sync again, it is the preferred leader: the controller's rebalance gives the
    # partition (and so the group) back to it.
    cluster.start_broker(coordinator)
    wait_until(lambda: cluster.state("__consumer_offsets", op)["leader"] == coordinator,
               30, what="preferred leader back")
    w = Wire(cluster.brokers[new])
    try:
        found = wait_until(lambda: (r := w.call(ApiKey.FIND_COORDINATOR, 2,
                                                {"key": group, "key_type": 0})).node_id
                           == coordinator and r, 10, what="FindCoordinator follows")
        assert found.port == cluster.brokers[coordinator].port
    finally:
        w.close()


def _poll_values(consumer, want, timeout=30.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    # a little longer: nothing beyond what is expected may arrive
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
    return got


def _log_bytes(broker, dirname):
    d = broker.data_dir / dirname
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else -1


def test_topic_deleted_while_a_broker_is_down_leaves_no_log_on_it(cluster):
    import re
    leaders = create_topic(cluster, "gone-while-down", 3, 1)
    victim = next(b for b in BROKER_IDS if b != cluster.controller())
    assert victim in leaders.values()
    broker = cluster.brokers[victim]
    assert cluster.stop(victim) == 0
    assert any(re.fullmatch(r"gone-while-down-\d+", d.name) for d in broker.data_dir.iterdir())
    admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster)})
    admin.delete_topics(["gone-while-down"], operation_timeout=10)["gone-while-down"].result(15)
    wait_until(lambda: not cluster.zk.exists("/brokers/topics/gone-while-down"), 10,
               what="topic deleted")
    cluster.start_broker(victim)
    assert not any(re.fullmatch(r"gone-while-down-\d+", d.name)
                   for d in broker.data_dir.iterdir())
    assert "deleting stray log gone-while-down-" in broker.log_path.read_text()
    wait_until(lambda: cluster.registered() == [1, 2, 3], 60, what="broker back")
