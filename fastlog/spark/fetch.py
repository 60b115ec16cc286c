# fastlog/spark/fetch.py: executor-side reading of one offset range into Arrow record batches.
#
# Owns the path from broker to Spark on an executor: Fetch requests for one topic
# partition over [start, end) through fastlog.client's connection (the next Fetch is on
# the wire, on a private loop thread, while the previous answer is decoded and Spark
# consumes), decoding each answer's record batches with the compiled ColumnBuilder
# (fastlog/spark/_arrow.pyx) and wrapping its buffers as pyarrow arrays without copying;
# data-loss detection (records deleted by retention or DeleteRecords before they were
# read); read_committed (kafka.isolation.level): the broker stops at the last stable offset
# and the batches of the aborted transactions it lists are dropped before decoding
# (fastlog.client.isolation); control batches are never rows; the kafka.* Fetch settings
# (FetchSettings: request timeout, fetch sizes and wait). Runs inside one Spark task
# (a Python worker). The event-loop thread and the Cluster (its connections) are kept per
# worker process, keyed by bootstrap, client settings and security, and used again by the
# process's next task: Spark reuses Python workers (spark.python.worker.reuse, true by
# default), so a later task or micro-batch reads over connections already open and
# authenticated. At most _SHARED_MAX are kept, the oldest closed first; nothing else
# outlives a task.

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time

from fastlog import _codec
from fastlog.client import errors
from fastlog.client.cluster import Cluster, TopicPartition
from fastlog.client.isolation import drop_aborted
from fastlog.client.versions import ApiKey

log = logging.getLogger("fastlog.spark")

FETCH_MAX_BYTES = 8 << 20
_SHARED_MAX = 4
ROWS_PER_BATCH = 65536
BYTES_PER_BATCH = 32 << 20


class DataLossError(RuntimeError):
    """Records the query should have read are gone (and failOnDataLoss is true)."""


def data_loss_message(what: str) -> str:
    return (f"{what}. Some data may have been lost because they are not available in "
            f"fastlog any more (deleted by retention or DeleteRecords, or the topic was "
            f"deleted). If you want your streaming query to continue anyway, set the "
            f"source option failOnDataLoss to false.")


def report_data_loss(what: str, fail: bool) -> None:
    """Raise DataLossError, or log a warning when failOnDataLoss is false."""
    if fail:
        raise DataLossError(data_loss_message(what))
    log.warning("%s; continuing because failOnDataLoss is false", what)


@dataclasses.dataclass(frozen=True)
class FetchSettings:
    """The kafka.* consumer settings a range's Fetch requests honour, as Kafka's consumer."""
    client_id: str = "fastlog-spark-executor"
    request_timeout_ms: int = 30000      # kafka.request.timeout.ms
    max_bytes: int = FETCH_MAX_BYTES     # kafka.fetch.max.bytes
    partition_max_bytes: int = FETCH_MAX_BYTES   # kafka.max.partition.fetch.bytes
    min_bytes: int = 1                   # kafka.fetch.min.bytes
    max_wait_ms: int = 200               # kafka.fetch.max.wait.ms


def fetch_settings(opts) -> FetchSettings:
    """FetchSettings from the source's ReadOptions."""
    return FetchSettings(opts.client_id, opts.request_timeout_ms, opts.fetch_max_bytes,
                         opts.max_partition_fetch_bytes, opts.fetch_min_bytes,
                         opts.fetch_max_wait_ms)


# (pid, bootstrap, client id, request timeout, security items) -> (_LoopThread, Cluster),
# oldest first; the pid keeps a forked child from using its parent's loop thread.
_shared: dict[tuple, tuple] = {}
_shared_lock = threading.Lock()


def shared_cluster(bootstrap: str, client_id: str, request_timeout_ms: int, security=None):
    """This process's (loop thread, Cluster) for these settings, made on first use."""
    from fastlog.client.sync import _LoopThread

    key = (os.getpid(), bootstrap, client_id, request_timeout_ms,
           tuple(sorted((security or {}).items())))
    with _shared_lock:
        got = _shared.get(key)
        if got is not None and not got[0].loop.is_closed():
            return got
        for old in [k for k in _shared if k[0] != key[0]]:
            del _shared[old]          # a parent's, whose loop thread is not in this process
        while len(_shared) >= _SHARED_MAX:
            _close(*_shared.pop(next(iter(_shared))))
        got = _shared[key] = (_LoopThread("fastlog-spark-fetch"), Cluster(
            bootstrap, client_id=client_id, request_timeout_ms=request_timeout_ms,
            security=security))
        return got


