# fastlog/spark/source.py: the PySpark Python data source "fastlog" (reads and writes).
#
# Owns the Spark side of fastlog: FastlogDataSource (format "fastlog") with the schema and
# options of Spark's Kafka source, a micro-batch stream reader (per-partition JSON offsets
# in the checkpoint, admission control for maxOffsetsPerTrigger and minOffsetsPerTrigger
# with maxTriggerDelay, availableNow, new topics and partitions picked up, data-loss
# checks, the lag metrics Spark's Kafka source reports, logged per batch), a batch reader
# over an offset range, start and end offsets resolved on the driver (earliest / latest /
# JSON / timestamps through ListOffsets, with fetchOffset.* retries) and refused with one
# sentence when they cannot be read, and a batch + streaming Arrow writer that produces
# DataFrame rows into topics.
#
# Where code runs (pyspark 4.3): the DataSource is created at load() in a Python worker
# and pickled everywhere; the stream reader lives in the query's long-lived driver runner
# process (initialOffset / latestOffset / partitions / commit), while read() runs on
# executors on a fresh unpickled copy, so everything read() needs travels in the
# InputPartition. Clients are created lazily and dropped when pickled.

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from fastlog.protocol.topics import topic_name_problem
from fastlog.spark import offsets as offsets_mod
from fastlog.spark.fetch import fetch_settings, report_data_loss
from fastlog.spark.options import (
    OptionError,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)

log = logging.getLogger("fastlog.spark")
metrics_log = logging.getLogger("fastlog.spark.metrics")

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))
KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, with the headers column when includeHeaders is true."""
    if not include_headers:
        return KAFKA_SCHEMA
    return StructType(KAFKA_SCHEMA.fields + [StructField("headers", HEADERS_TYPE)])


class OffsetRange(InputPartition):
    """One Spark task: topic-partition records over [start, end). Pickled to executors."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


# ---------------------------------------------------------------------------------------
# Driver-side metadata


