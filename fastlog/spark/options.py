# fastlog/spark/options.py: the "fastlog" data source's options, with Spark's Kafka names.
#
# Owns parsing and validation of the option map Spark hands a Python data source (keys
# lower-cased, values strings) into ReadOptions / WriteOptions. Every unknown,
# unsupported or contradictory option fails with one sentence naming the option, raised
# from DataSource.schema() (so at load()) or when the writer is created (at start()/save()).
# Security: the kafka.-prefixed client keys Spark's Kafka source passes through
# (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*) become the keys of
# fastlog.client.security.ClientSecurity, checked here (one sentence for what the client
# cannot do) and kept as plain strings in the options, so every client made from them
# (driver and executors) authenticates alike; the Java client's truststore/keystore are
# taken as PEM files, JKS and PKCS12 are refused. kafka.isolation.level is read as Spark's
# Kafka source reads it: read_uncommitted by default; read_committed ends offsets at the
# last stable offset and drops aborted transactions' records. The other kafka.* client
# settings fastlog's clients honour (_KAFKA_CONSUMER, _KAFKA_PRODUCER) are kept as fields;
# one side's keys on the other side are ignored with a warning (once per process), as a
# Kafka client warns; every other kafka.* key is refused. Where a read starts and ends
# follows Spark's precedence (*Timestamp, then *OffsetsByTimestamp, then *Offsets); the
# offsets themselves are resolved against the broker by the reader (source.py).
# Pure functions (apart from that warning); the resulting dataclasses are picklable and
# travel to executors.

from __future__ import annotations

import dataclasses
import logging
import re

from fastlog.client.errors import FastlogError
from fastlog.client.security import KEYS as CLIENT_SECURITY_KEYS
from fastlog.client.security import ClientSecurity
from fastlog.protocol.topics import topic_name_problem
from fastlog.spark import offsets as offsets_mod

log = logging.getLogger("fastlog.spark")


class OptionError(ValueError):
    """An option of the fastlog Spark source or sink is invalid."""


# Spark's Kafka option names (canonical spelling) by lower-cased key.
_READ = ["kafka.bootstrap.servers", "bootstrap.servers", "subscribe", "subscribePattern",
         "assign", "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
         "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
         "startingOffsetsByTimestampStrategy", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
         "maxTriggerDelay", "failOnDataLoss", "includeHeaders", "minPartitions",
         "maxRecordsPerPartition", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
         "fetchOffset.retryIntervalMs", "groupIdPrefix"]
_WRITE = ["kafka.bootstrap.servers", "bootstrap.servers", "topic", "compression",
          "includeHeaders"]
# Spark itself may put these into a source's or sink's options.
_SPARK_OWN = ["path", "checkpointLocation", "queryName"]
# Kafka options this source knows but does not implement.
_UNSUPPORTED = ["maxOffsetsPerTrigger.bytes"]
# kafka.* consumer / producer settings Spark's Kafka source refuses as well.
_REFUSED_KAFKA = {"kafka.auto.offset.reset": "set startingOffsets instead",
                  "kafka.key.deserializer": "keys are always read as binary",
                  "kafka.value.deserializer": "values are always read as binary",
                  "kafka.key.serializer": "keys are always written as binary",
                  "kafka.value.serializer": "values are always written as binary",
                  "kafka.enable.auto.commit": "offsets live in Spark's checkpoint",
                  "kafka.interceptor.classes": "interceptors are not supported"}
# The kafka.* client settings fastlog's clients honour (besides the security ones), as
# Kafka's consumer (source) or producer (sink) does. A job may share one option map
# between its read and its write, so each side accepts the other's keys (a Kafka client
# only warns about another client's settings); every other kafka.* key is refused.
_KAFKA_CONSUMER = ["kafka.isolation.level", "kafka.request.timeout.ms",
                   "kafka.max.partition.fetch.bytes", "kafka.fetch.max.bytes",
                   "kafka.fetch.min.bytes", "kafka.fetch.max.wait.ms", "kafka.client.id",
                   "kafka.group.id"]
