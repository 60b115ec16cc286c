"""Cluster mode with three real brokers on one real ZooKeeper (shared by this module):
Kafka's znode layout, leadership spread over the brokers, real clients through one
bootstrap address, NOT_LEADER_OR_FOLLOWER from a broker that does not lead, a consumer
group whose coordinator is another broker, topic config changes and deletion reaching
every broker, and a duplicate broker id refused at startup."""

import re
import subprocess
import time

import pytest

from fastlog.protocol import ApiKey, Errors
from fastlog.server.group.offsets import partition_for
from fastlog.testing import BrokerProcess, wait_until
from tests.cluster.harness import BROKER_IDS, overrides
from tests.server.wire import Wire, batch, fetch_body, produce

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

# AlterConfigs (non-incremental) is what this test means to send.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")


def create_topic(cluster, name, partitions, rf, configs=None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})],
                              operation_timeout=10)[name]
    fut.result(15)
    return cluster.wait_leaders(name, partitions)


def produce_all(bootstrap, topic, partitions, per_partition):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(partitions * per_partition):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(20) == 0, "records left unacknowledged"


def test_znodes_follow_kafkas_layout(cluster):
    zk = cluster.zk
    assert sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"]
    for i, b in cluster.brokers.items():
        reg = cluster.json(f"/brokers/ids/{i}")
        assert reg["version"] == 5
        assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b.port}"]
        assert (reg["host"], reg["port"]) == ("127.0.0.1", b.port)
        assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert reg["jmx_port"] == -1 and reg["timestamp"].isdigit()
        assert zk.exists(f"/brokers/ids/{i}").ephemeralOwner != 0
    cid = cluster.json("/cluster/id")
    assert cid["version"] == "1" and re.fullmatch(r"[A-Za-z0-9_-]{22}", cid["id"])
    ctl = cluster.json("/controller")
    assert ctl["brokerid"] in BROKER_IDS and ctl["version"] in (1, 2)
    assert zk.exists("/controller").ephemeralOwner != 0
    assert cluster.controller_epoch() >= 1
    for path in ("/consumers", "/config/changes", "/admin/delete_topics", "/brokers/seqid",
                 "/isr_change_notification", "/latest_producer_id_block",
                 "/log_dir_event_notification", "/config/topics", "/config/brokers"):
        assert zk.exists(path), path
    # every broker's log dir took the cluster id
    for b in cluster.brokers.values():
        props = (b.data_dir / "meta.properties").read_text()
        assert f"cluster.id={cid['id']}" in props

    create_topic(cluster, "layout", 2, 2, {"retention.ms": "3600000"})
    topic = cluster.json("/brokers/topics/layout")
    assert topic["version"] in (2, 3) and set(topic["partitions"]) == {"0", "1"}
    assert all(len(r) == 2 and len(set(r)) == 2 for r in topic["partitions"].values())
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", topic["topic_id"])
    assert cluster.json("/config/topics/layout") == {"version": 1,
                                                      "config": {"retention.ms": "3600000"}}
    st = cluster.state("layout", 0)
    assert st["version"] == 1 and st["leader"] == topic["partitions"]["0"][0]
    assert st["leader_epoch"] == 0 and st["controller_epoch"] >= 1
    assert sorted(st["isr"]) == sorted(topic["partitions"]["0"])


