# Kafka's ZooKeeper layout: every znode path fastlog uses and the exact JSON payload Kafka's
# ZooKeeper-mode brokers (2.x-3.x) write there, so Kafka's tools read our cluster and we read
# theirs. Encoders produce compact JSON with Kafka's keys and value types (some numbers are
# strings in Kafka's format, e.g. timestamps and the cluster id's "version"); decoders parse by
# key, accept the older versions Kafka accepts, and raise ZkDataError (naming the path) on
# anything malformed. Pure functions and frozen dataclasses: safe from any thread.

from __future__ import annotations

import json
import re
import time
import urllib.parse
from dataclasses import dataclass, field

# -- top-level paths ---------------------------------------------------------------------

ADMIN = "/admin"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
BROKER_TOPICS = "/brokers/topics"
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONSUMERS = "/consumers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
FEATURE = "/feature"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
# fastlog's own (Kafka sends a ControlledShutdown request instead): a stopping broker's
# ephemeral .../<id> asks the active controller to move leadership off it; the controller
# answers by rewriting the node's data (encode/decode_controlled_shutdown below).
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
# fastlog's own (Kafka's controller learns them from LeaderAndIsr answers instead): a
# broker's ephemeral .../<id> lists its replicas in failed log dirs, in the partition-list
# form below; the controller reads it when a log dir event names that broker.
OFFLINE_REPLICAS = "/fastlog/offline_replicas"

CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")

# Paths a broker makes sure exist at startup (Kafka: ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    CONSUMERS, BROKER_IDS, BROKER_TOPICS, CONFIG_CHANGES, DELETE_TOPICS, BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION, LATEST_PRODUCER_ID_BLOCK, LOG_DIR_EVENT_NOTIFICATION,
) + tuple(f"{CONFIG}/{t}" for t in CONFIG_TYPES)

CONFIG_CHANGE_PREFIX = "config_change_"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
# Kafka's LogDirEventNotificationHandler.LogDirFailureEvent
LOG_DIR_FAILURE_EVENT = 1

INITIAL_CONTROLLER_EPOCH = 0
NO_LEADER = -1
# Kafka's LeaderAndIsr "initial" values for a partition state znode.
INITIAL_LEADER_EPOCH = 0
RESERVED_BROKER_MAX_ID = 1000  # reserved.broker.max.id: generated ids start above it

_ENDPOINT_RE = re.compile(r"^([^:/]+)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")


class ZkDataError(ValueError):
    """A znode's payload is not what Kafka's format says it must be."""


# -- path builders -----------------------------------------------------------------------

def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{int(broker_id)}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{int(broker_id)}"


def encode_controlled_shutdown(broker_epoch: int, remaining=None) -> bytes:
    """{"version":1,"broker_epoch":E} asks; the controller adds "remaining":[[topic,p],...]
    (partitions still led by the broker: no other live in-sync replica) when done."""
    obj = {"version": 1, "broker_epoch": int(broker_epoch)}
    if remaining is not None:
        obj["remaining"] = [[t, int(p)] for t, p in sorted(remaining)]
    return json.dumps(obj, separators=(",", ":")).encode()


