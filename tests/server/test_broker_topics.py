"""Topic operations wired through the broker: live config changes reach the logs, the
periodic retention task deletes old segments, auto-creation follows its switches, and
startup problems are one sentence with a non-zero exit."""

import os
import select
import socket
import subprocess
import time

from fastlog import protocol
from fastlog.protocol import ApiKey, Errors
from fastlog.testing import BrokerProcess, server_command
from tests.server.wire import Wire, batch, create_partitions, create_topic, produce


def earliest(w, topic):
    r = w.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
    return r.topics[0].partitions[0].offset


def test_altered_retention_applies_to_the_live_log(broker_factory):
    b = broker_factory({"log.retention.check.interval.ms": "200"})
    create_topic(b, "tp-retention", configs={"segment.bytes": "1024"})
    w = Wire(b)
    try:
        for i in range(40):
            assert produce(w, "tp-retention", batch([b"%03d" % i + b"." * 100])).error_code == 0
        assert earliest(w, "tp-retention") == 0
        r = w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [{
            "resource_type": 2, "resource_name": "tp-retention",
            "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}]}],
            "validate_only": False})
        assert r.responses[0].error_code == 0
        deadline = time.monotonic() + 15
        while earliest(w, "tp-retention") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert earliest(w, "tp-retention") > 0
        d = w.call(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [{
            "resource_type": 2, "resource_name": "tp-retention",
            "configuration_keys": ["retention.ms", "segment.bytes"]}],
            "include_synonyms": True})
        cfg = {c.name: c for c in d.results[0].configs}
        assert cfg["retention.ms"].value == "1" and cfg["retention.ms"].config_source == 1
        assert cfg["segment.bytes"].value == "1024"
        # Kafka's synonym chain: the topic override, then the broker default that applies
        assert [(s.name, s.source) for s in cfg["retention.ms"].synonyms] == [
            ("retention.ms", 1), ("log.retention.hours", 5)]
    finally:
        w.close()


def test_auto_create_switches(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    w = Wire(b)
    try:
        r = w.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-auto"}],
                                        "allow_auto_topic_creation": True})
        assert r.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        w.close()


def test_auto_create_respects_the_v4_flag_and_name_rules(broker):
    w = Wire(broker)
    try:
        r = w.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-noauto"}],
                                        "allow_auto_topic_creation": False})
        assert r.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        r = w.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-yesauto"}],
                                        "allow_auto_topic_creation": True})
        assert r.topics[0].error_code == 0 and len(r.topics[0].partitions) == 1
        assert r.topics[0].partitions[0].leader_epoch == 0
        r = w.call(ApiKey.METADATA, 8, {"topics": [{"name": "bad*name"}],
                                        "allow_auto_topic_creation": True})
        assert r.topics[0].error_code == Errors.INVALID_TOPIC_EXCEPTION
        # a topic that would collide with an existing one once '.' and '_' are equated
        create_topic(broker, "tp.collide")
        r = w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
            "name": "tp_collide", "num_partitions": 1, "replication_factor": 1,
            "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
        assert r.topics[0].error_code == Errors.INVALID_TOPIC_EXCEPTION
        # replication factor above the broker count, and validate_only creates nothing
        r = w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [
            {"name": "tp-rf3", "num_partitions": 1, "replication_factor": 3,
             "assignments": [], "configs": []},
            {"name": "tp-validate", "num_partitions": -1, "replication_factor": -1,
             "assignments": [], "configs": [{"name": "retention.ms", "value": "x"}]},
            {"name": "tp-validate2", "num_partitions": 2, "replication_factor": 1,
             "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": True})
        codes = [t.error_code for t in r.topics]
        assert codes == [Errors.INVALID_REPLICATION_FACTOR, Errors.INVALID_CONFIG, 0]
        r = w.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-validate2"}],
                                        "allow_auto_topic_creation": False})
        assert r.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        w.close()