def test_six_partitions_spread_over_brokers_and_clients_use_one_bootstrap(cluster):
    leaders = create_topic(cluster, "spread", 6, 1)
    counts = {b: list(leaders.values()).count(b) for b in BROKER_IDS}
    assert counts == {1: 2, 2: 2, 3: 2}, leaders
    # confluent-kafka produces through broker 1 only; records land on all three
    produce_all(cluster.bootstrap, "spread", 6, 10)
    for i, b in cluster.brokers.items():
        dirs = {d.name for d in b.data_dir.iterdir() if d.name.startswith("spread-")}
        assert dirs == {f"spread-{p}" for p, lead in leaders.items() if lead == i}

    # kafka-python reads all of them back, bootstrapped from another broker
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.brokers[2].bootstrap,
                                   auto_offset_reset="earliest", consumer_timeout_ms=10000,
                                   enable_auto_commit=False)
    try:
        consumer.assign([kafka.TopicPartition("spread", p) for p in range(6)])
        got = set()
        deadline = time.monotonic() + 20
        while len(got) < 60 and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500).values():
                got.update((m.partition, m.value) for m in msgs)
    finally:
        consumer.close()
    assert got == {(i % 6, b"v%d" % i) for i in range(60)}

    # Metadata from any broker: every broker, the real controller
    for b in cluster.brokers.values():
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("spread", timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        assert md.controller_id == cluster.controller()
        assert {p: m.leader for p, m in md.topics["spread"].partitions.items()} == leaders

    # fastlog's admin asks the three leaders for offsets at once, one answer each
    from fastlog.client import EARLIEST, LATEST, SyncAdmin
    from fastlog.client import TopicPartition as FastlogTP
    with SyncAdmin(cluster.brokers[3].bootstrap) as admin:
        tps = [FastlogTP("spread", p) for p in range(6)]
        ends = admin.list_offsets({tp: LATEST for tp in tps})
        starts = admin.list_offsets({tp: EARLIEST for tp in tps})
    assert {tp.partition: o.offset for tp, o in ends.items()} == {p: 10 for p in range(6)}
    assert {tp.partition: o.offset for tp, o in starts.items()} == {p: 0 for p in range(6)}


def test_broker_that_does_not_lead_answers_not_leader_or_follower(cluster):
    leaders = create_topic(cluster, "notlead", 3, 1)
    p, leader = next(iter(leaders.items()))
    other = next(i for i in BROKER_IDS if i != leader)
    w = Wire(cluster.brokers[other])
    try:
        r = produce(w, "notlead", batch([b"x"]), partition=p, acks=1)
        assert r.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        f = w.call(ApiKey.FETCH, 11, fetch_body("notlead", 0, 0, partition=p))
        assert f.responses[0].partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER
        lo = w.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "notlead", "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                "timestamp": -1}]}]})
        assert lo.topics[0].partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER
        r = produce(w, "nosuchtopic-x", batch([b"x"]), acks=1)
        assert r.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        w.close()
    w = Wire(cluster.brokers[leader])
    try:
        r = produce(w, "notlead", batch([b"x"]), partition=p, acks=1)
        assert r.error_code == Errors.NONE and r.base_offset == 0
    finally:
        w.close()


def test_consumer_group_with_its_coordinator_on_another_broker(cluster):
    leaders = create_topic(cluster, "grouped", 3, 1)
    produce_all(cluster.bootstrap, "grouped", 3, 5)
    # Make sure __consumer_offsets exists (FindCoordinator creates it), then pick a group
    # whose coordinator is not the bootstrap broker.
    w = Wire(cluster.brokers[1])
    try:
        first = w.call(ApiKey.FIND_COORDINATOR, 2, {"key": "probe", "key_type": 0})
        assert first.error_code in (Errors.NONE, Errors.COORDINATOR_NOT_AVAILABLE)
        offsets_leaders = cluster.wait_leaders("__consumer_offsets", 6)
        group = next(g for g in (f"group-{i}" for i in range(100))
                     if offsets_leaders[partition_for(g, 6)] != 1)
        coordinator = offsets_leaders[partition_for(group, 6)]
        found = w.call(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        assert (found.error_code, found.node_id, found.port) == (
            Errors.NONE, coordinator, cluster.brokers[coordinator].port)
        # the bootstrap broker is not the group's coordinator
        join = w.call(ApiKey.HEARTBEAT, 2, {"group_id": group, "generation_id": 1,
                                           "member_id": "m"})
        assert join.error_code == Errors.NOT_COORDINATOR
    finally:
        w.close()

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["grouped"])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 15 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert len(got) == 15
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition("grouped", p) for p in range(3)], timeout=10)
        assert sorted(tp.offset for tp in committed) == [5, 5, 5]
    finally:
        c.close()
    # the coordinator's log holds the commits; another client reads them back
    assert (cluster.brokers[coordinator].data_dir
            / f"__consumer_offsets-{partition_for(group, 6)}").is_dir()
    kafka = pytest.importorskip("kafka")
    kc = kafka.KafkaConsumer(bootstrap_servers=cluster.brokers[3].bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        assert [kc.committed(kafka.TopicPartition("grouped", p)) for p in range(3)] == [5, 5, 5]
    finally:
        kc.close()
    assert set(leaders.values()) == {1, 2, 3}


def test_topic_config_change_and_deletion_reach_every_broker(cluster):
    create_topic(cluster, "doomed", 3, 1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource("topic", "doomed", set_config={"retention.ms": "12345"})
    for fut in admin.alter_configs([res]).values():
        fut.result(10)
    assert cluster.json("/config/topics/doomed")["config"] == {"retention.ms": "12345"}

    def seen_by(b):
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        got = a.describe_configs([ConfigResource("topic", "doomed")])
        cfg = next(iter(got.values())).result(10)
        return cfg["retention.ms"].value == "12345"
    for b in cluster.brokers.values():
        wait_until(lambda b=b: seen_by(b), 10, what=f"config change seen by {b.bootstrap}")

    for fut in admin.delete_topics(["doomed"], operation_timeout=10).values():
        fut.result(15)
    wait_until(lambda: not cluster.zk.exists("/brokers/topics/doomed"), 10,
               what="topic znode deleted")
    for b in cluster.brokers.values():
        # (a deleted log's dir is renamed <topic>-<p>.<uuid>-delete, removed later)
        wait_until(lambda b=b: not any(re.fullmatch(r"doomed-\d+", d.name)
                                       for d in b.data_dir.iterdir()),
                   10, what=f"logs deleted on {b.bootstrap}")
    assert not cluster.zk.exists("/admin/delete_topics/doomed")


def test_duplicate_broker_id_fails_to_start_with_one_sentence(cluster, tmp_path):
    dup = BrokerProcess(tmp_path / "dup", overrides(cluster.zk_hosts, 2))
    proc = subprocess.run(dup.command(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("fastlog-server:")]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "broker.id 2 is already registered" in lines[0]
    assert "Traceback" not in proc.stderr
    # the running broker 2 kept its registration
    reg = cluster.json("/brokers/ids/2")
    assert reg["port"] == cluster.brokers[2].port


def test_broker_id_generated_through_seqid_and_kept_in_meta_properties(cluster, tmp_path):
    props = overrides(cluster.zk_hosts, 0, **{"broker.rack": "rack-b"})
    del props["broker.id"]
    b = BrokerProcess(tmp_path / "generated", props)
    b.start()
    try:
        gen = wait_until(lambda: [i for i in cluster.registered() if i > 1000], 15,
                         what="a generated broker id")
        assert len(gen) == 1 and gen[0] > 1000  # above reserved.broker.max.id
        assert f"broker.id={gen[0]}" in (b.data_dir / "meta.properties").read_text()
        assert cluster.json(f"/brokers/ids/{gen[0]}")["rack"] == "rack-b"
        # Broker 1 learns of the new broker through its ZooKeeper watch, a moment after
        # the registration the wait above saw.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        md = wait_until(lambda: (m := admin.list_topics(timeout=10)).brokers.get(gen[0]) and m,
                        15, what="the new broker in broker 1's metadata")
        assert md.brokers[gen[0]].port == b.port
        assert b.stop() == 0
        b.start()
        wait_until(lambda: gen[0] in cluster.registered(), 15, what="same id after restart")
    finally:
        b.stop()
    wait_until(lambda: cluster.registered() == [1, 2, 3], 15, what="registration gone")


def _start_fails(command, timeout=60):
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("fastlog-server:")]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_log_dir_of_another_cluster_is_refused(cluster, tmp_path):
    data = tmp_path / "foreign"
    data.mkdir()
    (data / "meta.properties").write_text("version=0\nbroker.id=7\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")
    line = _start_fails(BrokerProcess(data, overrides(cluster.zk_hosts, 7)).command())
    assert "belongs to cluster AAAAAAAAAAAAAAAAAAAAAA" in line
    assert 7 not in cluster.registered()


def test_unreachable_zookeeper_is_one_sentence(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    props = overrides(f"127.0.0.1:{port}", 1, **{"zookeeper.connection.timeout.ms": 1000})
    line = _start_fails(BrokerProcess(tmp_path / "nozk", props).command())
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{port}" in line


def test_metadata_auto_creates_a_topic_over_the_brokers(cluster):
    kafka = pytest.importorskip("kafka")
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.brokers[3].bootstrap)
    try:
        for i in range(9):
            producer.send("auto-made", value=b"a%d" % i, partition=i % 3)
        producer.flush(15)
    finally:
        producer.close(5)
    leaders = cluster.wait_leaders("auto-made", 3)
    assert sorted(leaders.values()) == [1, 2, 3]  # num.partitions=3, one per broker
