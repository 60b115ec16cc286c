"""Where group state lives: the internal topic ``__consumer_offsets``.

A group belongs to one partition of the topic, chosen as Kafka does
(``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``, Java's String.hashCode over
UTF-16 code units), so a data directory and client expectations line up with Kafka's.

``GroupStore`` is the narrow interface the coordinator writes and loads through:
``append(partition, [(key, value|None)], producer=None)`` returns once the records are in
the log (or raises StoreError carrying the Kafka error code the client should see); with
``producer=(producer id, epoch)`` they go in one transactional batch of that producer
(TxnOffsetCommit). ``load(partition)`` is an async iterator over every record of a
partition in offset order, in chunks (lists), so a load never holds more of the log than
one chunk: (key, value) for a plain record, (key, value, producer id) for a record of a
transactional batch, and a ``TxnControl`` for a transaction marker.
``LogGroupStore`` implements it over the broker's replica manager; ``MemoryGroupStore`` is
an in-process stand-in with the same semantics for tests of the coordinator alone.

Called from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from fastlog import _codec
from fastlog.protocol.errors import Errors

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 14)
def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's partitionFor(groupId); Utils.abs maps Integer.MIN_VALUE to 0. Memoized:
    every request of a group or transactional id routes by it, and the hash is a Python
    loop over the id's UTF-16 units."""
    h = java_string_hashcode(group_id)
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_partitions


@dataclasses.dataclass(frozen=True)
class TxnControl:
    """A transaction marker met while loading: the producer's transaction ended."""

    producer_id: int
    committed: bool


class StoreError(Exception):
    """A write to __consumer_offsets failed; ``error`` is what the client is told."""

    def __init__(self, error: Errors, message: str = ""):
        super().__init__(message or error.name)
        self.error = error


class GroupStore(Protocol):
    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> None: ...

    def load(self, partition: int) -> AsyncIterator[list[tuple[bytes | None, bytes | None]]]:
        ...


class MemoryGroupStore:
    """An in-memory __consumer_offsets (list of records per partition) for unit tests.

    ``fail_with`` makes the next appends raise StoreError with that code."""

    LOAD_CHUNK_RECORDS = 10_000

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_with: Errors | None = None

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> None:
        if self.fail_with is not None:
            raise StoreError(self.fail_with)
        if producer is not None:
            records = [(k, v, producer[0]) for k, v in records]
        self.partitions.setdefault(partition, []).extend(records)

    async def load(self, partition: int) -> AsyncIterator[list[tuple[bytes, bytes | None]]]:
        records = list(self.partitions.get(partition, []))
        for i in range(0, len(records), self.LOAD_CHUNK_RECORDS):
            yield records[i:i + self.LOAD_CHUNK_RECORDS]


# What a failed append of the offsets topic tells a group client (Kafka's
# GroupMetadataManager maps storage errors the same way).
_APPEND_ERROR_MAP = {
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.REQUEST_TIMED_OUT: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR,
    Errors.MESSAGE_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.RECORD_LIST_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.INVALID_FETCH_SIZE: Errors.UNKNOWN_SERVER_ERROR,
}


def map_append_error(code: int) -> Errors:
    err = Errors.for_code(code) if hasattr(Errors, "for_code") else Errors(code)
    return _APPEND_ERROR_MAP.get(err, err)


