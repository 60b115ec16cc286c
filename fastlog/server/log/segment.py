# fastlog/server/log/segment.py — LogSegment: one `.log` file and its indexes.
#
# Files (Kafka's names and formats): `<20-digit base offset>.log` holds v2 record batches
# back to back, exactly as producers sent them but for baseOffset/partitionLeaderEpoch;
# `.index` and `.timeindex` are fastlog._index mmap indexes; `.txnindex` lists the
# aborted transactions whose markers the segment holds (txn_index.py). Suffixes `.deleted` (awaiting
# asynchronous removal) and `.cleaned`/`.swap` (compaction, see cleaner.py; at load a
# `.cleaned` is discarded and a `.swap` completed, see Log._complete_swaps) may follow.
#
# Threads: not thread-safe. The owning Log calls everything from the broker's event-loop
# thread, except flush() which its background I/O worker may run concurrently (an fsync of
# descriptors only), and write_at() of a large append, which a write thread runs between
# the owner's append(write_behind=True) and end_append() (a pwrite beyond the segment's
# published size, which no reader looks at). The owner's everyday append of the active
# segment is done by its Log's compiled LeaderAppend (_append.pyx) with the same steps as
# append() (index space, pwrite, SegmentIndexer entries, then size and next offset).
# Reads map the .log file (a Python mmap holds a descriptor of its own); READ_MAPS keeps at
# most READ_MAP_LIMIT of those mappings in the process, dropping the least recently used
# (any thread: recovery threads load logs in parallel), so that a broker reading thousands
# of partitions keeps its open files near one per segment. A segment is never explicitly closed while
# readers may hold regions of it: deletion unlinks the files and the descriptor/mappings
# go when the last reference does.
"""A log segment: the data file plus offset and time indexes."""

from __future__ import annotations

import dataclasses
import mmap
import os
import threading
import weakref
from collections import OrderedDict

from fastlog._codec import (
    BATCH_HEADER_SIZE,
    CodecError,
    TruncatedError,
    iter_records,
    read_batch_header,
    scan_batches,
)
from fastlog._index import (
    NO_TIMESTAMP,
    CorruptIndexError,
    OffsetIndex,
    SegmentIndexer,
    TimeIndex,
)

from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex, read_end_txn_marker

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# every file of a segment, the data file first
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Recovery and timestamp searches walk the file in windows of this size so that a huge
# segment never turns into one huge list of batch headers.
SCAN_WINDOW = 8 * 1024 * 1024
INT32_MAX = (1 << 31) - 1
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


# Read mappings of .log files kept at once (each holds a file descriptor).
READ_MAP_LIMIT = 1024


class ReadMaps:
    """The segments holding a read mapping, least recently used first; over `limit`,
    the oldest loses its mapping (a reader still holding it keeps it alive). Segments are
    held by weak reference (a collected one is dropped in its turn). Any thread."""

    def __init__(self, limit: int = READ_MAP_LIMIT):
        self.limit = limit
        self._lru: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, seg) -> None:
        ref = weakref.ref(seg)
        with self._lock:
            lru = self._lru
            if ref in lru:
                lru.move_to_end(ref)
                return
            lru[ref] = None
            victims = [lru.popitem(last=False)[0]() for _ in range(len(lru) - self.limit)]
        for v in victims:
            if v is not None:
                v._map = None
                v._map_len = 0

    def forget(self, seg) -> None:
        with self._lock:
            self._lru.pop(weakref.ref(seg), None)


READ_MAPS = ReadMaps()


def file_name(dir_path: str, base_offset: int, suffix: str) -> str:
    return os.path.join(dir_path, f"{base_offset:020d}{suffix}")


def offset_from_file_name(name: str) -> int:
    return int(os.path.basename(name).split(".", 1)[0])


class SegmentFile:
    """A segment's data file descriptor, shared by the segment and the FileRegions it
    hands out (the network layer sends from it with sendfile). Closed when the last
    holder lets go, or explicitly at shutdown."""

    __slots__ = ("path", "_fd", "_lock", "__weakref__")

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd
        self._lock = threading.Lock()

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError(f"segment file {self.path} is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fsync(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)

    def pread_into(self, buf, offset: int) -> int | None:
        """Read into `buf` (a writable buffer) from `offset`: the bytes read, or None
        when the file is closed. Any thread (the verifier): the descriptor cannot be
        closed, or reused for another file, while the read runs."""
        with self._lock:
            if self._fd < 0:
                return None
            return os.preadv(self._fd, [buf], offset)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self, _close=os.close):  # (os may be gone at interpreter exit)
        fd, self._fd = self._fd, -1
        if fd >= 0:
            _close(fd)

    def __repr__(self):
        return f"SegmentFile({self.path!r})"


