# fastlog/server/config.py — the broker's configuration (KafkaConfig).
#
# Owns: the table of broker keys we accept (Kafka's names, types and defaults), the parser
# for Java-style `server.properties` files, `--override key=value` merging, and typed,
# validated access. Derived values (effective retention ms, log dirs, listeners) are
# computed here once so every other module reads one answer.
# Read by: fastlog.cli.server (startup), the broker and its handlers (read-only after
# startup; DescribeConfigs lists it). No I/O besides reading the properties file.
"""Broker configuration with Kafka's key names, types and defaults."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastlog.fileio import FileTooLargeError, read_capped
from fastlog.security import MECHANISMS, TLS_CONFIG_KEYS, SecurityConfigError, parse_login_module
from fastlog.security.authorizer import parse_super_users

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
# A server.properties file is a few KiB; the cap keeps /dev/zero or a wrong file from
# being read without end.
MAX_PROPERTIES_BYTES = 1 << 20


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message is one sentence for the user."""


# --------------------------------------------------------------------------- types


def _parse_int(name: str, raw: str, bits: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be an integer, not {raw!r}") from None
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be between {lo} and {hi}, not {value}")
    return value


def _parse_bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise ConfigError(f"{name} must be true or false, not {raw!r}")


def _parse_double(name: str, raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a number, not {raw!r}") from None


def _parse_list(name: str, raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "int": lambda n, r: _parse_int(n, r, 32),
    "short": lambda n, r: _parse_int(n, r, 16),
    "long": lambda n, r: _parse_int(n, r, 64),
    "boolean": _parse_bool,
    "double": _parse_double,
    "string": lambda n, r: r.strip(),
    "password": lambda n, r: r,
    "list": _parse_list,
    "class": lambda n, r: r.strip(),
}

# Kafka's DescribeConfigs config_type codes (KIP-226 / DescribeConfigsResponse v3).
CONFIG_TYPE_CODES = {
    "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
    "list": 7, "class": 8, "password": 9,
}


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str
    default: Any
    doc: str = ""
    # Validator returns None when fine, else the reason (completing "<name> must ...").
    check: Callable[[Any], str | None] | None = None
    sensitive: bool = False
    # Accepted for compatibility with Kafka property files but has no effect here: setting
    # it draws a startup warning (KafkaConfig.inert_keys), never silence.
    inert: bool = False

    def parse(self, raw: str) -> Any:
        value = _PARSERS[self.type](self.name, raw)
        if self.check is not None and value is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(f"{self.name} {problem}, not {raw.strip()!r}")
        return value


def _at_least(lo: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be at least {lo}"


def _between(lo: int, hi: int, *also: int) -> Callable[[Any], str | None]:
    extra = "".join(f" or {a}" for a in also)
    return lambda v: None if lo <= v <= hi or v in also else f"must be in [{lo}, {hi}]{extra}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(v):
        items = v if isinstance(v, list) else [v]
        for item in items:
            if item not in choices:
                return "must be one of " + ", ".join(choices)
        return None

    return check


_LISTENER_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/]*):(\d{1,5})$")


def _check_listeners(v: list[str]) -> str | None:
    # Listener names are free (Kafka's NAME://host:port); that each one's security
    # protocol is PLAINTEXT is checked against listener.security.protocol.map later.
    names = []
    for item in v:
        m = _LISTENER_RE.match(item)
        if not m or int(m.group(3)) > 65535:
            return "must be a list like PLAINTEXT://host:port"
        names.append(m.group(1).upper())
    if len(set(names)) != len(names):
        return "must name each listener once"
    return None


def _check_http_listener(v: str) -> str | None:
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return "must be HOST:PORT"
    return None


def http_listener(v: str) -> tuple[str, int]:
    """(host, port) of an http.listener value (checked by _check_http_listener)."""
    host, _, port = v.rpartition(":")
    return host.strip("[]"), int(port)


def check_zk_connect(v: str) -> str | None:
    """Why a ZooKeeper connect string ("host:port,host:port/chroot") is malformed, completing
    "<name> ...", or None when ZooKeeper would accept it. Shared by zookeeper.connect and the
    --zookeeper option of the CLI tools."""
    hosts, slash, chroot = v.partition("/")
    if not hosts.strip():
        return "must name at least one host:port"
    # Entries are not trimmed: ZooKeeper (and kazoo) would read a space into the port.
    for entry in hosts.split(","):
        if not entry.strip():
            return "must not have an empty host:port entry"
        if entry.startswith(":"):
            return "must give a host in each host:port entry"
        m = _ZK_HOST_RE.match(entry)
        if m is None:
            return "must be a list of host:port entries, with an optional /chroot"
        port = m.group(3)
        if port is not None and not (port.isascii() and port.isdigit() and len(port) <= 5
                                     and 1 <= int(port) <= 65535):
            return "must give ports between 1 and 65535"
    # ZooKeeper's path rules (PathUtils.validatePath); a lone "/" means no chroot.
    if slash and chroot:
        parts = chroot.split("/")
        if any(p in ("", ".", "..") for p in parts) or _ZK_BAD_PATH_CHARS.search(chroot):
            return ("must have a chroot like /kafka, without empty, '.' or '..' parts "
                    "or a trailing /")
    return None


# host[:port], or [ipv6][:port]; ZooKeeper's port is 2181 when omitted.
_ZK_HOST_RE = re.compile(r"^(?:\[([0-9A-Fa-f:.]+(?:%[\w.]+)?)\]|([^\s:/\[\]@?#]+))(?::(.*))?$")
_ZK_BAD_PATH_CHARS = re.compile(r"[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


# Kafka's security protocols; the default listener.security.protocol.map makes each one a
# listener name too.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}
# Kafka's per-listener form: listener.name.<listener, lower case>.<key>.
LISTENER_PREFIX = "listener.name."
# Mechanisms Kafka has and fastlog refuses (one sentence at startup).
_UNSERVED_MECHANISMS = ("GSSAPI", "OAUTHBEARER")


def _check_protocol_map(v: str) -> str | None:
    try:
        pmap = _parse_protocol_map(v)
    except ValueError:
        return "must be a list like INTERNAL:SASL_SSL,EXTERNAL:SSL"
    for proto in pmap.values():
        if proto not in SECURITY_PROTOCOLS:
            return "must map each listener to one of " + ", ".join(SECURITY_PROTOCOLS)
    return None


def _check_mechanisms(v: list[str]) -> str | None:
    for name in v:
        if name in _UNSERVED_MECHANISMS:
            return (f"names {name}, which fastlog does not serve (use PLAIN, SCRAM-SHA-256 "
                    "or SCRAM-SHA-512)")
        if name not in MECHANISMS:
            return "must list SASL mechanisms among " + ", ".join(MECHANISMS)
    return None


def _check_inter_broker_protocol(v: str | None) -> str | None:
    if v is not None and v.strip().upper() not in SECURITY_PROTOCOLS:
        return "must be one of " + ", ".join(SECURITY_PROTOCOLS)
    return None


def _check_inter_broker_mechanism(v: str) -> str | None:
    return _check_mechanisms([v.strip()])


def _parse_protocol_map(v: str | None) -> dict[str, str]:
    """listener.security.protocol.map ("NAME:PROTOCOL,...") as {NAME: PROTOCOL}."""
    if v is None:
        return dict(_DEFAULT_PROTOCOL_MAP)
    out = {}
    for item in v.split(","):
        if not item.strip():
            continue
        name, sep, proto = item.partition(":")
        if not sep or not name.strip() or not proto.strip():
            raise ValueError(item)
        out[name.strip().upper()] = proto.strip().upper()
    return out


# The authorizer.class.name values that turn on fastlog's ACL authorizer: Kafka's
# ZooKeeper-mode AclAuthorizer and KRaft's StandardAuthorizer decide alike.
AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer")


def _check_authorizer(v: str) -> str | None:
    if not v.strip() or v.strip() in AUTHORIZER_CLASSES:
        return None
    return "must be empty or one of " + ", ".join(AUTHORIZER_CLASSES)


def _check_super_users(v: str) -> str | None:
    try:
        parse_super_users(v)
    except SecurityConfigError as e:
        return f"is not valid ({e})"
    return None


def parse_connection_overrides(v: str | None) -> dict[str, int]:
    """max.connections.per.ip.overrides, Kafka's "host:count,host:count" (a host may be
    a name or an address; the count is after the last colon, so IPv6 works too)."""
    out: dict[str, int] = {}
    for item in (v or "").split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit() or int(count) > INT_MAX:
            raise ValueError(item)
        out[host] = int(count)
    return out


def _check_connection_overrides(v: str) -> str | None:
    try:
        parse_connection_overrides(v)
    except ValueError:
        return "must be a list like host1:10,127.0.0.1:20 (a count of 0 or more per host)"
    return None


_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
# log.message.format.version / message.format.version: a Kafka release ("0.10.2", "2.8",
# "3.0-IV1"). Kafka 3.x ignores it (every batch is v2) and warns that it is deprecated.
_FORMAT_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?(-IV\d+)?$")
MESSAGE_FORMAT_VERSION_DEFAULT = "3.0-IV1"


def _format_version(v: str) -> str | None:
    return None if _FORMAT_VERSION_RE.match(v) else "must be a Kafka version such as 2.8 or 3.0-IV1"


def message_format_ignored(key: str, value: str, topic: str | None = None) -> str:
    """Kafka 3.x's deprecation warning for a message format version it ignores."""
    where = f" for topic {topic}" if topic is not None else ""
    return (f"{key} with value {value}{where} is ignored: every record batch is written in "
            f"format v2 (magic 2). {key} is deprecated and will be removed in Kafka 4.0")
# Kafka's ranges for the levels of a topic's recompression (KIP-390).
_GZIP_LEVEL = _between(1, 9, -1)
_LZ4_LEVEL = _between(1, 17)
_ZSTD_LEVEL = _between(-131072, 22)

_KEYS: list[ConfigKey] = [
    # identity and network
    # Kafka: -1 is "not set"; any other negative id is refused.
    ConfigKey("broker.id", "int", -1, "This broker's id; -1 means node.id or the id stored in meta.properties (0 on a new single node).", _at_least(-1)),
    ConfigKey("node.id", "int", -1, "Synonym of broker.id.", _at_least(-1)),
    ConfigKey("broker.id.generation.enable", "boolean", True, "Cluster mode: without broker.id, generate one through ZooKeeper's /brokers/seqid."),
    ConfigKey("broker.rack", "string", None, "Rack of this broker."),
    ConfigKey("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], "Listeners this broker binds.", _check_listeners),
    ConfigKey("advertised.listeners", "list", None, "Listeners published to clients; listeners when unset.", _check_listeners),
    ConfigKey("listener.security.protocol.map", "string", None,
              "Security protocol of each listener name: PLAINTEXT, SSL, SASL_PLAINTEXT or "
              "SASL_SSL.", _check_protocol_map),
    ConfigKey("inter.broker.listener.name", "string", None,
              "Listener brokers use to reach each other (followers fetching from leaders); "
              "security.inter.broker.protocol when unset."),
    ConfigKey("security.inter.broker.protocol", "string", None,
              "Security protocol brokers use to reach each other, as the name of a listener "
              "(Kafka's default PLAINTEXT); set this or inter.broker.listener.name, not both.",
              _check_inter_broker_protocol),
    # Default 1 (Kafka: 3): one processor runs inline on the API loop, which costs the least
    # CPU per request with the GIL (perf/README.md: ~11 vs ~40 us per small produce).
    ConfigKey("num.network.threads", "int", 1, "Processor loops that read and write sockets.", _at_least(1)),
    # Kafka's request handler threads; here handlers run on the API loop, and these threads
    # check large produce batches (decompression, record walk) off it.
    ConfigKey("num.io.threads", "int", 8, "Threads that write produce batches of 512 KiB or more off the request loop; also the most worker processes (no more than the cores) that check large batches.", _at_least(1)),
    # The log cleaner runs Python on its own thread: at Python's default switch interval (5
    # ms) the request loop waits up to 5 ms for the interpreter lock after each of its
    # syscalls while a compaction pass runs, and produce latency at 2,000 rec/s went from
    # p50 0.6 ms to 2-3 s; at 0.1 ms it stays at 0.6 (perf/cleaner_latency.py).
    ConfigKey("fastlog.gil.switch.interval.ms", "double", 0.1,
              "Longest a background thread (the log cleaner) holds the interpreter lock "
              "while the request loop waits for it (Python's switch interval).",
              _between(0.01, 1000)),
    ConfigKey("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.", _at_least(1)),
    ConfigKey("socket.send.buffer.bytes", "int", 102400, inert=True),
    ConfigKey("socket.receive.buffer.bytes", "int", 102400, inert=True),
    # As Kafka's request queue: requests read and waiting for their handler. With one
    # network thread (inline) a handler starts as soon as its request is read, so the
    # bound only acts with num.network.threads > 1.
    ConfigKey("queued.max.requests", "int", 500,
              "Requests read and waiting for their handler, over all connections, before "
              "the broker stops reading more.", _at_least(1)),
    # Kafka's default -1 is unbounded; ours bounds the memory of requests being received
    # (a few big frames from many connections reached 1 GB of RSS); -1 or 0 is unbounded.
    ConfigKey("queued.max.request.bytes", "long", 512 * 1024 * 1024,
              "Memory for requests being received, over all connections; while it is used "
              "up, connections needing more wait. -1 or 0: unbounded.", _at_least(-1)),
    ConfigKey("max.connections", "int", INT_MAX, "Most client connections at once.", _at_least(0)),
    ConfigKey("max.connections.per.ip", "int", INT_MAX,
              "Most connections from one address; more are closed at once.", _at_least(0)),
    ConfigKey("max.connections.per.ip.overrides", "string", "",
              "Per-host exceptions to max.connections.per.ip, as host:count,host:count.",
              _check_connection_overrides),
    ConfigKey("connections.max.idle.ms", "long", 600000, "Idle connections are closed after this.", _at_least(1)),
    # Kafka has no such key (its brokers wait forever for the rest of a frame); a client
    # sending a byte now and then is never idle, so this is what closes it.
    ConfigKey("fastlog.request.receive.timeout.ms", "long", 30000,
              "A connection that began to send a request and has not sent all of it after "
              "this long is closed; 0: never.", _at_least(0)),
    ConfigKey("request.timeout.ms", "int", 30000),  # inter-broker calls: markers, verification
    # security (fastlog/server/authenticator.py; each can be set per listener as
    # listener.name.<listener>.<key>, the JAAS line per mechanism as
    # listener.name.<listener>.<mechanism>.sasl.jaas.config)
    # Kafka's default is GSSAPI, which fastlog does not serve.
    ConfigKey("sasl.enabled.mechanisms", "list", ["PLAIN"],
              "SASL mechanisms of SASL_PLAINTEXT and SASL_SSL listeners.", _check_mechanisms),
    # Kafka has no such bound (a client may stay unauthenticated until it is idle): a
    # connection of a SASL listener that has not authenticated this long after its first
    # request is closed.
    # Kafka's default is GSSAPI, which fastlog does not serve: PLAIN is the default here.
    ConfigKey("sasl.mechanism.inter.broker.protocol", "string", "PLAIN",
              "SASL mechanism a broker authenticates with to other brokers when the "
              "inter-broker listener uses SASL; the credentials are the username and "
              "password of that listener's JAAS line for the mechanism.",
              _check_inter_broker_mechanism),
    ConfigKey("fastlog.sasl.authentication.timeout.ms", "long", 10000,
              "A SASL connection not authenticated this long after its first request is "
              "closed.", _at_least(1)),
    # authorization (fastlog/security/authorizer.py; wired in fastlog/server/authz.py)
    ConfigKey("authorizer.class.name", "string", "",
              "Kafka's AclAuthorizer (or StandardAuthorizer) class name turns ACL "
              "authorization on; empty: every principal may do everything.",
              _check_authorizer),
    ConfigKey("super.users", "string", "",
              "Principals allowed everything, separated by ';' (User:admin;User:broker).",
              _check_super_users),
    ConfigKey("allow.everyone.if.no.acl.found", "boolean", False,
              "Allow an operation on a resource that no ACL applies to."),
    # client quotas (fastlog/security/quota.py): the rate is measured over
    # quota.window.num samples of quota.window.size.seconds each, as in Kafka
    ConfigKey("quota.window.num", "int", 11,
              "Samples a client quota's rate is measured over.", _at_least(1)),
    ConfigKey("quota.window.size.seconds", "int", 1,
              "Length of one client quota sample, in seconds.", _at_least(1)),
    *(ConfigKey(k, "password" if k.endswith((".password", ".key")) else "string", None,
                "TLS setting of SSL and SASL_SSL listeners (Kafka's meaning).",
                sensitive=k.endswith((".password", ".key")))
      for k in TLS_CONFIG_KEYS),
    ConfigKey("ssl.principal.mapping.rules", "string", "DEFAULT",
              "How the subject DN of a client certificate becomes the principal's name "
              "(Kafka's RULE:pattern/replacement/[LU] list, or DEFAULT: the whole DN)."),
    # storage
    ConfigKey("log.dir", "string", "./data", "Data directory when log.dirs is unset.",
              lambda v: None if v else "must name a directory"),
    ConfigKey("log.dirs", "list", None, "Data directories; log.dir when unset."),
    ConfigKey("message.max.bytes", "int", 1048588, "Largest record batch (after compression).", _at_least(0)),
    ConfigKey("num.partitions", "int", 1, "Partitions of an auto-created topic.", _at_least(1)),
    ConfigKey("default.replication.factor", "int", 1, "Replication factor of an auto-created topic.", _at_least(1)),
    ConfigKey("auto.create.topics.enable", "boolean", True, "Create a topic on first Metadata/Produce use."),
    ConfigKey("delete.topic.enable", "boolean", True, "Allow DeleteTopics."),
    ConfigKey("log.segment.bytes", "int", 1073741824, "Segment size before roll.", _at_least(14)),
    ConfigKey("log.roll.ms", "long", None, "Roll after this age (overrides log.roll.hours).", _at_least(1)),
    ConfigKey("log.roll.hours", "int", 168, "Roll after this age.", _at_least(1)),
    ConfigKey("log.roll.jitter.ms", "long", None, check=_at_least(0)),
    ConfigKey("log.roll.jitter.hours", "int", 0, check=_at_least(0)),
    # Kafka's retention.ms rule (at least -1, which keeps forever) for all three units.
    ConfigKey("log.retention.ms", "long", None, "Retention time; -1 keeps forever.", _at_least(-1)),
    ConfigKey("log.retention.minutes", "int", None, "Retention time in minutes.", _at_least(-1)),
    ConfigKey("log.retention.hours", "int", 168, "Retention time in hours.", _at_least(-1)),
    ConfigKey("log.retention.bytes", "long", -1, "Retention size per partition; -1 unlimited."),
    ConfigKey("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", _at_least(1)),
    ConfigKey("log.flush.interval.messages", "long", LONG_MAX, "fsync after this many messages.", _at_least(1)),
    ConfigKey("log.flush.interval.ms", "long", None, "fsync after this age of unflushed data."),
    ConfigKey("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the flusher checks logs."),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", "int", 60000, "How often recovery points are checkpointed.", _at_least(0)),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, "How often log start offsets are checkpointed.", _at_least(0)),
    ConfigKey("log.index.interval.bytes", "int", 4096, "Bytes between offset-index entries.", _at_least(0)),
    ConfigKey("log.index.size.max.bytes", "int", 10485760, "Largest index file.", _at_least(4)),
    ConfigKey("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files go.", _at_least(0)),
    ConfigKey("log.cleanup.policy", "list", ["delete"], "delete and/or compact.", _one_of("delete", "compact")),
    ConfigKey("log.cleaner.enable", "boolean", True),
    ConfigKey("log.cleaner.threads", "int", 1, inert=True),
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", 0.5, check=_between(0, 1)),
    ConfigKey("log.cleaner.delete.retention.ms", "long", 86400000),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "long", 0),
    ConfigKey("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000, "Pause between log cleaner passes.", _at_least(1)),
    ConfigKey("log.cleaner.dedupe.buffer.size", "long", 134217728, "Memory of the cleaner's offset map.", _at_least(1024)),
    # fastlog's own: a background thread re-checks the CRC-32C of every batch in sealed
    # segments (fastlog/server/log/verifier.py); a corrupt range is never served.
    # fastlog's own: the HTTP endpoint (fastlog/server/http.py): /metrics, /health/*
    ConfigKey("http.listener", "string", None,
              "HOST:PORT of the HTTP endpoint (/metrics, /health/live, /health/ready); unset: none.",
              _check_http_listener),
    ConfigKey("fastlog.log.verification.interval.ms", "long", 3600000,
              "Pause between passes of the background CRC check of sealed segments; 0 or -1 turns it off.",
              _at_least(-1)),
    ConfigKey("fastlog.log.verification.bytes.per.sec", "long", 10485760,
              "Read rate of the background CRC check of sealed segments.", _at_least(1)),
    ConfigKey("log.preallocate", "boolean", False, inert=True),
    ConfigKey("log.message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.", _one_of(*_TIMESTAMP_TYPES)),
    ConfigKey("log.message.timestamp.difference.max.ms", "long", LONG_MAX),
    ConfigKey("log.message.timestamp.before.max.ms", "long", LONG_MAX),
    ConfigKey("log.message.timestamp.after.max.ms", "long", 3600000),
    ConfigKey("log.message.downconversion.enable", "boolean", True, inert=True),
    # Deprecated: a deprecation warning at startup (KafkaConfig.deprecation_warnings).
    ConfigKey("log.message.format.version", "string", MESSAGE_FORMAT_VERSION_DEFAULT,
              "Ignored (every batch is v2); deprecated.", _format_version),
    ConfigKey("num.recovery.threads.per.data.dir", "int", 1, "Threads per log dir that load (and recover) the logs at startup and flush them at shutdown.", _at_least(1)),
    ConfigKey("compression.type", "string", "producer", "Topic codec; producer keeps the producer's.", _one_of(*_COMPRESSION)),
    ConfigKey("compression.gzip.level", "int", -1, "gzip level of batches the topic recompresses (-1: zlib's default).", _GZIP_LEVEL),
    ConfigKey("compression.lz4.level", "int", 9, "lz4 level of batches the topic recompresses.", _LZ4_LEVEL),
    ConfigKey("compression.zstd.level", "int", 3, "zstd level of batches the topic recompresses.", _ZSTD_LEVEL),
    ConfigKey("min.insync.replicas", "int", 1, "Replicas that must have a record for acks=all.", _at_least(1)),
    ConfigKey("unclean.leader.election.enable", "boolean", False),
    ConfigKey("fetch.max.bytes", "int", 57671680, "Largest Fetch response.", _at_least(0)),
    ConfigKey("max.incremental.fetch.session.cache.slots", "int", 1000, "Fetch sessions (KIP-227) the broker keeps.", _at_least(0)),
    # Kafka's constant KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, a key here
    # so tests need not wait two minutes for a session to go stale.
    ConfigKey("fastlog.fetch.session.eviction.ms", "long", 120000, "Idle time after which a fetch session gives way to a new one when the cache is full.", _at_least(0)),
    ConfigKey("producer.id.expiration.ms", "int", 86400000, check=_at_least(1)),
    # transactions (fastlog/server/txn/coordinator.py reads these)
    ConfigKey("transactional.id.expiration.ms", "int", 604800000, "A transactional id idle this long is forgotten.", _at_least(1)),
    ConfigKey("transaction.max.timeout.ms", "int", 900000, "Longest transaction.timeout.ms a producer may ask for.", _at_least(1)),
    ConfigKey("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", _at_least(1)),
    ConfigKey("transaction.state.log.replication.factor", "short", 3, "Replication factor of __transaction_state.", _at_least(1)),
    ConfigKey("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state.", _at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600, check=_at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, "How often transactions past their timeout are aborted.", _at_least(1)),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, "How often expired transactional ids are removed.", _at_least(1)),
    ConfigKey("transaction.partition.verification.enable", "boolean", True, "KIP-890: a partition leader checks with the transaction coordinator that a transactional write's partition was added to the transaction (fastlog/server/txn/verification.py)."),
    # replication (cluster mode; fastlog/server/replica_manager.py, replica_fetcher.py)
    ConfigKey("replica.lag.time.max.ms", "long", 30000, "A follower not caught up for this long leaves the ISR.", _at_least(1)),
    ConfigKey("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower asks for per partition.", _at_least(1)),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500, "Longest a follower fetch waits at the leader.", _at_least(0)),
    ConfigKey("replica.fetch.min.bytes", "int", 1, "Bytes a follower fetch waits for.", _at_least(1)),
    ConfigKey("replica.fetch.backoff.ms", "int", 1000, "Follower pause after a fetch error.", _at_least(0)),
    ConfigKey("replica.socket.timeout.ms", "int", 30000, "Follower request timeout.", _at_least(1)),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", "long", 5000, "How often high watermarks are checkpointed.", _at_least(1)),
    ConfigKey("replica.selector.class", "string", None, "Set to a name ending in RackAwareReplicaSelector to let consumers read from a replica in their rack."),
    ConfigKey("num.replica.fetchers", "int", 1, "Fetcher tasks per source broker.", _at_least(1)),
    ConfigKey("fastlog.debug.ack.before.replication", "boolean", False, "TEST ONLY: answer acks=all produces before the ISR has the data (loses acknowledged records on failover; used by the replication checker's control test)."),
    ConfigKey("controlled.shutdown.enable", "boolean", True, "Cluster mode: move leadership off a stopping broker first."),
    ConfigKey("auto.leader.rebalance.enable", "boolean", True, "Cluster mode: the controller gives leadership back to preferred replicas."),
    ConfigKey("leader.imbalance.check.interval.seconds", "long", 300, "How often the controller checks leader imbalance.", _at_least(1)),
    ConfigKey("leader.imbalance.per.broker.percentage", "int", 10, "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.", _at_least(0)),
    # groups and offsets (issue 5 reads these)
    ConfigKey("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", _at_least(1)),
    ConfigKey("offsets.topic.replication.factor", "short", 3, "Replication factor of __consumer_offsets.", _at_least(1)),
    ConfigKey("offsets.topic.segment.bytes", "int", 104857600, check=_at_least(1)),
    ConfigKey("offsets.topic.compression.codec", "int", 0, inert=True),
    ConfigKey("offsets.load.buffer.size", "int", 5242880, inert=True, check=_at_least(1)),
    ConfigKey("offsets.retention.minutes", "int", 10080, "Committed offsets expire after this.", _at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600000, check=_at_least(1)),
    ConfigKey("offsets.commit.timeout.ms", "int", 5000, check=_at_least(1)),
    ConfigKey("offset.metadata.max.bytes", "int", 4096, "Longest metadata string of a committed offset.", _at_least(0)),
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000, "Delay of a new group's first rebalance.", _at_least(0)),
    ConfigKey("group.min.session.timeout.ms", "int", 6000),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000),
    ConfigKey("group.max.size", "int", INT_MAX, check=_at_least(1)),
    # cluster mode
    ConfigKey("zookeeper.connect", "string", None, "ZooKeeper connect string; single-node embedded metadata when unset.",
              check_zk_connect),
    ConfigKey("zookeeper.session.timeout.ms", "int", 18000),
    ConfigKey("zookeeper.connection.timeout.ms", "int", None),
    ConfigKey("zookeeper.set.acl", "boolean", False, inert=True),
    ConfigKey("reserved.broker.max.id", "int", 1000, "Generated broker ids start above this.", _at_least(0)),
]

CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}
# Keys that listener.name.<listener>.<key> may set (what the listener's security reads,
# and its own max.connections).
LISTENER_KEYS = ("sasl.enabled.mechanisms", "ssl.principal.mapping.rules", *TLS_CONFIG_KEYS,
                 "max.connections")
_JAAS_KEYS = tuple(f"{m.lower()}.sasl.jaas.config" for m in MECHANISMS)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def parse_properties(text: str) -> list[tuple[str, str]]:
    """Parse Java .properties text into (key, raw value) pairs, in order.

    Supports `#`/`!` comments, `=`/`:`/whitespace separators, backslash line continuation
    and the usual escapes; that is all Kafka's own server.properties files use."""
    pairs: list[tuple[str, str]] = []
    logical: list[str] = []
    for physical in text.splitlines():
        line = physical.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # an odd number of trailing backslashes continues the line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        pairs.append(_split_property("".join(logical)))
        logical = []
    if logical:
        pairs.append(_split_property("".join(logical)))
    return [p for p in pairs if p[0]]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and i + 6 <= len(s):
                try:
                    out.append(chr(int(s[i + 2:i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t")
    return _unescape(key), _unescape(rest)


class KafkaConfig:
    """Typed, validated broker configuration.

    `values` holds every known key (defaults included); `explicit` is the set of keys the
    user set (file or override) — DescribeConfigs reports those as STATIC_BROKER_CONFIG."""

    def __init__(self, props: Mapping[str, str] | None = None):
        self.values: dict[str, Any] = {k.name: k.default for k in _KEYS}
        self.explicit: dict[str, str] = {}
        # LISTENER NAME -> {key: parsed value} from listener.name.<listener>.<key>
        self.listener_overrides: dict[str, dict[str, Any]] = {}
        for name, raw in (props or {}).items():
            if name.startswith(LISTENER_PREFIX):
                self._set_listener_key(name, raw)
                continue
            key = CONFIG_KEYS.get(name)
            if key is None:
                raise ConfigError(f"unknown configuration key {name!r}")
            self.values[name] = key.parse(raw)
            self.explicit[name] = raw
        self._validate()

    # -------------------------------------------------------------- construction
    @classmethod
    def from_sources(cls, path: str | None = None, overrides: Iterable[str] = ()) -> KafkaConfig:
        props: dict[str, str] = {}
        if path is not None:
            props.update(cls.read_properties(path))
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--override expects key=value, not {item!r}")
            key, value = item.split("=", 1)
            props[key.strip()] = value
        return cls(props)

    @staticmethod
    def read_properties(path: str) -> dict[str, str]:
        """The key/value pairs of a properties file (bounded in size, UTF-8); ConfigError
        with one sentence when it cannot be read."""
        props: dict[str, str] = {}
        try:
            data = read_capped(path, MAX_PROPERTIES_BYTES)
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
        except FileTooLargeError:
            raise ConfigError(f"{path} is larger than {MAX_PROPERTIES_BYTES >> 20} MiB, "
                              "too large for a properties file") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{path} is not a UTF-8 text file") from None
        for key, value in parse_properties(text):
            props[key] = value
        return props

    # -------------------------------------------------------------- access
    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def _set_listener_key(self, name: str, raw: str) -> None:
        listener, dot, key = name[len(LISTENER_PREFIX):].partition(".")
        if not listener or not dot or not key:
            raise ConfigError(f"{name} must be of the form listener.name.<listener>.<key>")
        if listener != listener.lower():
            raise ConfigError(f"{name} must name its listener in lower case, as "
                              f"{LISTENER_PREFIX}{listener.lower()}.{key}")
        if key in LISTENER_KEYS:
            value = dataclasses.replace(CONFIG_KEYS[key], name=name).parse(raw)
        elif key in _JAAS_KEYS:
            try:
                value = parse_login_module(raw, name)
            except SecurityConfigError as e:
                raise ConfigError(str(e)) from None
        else:
            raise ConfigError(
                f"{name}: fastlog takes only these keys per listener: "
                f"{', '.join(LISTENER_KEYS)} and <mechanism>.sasl.jaas.config")
        self.listener_overrides.setdefault(listener.upper(), {})[key] = value

    def listener_config(self, name: str) -> dict[str, Any]:
        """One listener's security settings resolved as Kafka resolves them: the value of
        listener.name.<listener>.<key> when set, else of <key>. The JAAS line of a
        mechanism is under "<mechanism in lower case>.sasl.jaas.config" (a parsed
        fastlog.security.JaasEntry) and exists only in the per-listener form, as for
        Kafka's brokers."""
        out = {k: self.values[k] for k in LISTENER_KEYS}
        out.update(self.listener_overrides.get(name.upper(), {}))
        return out

    def listener_security_protocol(self, name: str) -> str:
        return self.security_protocol_map[name.upper()]

    def inert_keys(self) -> list[str]:
        """The keys the user set that fastlog accepts from Kafka's files but does not act
        on: the startup warns about each, so none is ignored in silence."""
        return sorted(name for name in self.explicit if CONFIG_KEYS[name].inert)

    def deprecation_warnings(self) -> list[str]:
        """Sentences about deprecated keys the user set, for the startup log."""
        raw = self.explicit.get("log.message.format.version")
        if raw is None:
            return []
        return [message_format_ignored("log.message.format.version", raw.strip())]

    def _validate(self) -> None:
        v = self.values
        if v["broker.id"] >= 0 and v["node.id"] >= 0 and v["broker.id"] != v["node.id"]:
            raise ConfigError("broker.id and node.id must be equal when both are set")
        if not v["listeners"]:
            raise ConfigError("listeners must name at least one listener")
        self._validate_listener_names()
        if v["max.connections.per.ip"] == 0 and not v["max.connections.per.ip.overrides"]:
            raise ConfigError("max.connections.per.ip can be 0 only when "
                              "max.connections.per.ip.overrides names the hosts allowed")
        if 0 < v["queued.max.request.bytes"] < v["socket.request.max.bytes"]:
            raise ConfigError("queued.max.request.bytes must be at least "
                              "socket.request.max.bytes (or -1 for unbounded)")
        if v["group.min.session.timeout.ms"] > v["group.max.session.timeout.ms"]:
            raise ConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        self._validate_log_dirs()
        self._validate_log_configs()

    def _validate_log_dirs(self) -> None:
        # The parsed list drops empty items, so look at what the user wrote: an empty
        # log.dirs would otherwise fall back to log.dir without a word.
        raw = self.explicit.get("log.dirs")
        if raw is not None:
            entries = [item.strip() for item in raw.split(",")]
            if not any(entries):
                raise ConfigError("log.dirs must name at least one directory")
            if "" in entries:
                raise ConfigError(f"log.dirs must not have an empty entry, not {raw.strip()!r}")
        # Kafka refuses a directory listed twice (one partition would be loaded twice).
        seen: dict[str, str] = {}
        for d in self.log_dirs:
            path = os.path.abspath(d)
            if path in seen:
                first = seen[path]
                raise ConfigError(f"log.dirs names {d!r} twice" if first == d else
                                  f"log.dirs names one directory twice, as {first!r} and {d!r}")
            seen[path] = d

    def _validate_log_configs(self) -> None:
        # Storage checks its settings when a log opens; building them now reports a bad
        # log.* value (or offsets.topic.segment.bytes) as one sentence at startup.
        from fastlog.server.log.config import LogConfig, LogConfigError

        defaults = self.topic_defaults()
        try:
            LogConfig.from_props(defaults)
        except LogConfigError as e:
            raise ConfigError(self._server_key_message(e)) from None
        try:
            # __consumer_offsets: what the group coordinator creates it with.
            LogConfig.from_props(defaults, {
                "cleanup.policy": "compact",
                "segment.bytes": self.values["offsets.topic.segment.bytes"]})
        except LogConfigError as e:
            raise ConfigError(self._server_key_message(e, "offsets.topic.segment.bytes")) from None
        try:
            # __transaction_state: what the transaction coordinator creates it with.
            LogConfig.from_props(defaults, {
                "cleanup.policy": "compact",
                "segment.bytes": self.values["transaction.state.log.segment.bytes"]})
        except LogConfigError as e:
            raise ConfigError(self._server_key_message(
                e, "transaction.state.log.segment.bytes")) from None

    def _server_key_message(self, error, server_key: str | None = None) -> str:
        """A LogConfigError about a topic key, told with the broker key the user set."""
        text, key = str(error), getattr(error, "key", None)
        if key is None or not text.startswith(key):
            return text
        if server_key is None:
            synonyms = TOPIC_CONFIG_SYNONYMS.get(key, [key])
            server_key = next((k for k in synonyms if k in self.explicit), synonyms[0])
        return server_key + text[len(key):]

    def _validate_listener_names(self) -> None:
        # Kafka's rules: every listener name has a protocol in the map, advertised names
        # are bound ones, and the inter-broker listener is one of them.
        pmap = self.security_protocol_map
        names = [name for name, _, _ in self.listeners]
        for name, _, _ in self.listeners + self.advertised_listeners:
            proto = pmap.get(name)
            if proto is None:
                raise ConfigError(f"listener {name} has no security protocol in "
                                  "listener.security.protocol.map")
        for name in self.listener_overrides:
            if name not in names:
                raise ConfigError(f"{LISTENER_PREFIX}{name.lower()}.* names listener {name}, "
                                  "which listeners does not bind")
        for name in names:
            if pmap[name] in SASL_PROTOCOLS:
                self._validate_sasl_listener(name)
        for name, _, _ in self.advertised_listeners:
            if name not in names:
                raise ConfigError(f"advertised.listeners names {name}, which listeners "
                                  "does not bind")
        inter = self.values["inter.broker.listener.name"]
        by_protocol = self.values["security.inter.broker.protocol"]
        if inter is not None and by_protocol is not None:
            # Kafka's rule: one names the listener, so both would say it twice.
            raise ConfigError("set only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol")
        for key, value in (("inter.broker.listener.name", inter),
                           ("security.inter.broker.protocol", by_protocol)):
            if value is not None and value.strip().upper() not in names:
                raise ConfigError(f"{key} {value!r} must be one of the listeners "
                                  f"({', '.join(names)})")
        inter_name = self.inter_broker_listener_name
        if pmap[inter_name] in SASL_PROTOCOLS and self.values["zookeeper.connect"]:
            mechanism = self.values["sasl.mechanism.inter.broker.protocol"].strip()
            if mechanism not in self.listener_config(inter_name)["sasl.enabled.mechanisms"]:
                raise ConfigError(
                    f"sasl.mechanism.inter.broker.protocol {mechanism} must be among the "
                    f"sasl.enabled.mechanisms of the inter-broker listener {inter_name}")

    def _validate_sasl_listener(self, name: str) -> None:
        cfg = self.listener_config(name)
        mechanisms = cfg["sasl.enabled.mechanisms"]
        if not mechanisms:
            raise ConfigError(f"listener {name} uses SASL but sasl.enabled.mechanisms is empty")
        jaas = f"{LISTENER_PREFIX}{name.lower()}.plain.sasl.jaas.config"
        if "PLAIN" in mechanisms:
            entry = cfg.get("plain.sasl.jaas.config")
            if entry is None:
                raise ConfigError(f"listener {name} enables SASL mechanism PLAIN, which needs "
                                  f"its users in {jaas}")
            if entry.login_module != PLAIN_LOGIN_MODULE:
                raise ConfigError(f"{jaas} must use {PLAIN_LOGIN_MODULE}")

    @property
    def security_protocol_map(self) -> dict[str, str]:
        return _parse_protocol_map(self.values["listener.security.protocol.map"])

    @property
    def inter_broker_listener_name(self) -> str:
        """The listener brokers reach each other through: inter.broker.listener.name,
        else the listener named by security.inter.broker.protocol, else PLAINTEXT when a
        listener has that name, else the first listener."""
        for key in ("inter.broker.listener.name", "security.inter.broker.protocol"):
            inter = self.values[key]
            if inter is not None and inter.strip():
                return inter.strip().upper()
        names = [name for name, _, _ in self.listeners]
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]

    @property
    def node_id(self) -> int:
        bid = self.values["broker.id"]
        return bid if bid >= 0 else self.values["node.id"]

    @property
    def listeners(self) -> list[tuple[str, str, int]]:
        return [_split_listener(x) for x in self.values["listeners"]]

    @property
    def advertised_listeners(self) -> list[tuple[str, str, int]]:
        adv = self.values["advertised.listeners"]
        return [_split_listener(x) for x in adv] if adv else self.listeners

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.values["log.dirs"]
        return list(dirs) if dirs else [self.values["log.dir"]]

    @property
    def log_retention_ms(self) -> int:
        v = self.values
        if v["log.retention.ms"] is not None:
            ms = v["log.retention.ms"]
        elif v["log.retention.minutes"] is not None:
            ms = v["log.retention.minutes"] * 60_000
        else:
            ms = v["log.retention.hours"] * 3_600_000
        return -1 if ms < 0 else ms

    @property
    def log_roll_ms(self) -> int:
        v = self.values
        return v["log.roll.ms"] if v["log.roll.ms"] is not None else v["log.roll.hours"] * 3_600_000

    @property
    def log_roll_jitter_ms(self) -> int:
        v = self.values
        if v["log.roll.jitter.ms"] is not None:
            return v["log.roll.jitter.ms"]
        return v["log.roll.jitter.hours"] * 3_600_000

    @property
    def log_flush_interval_ms(self) -> int:
        v = self.values
        if v["log.flush.interval.ms"] is not None:
            return v["log.flush.interval.ms"]
        return v["log.flush.scheduler.interval.ms"]

    @property
    def min_insync_replicas(self) -> int:
        return self.values["min.insync.replicas"]

    @property
    def default_replication_factor(self) -> int:
        return self.values["default.replication.factor"]

    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level config defaults derived from the broker keys (Kafka's synonyms)."""
        v = self.values
        return {
            "cleanup.policy": list(v["log.cleanup.policy"]),
            "compression.type": v["compression.type"],
            "compression.gzip.level": v["compression.gzip.level"],
            "compression.lz4.level": v["compression.lz4.level"],
            "compression.zstd.level": v["compression.zstd.level"],
            "delete.retention.ms": v["log.cleaner.delete.retention.ms"],
            "file.delete.delay.ms": v["log.segment.delete.delay.ms"],
            "flush.messages": v["log.flush.interval.messages"],
            "flush.ms": self.log_flush_interval_ms,
            "index.interval.bytes": v["log.index.interval.bytes"],
            "max.compaction.lag.ms": v["log.cleaner.max.compaction.lag.ms"],
            "max.message.bytes": v["message.max.bytes"],
            "message.downconversion.enable": v["log.message.downconversion.enable"],
            "message.format.version": v["log.message.format.version"],
            "message.timestamp.after.max.ms": v["log.message.timestamp.after.max.ms"],
            "message.timestamp.before.max.ms": v["log.message.timestamp.before.max.ms"],
            "message.timestamp.difference.max.ms": v["log.message.timestamp.difference.max.ms"],
            "message.timestamp.type": v["log.message.timestamp.type"],
            "min.cleanable.dirty.ratio": v["log.cleaner.min.cleanable.ratio"],
            "min.compaction.lag.ms": v["log.cleaner.min.compaction.lag.ms"],
            "min.insync.replicas": v["min.insync.replicas"],
            "preallocate": v["log.preallocate"],
            "retention.bytes": v["log.retention.bytes"],
            "retention.ms": self.log_retention_ms,
            "segment.bytes": v["log.segment.bytes"],
            "segment.index.bytes": v["log.index.size.max.bytes"],
            "segment.jitter.ms": self.log_roll_jitter_ms,
            "segment.ms": self.log_roll_ms,
            "unclean.leader.election.enable": v["unclean.leader.election.enable"],
        }


# Topic config name -> the broker key that supplies its default (DescribeConfigs synonyms).
TOPIC_CONFIG_SYNONYMS: dict[str, list[str]] = {
    "cleanup.policy": ["log.cleanup.policy"],
    "compression.type": ["compression.type"],
    "compression.gzip.level": ["compression.gzip.level"],
    "compression.lz4.level": ["compression.lz4.level"],
    "compression.zstd.level": ["compression.zstd.level"],
    "delete.retention.ms": ["log.cleaner.delete.retention.ms"],
    "file.delete.delay.ms": ["log.segment.delete.delay.ms"],
    "flush.messages": ["log.flush.interval.messages"],
    "flush.ms": ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
    "index.interval.bytes": ["log.index.interval.bytes"],
    "max.compaction.lag.ms": ["log.cleaner.max.compaction.lag.ms"],
    "max.message.bytes": ["message.max.bytes"],
    "message.downconversion.enable": ["log.message.downconversion.enable"],
    "message.format.version": ["log.message.format.version"],
    "message.timestamp.after.max.ms": ["log.message.timestamp.after.max.ms"],
    "message.timestamp.before.max.ms": ["log.message.timestamp.before.max.ms"],
    "message.timestamp.difference.max.ms": ["log.message.timestamp.difference.max.ms"],
    "message.timestamp.type": ["log.message.timestamp.type"],
    "min.cleanable.dirty.ratio": ["log.cleaner.min.cleanable.ratio"],
    "min.compaction.lag.ms": ["log.cleaner.min.compaction.lag.ms"],
    "min.insync.replicas": ["min.insync.replicas"],
    "preallocate": ["log.preallocate"],
    "retention.bytes": ["log.retention.bytes"],
    "retention.ms": ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
    "segment.bytes": ["log.segment.bytes"],
    "segment.index.bytes": ["log.index.size.max.bytes"],
    "segment.jitter.ms": ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    "segment.ms": ["log.roll.ms", "log.roll.hours"],
    "unclean.leader.election.enable": ["unclean.leader.election.enable"],
}

# Types of topic-level configs (for parsing AlterConfigs/CreateTopics values).
TOPIC_CONFIG_TYPES: dict[str, str] = {
    "cleanup.policy": "list", "compression.type": "string", "delete.retention.ms": "long",
    "compression.gzip.level": "int", "compression.lz4.level": "int",
    "compression.zstd.level": "int",
    "file.delete.delay.ms": "long", "flush.messages": "long", "flush.ms": "long",
    "index.interval.bytes": "int", "max.compaction.lag.ms": "long", "max.message.bytes": "int",
    "message.downconversion.enable": "boolean", "message.format.version": "string",
    "message.timestamp.after.max.ms": "long",
    "message.timestamp.before.max.ms": "long", "message.timestamp.difference.max.ms": "long",
    "message.timestamp.type": "string", "min.cleanable.dirty.ratio": "double",
    "min.compaction.lag.ms": "long", "min.insync.replicas": "int", "preallocate": "boolean",
    "retention.bytes": "long", "retention.ms": "long", "segment.bytes": "int",
    "segment.index.bytes": "int", "segment.jitter.ms": "long", "segment.ms": "long",
    "unclean.leader.election.enable": "boolean",
}

_TOPIC_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "cleanup.policy": _one_of("delete", "compact"),
    "compression.type": _one_of(*_COMPRESSION),
    "compression.gzip.level": _GZIP_LEVEL,
    "compression.lz4.level": _LZ4_LEVEL,
    "compression.zstd.level": _ZSTD_LEVEL,
    "message.timestamp.type": _one_of(*_TIMESTAMP_TYPES),
    "message.format.version": _format_version,
    "segment.bytes": _at_least(14),
    "segment.ms": _at_least(1),
    "segment.index.bytes": _at_least(4),
    "min.insync.replicas": _at_least(1),
    "max.message.bytes": _at_least(0),
    "index.interval.bytes": _at_least(0),
    "flush.messages": _at_least(1),
    "flush.ms": _at_least(0),
    "file.delete.delay.ms": _at_least(0),
    "delete.retention.ms": _at_least(0),
}


def parse_topic_config(name: str, raw: str | None) -> Any:
    """Parse and validate one topic-level config value; ConfigError names the problem."""
    kind = TOPIC_CONFIG_TYPES.get(name)
    if kind is None:
        raise ConfigError(f"unknown topic config {name!r}")
    if raw is None:
        raise ConfigError(f"{name} needs a value")
    value = _PARSERS[kind](name, raw)
    check = _TOPIC_CHECKS.get(name)
    if check is not None:
        problem = check(value)
        if problem:
            raise ConfigError(f"{name} {problem}, not {raw!r}")
    if name == "min.cleanable.dirty.ratio" and not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be between 0 and 1, not {raw!r}")
    return value


def format_config_value(value: Any) -> str | None:
    """Render a typed value the way Kafka prints it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(x) for x in value)
    return str(value)


def _split_listener(item: str) -> tuple[str, str, int]:
    m = _LISTENER_RE.match(item)
    if m is None:  # validated at parse time; defaults are well-formed
        raise ConfigError(f"bad listener {item!r}")
    host = m.group(2).strip("[]")
    return m.group(1).upper(), host, int(m.group(3))