_KAFKA_PRODUCER = ["kafka.acks", "kafka.linger.ms", "kafka.batch.size",
                   "kafka.compression.type", "kafka.request.timeout.ms", "kafka.client.id",
                   "kafka.max.request.size"]
_KAFKA_KNOWN = frozenset(_KAFKA_CONSUMER + _KAFKA_PRODUCER)
_warned: set[tuple[str, str]] = set()   # (source/sink, key) warned about in this process
STRATEGIES = ("error", "latest")   # startingOffsetsByTimestampStrategy
MAX_TRIGGER_DELAY = "15m"          # Spark's default maxTriggerDelay
# The Java client's PEM trust and key stores, as ClientSecurity's keys.
_STORES = {"kafka.ssl.truststore.location": "ssl.ca.location",
           "kafka.ssl.keystore.location": "ssl.certificate.location"}
_STORE_TYPES = ("kafka.ssl.truststore.type", "kafka.ssl.keystore.type")
_SECURITY_PREFIXES = ("kafka.security.", "kafka.sasl.", "kafka.ssl.")
_SECURITY_OPTIONS = [f"kafka.{k}" for k in CLIENT_SECURITY_KEYS] + [*_STORES, *_STORE_TYPES]
CANONICAL = {name.lower(): name for name in _READ + _WRITE + _SPARK_OWN + _UNSUPPORTED}
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")   # Kafka's numbering: 0, 1


def _name(key: str) -> str:
    return CANONICAL.get(key.lower(), key)


def _bool(opts, key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {_name(key)} must be true or false, got {raw!r}")
    return value == "true"


def _int(opts, key: str, minimum: int = 1, default: int | None = None) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {_name(key)} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {_name(key)} must be at least {minimum}, got {value}")
    return value


def _lower(opts) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(opts).items()}


def _bootstrap(opts) -> str:
    servers = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap.servers")
    if not servers or not servers.strip():
        raise OptionError("option kafka.bootstrap.servers is required (e.g. "
                          "'127.0.0.1:9092')")
    if ("kafka.bootstrap.servers" in opts and "bootstrap.servers" in opts
            and opts["kafka.bootstrap.servers"] != opts["bootstrap.servers"]):
        raise OptionError("options kafka.bootstrap.servers and bootstrap.servers disagree; "
                          "set only one")
    return servers.strip()


def _check_known(opts, allowed: list[str], what: str) -> None:
    allowed_lower = {a.lower() for a in allowed + _SPARK_OWN}
    unsupported = {u.lower() for u in _UNSUPPORTED}
    for key in sorted(opts):
        if key in _REFUSED_KAFKA:
            raise OptionError(f"option {key} is not supported: {_REFUSED_KAFKA[key]}")
        if key.startswith(_SECURITY_PREFIXES):
            continue  # checked by _security
        if key.startswith("kafka."):
            if key not in _KAFKA_KNOWN and key not in allowed_lower:
                raise OptionError(f"option {key} is not supported by fastlog's client (it "
                                  f"takes {', '.join(sorted(_KAFKA_KNOWN))} and the security "
                                  f"options)")
            own = _KAFKA_CONSUMER if what == "source" else _KAFKA_PRODUCER
            if key not in own and key not in allowed_lower and (what, key) not in _warned:
                _warned.add((what, key))
                log.warning("option %s is a %s setting: the fastlog %s ignores it, as a "
                            "Kafka %s does", key,
                            "producer" if what == "source" else "consumer", what,
                            "consumer" if what == "source" else "producer")
            continue
        if key in unsupported:
            raise OptionError(f"option {_name(key)} is not supported by the fastlog {what}")
        if key not in allowed_lower:
            raise OptionError(f"unknown option '{key}' for the fastlog {what}")


