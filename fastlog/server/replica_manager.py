# fastlog/server/replica_manager.py — the partitions this broker hosts (Kafka's ReplicaManager).
#
# Owns: one `Partition` per hosted (topic, partition): its Log (through LogManager), its
# leader epoch, in-sync replicas, high watermark and idempotent-producer state; the fetch
# and produce purgatories. `append_records` validates client record sets with the codec
# (Kafka's error codes), checks producer sequences, appends once and wakes parked
# fetches; `fetch_messages` reads file regions (never copies record bytes) and parks in the
# purgatory for min_bytes / max_wait_ms. Single node today: this broker leads every
# partition and is its only in-sync replica, so the high watermark is the log end offset
# after every append; replication will add followers behind the same methods.
# Called from: the broker's asyncio API loop only (handlers and the group coordinator);
# it never touches files itself except producer-state snapshots in the partition dir.
"""Hosted partitions: append with validation and idempotence, fetch with long polling."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from fastlog import _codec
from fastlog.protocol.errors import Errors
from fastlog.server.log import KafkaStorageError, OffsetOutOfRangeError, RecordBatchTooLargeError
from fastlog.server.producer_state import (
    NO_PRODUCER_ID,
    ProducerStateError,
    ProducerStateManager,
)
from fastlog.server.purgatory import Purgatory

log = logging.getLogger("fastlog.server.replica_manager")

COMPRESSION_ZSTD = 4
# Record bytes read per step when replaying the log tail into producer state.
_REPLAY_CHUNK = 1 << 20


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass
class PartitionResult:
    """Outcome of one partition's append (what the Produce response needs)."""

    error: Errors = Errors.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: list = dataclasses.field(default_factory=list)
    flush_future: object = None


@dataclasses.dataclass
class FetchPartitionResult:
    error: Errors = Errors.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    regions: list | None = None
    size: int = 0


class Partition:
    """One hosted partition. `leader_epoch` is stamped into every appended batch."""

    def __init__(self, topic: str, partition: int, log_, leader_epoch: int, replicas: list[int]):
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.log = log_
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = list(replicas)
        self.producer_state = ProducerStateManager(topic, partition)
        # zstd may only go to Fetch >= 10: remember whether this log has any.
        self.has_zstd = False
        # map end offset of the last producer snapshot written
        self.snapshot_offset = -1

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition})"


# Codec exception -> Kafka error code for a client record set (order matters: subclasses first).
_CODEC_ERRORS: list[tuple[type, Errors]] = [
    (_codec.CorruptRecordError, Errors.CORRUPT_MESSAGE),
    (_codec.RecordTooLargeError, Errors.MESSAGE_TOO_LARGE),
    (_codec.UnsupportedCodecError, Errors.UNSUPPORTED_COMPRESSION_TYPE),
    (_codec.DecompressionLimitError, Errors.INVALID_RECORD),
    (_codec.InvalidMagicError, Errors.INVALID_RECORD),
    (_codec.InvalidRecordError, Errors.INVALID_RECORD),
    (_codec.TruncatedError, Errors.CORRUPT_MESSAGE),
    (_codec.CodecError, Errors.CORRUPT_MESSAGE),
]


# v2 batch header fields rewritten for LogAppendTime topics (Kafka's layout).
_OFF_CRC = 17
_OFF_ATTRIBUTES = 21
_OFF_MAX_TIMESTAMP = 35
_ATTR_LOG_APPEND_TIME = 0x08


def _set_log_append_time(buf: bytearray, batches: list, now_ms: int) -> list:
    """message.timestamp.type=LogAppendTime: mark each batch's timestamp type, set its
    max timestamp to the append time and recompute its CRC (both lie inside the CRC),
    as Kafka does; per batch, never per record. Returns the re-read headers."""
    out = []
    for h in batches:
        pos = h.position
        attrs = int.from_bytes(buf[pos + _OFF_ATTRIBUTES:pos + _OFF_ATTRIBUTES + 2], "big")
        buf[pos + _OFF_ATTRIBUTES:pos + _OFF_ATTRIBUTES + 2] = \
            (attrs | _ATTR_LOG_APPEND_TIME).to_bytes(2, "big")
        buf[pos + _OFF_MAX_TIMESTAMP:pos + _OFF_MAX_TIMESTAMP + 8] = now_ms.to_bytes(8, "big", signed=True)
        crc = _codec.crc32c(memoryview(buf)[pos + _OFF_ATTRIBUTES:h.end])
        buf[pos + _OFF_CRC:pos + _OFF_CRC + 4] = crc.to_bytes(4, "big")
        out.append(_codec.read_batch_header(buf, pos))
    return out