class _Metadata:
    """The driver's view of the subscription: partitions and their offsets (blocking)."""

    def __init__(self, opts: ReadOptions):
        from fastlog.client import SyncAdmin
        self.opts = opts
        self.admin = SyncAdmin(opts.bootstrap, client_id=opts.client_id,
                               request_timeout_ms=opts.request_timeout_ms,
                               security=dict(opts.security))

    def close(self) -> None:
        self.admin.close()

    def _retried(self, what: str, call):
        """call() tried fetchOffset.numRetries times, fetchOffset.retryIntervalMs apart, as
        Spark's driver tries its offset requests (each try is the client's own retries
        within kafka.request.timeout.ms)."""
        from fastlog.client.errors import FastlogError
        attempts = max(1, self.opts.fetch_offset_retries)
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except FastlogError as exc:
                if attempt == attempts:
                    raise
                log.warning("%s failed (attempt %d of %d), retrying in %d ms: %s", what,
                            attempt, attempts, self.opts.fetch_offset_retry_interval_ms, exc)
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000.0)
        raise AssertionError("unreachable")

    def partitions(self) -> list[tuple[str, int]]:
        """The partitions the subscription covers now, sorted."""
        if self.opts.assign is not None:
            return list(self.opts.assign)
        return self._retried("listing the subscription's partitions", self._partitions)

    def _partitions(self) -> list[tuple[str, int]]:
        # One Metadata request for every topic (as list_topics makes), read whole: the
        # first micro-batch's planning waits for each round trip.
        out = []
        subscribed = set(self.opts.subscribe) if self.opts.subscribe is not None else None
        for info in self.admin.describe_topics():
            if info.internal:
                continue
            if subscribed is not None and info.name not in subscribed:
                continue
            if subscribed is None and not self.opts.matches(info.name):
                continue
            out.extend((info.name, p) for p in info.partitions)
        return sorted(out)

    def list_offsets(self, specs: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Offsets for EARLIEST (-2) / LATEST (-1) / a timestamp (ms), per partition."""
        from fastlog.client import TopicPartition
        if not specs:
            return {}
        request = {TopicPartition(t, p): s for (t, p), s in specs.items()}
        got = self._retried("listing offsets", lambda: self.admin.list_offsets(
            request, isolation_level=self.opts.isolation_level))
        return {(tp.topic, tp.partition): o.offset for tp, o in got.items()}

    def earliest(self, tps) -> dict[tuple[str, int], int]:
        return self.list_offsets({tp: offsets_mod.EARLIEST for tp in tps})

    def latest(self, tps) -> dict[tuple[str, int], int]:
        return self.list_offsets({tp: offsets_mod.LATEST for tp in tps})

    def resolve(self, tps, starting: bool) -> dict[tuple[str, int], int]:
        """Concrete start (or batch end) offsets of tps, after Spark's precedence: the
        *Timestamp option, else *OffsetsByTimestamp, else *Offsets ('earliest', 'latest' or
        JSON, which must name every partition of the subscription and no other)."""
        o = self.opts
        which = "starting" if starting else "ending"
        timestamp = o.starting_timestamp if starting else o.ending_timestamp
        by_time = o.starting_by_timestamp if starting else o.ending_by_timestamp
        spec = o.starting if starting else o.ending
        if timestamp is not None:
            return self._by_timestamp({tp: timestamp for tp in tps}, starting,
                                      f"{which}Timestamp")
        if by_time is not None:
            _check_names_every_partition(by_time, tps, f"{which}OffsetsByTimestamp", o)
            return self._by_timestamp(by_time, starting, f"{which}OffsetsByTimestamp")
        if spec == "earliest":
            return self.earliest(tps)
        if spec == "latest":
            return self.latest(tps)
        what = f"{which}Offsets"
        _check_names_every_partition(spec, tps, what, o)
        out = {tp: off for tp, off in spec.items() if off >= 0}
        out.update(self.earliest([tp for tp in tps if spec[tp] == offsets_mod.EARLIEST]))
        latest = self.latest(tps)
        for tp in sorted(out):
            if out[tp] > latest[tp]:
                raise OptionError(f"option {what} gives {tp[0]}-{tp[1]} offset {out[tp]}, "
                                  f"beyond the end of its log ({latest[tp]})")
        out.update({tp: latest[tp] for tp in tps if spec[tp] == offsets_mod.LATEST})
        return {tp: out[tp] for tp in tps}

    def _by_timestamp(self, stamps: dict, starting: bool, what: str) -> dict:
        """ListOffsets by timestamp: the first offset whose record's timestamp is at least
        the one given. Where there is none, an end is the latest offset; a start is an
        error, or the latest offset with startingOffsetsByTimestampStrategy latest."""
        found = self.list_offsets(stamps)
        none = sorted(tp for tp, off in found.items() if off < 0)
        if none and starting and self.opts.timestamp_strategy == "error":
            t, p = none[0]
            raise OptionError(f"option {what}: no record of {t}-{p} has a timestamp at or after "
                              f"{stamps[(t, p)]} (set startingOffsetsByTimestampStrategy to "
                              f"latest to start such partitions at their end)")
        latest = self.latest(none)
        return {tp: (latest[tp] if off < 0 else off) for tp, off in found.items()}


def _check_names_every_partition(spec: dict, tps, what: str, opts: ReadOptions) -> None:
    """A JSON of offsets or timestamps must name exactly the partitions of the subscription
    (as Spark's Kafka source asserts)."""
    missing = sorted(set(tps) - set(spec))
    if missing:
        t, p = missing[0]
        raise OptionError(f"option {what} must give every partition of the subscription, but "
                          f"{t}-{p} has none")
    extra = sorted(set(spec) - set(tps))
    if extra:
        t, p = extra[0]
        subscribed = t in {tp[0] for tp in tps} or t in (opts.subscribe or ()) or opts.matches(t)
        why = "does not exist" if subscribed else "is not in the subscription"
        raise OptionError(f"option {what} names partition {t}-{p}, which {why}")


def _ranges(start: dict, end: dict, opts: ReadOptions, meta: _Metadata | None,
            new_start: dict | None = None) -> list[OffsetRange]:
    """The tasks of one batch: one range per partition in end (split per the options)."""
    new = [tp for tp in end if tp not in start]
    fresh = dict(new_start or {})
    unknown = [tp for tp in new if tp not in fresh]
    if unknown and meta is not None:
        fresh.update(meta.earliest(unknown))
    out = []
    for tp in sorted(end):
        until = end[tp]
        begin = start.get(tp, fresh.get(tp))
        if begin is None:
            continue
        if begin > until:
            report_data_loss(f"partition {tp[0]}-{tp[1]}'s offset went back from {begin} to "
                             f"{until} (was the topic deleted and recreated?)",
                             opts.fail_on_data_loss)
            continue
        if begin == until:
            continue
        out.extend(_split(tp, begin, until, opts))
    if opts.min_partitions and out and len(out) < opts.min_partitions:
        out = _split_evenly(out, opts.min_partitions)
    return out


def _split(tp, begin: int, until: int, opts: ReadOptions) -> list[OffsetRange]:
    step = opts.max_records_per_partition
    if not step or until - begin <= step:
        return [OffsetRange(tp[0], tp[1], begin, until)]
    return [OffsetRange(tp[0], tp[1], s, min(s + step, until)) for s in range(begin, until, step)]


def _split_evenly(ranges: list[OffsetRange], want: int) -> list[OffsetRange]:
    """Cut the ranges into about `want` pieces, in proportion to their sizes (minPartitions)."""
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        pieces = max(1, round(want * (r.end - r.start) / total))
        size = -(-(r.end - r.start) // pieces)
        out.extend(OffsetRange(r.topic, r.partition, s, min(s + size, r.end))
                   for s in range(r.start, r.end, size))
    return out


def _rate_limit(start: dict, fresh: dict, latest: dict, limit: int) -> dict:
    """End offsets admitting at most `limit` records, shared in proportion to what is waiting.

    Like Kafka's rateLimit, but rounding down and then handing the remainder to the largest
    fractions, so that a batch never exceeds the limit (and never stalls below it).
    """
    begins = {tp: start.get(tp, fresh.get(tp)) for tp in latest}
    sizes = {tp: max(0, latest[tp] - b) for tp, b in begins.items() if b is not None}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size / total for tp, size in sizes.items()}
    take = {tp: int(s) for tp, s in shares.items()}
    left = limit - sum(take.values())
    for tp in sorted(shares, key=lambda tp: (take[tp] - shares[tp], tp))[:left]:
        take[tp] += 1
    out = dict(latest)
    for tp, n in take.items():
        out[tp] = min(latest[tp], begins[tp] + n)
    return out


def source_lag(end: dict, latest: dict) -> dict:
    """Spark's Kafka source metrics of a batch ending at `end` while the partitions end at
    `latest`: min/max/avg records behind the latest offset, over the latest's partitions."""
    behind = [latest[tp] - end.get(tp, latest[tp]) for tp in sorted(latest)]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": min(behind), "maxOffsetsBehindLatest": max(behind),
            "avgOffsetsBehindLatest": sum(behind) / len(behind)}


# ---------------------------------------------------------------------------------------
# Readers


class _ReaderBase:
    """What stream and batch readers share: options, lazy metadata client, executor read()."""

    def __init__(self, schema, opts: ReadOptions):
        self.schema = schema
        self.opts = opts
        self._meta: _Metadata | None = None

    @property
    def meta(self) -> _Metadata:
        if self._meta is None:
            self._meta = _Metadata(self.opts)
        return self._meta

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_meta"] = None  # a live client (threads, sockets) never travels
        return state

    def read(self, partition: OffsetRange):
        """Executor: the partition's records as pyarrow.RecordBatches (no per-record objects)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        from fastlog.spark.fetch import read_range
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        yield from read_range(
            self.opts.bootstrap, partition.topic, partition.partition, partition.start,
            partition.end, include_headers=self.opts.include_headers,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            timeout_ms=self.opts.poll_timeout_ms, arrow_schema=arrow_schema,
            security=dict(self.opts.security), isolation_level=self.opts.isolation_level,
            settings=fetch_settings(self.opts))

    def stop(self) -> None:
        if self._meta is not None:
            self._meta.close()
            self._meta = None


class FastlogStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets are {"topic": {"partition": nextOffset}} JSON."""

    def __init__(self, schema, opts: ReadOptions):
        super().__init__(schema, opts)
        self._initial = None
        self._target = None          # availableNow: the offsets to stop at
        self._latest = None          # for reportLatestOffset
        self._fresh: dict = {}       # earliest offsets of partitions that appeared
        self._last_trigger_ms = 0.0  # minOffsetsPerTrigger: when the last batch was let in

    def initialOffset(self) -> dict:
        # Spark calls this at least twice for a new query: it must not move.
        if self._initial is None:
            tps = self.meta.partitions()
            start = self.meta.resolve(tps, starting=True)
            self._initial = offsets_mod.to_json_dict(start)
        return self._initial

    def getDefaultReadLimit(self):
        # Spark's Kafka source returns a composite of ReadMinRows (with maxTriggerDelay) and
        # ReadMaxRows; a Python source can return only one, so it hands Spark the upper
        # bound (or the lower one alone) and applies minOffsetsPerTrigger itself.
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.meta.partitions()
        self._target = self.meta.latest(tps)

    def latestOffset(self, start: dict, limit=None) -> dict:
        start_offsets = offsets_mod.from_json_dict(start or {})
        tps = self.meta.partitions()
        gone = sorted(set(start_offsets) - set(tps))
        if gone:
            report_data_loss(f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone",
                             self.opts.fail_on_data_loss)
        if self._target is not None:
            tps = [tp for tp in tps if tp in self._target]
        new = [tp for tp in tps if tp not in start_offsets and tp not in self._fresh]
        if new:
            found = self.meta.earliest(new)
            for tp, off in sorted(found.items()):
                if off != 0:
                    report_data_loss(f"added partition {tp[0]}-{tp[1]} starts from {off} "
                                     f"instead of 0", self.opts.fail_on_data_loss)
            self._fresh.update(found)
        latest = self.meta.latest(tps)
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items()}
        self._latest = offsets_mod.to_json_dict(latest)
        end = latest
        if not isinstance(limit, ReadAllAvailable):   # ReadAllAvailable wins, as in Kafka's
            if self._delay_batch(start_offsets, latest):
                return offsets_mod.to_json_dict(start_offsets)
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            if max_rows:
                end = _rate_limit(start_offsets, self._fresh, latest, max_rows)
        # A partition whose start lies beyond its end (topic recreated) keeps its start, so
        # partitions() reports the loss once and the next batch moves past it.
        end_json = offsets_mod.to_json_dict(end)
        if end_json != offsets_mod.to_json_dict(start_offsets):
            self._log_lag(end, latest)
        return end_json

    def _delay_batch(self, start: dict, latest: dict) -> bool:
        """minOffsetsPerTrigger, as Kafka's delayBatch: skip this trigger while fewer
        records wait, unless maxTriggerDelay has passed since the last batch (the first
        trigger of a query always runs). Never under availableNow, which would wait for
        records that its fixed end never lets in."""
        want = self.opts.min_offsets_per_trigger
        if not want or self._target is not None:
            return False
        now = time.time() * 1000.0
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        waiting = sum(off - start.get(tp, self._fresh.get(tp, 0)) for tp, off in latest.items())
        if waiting < want:
            return True
        self._last_trigger_ms = now
        return False

    def _log_lag(self, end: dict, latest: dict) -> None:
        """Log the batch's lag metrics, the ones Spark's Kafka source reports in the query
        progress (pyspark 4.3's Python sources have no hook for source metrics)."""
        lag = source_lag(end, latest)
        if not lag:
            return
        if lag["maxOffsetsBehindLatest"] > 0:
            lag["estimatedBytesBehindLatest"] = self._bytes_behind(end, latest)
        if not metrics_log.handlers and not logging.getLogger().handlers:
            # the source process Spark starts configures no logging: write to its stderr,
            # which Spark copies into the driver's log
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
            metrics_log.addHandler(handler)
            metrics_log.setLevel(logging.INFO)
        metrics_log.info("fastlog source batch ending at %s, source metrics %s",
                         json.dumps(offsets_mod.to_json_dict(end)), json.dumps(lag))

    def _bytes_behind(self, end: dict, latest: dict) -> int | None:
        """Records behind times each partition's mean record size (its log size from
        DescribeLogDirs over the records it holds); None when the brokers will not say."""
        from fastlog.client import TopicPartition
        from fastlog.client.errors import FastlogError
        behind = {tp: latest[tp] - end.get(tp, latest[tp]) for tp in latest}
        behind = {tp: n for tp, n in behind.items() if n > 0}
        try:
            sizes: dict = {}
            dirs = self.meta.admin.describe_log_dirs(tps=[TopicPartition(*tp) for tp in behind])
            for by_dir in dirs.values():
                for desc in by_dir.values():
                    for tp, replica in desc.replicas.items():
                        key = (tp.topic, tp.partition)
                        sizes[key] = max(sizes.get(key, 0), replica.size)
            earliest = self.meta.earliest(list(behind))
        except FastlogError as exc:
            log.debug("no size estimate for the lag metrics: %s", exc)
            return None
        total = 0.0
        for tp, n in behind.items():
            held = latest[tp] - earliest.get(tp, 0)
            if held > 0 and tp in sizes:
                total += n * sizes[tp] / held
        return int(total)

    def reportLatestOffset(self):
        return self._latest

    def partitions(self, start: dict, end: dict):
        start_offsets = offsets_mod.from_json_dict(start or {})
        end_offsets = offsets_mod.from_json_dict(end or {})
        return _ranges(start_offsets, end_offsets, self.opts, self.meta, self._fresh)

    def commit(self, end: dict) -> None:
        # Spark's checkpoint is the source of truth (as with Kafka); nothing to do.
        for tp in offsets_mod.from_json_dict(end or {}):
            self._fresh.pop(tp, None)