class LogGroupStore:
    """__consumer_offsets through the broker's replica manager (see module comment); the
    transaction coordinator keeps __transaction_state through one too (``topic``)."""

    LOAD_CHUNK = 1 << 20

    def __init__(self, broker: Any, topic: str = GROUP_METADATA_TOPIC):
        self.broker = broker
        self.topic = topic

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> None:
        batch = _build_batch(_codec, records, producer)
        try:
            info = await self.broker.replica_manager.append_internal(
                self.topic, partition, batch)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - any storage failure becomes a client error
            code = getattr(e, "error_code", None) or getattr(e, "error", None)
            if isinstance(code, int):
                raise StoreError(map_append_error(int(code)), str(e)) from None
            log.warning("append to %s-%d failed: %r", self.topic, partition, e)
            raise StoreError(Errors.COORDINATOR_NOT_AVAILABLE, str(e)) from None
        code = getattr(info, "error_code", 0) or getattr(info, "error", 0) or 0
        if int(code) != 0:
            raise StoreError(map_append_error(int(code)))

    async def load(self, partition: int
                   ) -> AsyncIterator[list[tuple[bytes | None, bytes | None]]]:
        """Every record of the partition, one chunk per LOAD_CHUNK bytes read from the
        log's file regions."""

        log_ = self.broker.replica_manager.get_log(self.topic, partition)
        if log_ is None:
            return
        offset = _attr(log_, "log_start_offset", 0)
        end = _attr(log_, "log_end_offset", None)
        while end is None or offset < end:
            data = _read_bytes(log_.read(offset, self.LOAD_CHUNK))
            if not data:
                break
            scan = _codec.scan_batches(data)
            if not scan.batches:
                break
            good = data[:scan.valid_end]
            if any(h.is_transactional for h in scan.batches):
                chunk = _txn_chunk(_codec, good, scan.batches, offset)
            else:
                chunk = [(key, value) for rec_offset, key, value in _iter_records(_codec, good)
                         if rec_offset >= offset]
            if chunk:
                yield chunk
            # Advance by batch headers: a compacted batch may hold no records at all.
            next_offset = max(h.next_offset for h in scan.batches)
            if next_offset <= offset:
                break
            offset = next_offset
            await asyncio.sleep(0)   # one read per loop turn: other requests go in between


def _attr(obj: Any, name: str, default: Any) -> Any:
    v = getattr(obj, name, default)
    return v() if callable(v) else v


def _read_bytes(result: Any) -> bytes:
    """Concatenate what Log.read returned: FileRegions (file/fd, position, length),
    buffers, or an object with ``.regions``/``.records``."""
    if result is None:
        return b""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    for name in ("regions", "records", "parts"):
        inner = getattr(result, name, None)
        if inner is not None and not callable(inner):
            return _read_bytes(inner)
    if hasattr(result, "position") and hasattr(result, "length"):
        f = getattr(result, "file", None)
        if f is None:
            f = getattr(result, "fd", None)
        fd = f if isinstance(f, int) else f.fileno()
        return os.pread(fd, result.length, result.position)
    chunks = [_read_bytes(part) for part in result]
    return b"".join(chunks)


def _build_batch(codec: Any, records: list[tuple[bytes, bytes | None]],
                 producer: tuple[int, int] | None = None) -> bytearray:
    """One uncompressed v2 batch of the records, timestamped now; transactional, of the
    producer (id, epoch), when one is given (sequence 0, as Kafka's coordinator writes)."""
    ts = int(time.time() * 1000)
    txn = {} if producer is None else {"producer_id": producer[0],
                                       "producer_epoch": producer[1], "base_sequence": 0,
                                       "is_transactional": True}
    return bytearray(codec.build_batch([(ts, k, v) for k, v in records], **txn))


def _txn_chunk(codec: Any, data: bytes, batches: list, offset: int) -> list:
    """A chunk holding transactional batches, batch by batch (see GroupStore.load)."""
    chunk: list = []
    for h in batches:
        if h.next_offset <= offset:
            continue
        part = data[h.position:h.end]
        if h.is_control:
            for rec in codec.read_records(part, include_control=True):
                try:
                    _, kind = codec.parse_control_record(rec)
                except Exception:  # noqa: BLE001 - a damaged marker: skip it
                    continue
                chunk.append(TxnControl(h.producer_id, kind == 1))
            continue
        for rec_offset, key, value in _iter_records(codec, part):
            if rec_offset >= offset:
                chunk.append((key, value, h.producer_id) if h.is_transactional
                             else (key, value))
    return chunk


def _iter_records(codec: Any, data: bytes) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a chunk of log bytes; a partial last batch
    (the chunk boundary) is dropped, the next read starts at its offset."""
    got = codec.read_records(data)
    if isinstance(got, tuple):  # (records, next offset)
        got = got[0]
    for rec in got:
        yield rec.offset, rec.key, rec.value