def test_port_in_use_is_one_sentence_exit_1(tmp_path):
    """The listeners are checked before anything is created: no data dir, no
    __consumer_offsets partitions, only the one sentence on stderr."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        r = subprocess.run(server_command() + [
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={tmp_path / 'data'}"],
            capture_output=True, text=True, timeout=60)
    finally:
        s.close()
    assert r.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"fastlog-server: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert not (tmp_path / "data").exists()


def _alter(w, topic, ops, version=0, validate_only=False):
    r = w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, {"resources": [{
        "resource_type": 2, "resource_name": topic,
        "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}],
        "validate_only": validate_only})
    return r.responses[0]


def _describe(w, topic, keys=None):
    r = w.call(ApiKey.DESCRIBE_CONFIGS, 3, {"resources": [{
        "resource_type": 2, "resource_name": topic, "configuration_keys": keys}],
        "include_synonyms": False, "include_documentation": False})
    return r.results[0]


def test_incremental_alter_operations_and_errors(broker):
    create_topic(broker, "tp-incr")
    w = Wire(broker)
    try:
        assert _alter(w, "tp-incr", [("cleanup.policy", 2, "compact")]).error_code == 0
        res = _describe(w, "tp-incr", ["cleanup.policy"])
        assert res.configs[0].value == "delete,compact"
        assert res.configs[0].config_type == 7  # LIST
        assert _alter(w, "tp-incr", [("cleanup.policy", 3, "delete")]).error_code == 0
        assert _describe(w, "tp-incr", ["cleanup.policy"]).configs[0].value == "compact"
        assert _alter(w, "tp-incr", [("cleanup.policy", 1, None)]).error_code == 0
        res = _describe(w, "tp-incr", ["cleanup.policy"])
        assert res.configs[0].value == "delete" and res.configs[0].config_source == 5
        assert _alter(w, "tp-incr", [("retention.ms", 2, "5")]).error_code == \
            Errors.INVALID_CONFIG  # APPEND to a non-list
        assert _alter(w, "tp-incr", [("no.such.config", 0, "5")]).error_code == \
            Errors.INVALID_CONFIG
        assert _alter(w, "tp-incr", [("retention.ms", 0, "5")],
                      validate_only=True).error_code == 0
        assert _describe(w, "tp-incr", ["retention.ms"]).configs[0].config_source == 5
        assert _alter(w, "tp-nope", [("retention.ms", 0, "5")]).error_code == \
            Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert _describe(w, "tp-nope").error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        r = w.call(ApiKey.ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 4, "resource_name": "0",
            "configs": [{"name": "num.partitions", "value": "3"}]}], "validate_only": False})
        assert r.responses[0].error_code == Errors.INVALID_REQUEST
    finally:
        w.close()


def test_damaged_metadata_file_is_one_sentence_exit_1(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "fastlog-metadata.json").write_text("{torn")
    r = subprocess.run(server_command() + [
        "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}"],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "cannot read metadata file" in r.stderr and "Traceback" not in r.stderr



def _create(w, name, partitions):
    return w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1,
        "assignments": [], "configs": []}], "timeout_ms": 10000,
        "validate_only": False}).topics[0]


def test_partitions_beyond_the_open_file_limit_are_refused(tmp_path):
    # Each hosted partition keeps a file open: a topic the broker could not open is
    # refused whole, and the broker keeps serving and restarts.
    with BrokerProcess(tmp_path / "data", limits={"nofile": "1500:1500"}) as b:
        w = Wire(b)
        try:
            r = _create(w, "tp-many", 5000)
            assert r.error_code == Errors.INVALID_PARTITIONS
            assert "open files" in r.error_message and "ulimit -n" in r.error_message
            r = w.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-many"}],
                                            "allow_auto_topic_creation": False})
            assert r.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
            assert _create(w, "tp-some", 20).error_code == Errors.NONE
            assert create_partitions(w, "tp-some", 5000).error_code == Errors.INVALID_PARTITIONS
        finally:
            w.close()
        b.restart()
        w = Wire(b)
        try:
            assert _create(w, "tp-after", 2).error_code == Errors.NONE
        finally:
            w.close()


def _start_creating(b, creator, name, partitions):
    """Send CreateTopics on `creator` and return its correlation id once the broker has
    begun making the partitions (the first partition dir exists)."""
    creator.sock.settimeout(120)
    cid = creator.send(ApiKey.CREATE_TOPICS, 4, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1,
        "assignments": [], "configs": []}], "timeout_ms": 60000, "validate_only": False})
    deadline = time.monotonic() + 60
    while not (b.data_dir / f"{name}-0").exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert (b.data_dir / f"{name}-0").exists()
    return cid


def _creation_answer(creator, cid):
    got, resp = protocol.decode_response(ApiKey.CREATE_TOPICS, 4, creator.recv_frame())
    assert got == cid
    return resp.topics[0]


def test_the_request_loop_answers_while_a_topic_is_being_created(broker_factory):
    """A topic's partitions are made off the request loop: a Metadata request sent on
    another connection once the first of 1,000 partition dirs exists is answered while
    the CreateTopics is still pending (before it, the loop made them all first), and the
    creation then succeeds with every partition."""
    b = broker_factory({})
    creator, probe = Wire(b), Wire(b)
    try:
        cid = _start_creating(b, creator, "tp-big", 1000)
        r = probe.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-big"}],
                                            "allow_auto_topic_creation": False})
        assert r.topics[0].name == "tp-big"
        pending, _, _ = select.select([creator.sock], [], [], 0)
        assert not pending, "CreateTopics was answered before the probe"
        assert _creation_answer(creator, cid).error_code == Errors.NONE
        r = probe.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-big"}],
                                            "allow_auto_topic_creation": False})
        assert len(r.topics[0].partitions) == 1000
        assert all(p.error_code == 0 for p in r.topics[0].partitions)
    finally:
        creator.close()
        probe.close()


def test_a_topic_deleted_while_its_partitions_are_made_keeps_none(broker_factory):
    """DeleteTopics while CreateTopics is still making the partitions' files: the
    creation ends, the topic is gone, and its partitions are not served or kept (their
    dirs are renamed for deletion); the name can be created again."""
    b = broker_factory({})
    creator, other = Wire(b), Wire(b)
    try:
        cid = _start_creating(b, creator, "tp-gone", 1000)
        r = other.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["tp-gone"],
                                                 "timeout_ms": 10000})
        assert r.responses[0].error_code == Errors.NONE
        assert _creation_answer(creator, cid).error_code == Errors.NONE
        r = other.call(ApiKey.METADATA, 8, {"topics": [{"name": "tp-gone"}],
                                            "allow_auto_topic_creation": False})
        assert r.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert not [n for n in os.listdir(b.data_dir) if n.startswith("tp-gone-")
                    and not n.endswith("-delete")]
        create_topic(b, "tp-gone", 3)
        assert produce(other, "tp-gone", batch([b"again"]), partition=2).error_code == 0
        log_text = b.log_path.read_text(errors="replace")
        assert "Traceback" not in log_text and "failed" not in log_text, b.log_tail()
    finally:
        creator.close()
        other.close()
