# fastlog/server/producer_state.py — idempotent-producer state.
#
# Owns: per partition, for each producer id: its epoch and the metadata of its last 5
# batches (first/last sequence, first/last offset, max timestamp) — what Kafka keeps to
# spot a retried duplicate (answer with the original offsets) and a sequence gap
# (OUT_OF_ORDER_SEQUENCE_NUMBER). Also the producer-id allocator for InitProducerId,
# which reserves ids in durable blocks through the metadata store.
# Snapshot file: `<partition dir>/<20-digit offset>.snapshot` (Kafka's name), our own
# binary layout: b"FLPS", int16 version, uint32 CRC-32C of the rest, int32 producer count,
# then per producer: int64 pid, int16 epoch, int64 last timestamp, int8 batch count and per
# batch int32 first_seq, int32 last_seq, int64 first_offset, int64 last_offset, int64 ts.
# The offset in the name is the log end offset the state covers; on open the broker loads
# the newest snapshot at or below the log end and replays the batches after it.
# Called from: the broker's asyncio API loop only (ReplicaManager).
"""Idempotent producer state per partition, snapshots, and producer-id allocation."""

from __future__ import annotations

import collections
import os
import struct

import crc32c

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = (1 << 31) - 1
BATCHES_KEPT = 5

SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"FLPS"
_VERSION = 1
_HEAD = struct.Struct(">4shI")
_PRODUCER = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iiqqq")


def increment_sequence(seq: int, delta: int) -> int:
    """Sequences wrap from INT32_MAX to 0."""
    if seq > INT32_MAX - delta:
        return delta - (INT32_MAX - seq) - 1
    return seq + delta


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateError(Exception):
    """A batch the producer state refuses; `code` is the Kafka error name."""

    code = "UNKNOWN_SERVER_ERROR"


class OutOfOrderSequence(ProducerStateError):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpoch(ProducerStateError):
    code = "INVALID_PRODUCER_EPOCH"


class UnknownProducerId(ProducerStateError):
    code = "UNKNOWN_PRODUCER_ID"


class BatchMetadata:
    __slots__ = ("first_seq", "last_seq", "first_offset", "last_offset", "timestamp")

    def __init__(self, first_seq, last_seq, first_offset, last_offset, timestamp):
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.timestamp = timestamp


