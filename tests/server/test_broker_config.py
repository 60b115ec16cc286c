"""KafkaConfig: Kafka key names, types, defaults, properties files, overrides; and the
fastlog-server command line's handling of bad configuration (one sentence, exit 2)."""

import subprocess
import sys

import pytest

from fastlog.server.config import (
    ConfigError,
    KafkaConfig,
    parse_properties,
    parse_topic_config,
)
from fastlog.testing import BrokerProcess, server_command


def test_defaults_are_kafkas():
    c = KafkaConfig()
    assert c.listeners == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert c.log_dirs == ["./data"]
    assert c["message.max.bytes"] == 1048588
    assert c["num.partitions"] == 1
    assert c["log.segment.bytes"] == 1073741824
    assert c.log_retention_ms == 168 * 3600 * 1000
    assert c["socket.request.max.bytes"] == 104857600
    assert c["auto.create.topics.enable"] is True
    assert c["offsets.topic.num.partitions"] == 50


def test_retention_precedence_ms_over_minutes_over_hours():
    assert KafkaConfig({"log.retention.hours": "1"}).log_retention_ms == 3_600_000
    assert KafkaConfig({"log.retention.hours": "1", "log.retention.minutes": "2"}).log_retention_ms == 120_000
    assert KafkaConfig({"log.retention.minutes": "2", "log.retention.ms": "5"}).log_retention_ms == 5
    assert KafkaConfig({"log.retention.ms": "-1"}).log_retention_ms == -1


def test_log_dirs_overrides_log_dir():
    assert KafkaConfig({"log.dir": "/a"}).log_dirs == ["/a"]
    assert KafkaConfig({"log.dir": "/a", "log.dirs": "/b,/c"}).log_dirs == ["/b", "/c"]


def test_properties_file_syntax():
    text = "# comment\n! also\nbroker.id=3\nnum.partitions : 4\nlog.dirs /x,\\\n  /y\n\n"
    assert parse_properties(text) == [("broker.id", "3"), ("num.partitions", "4"),
                                      ("log.dirs", "/x,/y")]


@pytest.mark.parametrize("props, needle", [
    ({"no.such.key": "1"}, "unknown configuration key 'no.such.key'"),
    ({"num.partitions": "many"}, "num.partitions must be an integer"),
    ({"num.partitions": "0"}, "num.partitions must be at least 1"),
    ({"auto.create.topics.enable": "yes"}, "must be true or false"),
    ({"listeners": "127.0.0.1:9092"}, "listeners must be a list like PLAINTEXT://host:port"),
    ({"log.message.timestamp.type": "Now"}, "must be one of CreateTime, LogAppendTime"),
    ({"broker.id": "1", "node.id": "2"}, "broker.id and node.id must be equal"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,X:KERBEROS"},
     "must map each listener to one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"listeners": "INTERNAL://127.0.0.1:9093"}, "listener INTERNAL has no security protocol"),
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "must name each listener once"),
    ({"listener.security.protocol.map": "junk"}, "must be a list like INTERNAL:SASL_SSL,EXTERNAL:SSL"),
    ({"inter.broker.listener.name": "INTERNAL"}, "must be one of the listeners (PLAINTEXT)"),
    ({"advertised.listeners": "EXTERNAL://h:1",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT"},
     "advertised.listeners names EXTERNAL, which listeners does not bind"),
])
def test_bad_values_raise_one_sentence(props, needle):
    with pytest.raises(ConfigError) as e:
        KafkaConfig(props)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_named_listeners_mapped_to_plaintext():
    c = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                     "inter.broker.listener.name": "INTERNAL"})
    assert c.listeners == [("PLAINTEXT", "127.0.0.1", 9092), ("INTERNAL", "127.0.0.1", 9093)]
    assert c.inter_broker_listener_name == "INTERNAL"
    assert KafkaConfig().inter_broker_listener_name == "PLAINTEXT"


