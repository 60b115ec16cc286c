"""KafkaZkClient against a real ZooKeeper: Kafka's znode layout and payloads, broker
registration, broker ids, cluster id, controller election and epoch fencing."""

import json
import re
import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from fastlog.testing import wait_until
from fastlog.zk import paths
from fastlog.zk.client import (
    BrokerIdInUseError,
    ControllerEpoch,
    ControllerMovedError,
    KafkaZkClient,
    TopicExistsError,
    load_session,
)
from fastlog.zk.paths import BrokerInfo, EndPoint, LeaderAndIsr, TopicAssignment
from tests.zk_fixture import expire_session


def broker_info(broker_id, port=9092, rack=None):
    return BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port),), rack=rack)


@pytest.fixture
def clients(zk_hosts):
    made = []

    def make(session_timeout=4.0):
        c = KafkaZkClient(zk_hosts, session_timeout=session_timeout).start()
        made.append(c)
        return c
    yield make
    for c in made:
        try:
            c.close()
        except Exception:
            pass


def test_top_level_paths_are_kafkas_persistent_paths(clients, kazoo):
    clients().create_top_level_paths()
    for p in ("/consumers", "/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/changes",
              "/admin/delete_topics", "/isr_change_notification", "/latest_producer_id_block",
              "/log_dir_event_notification", "/config/topics", "/config/clients",
              "/config/users", "/config/brokers", "/config/ips"):
        assert kazoo.exists(p) is not None, p


def test_broker_registration_is_ephemeral_with_kafkas_v5_json(clients, kazoo):
    zk = clients()
    zk.create_top_level_paths()
    info = BrokerInfo(3, (EndPoint("PLAINTEXT", "127.0.0.1", 9093),
                          EndPoint("INTERNAL", "10.0.0.3", 9094, "SSL")), rack="r1")
    epoch = zk.register_broker(info)
    data, stat = kazoo.get("/brokers/ids/3")
    assert stat.ephemeralOwner == zk.session_id
    assert epoch == stat.czxid and epoch > 0
    obj = json.loads(data)
    assert set(obj) == {"features", "listener_security_protocol_map", "endpoints", "jmx_port",
                        "port", "host", "version", "timestamp", "rack"}
    assert obj["version"] == 5 and obj["jmx_port"] == -1
    assert obj["host"] == "127.0.0.1" and obj["port"] == 9093
    assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9093", "INTERNAL://10.0.0.3:9094"]
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SSL"}
    assert obj["rack"] == "r1" and obj["features"] == {}
    assert isinstance(obj["timestamp"], str) and obj["timestamp"].isdigit()
    assert b" " not in data  # compact, like Jackson
    back = zk.get_broker(3)
    assert back.endpoints == info.endpoints and back.rack == "r1"
    zk.close()
    assert kazoo.exists("/brokers/ids/3") is None


def test_broker_without_rack_has_no_rack_key(clients, kazoo):
    clients().register_broker(broker_info(1))
    assert "rack" not in json.loads(kazoo.get("/brokers/ids/1")[0])


def test_duplicate_broker_id_is_rejected_with_a_clear_error(clients):
    clients().register_broker(broker_info(1, 9092))
    with pytest.raises(BrokerIdInUseError, match=r"broker.id 1 is already registered.*127.0.0.1:9092"):
        clients().register_broker(broker_info(1, 9099))


def test_registering_again_on_the_same_session_keeps_the_node(clients, kazoo):
    zk = clients()
    first = zk.register_broker(broker_info(1, 9092))
    assert zk.register_broker(broker_info(1, 9092)) == first


# A broker process: registers broker 1 on a 30 s session, saves the session, says so, waits.
_OLD_BROKER = """
import sys, time
from fastlog.zk.client import KafkaZkClient, save_session
from tests.zk.test_client import broker_info
zk = KafkaZkClient(sys.argv[1], session_timeout=30.0).start()
zk.register_broker(broker_info(1))
save_session(sys.argv[2], zk.session_credentials())
print(hex(zk.session_id), flush=True)
time.sleep(120)
"""


def test_restarted_broker_recognises_its_stale_node_and_re_registers(clients, kazoo, zk_hosts,
                                                                      tmp_path):
    # The previous process crashes (SIGKILL): its session, and so its registration, live
    # on until the session times out, and nothing of it reconnects.
    old = subprocess.Popen([sys.executable, "-c", _OLD_BROKER, zk_hosts,
                            str(tmp_path / "zk-session")], stdout=subprocess.PIPE, text=True)
    try:
        old_session = int(old.stdout.readline(), 16)
    finally:
        old.kill()
        old.wait(10)
    assert kazoo.exists("/brokers/ids/1").ephemeralOwner == old_session

    new = clients()
    with pytest.raises(BrokerIdInUseError):  # without the saved credentials: a real duplicate
        new.register_broker(broker_info(1))
    creds = load_session(str(tmp_path / "zk-session"))
    assert creds[0] == old_session
    new.register_broker(broker_info(1), previous_session=creds)
    assert kazoo.exists("/brokers/ids/1").ephemeralOwner == new.session_id