def _security(opts) -> tuple[tuple[str, str], ...]:
    """The kafka.security.* / kafka.sasl.* / kafka.ssl.* options as ClientSecurity's keys
    (checked by ClientSecurity itself); OptionError with one sentence for one we cannot do."""
    config: dict[str, str] = {}
    for key in sorted(opts):
        if not key.startswith(_SECURITY_PREFIXES) or key in _STORE_TYPES:
            continue
        if key in _STORES:
            _check_pem_store(opts, key)
            config[_STORES[key]] = opts[key]
            if key == "kafka.ssl.keystore.location":  # a PEM keystore: key and chain in one
                config["ssl.key.location"] = opts[key]
        elif key[len("kafka."):] in CLIENT_SECURITY_KEYS:
            config[key[len("kafka."):]] = opts[key]
        else:
            raise OptionError(f"option {key} is not supported by fastlog's client (it takes "
                              f"{', '.join(_SECURITY_OPTIONS)})")
    for key in _STORE_TYPES:
        if key in opts and key.replace(".type", ".location") not in opts:
            raise OptionError(f"option {key} needs {key.replace('.type', '.location')}")
    try:
        ClientSecurity.from_config(config)
    except FastlogError as e:
        raise OptionError(f"{e} (the kafka.-prefixed security options)") from None
    return tuple(sorted(config.items()))


def _check_pem_store(opts, key: str) -> None:
    """A truststore or keystore must be a PEM file (the type PEM, or unset and the file
    PEM): Java's JKS and PKCS12 stores are refused with one sentence."""
    kind_key = key.replace(".location", ".type")
    kind = opts.get(kind_key, "").strip().upper()
    if kind and kind != "PEM":
        raise OptionError(f"option {kind_key} {kind} is not supported: fastlog's client reads "
                          f"PEM files (export the store to PEM with keytool and openssl)")
    try:
        with open(opts[key], "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise OptionError(f"option {key}: cannot read {opts[key]} ({e.strerror})") from None
    if b"-----BEGIN " not in head:
        raise OptionError(f"option {key} {opts[key]} is not a PEM file (JKS and PKCS12 stores "
                          f"are not supported: export the store to PEM)")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    subscribe: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] | None = None
    # Where a read starts and (batch) ends, after Spark's precedence: a *Timestamp option
    # over an *OffsetsByTimestamp option over an *Offsets option.
    starting: object = "latest"          # "earliest" | "latest" | {(t, p): offset}
    ending: object = "latest"            # batch only
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: dict | None = None    # {(t, p): timestamp ms}
    ending_by_timestamp: dict | None = None
    timestamp_strategy: str = "error"    # startingOffsetsByTimestampStrategy
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120000
    isolation_level: int = 0             # 1: read_committed (kafka.isolation.level)
    # kafka.* client settings: timeouts and sizes of the requests the clients send
    request_timeout_ms: int = 30000
    max_partition_fetch_bytes: int = 8 << 20
    fetch_max_bytes: int = 8 << 20
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 200
    client_id: str = "fastlog-spark"
    # ListOffsets on the driver: retries and the pause between them (fetchOffset.*)
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    # ClientSecurity's keys (the password among them, so never in the repr)
    security: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)

    def matches(self, topic: str) -> bool:
        """Whether a subscribePattern subscription includes topic."""
        return self.pattern is not None and re.fullmatch(self.pattern, topic) is not None


