"""Checkpoint files in Kafka's format, the leader-epoch cache, LogConfig from broker
defaults and overrides."""

import pytest

from fastlog.fileio import atomic_write, atomic_write_many
from fastlog.server.log import LeaderEpochFileCache, LogConfig, LogConfigError, OffsetCheckpointFile
from fastlog.server.log.checkpoint import CorruptCheckpointError


def test_offset_checkpoint_round_trip_and_format(tmp_path):
    cp = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint"))
    assert cp.read() == {}
    cp.write({("b", 1): 7, ("a", 0): 12})
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n2\na 0 12\nb 1 7\n"
    assert cp.read() == {("a", 0): 12, ("b", 1): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


@pytest.mark.parametrize("text", ["", "0\n", "1\n0\n", "0\n2\na 0 1\n", "0\n1\na x 1\n",
                                  "0\n1\na 0\n"])
def test_malformed_checkpoint_is_reported(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(str(path)).read()


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    (tmp_path / "f.tmp").write_text("half-writ")  # a crash left this behind
    atomic_write(str(path), b"new")
    assert path.read_bytes() == b"new" and not (tmp_path / "f.tmp").exists()


def test_atomic_write_many_replaces_every_file(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("old")
    (tmp_path / "b.tmp").write_text("half-writ")  # a crash left this behind
    atomic_write_many([(str(tmp_path / "a" / "f"), b"new a"), (str(tmp_path / "b"), b"new b")])
    assert (tmp_path / "a" / "f").read_bytes() == b"new a"
    assert (tmp_path / "b").read_bytes() == b"new b"
    assert sorted(p.name for p in tmp_path.rglob("*.tmp")) == []


def test_leader_epoch_cache_of_a_new_partition_is_written_by_its_creator(tmp_path):
    """read=False / write=False: the cache holds the first epoch, the file comes from
    content() (LogManager.create_logs writes many at once)."""
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("junk")  # not read
    cache = LeaderEpochFileCache(str(path), read=False)
    cache.assign(0, 0, write=False)
    assert cache.entries() == [(0, 0)] and path.read_text() == "junk"
    atomic_write(str(path), cache.content())
    assert LeaderEpochFileCache(str(path)).entries() == [(0, 0)]
    assert path.read_text() == "0\n1\n0 0\n"


def test_leader_epoch_cache(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(str(path))
    assert cache.latest_epoch == -1 and cache.end_offset_for(0, 10) == (-1, -1)
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch later: no change
    cache.assign(3, 20)
    cache.assign(5, 40)
    assert path.read_text() == "0\n3\n1 0\n3 20\n5 40\n"
    assert cache.end_offset_for(5, 55) == (5, 55)
    assert cache.end_offset_for(3, 55) == (3, 40)
    assert cache.end_offset_for(4, 55) == (3, 40)  # unknown epoch: the one before it
    assert cache.end_offset_for(0, 55) == (0, 0)
    assert cache.end_offset_for(9, 55) == (-1, -1)
    assert cache.epoch_for_offset(25) == 3
    cache.truncate_from_end(30)
    assert cache.entries() == [(1, 0), (3, 20)]
    cache.truncate_from_start(25)
    assert cache.entries() == [(3, 25)]
    cache.assign(2, 10)  # an older epoch at an older offset rewrites history
    assert cache.entries() == [(2, 10)]
    assert LeaderEpochFileCache(str(path)).entries() == [(2, 10)]


def test_log_config_from_broker_defaults_and_overrides():
    defaults = {"segment.bytes": 1000, "retention.ms": 5, "cleanup.policy": ["delete"],
                "some.broker.only.key": 1}
    cfg = LogConfig.from_props(defaults, {"retention.ms": "60000", "cleanup.policy": "compact,delete",
                                          "preallocate": "true"})
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.preallocate) == (1000, 60000, True)
    assert cfg.cleanup_policy == ("compact", "delete") and cfg.compact and cfg.delete_enabled
    assert cfg.overridden == {"retention.ms", "cleanup.policy", "preallocate"}
    assert LogConfig().segment_bytes == 1 << 30 and LogConfig().flush_messages == (1 << 63) - 1
    with pytest.raises(LogConfigError):
        LogConfig.from_props({}, {"no.such.key": "1"})
    with pytest.raises(LogConfigError):
        LogConfig.from_props({}, {"segment.bytes": "ten"})
    with pytest.raises(LogConfigError):
        LogConfig.from_props({}, {"segment.bytes": "3"})
    assert cfg.with_overrides({"retention.bytes": "10"}).retention_bytes == 10
