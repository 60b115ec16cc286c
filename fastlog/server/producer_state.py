# fastlog/server/producer_state.py — idempotent-producer state.
#
# Owns: per partition, for each producer id: its epoch, its open transaction, the
# coordinator epoch of its last marker, and the metadata of its last 5
# batches (first/last sequence, first/last offset, max timestamp) — what Kafka keeps to
# spot a retried duplicate (answer with the original offsets) and a sequence gap
# (OUT_OF_ORDER_SEQUENCE_NUMBER). Also the producer-id allocator for InitProducerId,
# which reserves ids in durable blocks through the metadata store.
# Snapshot file: `<partition dir>/<20-digit offset>.snapshot` (Kafka's name), our own
# binary layout: b"FLPS", int16 version, uint32 CRC-32C of the rest, int32 producer count,
# then per producer: int64 pid, int16 epoch, int64 last timestamp, (v2: int32 coordinator
# epoch, int64 first offset of its open transaction or -1), int8 batch count and per
# batch int32 first_seq, int32 last_seq, int64 first_offset, int64 last_offset, int64 ts;
# (v3) then int32 count and the int64 base offsets of the log's segments whose `.txnindex`
# holds aborted transactions (that file is created with its first entry, so the load tells
# a lost one from one never needed by this list).
# Version 3 is written; versions 1 (no transaction fields) and 2 (no segment list) are read.
# Transactions (KIP-98): a transactional batch opens the producer's transaction at its
# offset, a marker (control batch) ends it; the last stable offset is the first offset
# of an open transaction, or of an ended one whose marker the high watermark has not
# passed, else the high watermark.
# The offset in the name is the log end offset the state covers; on open the broker loads
# the newest snapshot at or below the log end and replays the batches after it.
# Called from: the broker's asyncio API loop only (ReplicaManager); WITH_OPEN_TXNS is
# also read by the metrics scrape's thread (metrics.BrokerCollector).
"""Idempotent and transactional producer state per partition, snapshots, producer ids."""

from __future__ import annotations

import collections
import os
import struct
import weakref

import crc32c

from fastlog.server.log.txn_index import read_end_txn_marker

# Every ProducerStateManager with an open transaction (and some that have just ended
# theirs): the metrics scrape counts the partitions with a late one over these alone
# instead of asking every partition. A manager is added wherever `ongoing` gains an
# entry, discarded where it empties; weak, so a manager replaced or dropped leaves it.
# Read from another thread as list(WITH_OPEN_TXNS.data) (one step under the lock).
WITH_OPEN_TXNS: weakref.WeakSet = weakref.WeakSet()

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = (1 << 31) - 1
BATCHES_KEPT = 5

SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"FLPS"
_VERSION = 3
_HEAD = struct.Struct(">4shI")
_PRODUCER_V1 = struct.Struct(">qhqb")
# v2 adds the coordinator epoch and the open transaction's first offset (-1: none)
_PRODUCER = struct.Struct(">qhqiqb")
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


class InvalidTxnState(ProducerStateError):
    code = "INVALID_TXN_STATE"


class TransactionCoordinatorFenced(ProducerStateError):
    code = "TRANSACTION_COORDINATOR_FENCED"


class CompletedTxn:
    """A transaction a marker ended (Kafka's CompletedTxn): its first data offset, the
    marker's offset, and whether it was aborted."""

    __slots__ = ("producer_id", "first_offset", "last_offset", "aborted", "last_stable_offset")

    def __init__(self, producer_id: int, first_offset: int, last_offset: int, aborted: bool,
                 last_stable_offset: int = -1):
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.aborted = aborted
        self.last_stable_offset = last_stable_offset

    def __repr__(self) -> str:
        return (f"CompletedTxn(producer_id={self.producer_id}, first_offset={self.first_offset}, "
                f"last_offset={self.last_offset}, aborted={self.aborted})")


class BatchMetadata:
    __slots__ = ("first_seq", "last_seq", "first_offset", "last_offset", "timestamp")

    def __init__(self, first_seq, last_seq, first_offset, last_offset, timestamp):
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.timestamp = timestamp


class ProducerStateEntry:
    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp", "coordinator_epoch",
                 "current_txn_first_offset")

    def __init__(self, producer_id: int, epoch: int):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: collections.deque[BatchMetadata] = collections.deque(maxlen=BATCHES_KEPT)
        self.last_timestamp = -1
        # epoch of the transaction coordinator that wrote this producer's last marker
        self.coordinator_epoch = -1
        # first offset of the producer's open transaction here, -1 when none is open
        self.current_txn_first_offset = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


# Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