def test_registration_is_recreated_after_session_expiry(clients, kazoo, zk_hosts):
    zk = clients()
    zk.register_broker(broker_info(2))
    renewed = []
    zk.on_new_session(lambda: renewed.append(zk.session_id))
    old_session = zk.session_id
    expire_session(zk.kazoo, zk_hosts)
    wait_until(lambda: renewed, what="new-session handler")
    stat = wait_until(lambda: kazoo.exists("/brokers/ids/2"), what="re-registration")
    assert stat.ephemeralOwner == zk.session_id != old_session


def test_broker_ids_generated_through_seqid(clients, kazoo):
    a, b = clients(), clients()
    a.create_top_level_paths()
    ids = [a.generate_broker_id(), b.generate_broker_id(), a.generate_broker_id()]
    assert ids == [1001, 1002, 1003]
    assert kazoo.get("/brokers/seqid")[0] == b""


def test_cluster_id_is_created_once_and_shared(clients, kazoo):
    a, b = clients(), clients()
    assert a.get_cluster_id() is None
    cid = a.get_or_create_cluster_id()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid)
    assert b.get_or_create_cluster_id() == cid
    assert json.loads(kazoo.get("/cluster/id")[0]) == {"version": "1", "id": cid}


def test_controller_election_is_exclusive_and_increments_the_epoch(clients, kazoo):
    a, b, c = clients(), clients(), clients()
    won = a.register_controller_and_increment_epoch(1)
    assert won == ControllerEpoch(1, 1)
    assert b.register_controller_and_increment_epoch(2) is None
    assert c.register_controller_and_increment_epoch(3) is None
    data, stat = kazoo.get("/controller")
    obj = json.loads(data)
    assert obj["brokerid"] == 1 and obj["version"] == 2 and isinstance(obj["timestamp"], str)
    assert stat.ephemeralOwner == a.session_id
    assert kazoo.get("/controller_epoch")[0] == b"1"
    a.close()
    won_b = b.register_controller_and_increment_epoch(2)
    assert won_b.epoch == 2 and kazoo.get("/controller_epoch")[0] == b"2"
    assert b.get_controller_id() == 2


def test_zombie_controller_writes_are_fenced(clients, kazoo):
    a, b = clients(), clients()
    a.create_top_level_paths()
    a.create_topic(TopicAssignment("t", {0: [1, 2]}))
    old = a.register_controller_and_increment_epoch(1)
    done, failed = a.create_partition_states(old, {("t", 0): LeaderAndIsr(1, 0, (1, 2), old.epoch)})
    assert done[("t", 0)].zk_version == 0 and not failed
    # a is paused; its office passes to b (here: /controller is handed over explicitly)
    kazoo.delete("/controller")
    new = b.register_controller_and_increment_epoch(2)
    assert new.epoch == old.epoch + 1
    st = a.get_partition_state("t", 0)
    with pytest.raises(ControllerMovedError):
        a.update_leader_and_isr(old, {("t", 0): st.new_leader_and_isr(2, (2,), old.epoch)})
    with pytest.raises(ControllerMovedError):
        a.delete_topic_znodes(old, "t")
    assert a.get_partition_state("t", 0) == st
    done, failed = b.update_leader_and_isr(new, {("t", 0): st.new_leader_and_isr(2, (2,), new.epoch)})
    assert done[("t", 0)].zk_version == 1 and done[("t", 0)].leader_epoch == 1


