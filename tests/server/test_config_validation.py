"""KafkaConfig refuses what Kafka's validators refuse (and what storage would refuse later)
when the config is parsed, in one sentence naming the broker key; fastlog-server prints
that sentence and exits 2 instead of a traceback."""

import asyncio
import subprocess
import sys

import pytest

from fastlog.server.config import (
    MAX_PROPERTIES_BYTES,
    ConfigError,
    KafkaConfig,
    check_zk_connect,
)
from fastlog.testing import server_command


def _refused(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_sources(None, overrides)
    message = str(e.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("override, needle", [
    ("log.dir=", "log.dir must name a directory"),
    ("log.dir=  ", "log.dir must name a directory"),
    ("log.dirs=", "log.dirs must name at least one directory"),
    ("log.dirs= , ", "log.dirs must name at least one directory"),
    ("log.dirs=/a,,/b", "log.dirs must not have an empty entry"),
    ("log.dirs=/a,/b,", "log.dirs must not have an empty entry"),
    ("log.dirs=/a,/a", "log.dirs names '/a' twice"),
    ("log.dirs=/a,/b/../a/", "log.dirs names one directory twice, as '/a' and '/b/../a/'"),
    ("log.dirs=data,./data", "log.dirs names one directory twice"),
])
def test_empty_or_repeated_log_dirs_are_refused(override, needle):
    assert needle in _refused([override])


def test_distinct_log_dirs_are_accepted():
    assert KafkaConfig.from_sources(None, ["log.dirs=/a, /b"]).log_dirs == ["/a", "/b"]
    assert KafkaConfig.from_sources(None, ["log.dir=/a"]).log_dirs == ["/a"]


@pytest.mark.parametrize("override, message", [
    ("log.flush.interval.ms=-5", "log.flush.interval.ms must be at least 0, not -5"),
    ("log.flush.scheduler.interval.ms=-5",
     "log.flush.scheduler.interval.ms must be at least 0, not -5"),
    ("log.cleaner.delete.retention.ms=-1",
     "log.cleaner.delete.retention.ms must be at least 0, not -1"),
    ("log.cleaner.min.compaction.lag.ms=-1",
     "log.cleaner.min.compaction.lag.ms must be at least 0, not -1"),
    ("log.cleaner.max.compaction.lag.ms=0",
     "log.cleaner.max.compaction.lag.ms must be at least 1, not 0"),
    ("offsets.topic.segment.bytes=1", "offsets.topic.segment.bytes must be at least 14, not 1"),
    ("transaction.state.log.segment.bytes=1",
     "transaction.state.log.segment.bytes must be at least 14, not 1"),
])
def test_storage_rules_are_checked_at_parse_time_under_the_broker_key(override, message):
    assert _refused([override]) == message


@pytest.mark.parametrize("override, needle", [
    ("broker.id=-5", "broker.id must be at least -1"),
    ("node.id=-7", "node.id must be at least -1"),
    ("log.retention.hours=-5", "log.retention.hours must be at least -1"),
    ("log.retention.minutes=-5", "log.retention.minutes must be at least -1"),
    ("log.retention.ms=-5", "log.retention.ms must be at least -1"),
    ("log.cleaner.min.cleanable.ratio=5", "log.cleaner.min.cleanable.ratio must be in [0, 1]"),
    ("log.cleaner.min.cleanable.ratio=nan", "log.cleaner.min.cleanable.ratio must be in [0, 1]"),
    ("log.cleaner.min.cleanable.ratio=-1", "log.cleaner.min.cleanable.ratio must be in [0, 1]"),
    ("group.initial.rebalance.delay.ms=-1", "group.initial.rebalance.delay.ms must be at least 0"),
    ("transaction.max.timeout.ms=0", "transaction.max.timeout.ms must be at least 1"),
    ("transaction.state.log.num.partitions=0",
     "transaction.state.log.num.partitions must be at least 1"),
])
def test_values_outside_kafkas_ranges_are_refused(override, needle):
    assert needle in _refused([override])


@pytest.mark.parametrize("override", [
    "broker.id=-1", "node.id=-1", "broker.id=0", "log.retention.ms=-1",
    "log.retention.hours=-1", "log.retention.hours=0", "log.cleaner.min.cleanable.ratio=0",
    "log.cleaner.min.cleanable.ratio=1", "group.initial.rebalance.delay.ms=0",
    "log.cleaner.max.compaction.lag.ms=1", "offsets.topic.segment.bytes=14",
])
def test_values_at_the_edges_of_kafkas_ranges_are_accepted(override):
    KafkaConfig.from_sources(None, [override])


@pytest.mark.parametrize("connect", [
    "127.0.0.1:2181", "zk1:2181,zk2:2182,zk3:2183", "zk1:2181/kafka", "zk1:2181/a/b",
    "zk1", "zk1:2181/", "[::1]:2181",
])
def test_zookeeper_connect_strings_zookeeper_accepts(connect):
    assert check_zk_connect(connect) is None
    assert KafkaConfig({"zookeeper.connect": connect})["zookeeper.connect"] == connect.strip()


@pytest.mark.parametrize("connect, needle", [
    ("", "must name at least one host:port"),
    ("/kafka", "must name at least one host:port"),
    ("127.0.0.1:abc", "must give ports between 1 and 65535"),
    ("127.0.0.1:", "must give ports between 1 and 65535"),
    ("127.0.0.1:0", "must give ports between 1 and 65535"),
    ("127.0.0.1:65536", "must give ports between 1 and 65535"),
    ("127.0.0.1:" + "9" * 5000, "must give ports between 1 and 65535"),
    (":2181", "must give a host in each host:port entry"),
    ("zk1:2181,,zk2:2181", "must not have an empty host:port entry"),
    ("zk1:2181,", "must not have an empty host:port entry"),
    ("zk 1:2181", "must be a list of host:port entries"),
    ("zk1:2181 ,zk2:2181", "must give ports between 1 and 65535"),
    ("zk1:2181, zk2:2181", "must be a list of host:port entries"),
    ("zk1:2181/kafka/", "must have a chroot like /kafka"),
    ("zk1:2181/a//b", "must have a chroot like /kafka"),
    ("zk1:2181/a/../b", "must have a chroot like /kafka"),
])
def test_malformed_zookeeper_connect_is_refused(connect, needle):
    assert needle in check_zk_connect(connect)
    message = _refused([f"zookeeper.connect={connect}"])
    assert message.startswith("zookeeper.connect ") and needle in message


def test_properties_file_larger_than_the_cap_is_refused(tmp_path):
    f = tmp_path / "server.properties"
    f.write_bytes(b"#" * (MAX_PROPERTIES_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        KafkaConfig.from_sources(str(f))
    f.write_bytes(b"#" * (MAX_PROPERTIES_BYTES - 20) + b"\nnum.partitions=3\n")
    assert KafkaConfig.from_sources(str(f))["num.partitions"] == 3


@pytest.mark.parametrize("args, needle", [
    (["--override", "log.dir="], "log.dir must name a directory"),
    (["--override", "log.dirs=a,,b"], "log.dirs must not have an empty entry"),
    (["--override", "log.flush.interval.ms=-5"], "log.flush.interval.ms must be at least 0"),
    (["--override", "offsets.topic.segment.bytes=1"], "offsets.topic.segment.bytes must be"),
    (["--override", "zookeeper.connect=127.0.0.1:abc"], "zookeeper.connect must give ports"),
    (["--override", "broker.id=-5"], "broker.id must be at least -1"),
    (["/dev/zero"], "/dev/zero is larger than 1 MiB"),
])
def test_server_refuses_bad_config_with_one_sentence(tmp_path, args, needle):
    # Run in an empty directory with a port-0 listener, so that a broker that wrongly
    # started would touch nothing of the user's and bind nothing fixed.
    r = subprocess.run(server_command() + ["--override", "listeners=PLAINTEXT://127.0.0.1:0"]
                       + args, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fastlog-server: ") and needle in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_log_config_error_at_startup_is_one_sentence(monkeypatch, capsys, tmp_path):
    """A topic config storage refuses when its log opens ends startup with one sentence."""
    import fastlog.server.broker as broker_module
    from fastlog.cli import server as cli_server
    from fastlog.server.log.config import LogConfigError

    class RefusingBroker:
        def __init__(self, config):
            self.shut_down = False

        async def startup(self):
            raise LogConfigError("segment.bytes must be at least 14, not 1", "segment.bytes")

        async def shutdown(self):
            await asyncio.sleep(0)

    monkeypatch.setattr(broker_module, "BrokerServer", RefusingBroker)
    before = sys.getswitchinterval()
    try:
        code = cli_server.main(["--override", "listeners=PLAINTEXT://127.0.0.1:0",
                                "--override", f"log.dirs={tmp_path}"])
    finally:
        sys.setswitchinterval(before)
    assert code == cli_server.EXIT_CONFIG
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fastlog-server: cannot start: segment.bytes must be at least 14, not 1"]