class ProducerStateEntry:
    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp")

    def __init__(self, producer_id: int, epoch: int):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: collections.deque[BatchMetadata] = collections.deque(maxlen=BATCHES_KEPT)
        self.last_timestamp = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class ProducerStateManager:
    """Idempotence bookkeeping for one partition."""

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.producers: dict[int, ProducerStateEntry] = {}
        # log end offset the in-memory state covers (for snapshots and replay)
        self.map_end_offset = 0

    # -------------------------------------------------------------- client appends
    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int) -> BatchMetadata | None:
        """Validate an incoming client batch. Returns the original batch metadata for a
        retried duplicate (the caller answers with its offsets and appends nothing),
        None when the batch may be appended, or raises ProducerStateError."""
        if producer_id == NO_PRODUCER_ID:
            return None
        last_seq = increment_sequence(first_seq, record_count - 1)
        entry = self.producers.get(producer_id)
        if entry is None:
            # Nothing known about this producer here: it must start a fresh sequence.
            if first_seq != 0:
                raise UnknownProducerId(
                    f"unknown producer {producer_id} sent sequence {first_seq} to "
                    f"{self.topic}-{self.partition}")
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"producer {producer_id} epoch {epoch} is older than {entry.epoch}")
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequence(
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, not {first_seq}")
            return None
        dup = entry.find_duplicate(first_seq, last_seq)
        if dup is not None:
            return dup
        if entry.batches and not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequence(
                f"producer {producer_id} sent sequence {first_seq} to {self.topic}-{self.partition} "
                f"after {entry.last_seq}")
        return None

    def update(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
               first_offset: int, last_offset: int, timestamp: int) -> None:
        """Record an appended batch (client append or log replay)."""
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerStateEntry(producer_id, epoch)
            self.producers[producer_id] = entry
        elif epoch < entry.epoch:
            return  # a fenced producer's batch found in replay: keep the newer epoch
        last_seq = increment_sequence(first_seq, record_count - 1)
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # -------------------------------------------------------------- maintenance
    def truncate_and_reload(self) -> None:
        self.producers.clear()
        self.map_end_offset = 0

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        dead = [pid for pid, e in self.producers.items()
                if e.last_timestamp >= 0 and now_ms - e.last_timestamp > expiration_ms]
        for pid in dead:
            del self.producers[pid]

    # -------------------------------------------------------------- snapshots
    def encode_snapshot(self) -> bytes:
        body = bytearray(struct.pack(">i", len(self.producers)))
        for e in self.producers.values():
            body += _PRODUCER.pack(e.producer_id, e.epoch, e.last_timestamp, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
        return _HEAD.pack(_MAGIC, _VERSION, crc32c.crc32c(bytes(body))) + bytes(body)

    def decode_snapshot(self, data: bytes) -> None:
        """Replace the state with a snapshot's; ValueError when it is damaged."""
        if len(data) < _HEAD.size + 4:
            raise ValueError("snapshot too short")
        magic, version, crc = _HEAD.unpack_from(data, 0)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError("not a fastlog producer snapshot")
        body = memoryview(data)[_HEAD.size:]
        if crc32c.crc32c(body) != crc:
            raise ValueError("snapshot CRC mismatch")
        (count,) = struct.unpack_from(">i", body, 0)
        pos = 4
        producers: dict[int, ProducerStateEntry] = {}
        for _ in range(count):
            if pos + _PRODUCER.size > len(body):
                raise ValueError("snapshot truncated")
            pid, epoch, last_ts, nb = _PRODUCER.unpack_from(body, pos)
            pos += _PRODUCER.size
            e = ProducerStateEntry(pid, epoch)
            e.last_timestamp = last_ts
            for _ in range(nb):
                if pos + _BATCH.size > len(body):
                    raise ValueError("snapshot truncated")
                e.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = e
        self.producers = producers

    def write_snapshot(self, directory: str) -> str:
        """Write `<map_end_offset>.snapshot` atomically and drop older snapshots."""
        return self.snapshot_job(directory)()

    def snapshot_job(self, directory: str):
        """Encode the state now; the returned callable writes it (any thread): tmp file,
        fsync, rename, then older snapshots go."""
        offset = self.map_end_offset
        data = self.encode_snapshot()

        def write() -> str:
            name = os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")
            tmp = name + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name)
            for old in list_snapshots(directory):
                if old[1] != name and old[0] < offset:
                    _unlink_quietly(old[1])
            return name

        return write

    def load_latest_snapshot(self, directory: str, log_end_offset: int) -> int:
        """Load the newest intact snapshot at or below log_end_offset; returns the offset
        replay must start from (0-based map end), or -1 when there was none."""
        for offset, path in reversed(list_snapshots(directory)):
            if offset > log_end_offset:
                _unlink_quietly(path)  # covers data the log no longer has
                continue
            try:
                with open(path, "rb") as f:
                    self.decode_snapshot(f.read())
            except (OSError, ValueError):
                _unlink_quietly(path)
                continue
            self.map_end_offset = offset
            return offset
        self.producers.clear()
        return -1


def list_snapshots(directory: str) -> list[tuple[int, str]]:
    found = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for n in names:
        if n.endswith(SNAPSHOT_SUFFIX):
            stem = n[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                found.append((int(stem), os.path.join(directory, n)))
    found.sort()
    return found


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class ProducerIdManager:
    """Hands out producer ids from blocks reserved durably in the metadata store, so an id
    is never reused across restarts."""

    def __init__(self, metadata):
        self._metadata = metadata
        self._next = 0
        self._end = 0

    async def generate_producer_id(self) -> int:
        if self._next >= self._end:
            first, count = await self._metadata.allocate_producer_ids()
            self._next, self._end = first, first + count
        pid = self._next
        self._next += 1
        return pid