def codec_error_code(exc: Exception) -> Errors:
    for cls, code in _CODEC_ERRORS:
        if isinstance(exc, cls):
            return code
    return Errors.UNKNOWN_SERVER_ERROR


class ReplicaManager:
    def __init__(self, broker):
        self.broker = broker
        self.node_id = broker.node_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetch_purgatory = Purgatory("Fetch")
        self.produce_purgatory = Purgatory("Produce")

    # ------------------------------------------------------------------ partitions
    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def get_log(self, topic: str, partition: int):
        p = self.partitions.get((topic, partition))
        return p.log if p is not None else None

    def make_leader(self, topic: str, partition: int, log_config, leader_epoch: int,
                    replicas: list[int]) -> Partition:
        """Open (or create) the partition's log and become its leader."""
        p = self.partitions.get((topic, partition))
        if p is not None:
            p.leader_epoch = leader_epoch
            return p
        log_ = self.broker.log_manager.get_or_create_log(topic, partition, log_config)
        p = Partition(topic, partition, log_, leader_epoch, replicas)
        self._load_producer_state(p)
        self.partitions[p.key] = p
        return p

    def delete_partition(self, topic: str, partition: int) -> None:
        p = self.partitions.pop((topic, partition), None)
        self.fetch_purgatory.check_and_complete((topic, partition))
        if p is not None:
            self.broker.log_manager.delete_log(topic, partition)

    def update_config(self, topic: str, log_config) -> None:
        for (t, _), p in self.partitions.items():
            if t == topic:
                p.log.update_config(log_config)

    # ------------------------------------------------------------------ producer state
    def _load_producer_state(self, p: Partition) -> None:
        """Snapshot at or below the log end, then replay the batches after it."""
        ps = p.producer_state
        leo = p.log.log_end_offset
        start = ps.load_latest_snapshot(p.log.dir, leo)
        offset = max(start, p.log.log_start_offset)
        steps = 0
        while offset < leo:
            try:
                info = p.log.read(offset, _REPLAY_CHUNK, min_one_batch=True)
            except OffsetOutOfRangeError:
                break
            if not info.regions:
                break
            data = b"".join(bytes(r.read()) for r in info.regions)
            scan = _codec.scan_batches(data, verify_crc=False)
            batches = scan.batches
            if scan.error is not None and not batches:
                log.warning("%s: stopping producer-state replay at %d: %s", p, offset, scan.error)
                break
            last = offset
            for b in batches:
                if b.compression == COMPRESSION_ZSTD:
                    p.has_zstd = True
                if b.last_offset < offset:
                    continue
                if b.producer_id != NO_PRODUCER_ID and not b.is_control:
                    ps.update(b.producer_id, b.producer_epoch, b.base_sequence, b.record_count,
                              b.base_offset, b.last_offset, b.max_timestamp)
                last = b.last_offset + 1
            if last <= offset:
                break
            offset = last
            steps += 1
        ps.update_map_end_offset(leo)
        if steps:
            log.debug("%s: producer state rebuilt from %d batch reads", p, steps)

    def checkpoint_producer_state(self, sync: bool = False) -> None:
        """Write a producer snapshot for every partition whose state moved since the last
        one (periodic, and at shutdown with sync=True), so a restart replays only the log
        tail after it. The state is encoded here; the fsync'ed write runs on LogManager's
        I/O worker unless sync."""
        jobs = []
        for p in self.partitions.values():
            ps = p.producer_state
            if not ps.producers or ps.map_end_offset == p.snapshot_offset:
                continue
            p.snapshot_offset = ps.map_end_offset
            jobs.append((p, ps.snapshot_job(p.log.dir)))
        if not jobs:
            return

        def write_all():
            for p, job in jobs:
                try:
                    job()
                except OSError as e:
                    log.warning("%s: cannot write producer snapshot: %s", p, e)

        if sync:
            write_all()
        else:
            self.broker.log_manager.scheduler.submit(write_all)

    # ------------------------------------------------------------------ produce
    async def append_records(self, entries, *, acks: int, api_version: int,
                             timeout_ms: int = 0) -> dict[tuple[str, int], PartitionResult]:
        """Append client record sets. `entries` is an iterable of (topic, partition, records)
        where records is a (zero-copy) memoryview of the request frame or None."""
        results: dict[tuple[str, int], PartitionResult] = {}
        for topic, partition, records in entries:
            key = (topic, partition)
            if acks not in (0, 1, -1):
                results[key] = PartitionResult(Errors.INVALID_REQUIRED_ACKS)
                continue
            p = self.partitions.get(key)
            if p is None:
                results[key] = PartitionResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            results[key] = self._append_one(p, records, acks, api_version)
        # flush.messages: the append asked for an fsync; acknowledge only once it is done
        # (it runs on LogManager's I/O worker, so the loop keeps serving meanwhile).
        flushes = [r.flush_future for r in results.values() if r.flush_future is not None]
        if flushes and acks != 0:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in flushes),
                                 return_exceptions=True)
        return results

    def _append_one(self, p: Partition, records, acks: int, api_version: int) -> PartitionResult:
        topic_cfg = self.broker.log_config(p.topic)
        if acks == -1 and len(p.isr) < topic_cfg.min_insync_replicas:
            return PartitionResult(
                Errors.NOT_ENOUGH_REPLICAS,
                error_message=f"{len(p.isr)} in-sync replicas, min.insync.replicas is "
                              f"{topic_cfg.min_insync_replicas}")
        if records is None or len(records) == 0:
            return PartitionResult(Errors.NONE, -1, -1, p.log.log_start_offset)
        try:
            batches = _codec.validate_record_set(
                records,
                max_batch_size=topic_cfg.max_message_bytes,
                allow_zstd=api_version >= 7,
                verify_records=True,
            )
        except _codec.CodecError as e:
            code = codec_error_code(e)
            log.info("%s: rejected produce v%d: %s (%s)", p, api_version, e, code.name)
            return PartitionResult(code, error_message=str(e))
        if len(batches) != 1:
            return PartitionResult(Errors.INVALID_RECORD,
                                   error_message="a produce request must carry one batch per partition")
        b = batches[0]
        if b.is_control:
            return PartitionResult(Errors.INVALID_RECORD,
                                   error_message="clients may not send control batches")
        if b.is_transactional:
            return PartitionResult(Errors.INVALID_RECORD,
                                   error_message="transactions are not supported")
        if b.producer_id != NO_PRODUCER_ID and b.base_sequence < 0:
            return PartitionResult(Errors.INVALID_RECORD,
                                   error_message="an idempotent batch needs a base sequence")
        if not topic_cfg.log_append_time:
            before_max, after_max = self.broker.timestamp_limits(p.topic)
            now = _now_ms()
            if (b.max_timestamp >= 0 and b.max_timestamp - now > after_max) or (
                    0 <= b.first_timestamp < now - before_max):
                return PartitionResult(
                    Errors.INVALID_TIMESTAMP,
                    record_errors=[{"batch_index": 0, "batch_index_error_message": None}],
                    error_message=f"batch timestamps {b.first_timestamp}..{b.max_timestamp} "
                                  f"are outside [now - {before_max}, now + {after_max}] ms")
        ps = p.producer_state
        try:
            dup = ps.check(b.producer_id, b.producer_epoch, b.base_sequence, b.record_count)
        except ProducerStateError as e:
            return PartitionResult(Errors[e.code], error_message=str(e),
                                   log_start_offset=p.log.log_start_offset)
        if dup is not None:
            # A retried batch already in the log: answer with its original offset.
            return PartitionResult(Errors.NONE, dup.first_offset, -1, p.log.log_start_offset)
        # The frame buffer is reused after this request: copy the batch exactly once.
        buf = bytearray(records)
        if topic_cfg.log_append_time:
            batches = _set_log_append_time(buf, batches, _now_ms())
        try:
            info = p.log.append(buf, batches, p.leader_epoch)
        except RecordBatchTooLargeError as e:
            return PartitionResult(Errors.MESSAGE_TOO_LARGE, error_message=str(e))
        except (OSError, KafkaStorageError) as e:
            # Kafka marks the log dir offline; we answer the retriable storage error.
            log.error("%s: append failed: %s", p, e)
            return PartitionResult(Errors.KAFKA_STORAGE_ERROR, error_message=str(e))
        if b.compression == COMPRESSION_ZSTD:
            p.has_zstd = True
        ps.update(b.producer_id, b.producer_epoch, b.base_sequence, b.record_count,
                  info.first_offset, info.last_offset, b.max_timestamp)
        ps.update_map_end_offset(info.last_offset + 1)
        self._after_append(p)
        return PartitionResult(Errors.NONE, info.first_offset, info.log_append_time,
                               p.log.log_start_offset, flush_future=info.flush_future)

    def _after_append(self, p: Partition) -> None:
        # Single node: we are the whole ISR, so the high watermark follows the log end.
        p.log.update_high_watermark(p.log.log_end_offset)
        self.fetch_purgatory.check_and_complete(p.key)

    async def append_internal(self, topic: str, partition: int, record_set: bytearray):
        """Append broker-built batches (group coordinator: __consumer_offsets). Validates
        structure, assigns offsets, advances the high watermark. Raises KeyError for an
        unknown partition and codec errors for bad input."""
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KeyError(f"{topic}-{partition} is not hosted here")
        batches = _codec.validate_record_set(record_set, verify_records=False)
        if not batches:
            raise ValueError("empty record set")
        info = p.log.append(record_set, batches, p.leader_epoch)
        self._after_append(p)
        if info.flush_future is not None:
            await asyncio.wrap_future(info.flush_future)
        return info

    # ------------------------------------------------------------------ fetch
    def read_partition(self, p: Partition, fetch_offset: int, max_bytes: int, *,
                       min_one_batch: bool, from_follower: bool, api_version: int) -> FetchPartitionResult:
        log_ = p.log
        hw = log_.high_watermark
        res = FetchPartitionResult(Errors.NONE, hw, hw, log_.log_start_offset)
        if api_version < 10 and (p.has_zstd or p.log.config.compression_type == "zstd"):
            res.error = Errors.UNSUPPORTED_COMPRESSION_TYPE
            return res
        # Consumers see up to the high watermark only; followers up to the log end.
        limit = log_.log_end_offset if from_follower else hw
        if fetch_offset == limit and fetch_offset >= log_.log_start_offset:
            return res
        if fetch_offset > limit and fetch_offset <= log_.log_end_offset:
            return res  # above the high watermark but in the log: nothing visible yet
        try:
            info = log_.read(fetch_offset, max_bytes, min_one_batch=min_one_batch,
                             **self._hw_bound(log_, limit))
        except OffsetOutOfRangeError:
            res.error = Errors.OFFSET_OUT_OF_RANGE
            return res
        res.regions = info.regions
        res.size = info.size
        return res

    @staticmethod
    def _hw_bound(log_, limit: int) -> dict:
        if limit >= log_.log_end_offset:
            return {}
        return {"max_position": limit}

    def wake_fetchers(self, topic: str, partition: int) -> None:
        self.fetch_purgatory.check_and_complete((topic, partition))

    # ------------------------------------------------------------------ other APIs
    def delete_records(self, topic: str, partition: int, offset: int) -> tuple[Errors, int]:
        p = self.partitions.get((topic, partition))
        if p is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, -1
        log_ = p.log
        target = log_.high_watermark if offset == -1 else offset
        if target < 0 or target > log_.high_watermark:
            return Errors.OFFSET_OUT_OF_RANGE, -1
        try:
            log_.delete_records_before(target)
        except OffsetOutOfRangeError:
            return Errors.OFFSET_OUT_OF_RANGE, -1
        self.fetch_purgatory.check_and_complete(p.key)
        return Errors.NONE, log_.log_start_offset

    def shutdown(self) -> None:
        self.checkpoint_producer_state(sync=True)
        self.fetch_purgatory.wake_all()
        self.produce_purgatory.wake_all()