def decode_controlled_shutdown(data: bytes | None) -> tuple[int, set | None]:
    """(broker_epoch, remaining partitions or None while unanswered); ZkDataError if bad."""
    try:
        obj = json.loads(data or b"{}")
        remaining = obj.get("remaining")
        return (int(obj.get("broker_epoch", -1)),
                None if remaining is None else {(str(t), int(p)) for t, p in remaining})
    except (ValueError, TypeError, AttributeError) as e:
        raise ZkDataError(f"malformed controlled shutdown request: {e}") from None


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def topic_partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{int(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{int(partition)}/state"


# Entity types whose names Kafka stores sanitized (any string may be a user or client id).
SANITIZED_TYPES = ("users", "clients")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user or client id as a znode name (Java's URLEncoder
    in UTF-8, with '*' as %2A and a space as %20)."""
    return urllib.parse.quote(name, safe="*").replace("*", "%2A").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name, errors="strict")


# Kafka's ConfigEntityName.Default: the default user or client id, never sanitized.
DEFAULT_ENTITY = "<default>"


def config_entity_name(entity_type: str, name: str) -> str:
    """The znode name of an entity under /config/<type> (and in change notifications)."""
    if entity_type in SANITIZED_TYPES and name != DEFAULT_ENTITY:
        return sanitize(name)
    return name


def user_client_entity(user: str, client_id: str) -> str:
    """The entity path ("<type>/<name>" under /config, as change notifications name it)
    of a user + client-id quota: users/<user>/clients/<client id>."""
    return (f"users/{config_entity_name('users', user)}/clients/"
            f"{config_entity_name('clients', client_id)}")


def config_entity_path(entity_type: str, name: str) -> str:
    if entity_type not in CONFIG_TYPES:
        raise ValueError(f"unknown config entity type {entity_type!r}; one of {CONFIG_TYPES}")
    return f"{CONFIG}/{entity_type}/{config_entity_name(entity_type, name)}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


# -- JSON helpers ------------------------------------------------------------------------

def _dumps(obj) -> bytes:
    # Jackson's compact output: no spaces.
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _loads(path: str, data: bytes | None) -> dict:
    if not data:
        raise ZkDataError(f"{path}: empty payload where Kafka writes JSON")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ZkDataError(f"{path}: payload is not JSON ({e}): {data[:200]!r}") from None
    if not isinstance(obj, dict):
        raise ZkDataError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _get(path: str, obj: dict, key: str, kind, *, default=...):
    if key not in obj:
        if default is ...:
            raise ZkDataError(f"{path}: missing key {key!r}")
        return default
    value = obj[key]
    if kind is int:
        # bool is an int subclass in Python, never in Kafka's JSON
        if isinstance(value, bool) or not isinstance(value, int):
            raise ZkDataError(f"{path}: {key!r} must be an integer, got {value!r}")
    elif not isinstance(value, kind):
        raise ZkDataError(f"{path}: {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _int_list(path: str, key: str, value) -> list[int]:
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, int)
                                          for x in value):
        raise ZkDataError(f"{path}: {key!r} must be a list of integers, got {value!r}")
    return list(value)


def now_ms_str() -> str:
    return str(int(time.time() * 1000))


# -- /brokers/ids/<id> -------------------------------------------------------------------

@dataclass(frozen=True)
class EndPoint:
    listener: str            # listener name, e.g. "PLAINTEXT" or "CLIENT"
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(cls, s: str, protocol_map: dict[str, str] | None = None) -> EndPoint:
        m = _ENDPOINT_RE.match(s) if isinstance(s, str) else None
        if not m:
            raise ValueError(f"endpoint {s!r} is not LISTENER://host:port")
        listener, host, port = m.group(1), m.group(2), int(m.group(3))
        if protocol_map is not None:
            proto = protocol_map.get(listener)
            if proto is None:
                raise ValueError(f"endpoint {s!r}: listener {listener} has no security protocol "
                                 "in listener_security_protocol_map")
        else:
            proto = listener  # pre-v4 registrations: the listener name is the protocol
        return cls(listener, host, port, proto)


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker's registration (/brokers/ids/<id>, ephemeral)."""
    id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    version: int = 5
    timestamp: str = ""
    features: dict = field(default_factory=dict)
    # The registration znode's czxid (Kafka's broker epoch): a broker that restarted, even
    # too fast for anyone to see it gone, comes back with a larger one. Not in the JSON.
    epoch: int = -1

    def endpoint(self, listener: str | None = None) -> EndPoint | None:
        """The endpoint of `listener`, or the first PLAINTEXT one, or the first at all."""
        if listener is not None:
            return next((e for e in self.endpoints if e.listener == listener), None)
        return next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"),
                    self.endpoints[0] if self.endpoints else None)


def encode_broker(info: BrokerInfo, timestamp: str | None = None) -> bytes:
    # Top-level host/port are the first PLAINTEXT endpoint (for old clients), else null/-1.
    plain = next((e for e in info.endpoints if e.security_protocol == "PLAINTEXT"), None)
    obj = {
        "features": dict(info.features),
        "listener_security_protocol_map": {e.listener: e.security_protocol
                                           for e in info.endpoints},
        "endpoints": [e.connection_string() for e in info.endpoints],
        "jmx_port": int(info.jmx_port),
        "port": plain.port if plain else -1,
        "host": plain.host if plain else None,
        "version": 5,
        "timestamp": timestamp if timestamp is not None else (info.timestamp or now_ms_str()),
    }
    if info.rack is not None:
        obj["rack"] = info.rack
    return _dumps(obj)


def decode_broker(broker_id: int, data: bytes | None, epoch: int = -1) -> BrokerInfo:
    path = broker_id_path(broker_id)
    obj = _loads(path, data)
    version = _get(path, obj, "version", int)
    if version < 1:
        raise ZkDataError(f"{path}: unsupported broker registration version {version}")
    jmx_port = _get(path, obj, "jmx_port", int, default=-1)
    try:
        if version == 1:
            endpoints = (EndPoint("PLAINTEXT", _get(path, obj, "host", str),
                                  _get(path, obj, "port", int)),)
        else:
            pmap = obj.get("listener_security_protocol_map")
            if pmap is not None and (not isinstance(pmap, dict) or
                                     not all(isinstance(v, str) for v in pmap.values())):
                raise ZkDataError(f"{path}: bad listener_security_protocol_map {pmap!r}")
            eps = _get(path, obj, "endpoints", list)
            endpoints = tuple(EndPoint.parse(s, pmap) for s in eps)
    except ValueError as e:
        if isinstance(e, ZkDataError):
            raise
        raise ZkDataError(f"{path}: {e}") from None
    rack = obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ZkDataError(f"{path}: 'rack' must be a string, got {rack!r}")
    features = obj.get("features") or {}
    if not isinstance(features, dict):
        raise ZkDataError(f"{path}: 'features' must be an object")
    ts = obj.get("timestamp", "")
    return BrokerInfo(int(broker_id), endpoints, rack, jmx_port, version, str(ts), features,
                      epoch)


# -- /controller, /controller_epoch ------------------------------------------------------

def encode_controller(broker_id: int, timestamp: str | None = None) -> bytes:
    return _dumps({"version": 2, "brokerid": int(broker_id),
                   "timestamp": timestamp or now_ms_str(), "kraftControllerEpoch": -1})


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id. Very old Kafka wrote a bare integer; accept that too."""
    if data and re.fullmatch(rb"\s*-?[0-9]{1,10}\s*", data):
        return int(data)
    obj = _loads(CONTROLLER, data)
    return _get(CONTROLLER, obj, "brokerid", int)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(int(epoch)).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(f"{CONTROLLER_EPOCH}: not an integer: {data[:50]!r}") from None


# -- /cluster/id ---------------------------------------------------------------------------

def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    obj = _loads(CLUSTER_ID, data)
    return _get(CLUSTER_ID, obj, "id", str)


# -- /brokers/topics/<t> -------------------------------------------------------------------

@dataclass(frozen=True)
class TopicAssignment:
    """A topic's replica assignment: partition -> replica broker ids, first is preferred leader."""
    topic: str
    partitions: dict[int, list[int]]
    topic_id: str | None = None
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)


