# fastlog/server/log/config.py — LogConfig: the per-topic storage settings.
#
# Owns: the topic-level keys storage obeys, with Kafka's names and defaults, and how a
# topic's effective config is built: broker defaults (KafkaConfig.topic_defaults(), i.e. the
# `log.*` keys under their topic names) overlaid by the topic's own overrides. Immutable;
# a config change builds a new LogConfig and hands it to Log.update_config. Any thread.
"""Per-topic log configuration (Kafka's topic config names and defaults)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

LONG_MAX = (1 << 63) - 1

# topic key -> (attribute, type, Kafka's default). Types: int, bool, float, str, list.
_KEYS: dict[str, tuple[str, str, Any]] = {
    "segment.bytes": ("segment_bytes", "int", 1024 * 1024 * 1024),
    "segment.ms": ("segment_ms", "int", 7 * 24 * 3600 * 1000),
    "segment.jitter.ms": ("segment_jitter_ms", "int", 0),
    "segment.index.bytes": ("segment_index_bytes", "int", 10 * 1024 * 1024),
    "index.interval.bytes": ("index_interval_bytes", "int", 4096),
    "flush.messages": ("flush_messages", "int", LONG_MAX),
    "flush.ms": ("flush_ms", "int", LONG_MAX),
    "retention.ms": ("retention_ms", "int", 7 * 24 * 3600 * 1000),
    "retention.bytes": ("retention_bytes", "int", -1),
    "file.delete.delay.ms": ("file_delete_delay_ms", "int", 60_000),
    "message.timestamp.type": ("message_timestamp_type", "str", "CreateTime"),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", "int", LONG_MAX),
    "max.message.bytes": ("max_message_bytes", "int", 1024 * 1024 + 12),
    "cleanup.policy": ("cleanup_policy", "list", ("delete",)),
    "compression.type": ("compression_type", "str", "producer"),
    "compression.gzip.level": ("compression_gzip_level", "int", -1),
    "compression.lz4.level": ("compression_lz4_level", "int", 9),
    "compression.zstd.level": ("compression_zstd_level", "int", 3),
    "min.insync.replicas": ("min_insync_replicas", "int", 1),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", "bool", False),
    "delete.retention.ms": ("delete_retention_ms", "int", 24 * 3600 * 1000),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "int", 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "int", LONG_MAX),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "float", 0.5),
    "preallocate": ("preallocate", "bool", False),
}

_MINIMUM = {"segment.bytes": 14, "segment.ms": 1, "segment.index.bytes": 4,
            "index.interval.bytes": 0, "flush.messages": 1, "flush.ms": 0,
            "file.delete.delay.ms": 0, "max.message.bytes": 0, "min.insync.replicas": 1,
            "min.compaction.lag.ms": 0, "max.compaction.lag.ms": 1, "delete.retention.ms": 0}


class LogConfigError(ValueError):
    """A topic config key or value that storage cannot accept; `key` names the topic key
    when the message starts with it (the broker config retells it with its own key)."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def _coerce(key: str, kind: str, value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        try:
            if kind == "int":
                value = int(text)
            elif kind == "float":
                value = float(text)
            elif kind == "bool":
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                value = text.lower() == "true"
            elif kind == "list":
                value = tuple(p.strip() for p in text.split(",") if p.strip())
            else:
                value = text
        except ValueError:
            raise LogConfigError(f"{key} has an invalid value {value!r}", key) from None
    elif kind == "list":
        value = tuple(value)
    elif kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise LogConfigError(f"{key} must be an integer, not {value!r}", key)
    if key in _MINIMUM and value < _MINIMUM[key]:
        raise LogConfigError(f"{key} must be at least {_MINIMUM[key]}, not {value}", key)
    return value


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Effective storage settings of one topic; attribute names are the keys with '_'."""

    segment_bytes: int = _KEYS["segment.bytes"][2]
    segment_ms: int = _KEYS["segment.ms"][2]
    segment_jitter_ms: int = 0
    segment_index_bytes: int = _KEYS["segment.index.bytes"][2]
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = _KEYS["retention.ms"][2]
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60_000
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: tuple = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    preallocate: bool = False
    # The topic keys that were set explicitly (DescribeConfigs reports them as topic-level).
    overridden: frozenset = frozenset()
    # Derived once here, because every produce request reads them: LogAppendTime
    # stamping, and the codec (compression.type; None keeps each batch's own, as
    # 'producer' does) and level (compression.<codec>.level) batches are stored with.
    log_append_time: bool = dataclasses.field(init=False, repr=False, compare=False)
    target_codec: int | None = dataclasses.field(init=False, repr=False, compare=False)
    target_level: int | None = dataclasses.field(init=False, repr=False, compare=False)
    # cleanup.policy contains 'compact' (the produce checks then want every record keyed)
    compact: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        target = _TARGETS.get(self.compression_type)
        codec = level = None
        if target is not None:
            codec = target[0]
            level = None if target[1] is None else getattr(self, target[1])
        object.__setattr__(self, "log_append_time",
                           self.message_timestamp_type == "LogAppendTime")
        object.__setattr__(self, "target_codec", codec)
        object.__setattr__(self, "target_level", level)
        object.__setattr__(self, "compact", "compact" in self.cleanup_policy)

    @classmethod
    def from_props(cls, defaults: Mapping[str, Any] | None = None,
                   overrides: Mapping[str, Any] | None = None) -> LogConfig:
        """Build from broker defaults (topic key names) plus topic overrides (strings or
        typed values). Unknown keys in `overrides` are an error; unknown defaults are
        ignored (the broker knows keys that storage does not use)."""
        values: dict[str, Any] = {}
        for source, strict in ((defaults or {}, False), (overrides or {}, True)):
            for key, raw in source.items():
                spec = _KEYS.get(key)
                if spec is None:
                    if strict:
                        raise LogConfigError(f"unknown topic config {key!r}")
                    continue
                if raw is None:
                    continue
                values[spec[0]] = _coerce(key, spec[1], raw)
        return cls(**values, overridden=frozenset((overrides or {}).keys()))

    @classmethod
    def from_broker(cls, kafka_config, overrides: Mapping[str, Any] | None = None) -> LogConfig:
        """Topic config from a KafkaConfig's defaults plus the topic's overrides."""
        return cls.from_props(kafka_config.topic_defaults(), overrides)

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
        """A copy with some topic keys changed."""
        return LogConfig.from_props(self.to_props(), overrides)

    def to_props(self) -> dict[str, Any]:
        """The config as {topic key: typed value}."""
        return {key: getattr(self, spec[0]) for key, spec in _KEYS.items()}

    @property
    def delete_enabled(self) -> bool:
        """True when time/size retention applies (cleanup.policy contains 'delete')."""
        return "delete" in self.cleanup_policy


# compression.type -> (Kafka's codec id in a batch's attributes, the LogConfig attribute
# holding its level, if it has one).
_TARGETS = {"uncompressed": (0, None), "gzip": (1, "compression_gzip_level"),
            "snappy": (2, None), "lz4": (3, "compression_lz4_level"),
            "zstd": (4, "compression_zstd_level")}


TOPIC_CONFIG_KEYS = tuple(_KEYS)