def parse_read_options(options, streaming: bool) -> ReadOptions:
    """Validate a read's options (streaming or batch); raises OptionError with one sentence."""
    opts = _lower(options)
    _check_known(opts, _READ, "source")
    bootstrap = _bootstrap(opts)
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        listed = ", ".join(_name(k) for k in chosen) if chosen else "none of them"
        raise OptionError(f"exactly one of the options subscribe, subscribePattern and assign "
                          f"must be set (got {listed})")
    kind = chosen[0]
    subscribe = pattern = assign = None
    if kind == "subscribe":
        topics = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
        if not topics:
            raise OptionError("option subscribe must list at least one topic")
        subscribe = tuple(sorted(set(topics)))
    elif kind == "subscribepattern":
        pattern = opts["subscribepattern"]
        if not pattern.strip():
            raise OptionError("option subscribePattern must not be empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid regular expression: "
                              f"{exc}") from None
    else:
        try:
            assign = tuple(offsets_mod.parse_assign(opts["assign"]))
        except offsets_mod.OffsetSpecError as exc:
            raise OptionError(str(exc)) from None

    if streaming:
        for key in ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp"):
            if key in opts:
                raise OptionError(f"option {_name(key)} is not valid in streaming queries "
                                  f"(a stream has no end; use it with spark.read)")
    starting = _offsets_option(opts, "startingoffsets",
                               "latest" if streaming else "earliest", streaming, True)
    ending = _offsets_option(opts, "endingoffsets", "latest", streaming, False)
    starting_by_ts = _timestamps_option(opts, "startingoffsetsbytimestamp")
    ending_by_ts = _timestamps_option(opts, "endingoffsetsbytimestamp")
    if assign is not None:
        for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets"),
                           (starting_by_ts, "startingOffsetsByTimestamp"),
                           (ending_by_ts, "endingOffsetsByTimestamp")):
            if isinstance(spec, dict) and set(spec) - set(assign):
                extra = sorted(set(spec) - set(assign))
                raise OptionError(f"option {name} names {extra[0][0]}-{extra[0][1]}, which "
                                  f"option assign does not include")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in STRATEGIES:
        raise OptionError(f"option startingOffsetsByTimestampStrategy must be error or latest, "
                          f"got {opts['startingoffsetsbytimestampstrategy']!r}")
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger")
    min_per_trigger = _int(opts, "minOffsetsPerTrigger")
    if min_per_trigger and max_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(f"option minOffsetsPerTrigger ({min_per_trigger}) must not be more "
                          f"than maxOffsetsPerTrigger ({max_per_trigger})")
    group_id = opts.get("kafka.group.id")
    if group_id is not None and not group_id.strip():
        raise OptionError("option kafka.group.id must not be empty")
    return ReadOptions(
        bootstrap=bootstrap, subscribe=subscribe, pattern=pattern, assign=assign,
        starting=starting, ending=ending,
        starting_timestamp=_int(opts, "startingTimestamp", 0),
        ending_timestamp=_int(opts, "endingTimestamp", 0),
        starting_by_timestamp=starting_by_ts, ending_by_timestamp=ending_by_ts,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", MAX_TRIGGER_DELAY),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        min_partitions=_int(opts, "minPartitions"),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition"),
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 1, 120000),
        isolation_level=_isolation_level(opts),
        request_timeout_ms=_int(opts, "kafka.request.timeout.ms", 1, 30000),
        max_partition_fetch_bytes=_int(opts, "kafka.max.partition.fetch.bytes", 1, 8 << 20),
        fetch_max_bytes=_int(opts, "kafka.fetch.max.bytes", 1, 8 << 20),
        fetch_min_bytes=_int(opts, "kafka.fetch.min.bytes", 0, 1),
        fetch_max_wait_ms=_int(opts, "kafka.fetch.max.wait.ms", 0, 200),
        client_id=(opts.get("kafka.client.id") or "fastlog-spark").strip(),
        fetch_offset_retries=_int(opts, "fetchOffset.numRetries", 0, 3),
        fetch_offset_retry_interval_ms=_int(opts, "fetchOffset.retryIntervalMs", 0, 1000),
        security=_security(opts),
    )


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60000, "min": 60000, "h": 3600000, "d": 86400000}


def _duration_ms(opts, key: str, default: str) -> int:
    """A duration as Spark's timeStringAsMs reads it: a number with an optional unit (ms,
    s, m/min, h, d; milliseconds when there is none)."""
    raw = opts.get(key.lower(), default)
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if m is None or m.group(2) not in ("", *_UNITS_MS):
        raise OptionError(f"option {_name(key)} must be a duration like 30s or 5m, got {raw!r}")
    return int(m.group(1)) * _UNITS_MS.get(m.group(2), 1)