def encode_topic(assignment: TopicAssignment) -> bytes:
    def strkeys(d):
        return {str(p): list(r) for p, r in sorted(d.items()) if r}

    obj = {
        "version": 3,
        "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
        "adding_replicas": strkeys(assignment.adding_replicas),
        "removing_replicas": strkeys(assignment.removing_replicas),
    }
    if assignment.topic_id is not None:
        obj["topic_id"] = assignment.topic_id
    return _dumps(obj)


def decode_topic(topic: str, data: bytes | None) -> TopicAssignment:
    path = topic_path(topic)
    if not data:
        return TopicAssignment(topic, {})
    obj = _loads(path, data)

    def parts(key):
        value = obj.get(key) or {}
        if not isinstance(value, dict):
            raise ZkDataError(f"{path}: {key!r} must be an object")
        out = {}
        for p, replicas in value.items():
            try:
                pid = int(p)
            except ValueError:
                raise ZkDataError(f"{path}: partition key {p!r} is not an integer") from None
            if pid < 0:
                raise ZkDataError(f"{path}: negative partition {pid}")
            out[pid] = _int_list(path, f"{key}.{p}", replicas)
        return out

    topic_id = obj.get("topic_id")
    if topic_id is not None and not isinstance(topic_id, str):
        raise ZkDataError(f"{path}: 'topic_id' must be a string")
    return TopicAssignment(topic, parts("partitions"), topic_id,
                           parts("adding_replicas"), parts("removing_replicas"))


# -- /brokers/topics/<t>/partitions/<p>/state ----------------------------------------------

@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's recorded leadership. `zk_version` is the state znode's version (Kafka's
    partition epoch): updates are conditional on it. -1 means "not read from ZooKeeper"."""
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING (unclean election)

    def new_leader_and_isr(self, leader: int, isr, controller_epoch: int) -> LeaderAndIsr:
        """The next state: leader epoch + 1 (Kafka bumps it on every controller change)."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), controller_epoch,
                            self.zk_version, self.leader_recovery_state)


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    obj = {"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
           "leader_epoch": state.leader_epoch, "isr": list(state.isr)}
    if state.leader_recovery_state:
        obj["leader_recovery_state"] = state.leader_recovery_state
    return _dumps(obj)