def _close(runner, cluster) -> None:
    try:
        asyncio.run_coroutine_threadsafe(cluster.close(), runner.loop).result(10)
    except Exception:  # noqa: BLE001 - closing anyway
        pass
    runner.stop()


def close_shared() -> None:
    """Close every kept Cluster and its loop thread (tests; a worker just exits)."""
    with _shared_lock:
        while _shared:
            _close(*_shared.pop(next(iter(_shared))))


class RangeFetcher:
    """Fetches one partition's records from its leader on the process's loop thread.

    fetch_async(offset) returns a concurrent Future, so the next Fetch travels and its
    answer is read off the socket while the task decodes the previous one and Spark
    consumes the Arrow batches already yielded.
    """

    def __init__(self, bootstrap: str, tp: TopicPartition, timeout_ms: int, security=None,
                 isolation_level: int = 0, settings: FetchSettings | None = None):
        self.tp = tp
        self.isolation_level = isolation_level
        self.settings = settings = settings or FetchSettings()
        self.timeout = timeout_ms / 1000.0
        self._runner, self.cluster = shared_cluster(
            bootstrap, settings.client_id, min(timeout_ms, settings.request_timeout_ms),
            security)
        self._conn = None

    def reset_connection(self) -> None:
        self._conn = None

    async def _fetch(self, offset: int):
        if self._conn is None or not self._conn.connected:
            self._conn = await self.cluster.leader_connection(self.tp, refresh=True)
        conn = self._conn
        request = {
            "replica_id": -1, "max_wait_ms": self.settings.max_wait_ms,
            "min_bytes": self.settings.min_bytes,
            "max_bytes": self.settings.max_bytes, "isolation_level": self.isolation_level,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": self.tp.topic, "partitions": [{
                "partition": self.tp.partition, "current_leader_epoch": -1,
                "fetch_offset": offset, "log_start_offset": -1,
                "partition_max_bytes": self.settings.partition_max_bytes}]}],
        }
        resp = await conn.request(ApiKey.FETCH, request,
                                  timeout=self.cluster.request_timeout_ms / 1000.0 + 1.0)
        errors.raise_for(getattr(resp, "error_code", 0), f"fetch {self.tp}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == self.tp.partition and t.topic == self.tp.topic:
                    return p
        raise errors.ProtocolMismatch(f"fetch answer without {self.tp}")

    def fetch_async(self, offset: int):
        """A concurrent.futures.Future of the partition's Fetch answer at offset."""
        return asyncio.run_coroutine_threadsafe(self._fetch(offset), self._runner.loop)

    def fetch(self, offset: int):
        return self.fetch_async(offset).result(self.timeout)

    def earliest(self) -> int:
        from fastlog.client.admin import EARLIEST, Admin  # only after OFFSET_OUT_OF_RANGE

        async def ask():
            got = await Admin(cluster=self.cluster).list_offsets({self.tp: EARLIEST})
            return got[self.tp].offset
        return asyncio.run_coroutine_threadsafe(ask(), self._runner.loop).result(self.timeout)

    def close(self) -> None:
        """Done with the range; the Cluster stays open for the process's next task."""
        self._conn = None


def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int, *,
               include_headers: bool, fail_on_data_loss: bool, timeout_ms: int,
               arrow_schema, security=None, isolation_level: int = 0,
               settings: FetchSettings | None = None):
    """Yield pyarrow.RecordBatches (schema arrow_schema) of topic-partition over [start, end);
    security: ClientSecurity's keys (ReadOptions.security); isolation_level 1: read_committed
    (records of aborted transactions dropped); settings: the kafka.* Fetch settings."""
    from fastlog.spark._arrow import ColumnBuilder

    tp = TopicPartition(topic, partition)
    builder = ColumnBuilder(include_headers)
    fetcher = RangeFetcher(bootstrap, tp, timeout_ms, security, isolation_level, settings)
    offset = start
    attempt = 0
    stalled_since = None
    pending = fetcher.fetch_async(offset) if offset < end else None
    try:
        while offset < end:
            if pending is None:
                pending = fetcher.fetch_async(offset)
            try:
                p = pending.result(timeout_ms / 1000.0)
            except (errors.BrokerUnavailable, errors.ClientTimeout, errors.KafkaError) as exc:
                pending = None
                if isinstance(exc, errors.KafkaError) and not exc.retriable:
                    raise
                attempt += 1
                if attempt > 10:
                    raise
                time.sleep(fetcher.cluster.backoff(attempt))
                fetcher.reset_connection()
                continue
            pending = None
            attempt = 0
            code = p.error_code
            log_start = getattr(p, "log_start_offset", -1)
            if code == errors.OFFSET_OUT_OF_RANGE or (code == 0 and log_start > offset):
                earliest = fetcher.earliest() if code else log_start
                if earliest > offset:
                    report_data_loss(f"cannot read {tp} from offset {offset}: the earliest "
                                     f"available offset is {earliest}", fail_on_data_loss)
                    offset = min(earliest, end)
                    continue
                if code:
                    raise errors.KafkaError(code, f"fetch {tp} at offset {offset}")
            elif code:
                exc = errors.KafkaError(code, f"fetch {tp} at offset {offset}")
                if not exc.retriable:
                    raise exc
                time.sleep(fetcher.cluster.backoff(1))
                fetcher.reset_connection()
                continue
            records = p.records
            if records is not None and len(records):
                scan = _codec.scan_batches(records, verify_crc=False)
                ahead = offset
                if scan.batches:
                    ahead = scan.batches[-1].next_offset
                    if offset < ahead < end:
                        pending = fetcher.fetch_async(ahead)  # travels while we decode
                kept = drop_aborted(records, scan.batches,
                                    getattr(p, "aborted_transactions", None)
                                    if isolation_level else None)
                nxt = builder.add(kept, offset, end)
                if kept is not records:
                    # every complete batch was read or dropped, aborted ones at the end too
                    nxt = max(nxt, min(ahead, end))
                if pending is not None and nxt != ahead:
                    pending.cancel()
                    pending = None
            else:
                nxt = offset
            if nxt > offset:
                offset = nxt
                stalled_since = None
            else:
                if p.high_watermark <= offset:
                    report_data_loss(
                        f"cannot read {tp} offsets [{offset}, {end}): the partition ends "
                        f"at {p.high_watermark}", fail_on_data_loss)
                    break
                now = time.monotonic()
                stalled_since = stalled_since or now
                if now - stalled_since > timeout_ms / 1000.0:
                    raise errors.ClientTimeout(
                        f"no records of {tp} at offset {offset} within {timeout_ms} ms")
            if builder.rows >= ROWS_PER_BATCH or builder.data_bytes >= BYTES_PER_BATCH:
                yield to_record_batch(builder.finish(), topic, partition, arrow_schema)
        if builder.rows:
            yield to_record_batch(builder.finish(), topic, partition, arrow_schema)
    finally:
        if pending is not None:
            pending.cancel()
        fetcher.close()


