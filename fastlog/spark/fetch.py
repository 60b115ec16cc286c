# fastlog/spark/fetch.py: executor-side reading of one offset range into Arrow record batches.
#
# Owns the path from broker to Spark on an executor: Fetch requests for one topic
# partition over [start, end) through fastlog.client's connection (the next Fetch is on
# the wire while the previous answer is decoded), decoding each answer's record batches
# with the compiled ColumnBuilder (fastlog/spark/_arrow.pyx) and wrapping its buffers as
# pyarrow arrays without copying; data-loss detection (records deleted by retention or
# DeleteRecords before they were read). Runs inside one Spark task (a Python worker),
# single-threaded, with a private event loop; no state outlives the task.

from __future__ import annotations

import asyncio
import logging
import time

from fastlog import _codec
from fastlog.client import errors
from fastlog.client.admin import EARLIEST, Admin
from fastlog.client.cluster import Cluster, TopicPartition
from fastlog.client.versions import ApiKey

log = logging.getLogger("fastlog.spark")

FETCH_MAX_BYTES = 8 << 20
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


class RangeFetcher:
    """Fetches one partition's records from its leader, one request ahead."""

    def __init__(self, bootstrap: str, tp: TopicPartition, timeout_ms: int):
        self.tp = tp
        self.timeout = timeout_ms / 1000.0
        self.loop = asyncio.new_event_loop()
        self.cluster = Cluster(bootstrap, client_id="fastlog-spark-executor",
                               request_timeout_ms=min(timeout_ms, 30000))
        self._conn = None
        self._ahead = None  # (offset, future) of the request already sent

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    async def _connection(self):
        if self._conn is None or not self._conn.connected:
            self._conn = await self.cluster.leader_connection(self.tp, refresh=True)
        return self._conn

    async def _submit(self, offset: int):
        conn = await self._connection()
        request = {
            "replica_id": -1, "max_wait_ms": 200, "min_bytes": 1,
            "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": self.tp.topic, "partitions": [{
                "partition": self.tp.partition, "current_leader_epoch": -1,
                "fetch_offset": offset, "log_start_offset": -1,
                "partition_max_bytes": FETCH_MAX_BYTES}]}],
        }
        fut = conn.submit(ApiKey.FETCH, request)
        await conn.drain()
        return conn, fut

    async def _fetch(self, offset: int):
        if self._ahead is not None and self._ahead[0] == offset:
            conn, fut = self._ahead[1]
        else:
            conn, fut = await self._submit(offset)
        self._ahead = None
        resp = await conn.wait(fut, self.cluster.request_timeout_ms / 1000.0 + 1.0)
        errors.raise_for(getattr(resp, "error_code", 0), f"fetch {self.tp}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == self.tp.partition and t.topic == self.tp.topic:
                    return p
        raise errors.ProtocolMismatch(f"fetch answer without {self.tp}")

    def fetch(self, offset: int):
        """The partition answer (records, error_code, high_watermark, log_start_offset)."""
        return self.run(self._fetch(offset))

    def send_ahead(self, offset: int) -> None:
        """Put the Fetch for offset on the wire now; fetch(offset) will collect it."""
        try:
            self._ahead = (offset, self.run(self._submit(offset)))
        except errors.FastlogError:
            self._ahead = None  # fetch() retries it the ordinary way

    def earliest(self) -> int:
        async def ask():
            admin = Admin(cluster=self.cluster)
            got = await admin.list_offsets({self.tp: EARLIEST})
            return got[self.tp].offset
        return self.run(ask())

    def close(self) -> None:
        try:
            self.run(self.cluster.close())
        finally:
            self.loop.close()


def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int, *,
               include_headers: bool, fail_on_data_loss: bool, timeout_ms: int,
               arrow_schema):
    """Yield pyarrow.RecordBatches (schema arrow_schema) of topic-partition over [start, end)."""
    from fastlog.spark._arrow import ColumnBuilder

    tp = TopicPartition(topic, partition)
    builder = ColumnBuilder(include_headers)
    fetcher = RangeFetcher(bootstrap, tp, timeout_ms)
    offset = start
    attempt = 0
    stalled_since = None
    try:
        while offset < end:
            try:
                p = fetcher.fetch(offset)
            except (errors.BrokerUnavailable, errors.ClientTimeout, errors.KafkaError) as exc:
                if isinstance(exc, errors.KafkaError) and not exc.retriable:
                    raise
                attempt += 1
                if attempt > 10:
                    raise
                time.sleep(fetcher.cluster.backoff(attempt))
                fetcher._conn = None
                continue
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
                fetcher._conn = None
                continue
            records = p.records
            if records is not None and len(records):
                scan = _codec.scan_batches(records, verify_crc=False)
                if scan.batches:
                    ahead = scan.batches[-1].next_offset
                    if offset < ahead < end:
                        fetcher.send_ahead(ahead)
                nxt = builder.add(records, offset, end)
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
