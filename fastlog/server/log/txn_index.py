# fastlog/server/log/txn_index.py — TransactionIndex: a segment's aborted transactions.
#
# File (Kafka's name and format): `<20-digit base offset>.txnindex` beside the segment's
# `.log`, entries of 34 bytes back to back, big-endian: int16 version (0), int64 producer
# id, int64 first offset (the transaction's first batch), int64 last offset (its ABORT
# marker), int64 last stable offset (the partition's LSO once the marker was written).
# An entry lives in the segment holding its marker; entries come in increasing last
# offset. As Kafka's, the file is created with a segment's first entry: no file, no
# aborted transaction. A lost one is noticed where the segment is known to need it: a
# recovered segment holding an ABORT marker (Log load), or a segment the partition's
# producer-state snapshot lists as holding aborts (Log.check_txn_indexes); it is then
# rebuilt from the log.
# read_committed fetches ask for the aborted transactions overlapping what they return
# (Kafka's collectAbortedTxns). The entries are kept in memory as well (aborts are rare;
# a fetch never reads the file). Also here: reading a transaction marker's control
# record (recovery, producer-state replay, `fastlog dump-log`).
# Threads: the owning Log's thread (append, truncate, rename, delete, collect); flush() may
# run on the LogManager's I/O worker (an fsync of a descriptor opened for it).
"""The aborted-transaction index of a log segment (Kafka's .txnindex)."""

from __future__ import annotations

import os
import struct
import typing

from fastlog import _codec
from fastlog._index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
_VERSION = 0


CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def end_txn_marker(record) -> tuple[bool, int] | None:
    """(commit, coordinator epoch) of a control record (Kafka's: key int16 version + int16
    type, 0 ABORT / 1 COMMIT; value int16 version + int32 coordinator epoch); None for
    another control type or a record too short."""
    _, kind = _codec.parse_control_record(record)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    value = record.value
    epoch = int.from_bytes(value[2:6], "big", signed=True) if value and len(value) >= 6 else -1
    return kind == CONTROL_COMMIT, epoch


def read_end_txn_marker(buf, h) -> tuple[bool, int] | None:
    """end_txn_marker of the control batch `h` in buf; None when unreadable."""
    try:
        for rec in _codec.iter_records(buf, h.position, verify_crc=False):
            return end_txn_marker(rec)
    except (_codec.CodecError, ValueError):
        return None
    return None


class AbortedTxn(typing.NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


class TransactionIndex:
    """One segment's aborted transactions: the file and the same entries in memory."""

    def __init__(self, path: str, start_offset: int, create: bool):
        self.path = path
        self.start_offset = start_offset
        self.entries: list[AbortedTxn] = []
        self._dirty = False
        # Why the file could not be used at open (damaged): the Log rebuilds it.
        self.problem: str | None = None
        # whether the file is there (created lazily, with the first entry)
        self.exists = False
        if not create:
            self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        self.exists = True
        try:
            self.entries = decode_entries(data, self.start_offset)
        except CorruptIndexError as e:
            self.problem = str(e)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (its marker is in this segment). One out of order (a rebuild of
        a missing tail entry) is inserted in place and the file rewritten."""
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            if self.has(txn.last_offset):
                return   # (a replay of a marker already listed)
            self.entries.append(txn)
            self.entries.sort(key=lambda e: e.last_offset)
            self._write_all()
            return
        self.entries.append(txn)
        with open(self.path, "ab") as f:
            f.write(txn.encode())
        self.exists = self._dirty = True

    def has(self, last_offset: int) -> bool:
        return any(e.last_offset == last_offset for e in self.entries)

    def reset(self, entries: list[AbortedTxn] | None = None) -> None:
        """Replace every entry (a rebuild) and rewrite the file."""
        self.entries = sorted(entries or [], key=lambda e: e.last_offset)
        self.problem = None
        self._write_all()

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after offset (a log truncation)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._write_all()

    def collect(self, fetch_offset: int, upper_bound: int, out: list[AbortedTxn]) -> bool:
        """Append to `out` the transactions that overlap [fetch_offset, upper_bound);
        True when a later segment cannot hold more (an entry's last stable offset is
        beyond the bound: every later abort began after it)."""
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return True
        return False

    def _write_all(self) -> None:
        if not self.entries and not self.exists:
            return   # (no entry, no file)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(e.encode() for e in self.entries))
        os.replace(tmp, self.path)
        self.exists = self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # renamed or deleted meanwhile (the rename's own path is synced later)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename_to(self, path: str) -> None:
        try:
            os.rename(self.path, path)
        except FileNotFoundError:
            pass
        self.path = path

    def delete(self) -> None:
        self.exists = False
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def decode_entries(data: bytes, start_offset: int = 0) -> list[AbortedTxn]:
    """The entries of a .txnindex file's bytes; CorruptIndexError when it is damaged (a
    partial entry, an unknown version, an offset before the segment, out of order)."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{len(data)} bytes is not a whole number of "
                                f"{ENTRY_SIZE}-byte entries")
    out = []
    prev = -1
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != _VERSION:
            raise CorruptIndexError(f"entry at byte {pos} has version {version}")
        if last < start_offset or first > last or last <= prev:
            raise CorruptIndexError(f"entry at byte {pos} has offsets {first}..{last} "
                                    f"(segment from {start_offset}, previous {prev})")
        prev = last
        out.append(AbortedTxn(pid, first, last, lso))
    return out