class _RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read whose options are invalid: every call raises the one sentence."""

    def __init__(self, message: str):
        self.message = message

    def _refuse(self, *args, **kwargs):
        raise OptionError(self.message)

    initialOffset = partitions = read = commit = getDefaultReadLimit = _refuse
    prepareForTriggerAvailableNow = _refuse

    def latestOffset(self, start, limit):
        self._refuse()

    def stop(self) -> None:
        pass


class FastlogBatchReader(_ReaderBase, DataSourceReader):
    """spark.read.format("fastlog"): one offset range per partition, fixed at planning."""

    def partitions(self):
        meta = self.meta
        try:
            tps = meta.partitions()
            start = meta.resolve(tps, starting=True)
            end = meta.resolve(tps, starting=False)
            for tp in sorted(start):
                if start[tp] > end.get(tp, start[tp]):
                    raise OptionError(f"the read starts {tp[0]}-{tp[1]} at offset {start[tp]}, "
                                      f"after where it ends ({end[tp]}): check startingOffsets "
                                      f"and endingOffsets (or their timestamp forms)")
            return _ranges(start, end, self.opts, None) or [OffsetRange("", -1, 0, 0)]
        finally:
            self.stop()

    def read(self, partition: OffsetRange):
        if partition.partition < 0:
            return iter(())
        return super().read(partition)


# ---------------------------------------------------------------------------------------
# Writers


@dataclasses.dataclass
class FastlogCommitMessage(WriterCommitMessage):
    rows: int = 0


class _WriterBase:
    """Produces the rows of each Arrow batch, grouped by (topic, partition), as record batches."""

    def __init__(self, schema, opts: WriteOptions):
        names = {f.name: f.dataType for f in schema.fields}
        if "value" not in names:
            raise OptionError("the fastlog sink needs a 'value' column (string or binary)")
        for col, types in (("value", (StringType, BinaryType)), ("key", (StringType, BinaryType)),
                           ("topic", (StringType,)), ("partition", (IntegerType, LongType))):
            if col in names and not isinstance(names[col], types):
                raise OptionError(f"column '{col}' of the fastlog sink must be "
                                  f"{' or '.join(t.typeName() for t in types)}, got "
                                  f"{names[col].simpleString()}")
        if "topic" not in names and opts.topic is None:
            raise OptionError("the fastlog sink needs a 'topic' column or the topic option")
        self.opts = opts
        self.columns = list(names)

    def write(self, iterator):
        import asyncio
        rows = asyncio.run(self._write(iterator))
        return FastlogCommitMessage(rows=rows)

    async def _write(self, iterator) -> int:
        from fastlog.client import Producer
        from fastlog.client.partitioner import partition_for_key

        o = self.opts
        producer = Producer(o.bootstrap, client_id=o.client_id, security=dict(o.security),
                            compression=o.compression, acks=o.acks, linger_ms=o.linger_ms,
                            request_timeout_ms=o.request_timeout_ms,
                            max_request_size=o.max_request_size)
        await producer.start()
        counts: dict[str, int] = {}
        pending = []
        rows = 0
        try:
            for rb in iterator:
                cols = {name: rb.column(name).to_pylist() for name in self.columns
                        if name in ("key", "value", "topic", "partition", "headers",
                                    "timestamp")}
                n = rb.num_rows
                now = int(time.time() * 1000)
                values = cols["value"]
                keys = cols.get("key") or [None] * n
                topics = [o.topic] * n if o.topic is not None else cols["topic"]
                parts = cols.get("partition") or [None] * n
                headers = cols.get("headers") or [None] * n
                stamps = cols.get("timestamp")
                groups: dict[tuple[str, int], list] = {}
                sticky: dict[str, int] = {}
                for i in range(n):
                    topic = topics[i]
                    if topic is None:
                        raise ValueError(
                            f"row {rows + i} has no topic: fill the 'topic' column or set "
                            f"the topic option of the fastlog sink")
                    if topic not in counts:
                        problem = topic_name_problem(topic)
                        if problem is not None:
                            raise ValueError(f"row {rows + i} has an invalid topic name "
                                             f"{topic!r}: {problem}")
                        counts[topic] = len(await producer.cluster.partitions_for(
                            topic, allow_auto_create=True))
                    key = keys[i]
                    if isinstance(key, str):
                        key = key.encode()
                    value = values[i]
                    if isinstance(value, str):
                        value = value.encode()
                    part = parts[i]
                    if part is None:
                        if key is not None:
                            part = partition_for_key(key, counts[topic])
                        else:
                            part = sticky.setdefault(topic, random.randrange(counts[topic]))
                    elif not 0 <= part < counts[topic]:
                        raise ValueError(f"row {rows + i} names partition {part} of topic "
                                         f"{topic!r}, which has partitions 0 to "
                                         f"{counts[topic] - 1}")
                    hdrs = headers[i]
                    if hdrs:
                        hdrs = [(h["key"], h["value"]) for h in hdrs]
                    ts = now
                    if stamps is not None and stamps[i] is not None:
                        ts = int(stamps[i].timestamp() * 1000)
                    groups.setdefault((topic, part), []).append((ts, key, value, hdrs or ()))
                for (topic, part), recs in groups.items():
                    for chunk in _chunks(recs, o.batch_bytes):
                        pending.append(await producer.send_batch(topic, part, chunk))
                rows += n
            await producer.flush()
            for fut in pending:
                await fut
        finally:
            await producer.close()
        return rows


def _chunks(records: list, limit: int):
    """Split records into runs of at most ~limit bytes (each becomes one record batch)."""
    run, size = [], 0
    for rec in records:
        n = 16 + (len(rec[1]) if rec[1] else 0) + (len(rec[2]) if rec[2] else 0)
        if run and size + n > limit:
            yield run
            run, size = [], 0
        run.append(rec)
        size += n
    if run:
        yield run


class FastlogBatchWriter(_WriterBase, DataSourceArrowWriter):
    """df.write.format("fastlog").mode("append").save(): at-least-once, like Kafka's sink."""

    def commit(self, messages) -> None:
        pass

    def abort(self, messages) -> None:
        pass


class FastlogStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """df.writeStream.format("fastlog"): at-least-once, like Kafka's sink."""

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


# ---------------------------------------------------------------------------------------
# The data source


class FastlogDataSource(DataSource):
    """format("fastlog"): Spark's Kafka source and sink, over a fastlog (or Kafka) broker.

    Register once per session with ``spark.dataSource.register(FastlogDataSource)`` (or
    ``fastlog.spark.register(spark)``). Batch writes need ``.mode("append")``: pyspark
    refuses the default save mode for every Python data source.
    """

    @classmethod
    def name(cls) -> str:
        return "fastlog"

    def _read_options(self, streaming: bool) -> ReadOptions:
        return parse_read_options(self.options, streaming)

    def schema(self):
        # Called at load(): a bad read option fails here, with one sentence. Whether the
        # read is streaming is unknown yet, so streaming-only checks run again later.
        common = {k: v for k, v in dict(self.options).items()
                  if k.lower() not in ("endingoffsets", "endingoffsetsbytimestamp",
                                       "endingtimestamp")}
        return kafka_schema(parse_read_options(common, streaming=True).include_headers)

    def reader(self, schema):
        return FastlogBatchReader(schema, self._read_options(streaming=False))

    def streamReader(self, schema):
        try:
            return FastlogStreamReader(schema, self._read_options(streaming=True))
        except OptionError as exc:
            # pyspark 4.3's runner follows an exception raised here with an
            # UnboundLocalError of its own: refuse from the reader's first call instead.
            return _RefusedStreamReader(str(exc))

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise OptionError("save mode overwrite is not allowed for the fastlog sink (nor "
                              "for Spark's Kafka sink): use mode('append')")
        return FastlogBatchWriter(schema, parse_write_options(self.options))

    def streamWriter(self, schema, overwrite: bool):
        # overwrite is True in complete mode: like Kafka's sink, each batch then appends
        # the whole result table to the topic. (Spark offers Python sinks no update mode.)
        return FastlogStreamWriter(schema, parse_write_options(self.options))


class FastlogPythonDataSource(FastlogDataSource):
    """The same source, named "fastlog-python": register() uses it when the JVM reader's
    jar is loaded, whose provider takes the name "fastlog" and hands this source what it
    does not read itself (streams, writes, other options)."""

    @classmethod
    def name(cls) -> str:
        from fastlog.spark import JVM_PYTHON_NAME
        return JVM_PYTHON_NAME