def test_overrides_win_over_file(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("num.partitions=2\nbroker.id=5\n")
    c = KafkaConfig.from_sources(str(f), ["num.partitions=7"])
    assert c["num.partitions"] == 7 and c.node_id == 5
    assert set(c.explicit) == {"num.partitions", "broker.id"}


def test_topic_config_parsing():
    assert parse_topic_config("retention.ms", "1000") == 1000
    assert parse_topic_config("cleanup.policy", "compact,delete") == ["compact", "delete"]
    with pytest.raises(ConfigError):
        parse_topic_config("retention.ms", "soon")
    with pytest.raises(ConfigError):
        parse_topic_config("no.such", "1")
    with pytest.raises(ConfigError):
        parse_topic_config("cleanup.policy", "shred")


def _run(*args, timeout=30):
    return subprocess.run(server_command() + list(args), capture_output=True, text=True,
                          timeout=timeout)


def test_cli_help():
    r = _run("--help")
    assert r.returncode == 0
    assert "--override" in r.stdout and "server.properties" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (["--override", "bogus.key=1"], "unknown configuration key 'bogus.key'"),
    (["--override", "num.network.threads=zero"], "num.network.threads must be an integer"),
    (["--override", "nothing"], "--override expects key=value"),
    (["/nonexistent/server.properties"], "cannot read /nonexistent/server.properties"),
])
def test_cli_bad_config_exits_2_with_one_sentence(args, needle):
    r = _run(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name, good, bad", [
    ("compression.gzip.level", ["-1", "1", "9"], ["0", "10", "-2"]),
    ("compression.lz4.level", ["1", "17"], ["0", "18", "-1"]),
    ("compression.zstd.level", ["-131072", "3", "22"], ["23", "-131073"]),
])
def test_compression_levels_take_kafkas_ranges(name, good, bad):
    for raw in good:
        assert parse_topic_config(name, raw) == int(raw)
    for raw in bad:
        with pytest.raises(ConfigError):
            parse_topic_config(name, raw)
    c = KafkaConfig({name: good[-1]})
    assert c.topic_defaults()[name] == int(good[-1])
    assert KafkaConfig().topic_defaults()[name] == {"compression.gzip.level": -1,
                                                    "compression.lz4.level": 9,
                                                    "compression.zstd.level": 3}[name]
    with pytest.raises(ConfigError):
        KafkaConfig({name: bad[0]})


def test_switch_interval_is_applied_to_the_process():
    """fastlog.gil.switch.interval.ms becomes the interpreter's switch interval (how soon
    the log cleaner's thread hands the interpreter lock to the request loop)."""
    from fastlog.cli.server import apply_process_settings

    before = sys.getswitchinterval()
    try:
        apply_process_settings(KafkaConfig())
        assert sys.getswitchinterval() == pytest.approx(0.0001)
        apply_process_settings(KafkaConfig.from_sources(
            None, ["fastlog.gil.switch.interval.ms=2.5"]))
        assert sys.getswitchinterval() == pytest.approx(0.0025)
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize("bad", ["0", "-1", "1001", "fast"])
def test_switch_interval_outside_its_range_is_refused(bad):
    with pytest.raises(ConfigError, match="fastlog.gil.switch.interval.ms"):
        KafkaConfig.from_sources(None, [f"fastlog.gil.switch.interval.ms={bad}"])


def test_inert_keys_are_listed_only_when_set():
    assert KafkaConfig({}).inert_keys() == []
    cfg = KafkaConfig({"log.cleaner.threads": "4", "log.preallocate": "true",
                       "num.partitions": "3", "num.recovery.threads.per.data.dir": "4"})
    assert cfg.inert_keys() == ["log.cleaner.threads", "log.preallocate"]


def test_inert_keys_draw_one_startup_warning(tmp_path):
    """A Kafka key fastlog accepts but does not act on is never ignored in silence."""
    with BrokerProcess(tmp_path / "data", overrides={
            "log.cleaner.threads": "4", "zookeeper.set.acl": "true"}) as b:
        pass
    lines = [line for line in b.log_path.read_text().splitlines() if "without effect" in line]
    assert len(lines) == 1
    assert "WARNING" in lines[0]
    assert "log.cleaner.threads, zookeeper.set.acl" in lines[0]


def test_message_format_version_is_accepted_ignored_and_warned_about(broker_factory):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    assert KafkaConfig({"log.message.format.version": "2.8"})["log.message.format.version"] == "2.8"
    with pytest.raises(ConfigError, match="log.message.format.version"):
        KafkaConfig({"log.message.format.version": "v2"})
    assert parse_topic_config("message.format.version", "0.10.2") == "0.10.2"
    b = broker_factory({"log.message.format.version": "2.8"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("mfv", 1, 1, config={"message.format.version": "0.11.0"})]
                        )["mfv"].result(15)
    bad = admin.create_topics([NewTopic("mfv-bad", 1, 1,
                                        config={"message.format.version": "new"})])["mfv-bad"]
    with pytest.raises(KafkaException) as e:
        bad.result(15)
    assert e.value.args[0].code() == 40  # INVALID_CONFIG
    res = ConfigResource(ConfigResource.Type.TOPIC, "mfv")
    entries = admin.describe_configs([res])[res].result(15)
    assert entries["message.format.version"].value == "0.11.0"
    text = b.log_path.read_text(errors="replace")
    assert "log.message.format.version with value 2.8 is ignored" in text
    assert "message.format.version with value 0.11.0 for topic mfv is ignored" in text