class BatchWalk:
    """Walks the v2 batches of buf[start:end] window by window with _codec.scan_batches.

    Iterating yields lists of BatchHeader; afterwards `valid_end` is the position after
    the last good batch and `error` the CodecError that stopped the walk (None if the
    walk reached `end`)."""

    def __init__(self, buf, start: int, end: int, verify_crc: bool, window: int = SCAN_WINDOW):
        self.buf, self.start, self.end = buf, start, end
        self.verify_crc, self.window = verify_crc, window
        self.valid_end = start
        self.error = None

    def __iter__(self):
        pos, end = self.start, self.end
        while pos < end:
            stop = min(end, pos + self.window)
            r = scan_batches(self.buf, pos, stop, self.verify_crc)
            if r.batches:
                yield r.batches
            self.valid_end = r.valid_end
            if r.error is None:
                pos = r.valid_end
                continue
            if stop == end or not isinstance(r.error, TruncatedError):
                self.error = r.error
                return
            if r.valid_end > pos:  # the window cut a batch: go on from its start
                pos = r.valid_end
                continue
            # One batch larger than the window: check its declared size, then scan it alone.
            try:
                h = read_batch_header(self.buf, pos)
            except CodecError as exc:
                self.error = exc
                return
            r = scan_batches(self.buf, pos, min(end, h.end), self.verify_crc)
            if r.batches:
                yield r.batches
            self.valid_end = r.valid_end
            if r.error is not None:
                self.error = r.error
                return
            pos = r.valid_end
        self.valid_end = max(self.valid_end, pos) if self.error is None else self.valid_end


@dataclasses.dataclass(slots=True)
class TailLoss:
    """What recovery cut off the end of a segment: `bytes` from byte `position`, which
    held the offsets from `from_offset` on; `batches` whole batches (structurally intact,
    e.g. failing their CRC) of `records` records, the rest a partial batch; `reason` is
    the check that failed."""

    position: int
    bytes: int
    from_offset: int
    batches: int
    records: int
    reason: str

    def describe(self) -> str:
        whole = f"{self.batches} batch(es) of {self.records} record(s)" if self.batches else ""
        partial = "a partial batch" if not self.batches else "partial data"
        return (f"{self.bytes} bytes ({whole or partial}) from offset {self.from_offset}, "
                f"byte {self.position}: {self.reason}")


def _tail_loss(buf, start: int, end: int, from_offset: int, reason) -> TailLoss:
    batches = records = 0
    for chunk in BatchWalk(buf, start, end, False):
        batches += len(chunk)
        records += sum(h.record_count for h in chunk)
    return TailLoss(start, end - start, from_offset, batches, records, str(reason))


class SegmentRead:
    """Where a read landed in one segment: `length` bytes at `position` of `file`."""

    __slots__ = ("file", "position", "length", "first_batch_offset", "first_entry_incomplete")

    def __init__(self, file, position, length, first_batch_offset, first_entry_incomplete):
        self.file = file
        self.position = position
        self.length = length
        self.first_batch_offset = first_batch_offset
        self.first_entry_incomplete = first_entry_incomplete


