# fastlog/server/dynamic_config.py — DynamicBrokerConfig: broker configs changed while the
# broker runs (Kafka's KIP-226).
#
# Owns: which broker keys may change live (DYNAMIC_KEYS: the log.* defaults topics inherit,
# as Kafka's DynamicLogConfig takes them, the log cleaner's pause and memory, and the
# connection limits), the layering of their
# values — topic override > dynamic per-broker (`/config/brokers/<id>`) > dynamic cluster
# default (`/config/brokers/<default>`) > static (server.properties, --override) > Kafka's
# default — and the synonym lists DescribeConfigs reports in that order.
# Format: each layer is {key: value as text}, the form the metadata store keeps (ZooKeeper's
# {"version":1,"config":{...}} or the embedded store's "brokers" map).
# The effective values replace KafkaConfig.values as one dict swap, so every reader of the
# broker's KafkaConfig sees the new values at its next read; the broker then pushes the
# derived topic log configs to the logs (BrokerServer.apply_dynamic_configs).
# Called from: the broker's asyncio API loop only (AlterConfigs handlers and the metadata
# store's change notifications, which the broker hands to the loop).
"""Dynamic broker configuration (KIP-226): layers, validation and synonyms."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fastlog.server.config import (
    CONFIG_KEYS,
    TOPIC_CONFIG_SYNONYMS,
    ConfigError,
    KafkaConfig,
    format_config_value,
)

# DescribeConfigs config sources (Kafka's DescribeConfigsResponse.ConfigSource ids).
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# As Kafka's DynamicLogConfig: the first (primary) broker synonym of each topic config —
# log.retention.ms, not log.retention.hours; log.roll.ms, not log.roll.hours — except the
# keys fastlog accepts but does not act on (they draw a warning at startup instead).
_LOG_KEYS = frozenset(names[0] for names in TOPIC_CONFIG_SYNONYMS.values()
                      if not CONFIG_KEYS[names[0]].inert)
# As Kafka's DynamicConnectionQuota (the socket servers take them live).
CONNECTION_KEYS = frozenset({"max.connections", "max.connections.per.ip",
                             "max.connections.per.ip.overrides"})
# Of Kafka's LogCleaner reconfigurables, those fastlog has (read at each cleaner pass).
CLEANER_KEYS = frozenset({"log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size"})
DYNAMIC_KEYS = _LOG_KEYS | CONNECTION_KEYS | CLEANER_KEYS

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: keys that set one value in several
# units, most precise first.
_SYNONYM_GROUPS = [names for names in TOPIC_CONFIG_SYNONYMS.values() if len(names) > 1]


def broker_synonyms(key: str) -> list[str]:
    """The broker keys that set `key`'s value, most precise first (log.retention.ms,
    log.retention.minutes, log.retention.hours), or [key]."""
    for names in _SYNONYM_GROUPS:
        if key in names:
            return list(names)
    return [key]


class DynamicConfigError(ValueError):
    """A dynamic change the broker refuses; the message is Kafka's sentence."""


class DynamicBrokerConfig:
    """The static configuration plus the dynamic default and per-broker layers."""

    def __init__(self, config: KafkaConfig):
        self.config = config
        self.static_values: dict[str, Any] = dict(config.values)
        self.default: dict[str, str] = {}
        self.per_broker: dict[str, str] = {}

    # ------------------------------------------------------------------ checks
    @staticmethod
    def check_keys(props: Mapping[str, str | None]) -> None:
        """DynamicConfigError unless every key may change live (Kafka's words)."""
        unknown = sorted(k for k in props if k not in CONFIG_KEYS)
        if unknown:
            raise DynamicConfigError(f"Unknown broker configs: {', '.join(unknown)}")
        fixed = sorted(k for k in props if k not in DYNAMIC_KEYS)
        if fixed:
            raise DynamicConfigError(
                f"Cannot update these configs dynamically: {', '.join(fixed)}")

    def validate(self, props: Mapping[str, str], per_broker: bool) -> None:
        """Refuse `props` as the new default (per_broker False) or per-broker layer when a
        key is not dynamic or the resulting configuration is invalid."""
        self.check_keys(props)
        empty = sorted(k for k, v in props.items() if v is None)
        if empty:
            raise DynamicConfigError(f"These configs need a value: {', '.join(empty)}")
        default, broker = (self.default, props) if per_broker else (props, self.per_broker)
        candidate = copy.copy(self.config)
        try:
            candidate.values = self._effective(default, broker, strict=True)
            candidate._validate()
        except ConfigError as e:
            raise DynamicConfigError(str(e)) from None

    # ------------------------------------------------------------------ changes
    def update(self, default: Mapping[str, str], per_broker: Mapping[str, str]) -> set[str]:
        """Take new dynamic layers (as stored; a value this broker cannot use is skipped,
        as Kafka skips it) and return the keys whose effective value changed."""
        values = self._effective(default, per_broker, strict=False)
        self.default = {k: v for k, v in default.items() if k in DYNAMIC_KEYS}
        self.per_broker = {k: v for k, v in per_broker.items() if k in DYNAMIC_KEYS}
        old = self.config.values
        changed = {k for k, v in values.items() if old.get(k) != v}
        self.config.values = values
        return changed

    def _effective(self, default: Mapping[str, str], per_broker: Mapping[str, str],
                   strict: bool) -> dict[str, Any]:
        values = dict(self.static_values)
        for layer in (default, per_broker):
            for key, raw in layer.items():
                if key not in DYNAMIC_KEYS:
                    continue
                try:
                    values[key] = CONFIG_KEYS[key].parse(raw)
                except ConfigError:
                    if strict:
                        raise
        if not strict:
            # A stored set that is valid key by key but not together (written by another
            # version) falls back to the static values rather than stopping the broker.
            candidate = copy.copy(self.config)
            candidate.values = values
            try:
                candidate._validate()
            except ConfigError:
                return dict(self.static_values)
        return values

    # ------------------------------------------------------------------ describe
    def synonyms(self, names: list[str]) -> list[tuple[str, str | None, int]]:
        """(key, value, source) of every layer that sets one of `names`, in Kafka's order:
        dynamic per-broker, dynamic default, static, then Kafka's default (the first of
        the names that has one). Sensitive values are None."""
        out: list[tuple[str, str | None, int]] = []
        explicit = self.config.explicit
        for layer, source in ((self.per_broker, SOURCE_DYNAMIC_BROKER),
                              (self.default, SOURCE_DYNAMIC_DEFAULT_BROKER)):
            out.extend((k, self._shown(k, layer[k]), source) for k in names if k in layer)
        out.extend((k, self._shown(k, format_config_value(self.static_values[k])),
                    SOURCE_STATIC_BROKER) for k in names if k in explicit)
        for k in names:
            if CONFIG_KEYS[k].default is not None:
                out.append((k, self._shown(k, format_config_value(CONFIG_KEYS[k].default)),
                            SOURCE_DEFAULT))
                break
        return out

    def broker_key_synonyms(self, key: str) -> list[tuple[str, str | None, int]]:
        """Kafka's synonyms of one broker key: those of its group from the first entry of
        the key itself on (describing log.retention.hours leaves out log.retention.ms)."""
        out = self.synonyms(broker_synonyms(key))
        while out and out[0][0] != key:
            out.pop(0)
        return out

    @staticmethod
    def _shown(key: str, value: str | None) -> str | None:
        return None if CONFIG_KEYS[key].sensitive else value