def to_record_batch(cols: dict, topic: str, partition: int, schema):
    """Wrap ColumnBuilder.finish() buffers as a pyarrow.RecordBatch of Spark's Kafka schema."""
    import pyarrow as pa

    n = cols["rows"]
    buf = pa.py_buffer

    def binary(parts, typ):
        valid, offsets, data, nulls = parts
        return pa.Array.from_buffers(typ, n, [buf(valid) if valid is not None else None,
                                              buf(offsets), buf(data)], null_count=nulls)

    fields = {f.name: f.type for f in schema}
    arrays = {
        "key": binary(cols["key"], fields["key"]),
        "value": binary(cols["value"], fields["value"]),
        "topic": pa.repeat(pa.scalar(topic, fields["topic"]), n),
        "partition": pa.repeat(pa.scalar(partition, fields["partition"]), n),
        "offset": pa.Array.from_buffers(fields["offset"], n, [None, buf(cols["offsets"])]),
        "timestamp": pa.Array.from_buffers(fields["timestamp"], n,
                                           [None, buf(cols["timestamps"])]),
        "timestampType": pa.Array.from_buffers(fields["timestampType"], n,
                                               [None, buf(cols["ts_types"])]),
    }
    if "headers" in fields:
        list_type = fields["headers"]
        struct_type = list_type.value_type
        h = cols["header_count"]
        hk_offsets, hk_data = cols["header_keys"]
        hkeys = pa.Array.from_buffers(struct_type.field(0).type, h,
                                      [None, buf(hk_offsets), buf(hk_data)])
        hv_valid, hv_offsets, hv_data, hv_nulls = cols["header_values"]
        hvalues = pa.Array.from_buffers(
            struct_type.field(1).type, h,
            [buf(hv_valid) if hv_valid is not None else None, buf(hv_offsets), buf(hv_data)],
            null_count=hv_nulls)
        structs = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(struct_type))
        valid, offsets, nulls = cols["headers"]
        arrays["headers"] = pa.Array.from_buffers(
            list_type, n, [buf(valid) if valid is not None else None, buf(offsets)],
            null_count=nulls, children=[structs])
    return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)