class LogSegment:
    """One segment of a partition: append, read, index lookups, recovery, truncation.

    Owner thread only (see the module comment); `flush()` may run on the I/O worker."""

    def __init__(self, dir_path: str, base_offset: int, file: SegmentFile,
                 offset_index: OffsetIndex, time_index: TimeIndex, size: int,
                 index_interval_bytes: int, roll_jitter_ms: int, created_ms: int,
                 txn_index: TransactionIndex):
        self.dir = dir_path
        self.base_offset = base_offset
        self.file = file
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.size = size
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        # Index interval bookkeeping and the largest timestamp so far (compiled).
        self._indexer = SegmentIndexer(offset_index, time_index, index_interval_bytes)
        self._max_ts_loaded = False  # the largest timestamp is read lazily from the index
        # Timestamp of the first batch: time-based rolling counts from it (Kafka's rule).
        self.rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None
        self._map: mmap.mmap | None = None
        self._map_len = 0
        self.deleted = False
        # What the last recover() removed (a TailLoss), None if nothing.
        self.last_loss: TailLoss | None = None
        # Byte ranges (start, end) found corrupt by the verifier (verifier.py), which
        # replaces the tuple whole; reads never serve them.
        self.corrupt: tuple = ()

    # ---- opening ----

    @classmethod
    def open(cls, dir_path: str, base_offset: int, config, now_ms: int,
             file_already_exists: bool = False, suffix: str = "") -> LogSegment:
        """Open (or create) the segment at base_offset with config's index settings."""
        log_path = file_name(dir_path, base_offset, LOG_SUFFIX + suffix)
        flags = os.O_RDWR | os.O_CLOEXEC | (0 if file_already_exists else os.O_CREAT)
        fd = os.open(log_path, flags, 0o644)
        size = os.fstat(fd).st_size
        seg_file = SegmentFile(log_path, fd)
        offset_index = OffsetIndex(file_name(dir_path, base_offset, INDEX_SUFFIX + suffix),
                                   base_offset, config.segment_index_bytes)
        time_index = TimeIndex(file_name(dir_path, base_offset, TIME_INDEX_SUFFIX + suffix),
                               base_offset, config.segment_index_bytes)
        # (a new segment's .txnindex file comes with its first aborted transaction)
        txn_index = TransactionIndex(file_name(dir_path, base_offset, TXN_INDEX_SUFFIX + suffix),
                                     base_offset, create=not file_already_exists)
        jitter = 0
        if config.segment_jitter_ms > 0:
            jitter = (hash((dir_path, base_offset)) & 0x7FFFFFFF) % min(
                config.segment_jitter_ms, config.segment_ms)
        return cls(dir_path, base_offset, seg_file, offset_index, time_index, size,
                   config.index_interval_bytes, jitter, now_ms, txn_index)

    @property
    def log_path(self) -> str:
        return self.file.path

    # ---- reading the file ----

    def _mapped(self, populate: bool = False):
        """A read-only mapping of the whole file (remapped when it has grown). populate:
        fill the page tables at once (a whole-file scan then takes no page faults)."""
        if self.size == 0:
            return b""
        m = self._map
        if m is None or self._map_len < self.size:
            flags = mmap.MAP_SHARED | (_MAP_POPULATE if populate else 0)
            m = mmap.mmap(self.file.fileno(), self.size, flags=flags, prot=mmap.PROT_READ)
            self._map = m
            self._map_len = self.size
        READ_MAPS.touch(self)
        return m

    def _drop_map(self) -> None:
        # Only ever dropped, not closed: a caller may still hold a view of it.
        if self._map is not None:
            READ_MAPS.forget(self)
        self._map = None
        self._map_len = 0

    def batches(self, start: int = 0, verify_crc: bool = False) -> BatchWalk:
        """A walk over the batches from byte `start` (tools, tests, recovery)."""
        return BatchWalk(self._mapped(), start, self.size, verify_crc)

    def txn_batches(self):
        """Each transactional batch of the segment in order: (BatchHeader, None) for data,
        (BatchHeader, commit) for a COMMIT/ABORT marker (a txn index rebuild)."""
        buf = self._mapped()
        for chunk in self.batches():
            for h in chunk:
                if h.is_control:
                    marker = read_end_txn_marker(buf, h)
                    if marker is not None:
                        yield h, marker[0]
                elif h.is_transactional:
                    yield h, None

    def translate_offset(self, offset: int, starting_position: int = 0):
        """The first batch whose last offset is >= offset, at or after starting_position
        (a BatchHeader whose .position is in this file), or None."""
        if self.size == 0:
            return None
        _, index_pos, next_pos = self.offset_index.lookup_bounds(offset)
        start = max(index_pos, starting_position)
        buf = self._mapped()
        # The index guarantees the batch holding `offset` starts at or before next_pos.
        end = self.size if next_pos < 0 or next_pos < start else min(self.size, next_pos)
        walk = BatchWalk(buf, start, end, False)
        for chunk in walk:
            for h in chunk:
                if h.last_offset >= offset:
                    return h
        if 0 <= next_pos < self.size and end == next_pos:
            try:
                h = read_batch_header(buf, next_pos)
            except CodecError:
                return None
            if h.last_offset >= offset:
                return h
            # A stale index: fall back to walking the rest of the file.
            for chunk in BatchWalk(buf, next_pos, self.size, False):
                for h in chunk:
                    if h.last_offset >= offset:
                        return h
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True) -> SegmentRead | None:
        """Bytes from the batch holding start_offset: at most max_size bytes (but the whole
        first batch if min_one_message) and never past byte max_position. None when the
        offset lies beyond this segment. May end inside a batch, as Kafka's reads do."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a segment read")
        h = self.translate_offset(start_offset)
        if h is None:
            return None
        limit = self.size if max_position is None else min(max_position, self.size)
        adjusted = max(max_size, h.size) if min_one_message else max_size
        length = max(0, min(limit - h.position, adjusted))
        return SegmentRead(self.file, h.position, length, h.base_offset, adjusted < h.size)

    @property
    def next_offset(self) -> int:
        """The offset after the last batch (base_offset when empty)."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    def _read_next_offset(self) -> int:
        if self.size == 0:
            return self.base_offset
        _, pos = self.offset_index.lookup(self.offset_index.last_offset)
        last = None
        walk = BatchWalk(self._mapped(), pos if pos < self.size else 0, self.size, False)
        for chunk in walk:
            last = chunk[-1]
        if last is None and pos:
            for chunk in BatchWalk(self._mapped(), 0, self.size, False):
                last = chunk[-1]
        return self.base_offset if last is None else last.next_offset

    # ---- timestamps ----

    @property
    def bytes_since_last_index_entry(self) -> int:
        return self._indexer.bytes_since

    def _load_max_timestamp(self) -> None:
        if not self._max_ts_loaded:
            ts, off = self.time_index.last_entry
            self._set_max_timestamp(ts, off)

    def _set_max_timestamp(self, ts: int, offset: int) -> None:
        self._indexer.max_timestamp = ts
        self._indexer.offset_of_max_timestamp = offset
        self._max_ts_loaded = True

    @property
    def max_timestamp_so_far(self) -> int:
        self._load_max_timestamp()
        return self._indexer.max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        self._load_max_timestamp()
        return self._indexer.offset_of_max_timestamp

    @property
    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.file.path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp (the file's mtime if no batch has one): retention
        by time compares this with retention.ms."""
        ts = self.max_timestamp_so_far
        return ts if ts > 0 else self.last_modified_ms

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int):
        """(offset, timestamp) of the first record at or after starting_offset whose
        timestamp is >= timestamp, or None if this segment has none."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        buf = self._mapped()
        for chunk in BatchWalk(buf, pos, self.size, False):
            for h in chunk:
                if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                    for rec in iter_records(buf, h.position, verify_crc=False):
                        if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                            return rec.offset, rec.timestamp
        return None

    # ---- writing ----

    def should_roll(self, messages_size: int, max_timestamp_in_messages: int,
                    max_offset_in_messages: int, now_ms: int, config,
                    batches: int = 1) -> bool:
        """Kafka's roll rule: size, age (by record time), a full index, or an offset that
        no longer fits a 4-byte relative offset. An index is full for an append of
        `batches` batches when it has not room for that many entries (each batch may add
        one): a nearly full index must not fill up after the batches were written."""
        size = self.size
        if (size > config.segment_bytes - messages_size
                or self.offset_index.room < batches or self.time_index.room < batches
                or max_offset_in_messages - self.base_offset > INT32_MAX):
            return True
        if size == 0:
            return False
        # The time waited counts from the first batch's timestamp, or from the segment's
        # creation when it has none (Kafka's timeWaitedForRoll).
        if self.rolling_based_timestamp is None:
            self._load_first_batch_timestamp()
        t = self.rolling_based_timestamp
        waited = (max_timestamp_in_messages - t if t is not None and t >= 0
                  else now_ms - self.created_ms)
        return waited > config.segment_ms - self.roll_jitter_ms

    def _load_first_batch_timestamp(self) -> None:
        # One positional read of the header: a mapping would hold a second descriptor of
        # the file for as long as the segment is active. Only the header is read, so its
        # fields are taken as they are (the codec's header reader wants the whole batch):
        # magic at byte 16, maxTimestamp at byte 35.
        head = bytearray(min(self.size, BATCH_HEADER_SIZE))
        if self.file.pread_into(head, 0) == BATCH_HEADER_SIZE and head[16] == 2:
            self.rolling_based_timestamp = int.from_bytes(head[35:43], "big", signed=True)
        else:
            self.rolling_based_timestamp = None

    def append(self, buf, batches, write_behind: bool = False):
        """Write the batches (already stamped, offsets above this segment's) with one
        positional write of their bytes, then add index entries every
        index_interval_bytes. `buf` holds the batches at their .position.
        write_behind (Log's write-behind, the write running on another thread while the
        owner goes on): only check the offsets, and return (the bytes to write, the
        position to write them at: the segment's current size); the caller then has
        write_at() run and calls end_append() on the owner thread once it is done."""
        if not batches:
            return None
        first, last = batches[0], batches[-1]
        if last.last_offset - self.base_offset > INT32_MAX or first.base_offset < self.base_offset:
            raise ValueError(f"offsets {first.base_offset}..{last.last_offset} do not fit "
                             f"segment {self.base_offset}")
        view = memoryview(buf)[first.position:last.end]
        physical = self.size
        if write_behind:
            return view, physical
        # Index space first: a full disk fails the whole append here (OSError), never a
        # store into an index page the file system cannot back (SIGBUS).
        self._indexer.reserve(len(batches), last.position - first.position)
        self.write_at(view, physical)
        self.end_append(batches, physical, len(view))
        return None

    def write_at(self, view, physical: int, reserve_for: int = 0,
                 upto: int = INT32_MAX) -> None:
        """Write `view` at byte `physical` (any thread: it touches only the
        descriptor, which the owner keeps open until end_append, and the index space past
        the entries). reserve_for (write-behind): first reserve, and fault in, the index
        space of that many batches, `upto` their bytes but the last's (then end_append's
        stores wait for no file system).
        On an error nothing of the append stays behind the segment's end."""
        if reserve_for:
            self._indexer.reserve(reserve_for, upto, True)
        fd = self.file.fileno()
        try:
            written = os.pwrite(fd, view, physical)
            while written < len(view):   # a short write (rare): the rest
                written += os.pwrite(fd, view[written:], physical + written)
        except OSError:
            # (a full disk) Nothing of a refused append may stay behind the segment's end.
            try:
                os.ftruncate(fd, physical)
            except OSError:
                pass
            raise

    def end_append(self, batches, physical: int, length: int) -> None:
        """Last step, once the bytes are written (owner thread): index entries, the
        segment's size and next offset, so that reads see the batches from now on."""
        first, last = batches[0], batches[-1]
        if self.rolling_based_timestamp is None:
            if self.size == 0:
                self.rolling_based_timestamp = first.max_timestamp
            else:
                self._load_first_batch_timestamp()
        if not self._max_ts_loaded:
            self._load_max_timestamp()
        self._indexer.add(batches, physical - first.position)
        self.size = physical + length
        self._next_offset = last.next_offset

    def on_become_inactive_segment(self) -> None:
        """The segment stops being active: record its final time entry, trim indexes."""
        self._load_max_timestamp()
        ti = self.time_index
        if self._indexer.max_timestamp > max(NO_TIMESTAMP, ti.last_entry[0]):
            if ti.entries >= ti.max_entries:  # a trimmed index: make room for one entry
                ti.resize((ti.entries + 1) * ti.entry_size)
            self.time_index.maybe_append(self._indexer.max_timestamp,
                                         self._indexer.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._drop_map()  # old segments map again only when read

    def unload_indexes(self) -> None:
        """Release the descriptors and mappings of both indexes (files at their valid
        size, nothing unwritten): the next lookup opens them again. A loaded inactive
        segment thus costs one descriptor, its .log, until it is read (a loaded active
        one until an append adds an entry or needs its largest timestamp)."""
        self.offset_index.unload()
        self.time_index.unload()

    def release_read_map(self) -> None:
        """Drop the read mapping (a new one is made by the next read): keeps the number
        of mappings per inactive segment at the two indexes after a load."""
        self._drop_map()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # ---- recovery and truncation ----

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if either index cannot be trusted for this file."""
        self.offset_index.sanity_check(self.size if self.size else None)
        self.time_index.sanity_check()
        n = self.offset_index.entries
        if n:
            # The last entry must name a real batch ending at the entry's offset.
            offset, pos = self.offset_index.entry(n - 1)
            try:
                h = read_batch_header(self._mapped(), pos)
            except CodecError:
                raise CorruptIndexError(
                    f"{self.offset_index.path}: last entry points at no batch") from None
            if h.last_offset != offset:
                raise CorruptIndexError(
                    f"{self.offset_index.path}: last entry offset {offset} but the batch "
                    f"at {pos} ends at {h.last_offset}")
        _, ts_off = self.time_index.last_entry
        if self.time_index.entries and ts_off >= self.next_offset:
            raise CorruptIndexError(f"{self.time_index.path}: entry beyond the segment end")

    def recover(self, leader_epoch_cache=None, max_message_bytes: int | None = None) -> int:
        """Rebuild both indexes from the file, checking every batch (size, CRC, offset
        order); truncate the file at the first bad batch. Returns the bytes removed."""
        self.offset_index.reset()
        self.time_index.reset()
        self.rolling_based_timestamp = None
        self._drop_map()
        buf = self._mapped(populate=True)
        latest_epoch = leader_epoch_cache.latest_epoch if leader_epoch_cache is not None else -1
        ix = SegmentIndexer(self.offset_index, self.time_index, self.index_interval_bytes,
                            prev_last_offset=self.base_offset - 1, last_epoch=latest_epoch)
        self._indexer, self._max_ts_loaded = ix, True
        walk = BatchWalk(buf, 0, self.size, True)
        valid_end = 0
        epochs: list = []
        for chunk in walk:
            accepted = ix.add(chunk, 0, True, epochs)
            if accepted and valid_end == 0:
                self.rolling_based_timestamp = chunk[0].max_timestamp
            if accepted:
                valid_end = chunk[accepted - 1].end
            if leader_epoch_cache is not None:
                for epoch, offset in epochs:
                    leader_epoch_cache.assign(epoch, offset)
                epochs.clear()
            if accepted < len(chunk):
                break
        prev_last = ix.prev_last_offset
        truncated = self.size - valid_end
        self.last_loss = None
        if truncated:
            reason = walk.error if walk.valid_end <= valid_end and walk.error is not None \
                else "offsets out of order"
            self.last_loss = _tail_loss(buf, valid_end, self.size, prev_last + 1, reason)
            self._truncate_file(valid_end)
        self._next_offset = prev_last + 1
        self.txn_index.truncate_to(self._next_offset)
        return truncated

    def check_tail(self):
        """The cheap check every start makes of the active segment: the batches after the
        last offset-index entry (at most index.interval.bytes and one batch) must be whole
        and pass their CRC. Returns the CodecError found, or None."""
        if self.size == 0:
            return None
        n = self.offset_index.entries
        pos = self.offset_index.entry(n - 1)[1] if n else 0
        walk = BatchWalk(self._mapped(), pos, self.size, True)
        for _ in walk:
            pass
        return walk.error

    def _truncate_file(self, size: int) -> None:
        self._drop_map()
        os.ftruncate(self.file.fileno(), size)
        self.size = size

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= offset; returns bytes removed."""
        h = self.translate_offset(offset)
        if h is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        removed = self.size - h.position
        self.txn_index.truncate_to(h.base_offset)
        self._truncate_file(h.position)
        self._next_offset = None
        self._rebuild_max_timestamp_tail()
        if self.size == 0:
            self.rolling_based_timestamp = None
        self.init_bytes_since_last_index_entry()
        return removed

    def init_bytes_since_last_index_entry(self) -> None:
        """Continue the index interval where the file ends, so that entries after a reopen
        or truncation land exactly where an uninterrupted build would put them."""
        n = self.offset_index.entries
        self._indexer.bytes_since = self.size - (self.offset_index.entry(n - 1)[1] if n else 0)

    def _rebuild_max_timestamp_tail(self) -> None:
        # The time index only lags; walk the batches after its last entry.
        ts, off = self.time_index.last_entry
        _, pos = self.offset_index.lookup(off)
        for chunk in BatchWalk(self._mapped(), pos, self.size, False):
            for h in chunk:
                if h.max_timestamp > ts:
                    ts, off = h.max_timestamp, h.last_offset
        self._set_max_timestamp(ts, off)

    # ---- durability and lifecycle ----

    def flush(self) -> None:
        """fsync the data file and the indexes (I/O worker or owner thread)."""
        self.file.fsync()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the segment's files, e.g. '' -> '.deleted'."""
        def renamed(path):
            base = path[: -len(old)] if old and path.endswith(old) else path
            return base + new
        new_log = renamed(self.file.path)
        try:
            os.rename(self.file.path, new_log)
        except FileNotFoundError:
            pass
        self.file.path = new_log
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def delete_files(self) -> None:
        """Unlink the files. Descriptors and mappings stay valid for anyone still reading
        and are released with the last reference."""
        self.deleted = True
        for path in (self.file.path, self.offset_index.path, self.time_index.path,
                     self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Trim the indexes and release every descriptor and mapping (shutdown; no
        readers left). The indexes of deleted files are only released."""
        self._drop_map()
        for index in (self.offset_index, self.time_index):
            if self.deleted:
                index.close_handler()
            elif not index.closed:
                index.close()
        self.file.close()

    def __repr__(self):
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, dir={self.dir!r})"
