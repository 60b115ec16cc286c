"""Dynamic broker configs (KIP-226) on one broker: a changed log.* default reaches the logs
of existing topics without a restart, the per-broker value wins over the cluster default,
read-only keys are refused with Kafka's sentence, DescribeConfigs reports each value's
source and synonyms to the admin clients, and the values survive a restart."""

import socket
import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.error import KafkaException

from fastlog import _codec
from fastlog.protocol import ApiKey, Errors
from fastlog.testing import wait_until
from tests.server.test_broker_topics import earliest
from tests.server.wire import Wire, batch, create_topic, produce

DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT, TOPIC = 2, 3, 4, 5, 1


def _alter(w, name, configs, version=1):
    r = w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, {"resources": [{
        "resource_type": 4, "resource_name": name,
        "configs": [{"name": k, "config_operation": op, "value": v}
                    for k, op, v in configs]}], "validate_only": False})
    return r.responses[0]


def _describe(w, name, keys, resource_type=4):
    r = w.call(ApiKey.DESCRIBE_CONFIGS, 3, {"resources": [{
        "resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False})
    res = r.results[0]
    assert res.error_code == 0, res.error_message
    return {c.name: c for c in res.configs}


def test_default_retention_change_reaches_an_existing_topic(broker_factory):
    b = broker_factory({"log.retention.check.interval.ms": "200"})
    create_topic(b, "dyn-retention", configs={"segment.bytes": "1024"})
    w = Wire(b)
    try:
        for i in range(40):
            assert produce(w, "dyn-retention", batch([b"%03d" % i + b"." * 100])).error_code == 0
        time.sleep(0.5)
        assert earliest(w, "dyn-retention") == 0
        assert _alter(w, "", [("log.retention.ms", 0, "1")]).error_code == 0
        wait_until(lambda: earliest(w, "dyn-retention") > 0, timeout=15,
                   what="retention of the cluster default applied")
        # The topic reports where its retention now comes from.
        cfg = _describe(w, "dyn-retention", ["retention.ms"], resource_type=2)["retention.ms"]
        assert cfg.value == "1" and cfg.config_source == DYNAMIC_DEFAULT
        assert [(s.name, s.value, s.source) for s in cfg.synonyms] == [
            ("log.retention.ms", "1", DYNAMIC_DEFAULT), ("log.retention.hours", "168", DEFAULT)]
    finally:
        w.close()


def test_per_broker_value_wins_over_the_default_and_survives_restart(broker_factory):
    b = broker_factory({"log.segment.bytes": "2000000"})
    w = Wire(b)
    try:
        assert _alter(w, "", [("log.segment.bytes", 0, "3000000")]).error_code == 0
        assert _describe(w, "0", ["log.segment.bytes"])["log.segment.bytes"].value == "3000000"
        assert _alter(w, "0", [("log.segment.bytes", 0, "4000000")]).error_code == 0
        cfg = _describe(w, "0", ["log.segment.bytes"])["log.segment.bytes"]
        assert cfg.value == "4000000" and cfg.config_source == DYNAMIC_BROKER
        assert not cfg.read_only
        assert [(s.value, s.source) for s in cfg.synonyms] == [
            ("4000000", DYNAMIC_BROKER), ("3000000", DYNAMIC_DEFAULT), ("2000000", STATIC),
            ("1073741824", DEFAULT)]
        # The default resource lists the dynamic defaults only.
        assert list(_describe(w, "", None)) == ["log.segment.bytes"]
    finally:
        w.close()
    b.restart()
    w = Wire(b)
    try:
        cfg = _describe(w, "0", ["log.segment.bytes"])["log.segment.bytes"]
        assert cfg.value == "4000000" and cfg.config_source == DYNAMIC_BROKER
        # Deleting the per-broker value falls back to the default.
        assert _alter(w, "0", [("log.segment.bytes", 1, None)]).error_code == 0
        cfg = _describe(w, "0", ["log.segment.bytes"])["log.segment.bytes"]
        assert cfg.value == "3000000" and cfg.config_source == DYNAMIC_DEFAULT
    finally:
        w.close()


def test_read_only_unknown_and_bad_values_are_refused(broker):
    w = Wire(broker)
    try:
        r = _alter(w, "0", [("num.io.threads", 0, "4")])
        assert r.error_code == Errors.INVALID_REQUEST
        assert "Cannot update these configs dynamically: num.io.threads" in r.error_message
        assert _alter(w, "", [("no.such.key", 0, "4")]).error_code == Errors.INVALID_REQUEST
        r = _alter(w, "", [("log.segment.bytes", 0, "3")])
        assert r.error_code == Errors.INVALID_REQUEST and "log.segment.bytes" in r.error_message
        r = _alter(w, "7", [("log.segment.bytes", 0, "3000")])
        assert r.error_code == Errors.INVALID_REQUEST
        cfg = _describe(w, "0", ["num.io.threads", "log.segment.bytes"])
        assert cfg["num.io.threads"].read_only and cfg["num.io.threads"].config_source == DEFAULT
        assert cfg["log.segment.bytes"].value == "1073741824"
    finally:
        w.close()


def test_admin_clients_alter_and_describe_broker_configs(broker):
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(10)
    got = a.describe_configs([ConfigResource("broker", "0")])
    configs = got[ConfigResource("broker", "0")].result(10)
    assert configs["log.retention.ms"].value == "3600000"
    assert configs["log.retention.ms"].source == DYNAMIC_BROKER
    assert not configs["log.retention.ms"].is_read_only
    assert configs["log.dirs"].is_read_only
    # A topic without its own retention inherits this broker's, and says so.
    create_topic(broker, "dyn-inherits")
    topic = ConfigResource("topic", "dyn-inherits")
    retention = a.describe_configs([topic])[topic].result(10)["retention.ms"]
    assert (retention.value, retention.source) == ("3600000", DYNAMIC_BROKER)
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
        ("log.retention.ms", "3600000", DYNAMIC_BROKER), ("log.retention.hours", "168", DEFAULT)]
    bad = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("listeners", "PLAINTEXT://127.0.0.1:1",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        a.incremental_alter_configs([bad])[bad].result(10)
    assert "Cannot update these configs dynamically" in str(e.value)

    # The cluster-wide default (the empty resource name, which kafka-configs.sh sends
    # and neither Python admin client does).
    w = Wire(broker)
    try:
        assert _alter(w, "", [("log.cleaner.delete.retention.ms", 0, "1000")]).error_code == 0
    finally:
        w.close()

    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        # AlterConfigs (not incremental) replaces this broker's whole dynamic set;
        # kafka-python sends the other modified dynamic keys along, found from the
        # DescribeConfigs read-only flags.
        kp.alter_configs([KpResource(ConfigResourceType.BROKER, "0",
                                     configs={"message.max.bytes": "2000000"})],
                        incremental=False)
        got = kp.describe_configs([KpResource(ConfigResourceType.BROKER, "0")],
                                  include_synonyms=True, config_filter="all")
        entries = next(iter(next(iter(got.values())).values()))
        assert entries["message.max.bytes"]["value"] == "2000000"
        assert entries["log.retention.ms"]["value"] == "3600000"
        retention = entries["log.cleaner.delete.retention.ms"]
        assert (retention["value"], retention["read_only"], retention["config_source"]) == (
            "1000", False, "DYNAMIC_DEFAULT_BROKER_CONFIG")
        assert [s["source"] for s in retention["synonyms"]] == [
            "DYNAMIC_DEFAULT_BROKER_CONFIG", "DEFAULT_CONFIG"]
    finally:
        kp.close()


def _answered(broker, source):
    s = socket.create_connection((broker.host, broker.port), timeout=5,
                                 source_address=(source, 0))
    w = Wire.__new__(Wire)
    w.sock, w.cid = s, 0
    try:
        w.send(ApiKey.API_VERSIONS, 2, {})
        return s, w.recv_frame() is not None
    except OSError:
        return s, False


def test_connection_limits_change_live(broker_factory):
    broker = broker_factory()  # its own: no other test's clients hold connections
    w = Wire(broker)
    try:
        assert _alter(w, "0", [("max.connections.per.ip", 0, "2"),
                               ("max.connections.per.ip.overrides", 0, "127.0.0.2:3")]
                      ).error_code == 0
    finally:
        w.close()
    kept = []
    try:
        for source, allowed in (("127.0.0.1", 2), ("127.0.0.2", 3)):
            results = []
            for _ in range(allowed + 1):
                s, ok = _answered(broker, source)
                kept.append(s)
                results.append(ok)
            assert results == [True] * allowed + [False], (source, results)
    finally:
        for s in kept:
            s.close()
    # Deleted, the limits are the static ones again (Kafka's default: unbounded).
    wait_until(lambda: _answered(broker, "127.0.0.1")[1], timeout=5, what="a connection")
    w = Wire(broker)
    try:
        assert _alter(w, "0", [("max.connections.per.ip", 1, None),
                               ("max.connections.per.ip.overrides", 1, None)]).error_code == 0
        more = [_answered(broker, "127.0.0.1") for _ in range(4)]
        assert all(ok for _, ok in more)
        for s, _ in more:
            s.close()
    finally:
        w.close()


def _log_bytes(broker, topic):
    total = 0
    for f in (broker.data_dir / f"{topic}-0").glob("*.log"):
        try:
            total += f.stat().st_size
        except FileNotFoundError:  # (a segment the cleaner replaced since the listing)
            pass
    return total


def test_cleaner_backoff_change_starts_a_pass(broker_factory):
    # A cleaner that would next look in ten minutes looks at once when its pause is cut.
    b = broker_factory({"log.cleaner.backoff.ms": "600000"})
    create_topic(b, "dyn-compact", configs={"cleanup.policy": "compact",
                                            "segment.bytes": "1024",
                                            "min.cleanable.dirty.ratio": "0.01"})
    w = Wire(b)
    try:
        now = int(time.time() * 1000)
        for i in range(60):
            records = _codec.build_batch([(now, b"k%d" % (i % 2), b"v%03d" % i + b"." * 80)])
            assert produce(w, "dyn-compact", records).error_code == 0
        before = _log_bytes(b, "dyn-compact")
        assert _alter(w, "0", [("log.cleaner.backoff.ms", 0, "200")]).error_code == 0
        wait_until(lambda: _log_bytes(b, "dyn-compact") < before / 2, timeout=20,
                   what="a compaction pass after the pause was cut")
    finally:
        w.close()