def test_partition_state_layout_and_conditional_update(clients, kazoo):
    zk = clients()
    zk.create_top_level_paths()
    zk.create_topic(TopicAssignment("orders", {0: [1, 2], 1: [2, 1]}, topic_id="abc"),
                    config={"retention.ms": "86400000"})
    assert json.loads(kazoo.get("/brokers/topics/orders")[0]) == {
        "version": 3, "partitions": {"0": [1, 2], "1": [2, 1]}, "adding_replicas": {},
        "removing_replicas": {}, "topic_id": "abc"}
    assert json.loads(kazoo.get("/config/topics/orders")[0]) == {
        "version": 1, "config": {"retention.ms": "86400000"}}
    with pytest.raises(TopicExistsError):
        zk.create_topic(TopicAssignment("orders", {0: [1]}))
    ep = zk.register_controller_and_increment_epoch(1)
    zk.create_partition_states(ep, {("orders", 0): LeaderAndIsr(1, 0, (1, 2), ep.epoch)})
    assert kazoo.get("/brokers/topics/orders/partitions/0")[0] == b""
    assert json.loads(kazoo.get("/brokers/topics/orders/partitions/0/state")[0]) == {
        "controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2]}
    st = zk.get_partition_state("orders", 0)
    # a leader's ISR shrink, conditional on the partition epoch (znode version)
    shrunk = LeaderAndIsr(1, st.leader_epoch, (1,), st.controller_epoch, st.zk_version)
    assert zk.conditional_update_partition_state("orders", 0, shrunk) == 1
    assert zk.conditional_update_partition_state("orders", 0, shrunk) is None  # stale version
    done, failed = zk.update_leader_and_isr(ep, {("orders", 0): st.new_leader_and_isr(2, (2,), 1)})
    assert not done and ("orders", 0) in failed  # the controller decided from a stale state


def test_topic_deletion_removes_every_znode(clients, kazoo):
    zk = clients()
    zk.create_top_level_paths()
    zk.create_topic(TopicAssignment("gone", {0: [1]}), config={"cleanup.policy": "compact"})
    ep = zk.register_controller_and_increment_epoch(1)
    zk.create_partition_states(ep, {("gone", 0): LeaderAndIsr(1, 0, (1,), 1)})
    zk.mark_topic_for_deletion("gone")
    assert kazoo.get("/admin/delete_topics/gone")[0] == b""
    assert zk.get_topics_marked_for_deletion() == ["gone"]
    zk.delete_topic_znodes(ep, "gone")
    for p in ("/brokers/topics/gone", "/config/topics/gone", "/admin/delete_topics/gone"):
        assert kazoo.exists(p) is None


def test_config_change_notification(clients, kazoo):
    zk = clients()
    zk.create_top_level_paths()
    path = zk.change_entity_config("topics", "t", {"retention.ms": "1000"})
    assert re.fullmatch(r"/config/changes/config_change_\d{10}", path)
    assert json.loads(kazoo.get(path)[0]) == {"version": 2, "entity_path": "topics/t"}
    name = zk.get_config_change_notifications()[0]
    assert zk.read_config_change(name) == ("topics", "t")
    assert zk.get_entity_config("topics", "t") == {"retention.ms": "1000"}


def test_isr_change_notification(clients, kazoo):
    zk = clients()
    zk.create_top_level_paths()
    path = zk.propagate_isr_changes([("t", 1), ("t", 0)])
    assert re.fullmatch(r"/isr_change_notification/isr_change_\d{10}", path)
    assert json.loads(kazoo.get(path)[0]) == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]}
    assert zk.read_isr_change_notification(path.rsplit("/", 1)[1]) == [("t", 0), ("t", 1)]


def test_log_dir_event_notification(clients, kazoo):
    zk = clients()
    zk.create_top_level_paths()
    path = zk.propagate_log_dir_event(3)
    assert re.fullmatch(r"/log_dir_event_notification/log_dir_event_\d{10}", path)
    data = kazoo.get(path)[0]
    assert json.loads(data) == {"version": 1, "broker": 3, "event": 1}
    assert paths.decode_log_dir_event(path, data) == (3, paths.LOG_DIR_FAILURE_EVENT)
    name = path.rsplit("/", 1)[1]
    assert zk.get_log_dir_event_notifications() == [name]
    assert zk.read_log_dir_event(name) == (3, paths.LOG_DIR_FAILURE_EVENT)


def test_offline_replicas_are_ephemeral(clients):
    zk = clients()
    zk.create_top_level_paths()
    assert zk.get_offline_replicas(3) == set()
    zk.set_offline_replicas(3, [("t", 1), ("t", 0)])
    zk.set_offline_replicas(3, [("t", 1), ("t", 0), ("u", 2)])   # replaced, not refused
    other = clients()
    assert other.get_offline_replicas(3) == {("t", 0), ("t", 1), ("u", 2)}
    zk.close()   # the broker's session ends: a restarted broker starts with none
    assert other.get_offline_replicas(3) == set()


def test_missing_chroot_is_created(zk_server):
    zk = KafkaZkClient(zk_server.hosts + "/fresh/chroot", session_timeout=4.0).start()
    try:
        zk.create_top_level_paths()
    finally:
        zk.close()
    root = KazooClient(hosts=zk_server.hosts)
    root.start()
    try:
        assert root.exists("/fresh/chroot/brokers/ids") is not None
    finally:
        root.stop()
        root.close()


def test_kafka_written_payloads_decode():
    # What a Kafka 2.x broker wrote (v4 registration, v1 topic, v1 controller) still reads.
    b = paths.decode_broker(7, b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                               b'"endpoints":["PLAINTEXT://h:9092"],"jmx_port":9999,"host":"h",'
                               b'"timestamp":"1","port":9092,"version":4}')
    assert b.endpoint().host == "h" and b.jmx_port == 9999 and b.rack is None
    assert paths.decode_topic("x", b'{"version":1,"partitions":{"0":[1]}}').partitions == {0: [1]}
    assert paths.decode_controller(b'{"version":1,"brokerid":4,"timestamp":"9"}') == 4
    with pytest.raises(paths.ZkDataError, match="/brokers/ids/7"):
        paths.decode_broker(7, b'{"version":"5"}')
    with pytest.raises(paths.ZkDataError):
        paths.decode_partition_state("t", 0, b'{"leader":1}')