def _timestamps_option(opts, key: str) -> dict | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        return offsets_mod.parse_timestamps_spec(raw.strip(), _name(key))
    except offsets_mod.OffsetSpecError as exc:
        raise OptionError(str(exc)) from None


def _isolation_level(opts) -> int:
    raw = opts.get("kafka.isolation.level", "read_uncommitted")
    if raw.strip().lower() not in ISOLATION_LEVELS:
        raise OptionError(f"option kafka.isolation.level must be read_uncommitted or "
                          f"read_committed, got {raw!r}")
    return ISOLATION_LEVELS.index(raw.strip().lower())


def _offsets_option(opts, key: str, default: str, streaming: bool, is_start: bool):
    raw = opts.get(key)
    if raw is None:
        return default
    value = raw.strip()
    if value.lower() in ("earliest", "latest"):
        value = value.lower()
        if not streaming and is_start and value == "latest":
            raise OptionError("option startingOffsets cannot be 'latest' for batch queries")
        if not streaming and not is_start and value == "earliest":
            raise OptionError("option endingOffsets cannot be 'earliest' for batch queries")
        return value
    try:
        spec = offsets_mod.parse_offsets_spec(value, _name(key))
    except offsets_mod.OffsetSpecError as exc:
        raise OptionError(str(exc)) from None
    if not streaming:
        bad = offsets_mod.LATEST if is_start else offsets_mod.EARLIEST
        for (t, p), off in spec.items():
            if off == bad:
                raise OptionError(f"option {_name(key)} cannot use {bad} "
                                  f"({'latest' if is_start else 'earliest'}) for {t}-{p} in "
                                  f"batch queries")
    return spec


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None = None
    compression: str = "none"
    acks: str = "1"
    linger_ms: float = 5.0
    batch_bytes: int = 1 << 20
    request_timeout_ms: int = 30000
    max_request_size: int = 1048576
    client_id: str = "fastlog-spark-sink"
    security: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)


def parse_write_options(options) -> WriteOptions:
    """Validate a write's options; raises OptionError with one sentence."""
    opts = _lower(options)
    # A job may share one option map between its read and its write (as Kafka jobs do):
    # read options are tolerated on the sink, everything else unknown is refused.
    _check_known(opts, _WRITE + _READ, "sink")
    bootstrap = _bootstrap(opts)
    topic = opts.get("topic")
    if topic is not None:
        problem = topic_name_problem(topic.strip())
        if problem is not None:
            raise OptionError(f"option topic is an invalid topic name: {problem}")
    compression = (opts.get("compression") or opts.get("kafka.compression.type")
                   or "none").strip().lower()
    if compression not in COMPRESSIONS:
        raise OptionError(f"option compression must be one of {', '.join(COMPRESSIONS)}, "
                          f"got {compression!r}")
    acks = opts.get("kafka.acks", "1").strip().lower()
    if acks not in ("0", "1", "all", "-1"):
        raise OptionError(f"option kafka.acks must be 0, 1 or all, got {acks!r}")
    try:
        linger = float(opts.get("kafka.linger.ms", "5"))
        batch = int(opts.get("kafka.batch.size", str(1 << 20)))
    except ValueError:
        raise OptionError("options kafka.linger.ms and kafka.batch.size must be "
                          "numbers") from None
    return WriteOptions(bootstrap=bootstrap, topic=topic.strip() if topic else None,
                        compression=compression, acks=acks, linger_ms=linger,
                        batch_bytes=max(1024, batch),
                        request_timeout_ms=_int(opts, "kafka.request.timeout.ms", 1, 30000),
                        max_request_size=_int(opts, "kafka.max.request.size", 1024, 1048576),
                        client_id=(opts.get("kafka.client.id") or "fastlog-spark-sink").strip(),
                        security=_security(opts))
