# fastlog/server/dynamic_config.py — DynamicBrokerConfig: broker configs changed while the
# broker runs (Kafka's KIP-226).
#
# Owns: which broker keys may change live (DYNAMIC_KEYS: the log.* defaults topics inherit,
# as Kafka's DynamicLogConfig takes them, the log cleaner's pause and memory, and the
# connection limits; per broker only, a TLS listener's keystore file
# listener.name.<listener>.ssl.keystore.location), the layering of their
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
import re
from collections.abc import Mapping
from typing import Any

from fastlog.security import SecurityConfigError, server_context
from fastlog.server.config import (
    CONFIG_KEYS,
    LISTENER_PREFIX,
    TLS_PROTOCOLS,
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
# Kafka's per-broker listener keystore update: the file is read again into the listener's
# TLS context. Its passwords are not dynamic here (Kafka stores them encrypted with
# password.encoder.secret, which fastlog does not have): the keystore keeps the password
# server.properties gives.
_KEYSTORE_KEY = re.compile(re.escape(LISTENER_PREFIX) + r"([a-z0-9_]+)\.ssl\.keystore\.location$")


def keystore_listener(key: str) -> str | None:
    """The listener (upper case) whose keystore file a key names, or None."""
    m = _KEYSTORE_KEY.match(key)
    return m.group(1).upper() if m else None


def is_dynamic(key: str) -> bool:
    return key in DYNAMIC_KEYS or keystore_listener(key) is not None

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
        self.static_listeners = _copy_listeners(config.listener_overrides)
        self.default: dict[str, str] = {}
        self.per_broker: dict[str, str] = {}

    # ------------------------------------------------------------------ checks
    def check_keys(self, props: Mapping[str, str | None], per_broker: bool) -> None:
        """DynamicConfigError unless every key may change live, at this level (Kafka's
        words)."""
        listeners = {name for name, _, _ in self.config.listeners}
        unknown = sorted(k for k in props if k not in CONFIG_KEYS and (
            keystore_listener(k) is None or keystore_listener(k) not in listeners))
        if unknown:
            raise DynamicConfigError(f"Unknown broker configs: {', '.join(unknown)}")
        fixed = sorted(k for k in props if not is_dynamic(k))
        if fixed:
            raise DynamicConfigError(
                f"Cannot update these configs dynamically: {', '.join(fixed)}")
        keystores = sorted(k for k in props if keystore_listener(k))
        if keystores and not per_broker:
            raise DynamicConfigError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {', '.join(keystores)}")
        plain = sorted(k for k in keystores if self.config.listener_security_protocol(
            keystore_listener(k)) not in TLS_PROTOCOLS)
        if plain:
            raise DynamicConfigError(f"These listeners do not use TLS: {', '.join(plain)}")

    def validate(self, props: Mapping[str, str], per_broker: bool) -> None:
        """Refuse `props` as the new default (per_broker False) or per-broker layer when a
        key is not dynamic or the resulting configuration is invalid (a new keystore is
        loaded to be sure it can be)."""
        self.check_keys(props, per_broker)
        empty = sorted(k for k, v in props.items() if v is None)
        if empty:
            raise DynamicConfigError(f"These configs need a value: {', '.join(empty)}")
        default, broker = (self.default, props) if per_broker else (props, self.per_broker)
        candidate = copy.copy(self.config)
        try:
            candidate.values, candidate.listener_overrides = self._effective(
                default, broker, strict=True)
            candidate._validate()
        except ConfigError as e:
            raise DynamicConfigError(str(e)) from None
        for key in sorted(props):
            listener = keystore_listener(key)
            if listener is not None:
                try:
                    server_context(candidate.listener_config(listener))
                except SecurityConfigError as e:
                    raise DynamicConfigError(f"{key}: {e}") from None

    # ------------------------------------------------------------------ changes
    def update(self, default: Mapping[str, str], per_broker: Mapping[str, str]) -> set[str]:
        """Take new dynamic layers (as stored; a value this broker cannot use is skipped,
        as Kafka skips it) and return the keys whose effective value changed."""
        values, listeners = self._effective(default, per_broker, strict=False)
        self.default = {k: v for k, v in default.items() if k in DYNAMIC_KEYS}
        self.per_broker = {k: v for k, v in per_broker.items() if is_dynamic(k)}
        old, old_listeners = self.config.values, self.config.listener_overrides
        changed = {k for k, v in values.items() if old.get(k) != v}
        for name in set(listeners) | set(old_listeners):
            location = listeners.get(name, {}).get("ssl.keystore.location")
            if location != old_listeners.get(name, {}).get("ssl.keystore.location"):
                changed.add(f"{LISTENER_PREFIX}{name.lower()}.ssl.keystore.location")
        self.config.values, self.config.listener_overrides = values, listeners
        return changed

    def _effective(self, default: Mapping[str, str], per_broker: Mapping[str, str],
                   strict: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        values = dict(self.static_values)
        listeners = _copy_listeners(self.static_listeners)
        for layer in (default, per_broker):
            for key, raw in layer.items():
                if key not in DYNAMIC_KEYS:
                    continue
                try:
                    values[key] = CONFIG_KEYS[key].parse(raw)
                except ConfigError:
                    if strict:
                        raise
        for key, raw in per_broker.items():
            listener = keystore_listener(key)
            if listener is not None and raw:
                listeners.setdefault(listener, {})["ssl.keystore.location"] = raw
        if not strict:
            # A stored set that is valid key by key but not together (written by another
            # version) falls back to the static values rather than stopping the broker.
            candidate = copy.copy(self.config)
            candidate.values, candidate.listener_overrides = values, listeners
            try:
                candidate._validate()
            except ConfigError:
                return dict(self.static_values), _copy_listeners(self.static_listeners)
        return values, listeners

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
            if k in CONFIG_KEYS and CONFIG_KEYS[k].default is not None:
                out.append((k, self._shown(k, format_config_value(CONFIG_KEYS[k].default)),
                            SOURCE_DEFAULT))
                break
        return out

    def broker_key_synonyms(self, key: str) -> list[tuple[str, str | None, int]]:
        """Kafka's synonyms of one broker key: those of its group from the first entry of
        the key itself on (describing log.retention.hours leaves out log.retention.ms);
        a listener's keystore has the listener-less key as its synonym."""
        listener = keystore_listener(key)
        if listener is not None:
            out = self.synonyms([key, "ssl.keystore.location"])
            static = self.static_listeners.get(listener, {}).get("ssl.keystore.location")
            if static is not None:
                out.insert(1 if key in self.per_broker else 0,
                           (key, static, SOURCE_STATIC_BROKER))
            return out
        out = self.synonyms(broker_synonyms(key))
        while out and out[0][0] != key:
            out.pop(0)
        return out

    @staticmethod
    def _shown(key: str, value: str | None) -> str | None:
        spec = CONFIG_KEYS.get(key)
        return None if spec is not None and spec.sensitive else value


def _copy_listeners(overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: dict(keys) for name, keys in overrides.items()}