def decode_partition_state(topic: str, partition: int, data: bytes | None,
                           zk_version: int = -1) -> LeaderAndIsr:
    path = partition_state_path(topic, partition)
    obj = _loads(path, data)
    return LeaderAndIsr(
        _get(path, obj, "leader", int),
        _get(path, obj, "leader_epoch", int),
        tuple(_int_list(path, "isr", _get(path, obj, "isr", list))),
        _get(path, obj, "controller_epoch", int),
        zk_version,
        _get(path, obj, "leader_recovery_state", int, default=0),
    )


# -- /config/<type>/<name>, /config/changes ------------------------------------------------

def encode_entity_config(config: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})


def decode_entity_config(path: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = _loads(path, data)
    config = obj.get("config") or {}
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZkDataError(f"{path}: 'config' must be an object of string values")
    return dict(config)


def encode_config_change(entity_path: str) -> bytes:
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(path: str, data: bytes | None) -> str:
    """The changed entity, "<type>/<name>", or "users/<user>/clients/<client id>" (version
    2; Kafka's v1 form is not supported)."""
    obj = _loads(path, data)
    version = _get(path, obj, "version", int)
    if version != 2:
        raise ZkDataError(f"{path}: unsupported config change notification version {version}")
    entity = _get(path, obj, "entity_path", str)
    if "/" not in entity:
        raise ZkDataError(f"{path}: entity_path {entity!r} is not <type>/<name>")
    return entity


# -- /isr_change_notification/isr_change_N, /admin/preferred_replica_election ---------------

def encode_partition_list(partitions) -> bytes:
    """{"version":1,"partitions":[{"topic":..,"partition":..}]}: ISR change notices and
    preferred-replica-election requests share this form."""
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": int(p)}
                                                for t, p in sorted(partitions)]})


def decode_partition_list(path: str, data: bytes | None) -> list[tuple[str, int]]:
    obj = _loads(path, data)
    out = []
    for item in _get(path, obj, "partitions", list):
        if not isinstance(item, dict):
            raise ZkDataError(f"{path}: partition entry {item!r} is not an object")
        out.append((_get(path, item, "topic", str), _get(path, item, "partition", int)))
    return out


# -- /log_dir_event_notification/log_dir_event_N --------------------------------------------

def encode_log_dir_event(broker_id: int) -> bytes:
    """{"version":1,"broker":<id>,"event":1}: a log dir of that broker failed."""
    return _dumps({"version": 1, "broker": int(broker_id), "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(path: str, data: bytes | None) -> tuple[int, int]:
    """(broker id, event) of a log dir event notification."""
    obj = _loads(path, data)
    return _get(path, obj, "broker", int), _get(path, obj, "event", int)


def encode_reassignment(plan) -> bytes:
    """/admin/reassign_partitions: {"version":1,"partitions":[{"topic","partition",
    "replicas"}]} (Kafka's kafka-reassign-partitions.sh plan)."""
    return _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": int(p), "replicas": [int(r) for r in plan[(t, p)]]}
        for t, p in sorted(plan)]})


def decode_reassignment(path: str, data: bytes | None) -> dict[tuple[str, int], list[int]]:
    obj = _loads(path, data)
    out = {}
    for item in _get(path, obj, "partitions", list):
        if not isinstance(item, dict):
            raise ZkDataError(f"{path}: partition entry {item!r} is not an object")
        tp = (_get(path, item, "topic", str), _get(path, item, "partition", int))
        out[tp] = _int_list(path, "replicas", _get(path, item, "replicas", list))
    return out


# -- /feature ------------------------------------------------------------------------------

def encode_feature(features: dict | None = None, enabled: bool = True) -> bytes:
    return _dumps({"version": 1, "status": 1 if enabled else 0, "features": features or {}})


def decode_feature(data: bytes | None) -> tuple[bool, dict]:
    obj = _loads(FEATURE, data)
    status = _get(FEATURE, obj, "status", int)
    if status not in (0, 1):
        raise ZkDataError(f"{FEATURE}: malformed status {status}")
    return status == 1, _get(FEATURE, obj, "features", dict)


# -- /latest_producer_id_block ---------------------------------------------------------------

def encode_producer_id_block(broker_id: int, block_start: int, block_end: int) -> bytes:
    # Kafka writes the bounds as strings (they are longs).
    return _dumps({"version": 1, "broker": int(broker_id), "block_start": str(block_start),
                   "block_end": str(block_end)})


def decode_producer_id_block(data: bytes | None) -> tuple[int, int] | None:
    """(block_start, block_end) inclusive, or None when no block was ever allocated."""
    if not data:
        return None
    obj = _loads(LATEST_PRODUCER_ID_BLOCK, data)
    try:
        return int(obj["block_start"]), int(obj["block_end"])
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{LATEST_PRODUCER_ID_BLOCK}: bad block {obj!r}") from None