class ProducerStateManager:
    """Idempotence and transaction bookkeeping for one partition."""

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.producers: dict[int, ProducerStateEntry] = {}
        # log end offset the in-memory state covers (for snapshots and replay)
        self.map_end_offset = 0
        # open transactions: first offset -> producer id (Kafka's ongoingTxns), in
        # increasing first offset (a transaction opens at the log end), so the first key
        # is the lowest
        self.ongoing: dict[int, int] = {}
        # ended transactions whose marker is not yet below the high watermark, by first
        # offset (Kafka's unreplicatedTxns): they still hold the last stable offset back
        self.unreplicated: dict[int, CompletedTxn] = {}
        # base offsets of the segments whose .txnindex held entries when the loaded
        # snapshot was taken (empty without a v3 snapshot)
        self.txn_index_bases: list[int] = []

    # -------------------------------------------------------------- client appends
    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
              is_transactional: bool = False) -> BatchMetadata | None:
        """Validate an incoming client batch. Returns the original batch metadata for a
        retried duplicate (the caller answers with its offsets and appends nothing),
        None when the batch may be appended, or raises ProducerStateError: an older
        epoch (INVALID_PRODUCER_EPOCH, fenced by a newer producer or marker), a sequence
        gap, or a plain batch while the producer's transaction is open here
        (INVALID_TXN_STATE)."""
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
        else:
            dup = entry.find_duplicate(first_seq, last_seq)
            if dup is not None:
                return dup
            if entry.batches and not _in_sequence(entry.last_seq, first_seq):
                raise OutOfOrderSequence(
                    f"producer {producer_id} sent sequence {first_seq} to "
                    f"{self.topic}-{self.partition} after {entry.last_seq}")
        if entry.current_txn_first_offset >= 0 and not is_transactional:
            raise InvalidTxnState(
                f"producer {producer_id} sent a non-transactional batch to "
                f"{self.topic}-{self.partition} while its transaction from offset "
                f"{entry.current_txn_first_offset} is open")
        return None

    def update(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
               first_offset: int, last_offset: int, timestamp: int,
               is_transactional: bool = False) -> None:
        """Record an appended batch (client append or log replay). A transactional batch
        of a producer with no open transaction here opens one at first_offset."""
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return
        entry = self._entry_at_epoch(producer_id, epoch)
        if entry is None:
            return  # a fenced producer's batch found in replay: keep the newer epoch
        last_seq = increment_sequence(first_seq, record_count - 1)
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[first_offset] = producer_id
            WITH_OPEN_TXNS.add(self)

    def _entry_at_epoch(self, producer_id: int, epoch: int) -> ProducerStateEntry | None:
        """The producer's entry moved to `epoch` (a new epoch forgets the old sequences,
        not an open transaction or the coordinator epoch); None for an older epoch."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        elif epoch < entry.epoch:
            return None
        return entry

    # -------------------------------------------------------------- transaction markers
    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker from a coordinator or producer epoch older than one already
        seen here (Kafka's appendEndTxnMarker checks): TRANSACTION_COORDINATOR_FENCED,
        INVALID_PRODUCER_EPOCH."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"marker for producer {producer_id} at epoch {epoch} is older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    def complete_txn(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                     offset: int, timestamp: int) -> CompletedTxn | None:
        """Apply a marker appended at `offset` (client path after check_marker, or replay):
        the producer takes the marker's epoch (fencing older writes), and its open
        transaction, if any, ends: returned as a CompletedTxn whose last_stable_offset
        is what Kafka records in the aborted-transaction index (the first offset of
        another producer's open transaction, else the marker's offset + 1)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        completed = None
        first = entry.current_txn_first_offset
        if first >= 0:
            completed = CompletedTxn(producer_id, first, offset, not commit)
            self.ongoing.pop(first, None)
            if not self.ongoing:
                WITH_OPEN_TXNS.discard(self)
            completed.last_stable_offset = next(iter(self.ongoing), offset + 1)
            self.unreplicated[first] = completed
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        return completed

    def has_ongoing_txn(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def first_unstable_offset(self) -> int | None:
        """The first offset of an open transaction, or of an ended one whose marker the
        high watermark has not passed yet; None when there is neither."""
        low = None
        if self.ongoing:
            low = next(iter(self.ongoing))
        if self.unreplicated:
            u = min(self.unreplicated)
            low = u if low is None else min(low, u)
        return low

    def has_late_transaction(self, now_ms: int, max_timeout_ms: int) -> bool:
        """Kafka's hasLateTransaction (KIP-664): the producer of the oldest open
        transaction last wrote longer ago than transaction.max.timeout.ms plus
        LATE_TRANSACTION_BUFFER_MS, so no coordinator will end it (a hanging transaction).
        Any thread: the open transactions are copied in one step first (none open, the
        usual case: no copy)."""
        if not self.ongoing:
            return False
        ongoing = dict(self.ongoing)
        if not ongoing:
            return False
        entry = self.producers.get(next(iter(ongoing.values())))
        last = entry.last_timestamp if entry is not None else -1
        return last > 0 and now_ms - last > max_timeout_ms + LATE_TRANSACTION_BUFFER_MS

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        if self.unreplicated:
            for first, txn in list(self.unreplicated.items()):
                if txn.last_offset < high_watermark:
                    del self.unreplicated[first]

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: read_committed consumers read below it."""
        self.on_high_watermark_updated(high_watermark)
        low = self.first_unstable_offset()
        return high_watermark if low is None else min(low, high_watermark)

    def load_batch(self, buf, h) -> CompletedTxn | None:
        """Replay one batch already in the log (recovery, a follower's append): data
        batches as update(), markers as complete_txn() without the client checks. `h`
        is its BatchHeader at h.position in buf."""
        if h.producer_id == NO_PRODUCER_ID:
            return None
        if h.is_control:
            marker = read_end_txn_marker(buf, h)
            if marker is None:
                return None
            commit, coordinator_epoch = marker
            return self.complete_txn(h.producer_id, h.producer_epoch, commit, coordinator_epoch,
                                     h.base_offset, h.max_timestamp)
        # (sequence span from last_offset_delta: compaction may drop records)
        self.update(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta + 1,
                    h.base_offset, h.last_offset, h.max_timestamp, h.is_transactional)
        return None

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # -------------------------------------------------------------- maintenance
    def truncate_and_reload(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        WITH_OPEN_TXNS.discard(self)
        self.unreplicated.clear()
        self.map_end_offset = 0

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        # (a producer with an open transaction stays until its marker, as in Kafka)
        dead = [pid for pid, e in self.producers.items()
                if e.last_timestamp >= 0 and now_ms - e.last_timestamp > expiration_ms
                and e.current_txn_first_offset < 0]
        for pid in dead:
            del self.producers[pid]

    # -------------------------------------------------------------- snapshots
    def encode_snapshot(self, txn_index_bases=()) -> bytes:
        body = bytearray(struct.pack(">i", len(self.producers)))
        for e in self.producers.values():
            body += _PRODUCER.pack(e.producer_id, e.epoch, e.last_timestamp, e.coordinator_epoch,
                                   e.current_txn_first_offset, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
        body += struct.pack(f">i{len(txn_index_bases)}q", len(txn_index_bases), *txn_index_bases)
        return _HEAD.pack(_MAGIC, _VERSION, crc32c.crc32c(bytes(body))) + bytes(body)

    def decode_snapshot(self, data: bytes) -> None:
        """Replace the state with a snapshot's; ValueError when it is damaged."""
        if len(data) < _HEAD.size + 4:
            raise ValueError("snapshot too short")
        magic, version, crc = _HEAD.unpack_from(data, 0)
        if magic != _MAGIC or version not in (1, 2, _VERSION):
            raise ValueError("not a fastlog producer snapshot")
        head = _PRODUCER if version >= 2 else _PRODUCER_V1
        body = memoryview(data)[_HEAD.size:]
        if crc32c.crc32c(body) != crc:
            raise ValueError("snapshot CRC mismatch")
        (count,) = struct.unpack_from(">i", body, 0)
        pos = 4
        producers: dict[int, ProducerStateEntry] = {}
        for _ in range(count):
            if pos + head.size > len(body):
                raise ValueError("snapshot truncated")
            if version >= 2:
                pid, epoch, last_ts, coordinator_epoch, txn_first, nb = head.unpack_from(body, pos)
            else:
                (pid, epoch, last_ts, nb), coordinator_epoch, txn_first = \
                    head.unpack_from(body, pos), -1, -1
            pos += head.size
            e = ProducerStateEntry(pid, epoch)
            e.last_timestamp = last_ts
            e.coordinator_epoch = coordinator_epoch
            e.current_txn_first_offset = txn_first
            for _ in range(nb):
                if pos + _BATCH.size > len(body):
                    raise ValueError("snapshot truncated")
                e.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = e
        bases: list[int] = []
        if version >= 3:
            if pos + 4 > len(body):
                raise ValueError("snapshot truncated")
            (n,) = struct.unpack_from(">i", body, pos)
            if n < 0 or pos + 4 + 8 * n > len(body):
                raise ValueError("snapshot truncated")
            bases = list(struct.unpack_from(f">{n}q", body, pos + 4))
        self.producers = producers
        self.txn_index_bases = bases
        self.ongoing = dict(sorted((e.current_txn_first_offset, e.producer_id)
                                   for e in producers.values()
                                   if e.current_txn_first_offset >= 0))
        if self.ongoing:
            WITH_OPEN_TXNS.add(self)
        self.unreplicated = {}

    def write_snapshot(self, directory: str, txn_index_bases=()) -> str:
        """Write `<map_end_offset>.snapshot` atomically and drop older snapshots."""
        return self.snapshot_job(directory, txn_index_bases)()

    def snapshot_job(self, directory: str, txn_index_bases=()):
        """Encode the state now (with the log's segments that hold aborted transactions,
        Log.txn_index_bases); the returned callable writes it (any thread): tmp file,
        fsync, rename, then older snapshots go."""
        offset = self.map_end_offset
        data = self.encode_snapshot(txn_index_bases)

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
        self.txn_index_bases = []
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
