"""Kafka's record formats for the internal topic ``__transaction_state``.

Key (``TransactionLogKey``): int16 version 0, then the transactional id (string).
Value (``TransactionLogValue``): int16 version, then

* v0: producer id (int64), producer epoch (int16), transaction timeout ms (int32), state
  (int8, Kafka's TransactionState ids: Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
  CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7), the partitions (nullable
  array of (topic string, array of int32)), last update time ms (int64), start time ms
  (int64);
* v1: the same fields in the flexible encoding (compact strings and arrays, tagged fields:
  0 previous producer id, 1 next producer id, 2 client transaction version).

We write v0 (what Kafka writes for clients of transaction version 0 and 1) and read both.
A null value is a tombstone: the transactional id expired. Records written by Kafka load
unchanged, so a data directory can move between the two.

Pure functions over bytes; any thread may call them. Decoding raises SchemaError (a
ValueError) naming what was wrong, never anything else, for arbitrary input.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from fastlog._codec import CodecError, Reader, Writer
from fastlog.server.group.schemas import SchemaError

TXN_KEY_VERSION = 0
TXN_VALUE_VERSION = 0


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, with its on-disk ids and its names (DescribeTransactions,
    ListTransactions state filters)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}


@dataclass
class TxnRecord:
    """A TransactionLogValue: one transactional id's state as the log holds it."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1   # v1 tagged fields (kept when read, not written)
    next_producer_id: int = -1


def encode_txn_key(transactional_id: str) -> bytes:
    w = Writer(8 + len(transactional_id))
    w.int16(TXN_KEY_VERSION)
    w.string(transactional_id)
    return w.getvalue()


# TransactionLogValue v0 around its partitions: version, producer id, epoch, timeout,
# state, topic count; then last update and start times
_VALUE_HEAD = struct.Struct(">hqhibi")
_VALUE_TAIL = struct.Struct(">qq")


def encode_txn_value(rec: TxnRecord) -> bytes:
    """TransactionLogValue v0 (one per state change of every transaction: struct-packed,
    the partitions' encoding reused while the set is the same, as Ongoing and Prepare*
    of a transaction and the transactions of one producer have it)."""
    key = frozenset(rec.partitions)
    encoded = _PARTITIONS.get(key)
    if encoded is None:
        encoded = _encode_partitions(key)
        if len(_PARTITIONS) >= _PARTITIONS_CACHED:
            _PARTITIONS.clear()
        _PARTITIONS[key] = encoded
    return b"".join((_VALUE_HEAD.pack(TXN_VALUE_VERSION, rec.producer_id, rec.producer_epoch,
                                      rec.timeout_ms, int(rec.state), encoded[0]),
                     encoded[1], _VALUE_TAIL.pack(rec.last_update_ms, rec.start_ms)))


# frozenset of partitions -> (topic count, the topics' bytes), for encode_txn_value
_PARTITIONS: dict[frozenset, tuple[int, bytes]] = {}
_PARTITIONS_CACHED = 1024


def _encode_partitions(partitions) -> tuple[int, bytes]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(p)
    out = []
    for t, ps in by_topic.items():
        name = t.encode()
        out.append(struct.pack(f">h{len(name)}si{len(ps)}i", len(name), name, len(ps), *ps))
    return len(by_topic), b"".join(out)


def decode_txn_key(key) -> str:
    """The transactional id of a __transaction_state key; SchemaError for anything else."""
    if key is None:
        raise SchemaError("record without a key")
    try:
        r = Reader(key)
        version = r.int16()
        if version != TXN_KEY_VERSION:
            raise SchemaError(f"unknown transaction key version {version}")
        return r.string()
    except CodecError as e:
        raise SchemaError(f"bad transaction key: {e}") from None


def decode_txn_value(value) -> TxnRecord | None:
    """A TransactionLogValue v0 or v1, or None for a tombstone."""
    if value is None:
        return None
    try:
        r = Reader(value)
        version = r.int16()
        if version not in (0, 1):
            raise SchemaError(f"unknown transaction value version {version}")
        flex = version >= 1
        text = r.compact_string if flex else r.string
        array_len = r.compact_array_len if flex else r.array_len
        pid = r.int64()
        epoch = r.int16()
        timeout = r.int32()
        status = r.int8()
        try:
            state = TxnState(status)
        except ValueError:
            raise SchemaError(f"unknown transaction state {status}") from None
        partitions: set[tuple[str, int]] = set()
        for _ in range(max(array_len(), 0)):   # -1: null (no partitions)
            topic = text()
            for _ in range(max(array_len(), 0)):
                partitions.add((topic, r.int32()))
            if flex:
                r.tagged_fields()
        rec = TxnRecord(pid, epoch, timeout, state, partitions, r.int64(), r.int64())
        if flex:
            r.tagged_fields()
    except CodecError as e:
        raise SchemaError(f"bad transaction value: {e}") from None
    return rec
