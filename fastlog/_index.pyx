# fastlog._index: the two per-segment indexes, kept in memory-mapped files.
#
# Formats (byte-compatible with Kafka's files; every field big-endian):
#   <base>.index      8-byte entries:  int32 offset relative to the segment's base offset,
#                                      int32 byte position of a batch in the .log file
#   <base>.timeindex 12-byte entries:  int64 timestamp (ms), int32 relative offset
# Entries are sparse (one per `index.interval.bytes` of log) and sorted on both fields, so a
# lookup is a binary search run in C straight over the mapping (no Python object per probe).
#
# Threads: one owner thread (the broker's event-loop thread) appends, looks up, truncates,
# resizes and closes. The only call allowed from another thread is flush(), which fsyncs the
# file through a descriptor of its own (on Linux that writes the dirty pages of our
# MAP_SHARED mapping too) and never touches the mapping itself.
#
# Descriptors: an index holds its mapping, not a descriptor (as Kafka's, which closes its
# file once mapped). The file is opened for the moment a mapping is made, the file resized
# or space reserved, and by flush(); so a partition's open files are its segments' .log
# files alone, and a broker of 10,000 partitions fits the usual soft limit.
#
# Disk space: a writable index file is created at its full size but sparse, and the file
# system backs a page of it only when that page is first written. A store into the mapping
# that the file system cannot back (a full disk) kills the process with SIGBUS, so every
# entry is written only into space already reserved with posix_fallocate, page by page
# ahead of the entries (`_reserve`): a full disk becomes an OSError(ENOSPC) on the append.
#
# A new writable index has no file at first (as Kafka's LazyIndex): the file is created,
# at its full sparse size, when the first entry is stored or the index is resized (a
# segment rolled or closed). A partition that gets a few small writes, or none, thus costs
# no index inodes, descriptors or mappings; on a file system where creating an inode is
# slow that was most of a fresh partition's CPU (perf/fresh_partitions.py). An index
# whose file is missing on open is an empty index, as before.
#
# Read-around: a page fault on a file mapping makes the kernel read the pages around it
# too (up to the device's readahead, 8 MiB on this machine's disk). In a writable index,
# sparse at its full size, those are holes: the first store into a new index zeroed and
# cached about 2,000 pages (2-4 ms of CPU, and as much again when the file was trimmed at
# roll or close), the largest part of a fresh partition's cost and of produce over 1,000
# partitions (perf/README.md). Writable mappings are therefore advised MADV_RANDOM (a
# fault reads its own page; 8-17 us); read-only ones, trimmed to their entries, keep the
# kernel's read-around.
#
# An index whose file exists is not opened either until it is used (Kafka's LazyIndex for
# loaded segments): the constructor only stats the file, and the mapping is made by the
# first lookup, append, check of entries or resize that needs it. A broker restarting with
# thousands of partitions thus maps no index of a partition that is not read or written,
# and an index without entries is never opened at all (its resizes only change the size
# its file will be made at). unload() returns an index to that state (a loaded segment's
# indexes are mapped only while it is used).

import os

from libc.errno cimport EINVAL, EOPNOTSUPP, errno
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memset

from fastlog._codec cimport BatchHeader, fl_be32, fl_be64, fl_put_be32, fl_put_be64
from posix.fcntl cimport posix_fallocate
from posix.mman cimport (
    MADV_RANDOM,
    MAP_FAILED,
    MAP_SHARED,
    PROT_READ,
    PROT_WRITE,
    madvise,
    mmap,
    munmap,
)

# Kafka's value for "no timestamp": the lookup answer when no time entry is <= the target.
NO_TIMESTAMP = -1
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024

# The page-cache-friendly search (the idea is Kafka's; the reasoning, in our words):
#
# A plain binary search over an index touches pages all over the file: the first probe is
# the middle page, the next a quarter of the way in, and so on. Almost every lookup in a
# broker is for an offset near the end (followers and caught-up consumers read the tail),
# so those probes land on the same few last pages -- plus a handful of pages in the middle
# of the file that only binary search ever visits. Those middle pages are read rarely, so
# the OS evicts them; the next tail lookup then page-faults on a page it did not really
# need, and a fault on a cold page costs a disk read on the hot produce/fetch path.
#
# Worked example: 4 KiB pages, an index of 13 pages. Lookups near the end probe pages
# 12, 6, 9, 11, 12: page 6 and 9 are touched only as waypoints. As the index grows to 14
# pages the waypoints move (7, 10, 12, 13) and the old ones go cold; any page that is cold
# when touched stalls the request thread for a disk seek.
#
# So we split the entries in two: a "warm" tail covering the last 8192 bytes (two pages,
# which every tail lookup touches anyway and hence stay in the page cache) and the cold
# rest. If the target is at or after the first warm entry we search only the warm tail;
# otherwise we search the cold part, which only readers far behind the head pay for.
# 8192 bytes is small enough that the warm tail is always resident, and big enough that an
# in-sync reader (a few MiB behind at worst, i.e. far fewer entries than fit in 8 KiB at
# the default 4 KiB index interval) finds its target there.
cdef enum:
    WARM_SECTION_BYTES = 8192
    # Index space is reserved (posix_fallocate) this many bytes at a time.
    RESERVE_CHUNK = 4096


class CorruptIndexError(Exception):
    """An index file that cannot be trusted; its segment must rebuild it."""


class InvalidOffsetError(ValueError):
    """An append or truncation that would break the index's ordering."""


class IndexOffsetOverflowError(ValueError):
    """An offset too far from the segment's base offset to fit a 4-byte relative offset."""


class IndexFullError(Exception):
    """An append to an index that has no free slot (the segment must roll first)."""


cdef inline Py_ssize_t _round_down(Py_ssize_t n, Py_ssize_t factor) noexcept nogil:
    if n < 0:
        return 0
    return factor * (n // factor)


cdef inline int64_t _field(const unsigned char* data, int esz, Py_ssize_t n,
                           bint by_value) noexcept nogil:
    # Search key of entry n: offset index (rel. offset | position), time index
    # (timestamp | rel. offset). Signed, so a negative value marks a corrupt file.
    cdef const unsigned char* p = data + n * esz
    if esz == 8:
        return <int32_t>fl_be32(p + 4) if by_value else <int32_t>fl_be32(p)
    return <int32_t>fl_be32(p + 8) if by_value else <int64_t>fl_be64(p)


cdef inline void _search_range(const unsigned char* data, int esz, Py_ssize_t entries,
                               Py_ssize_t begin, Py_ssize_t end, int64_t target, bint by_value,
                               Py_ssize_t* lower, Py_ssize_t* upper) noexcept nogil:
    # Binary search of slots begin..end, whose first entry is <= target. The loop has a
    # single data-dependent choice (the compiler turns it into a conditional move), and
    # the equality test is done once at the end.
    cdef Py_ssize_t lo = begin, hi = end, mid
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if _field(data, esz, mid, by_value) > target:
            hi = mid - 1
        else:
            lo = mid
    lower[0] = lo
    if _field(data, esz, lo, by_value) == target:
        upper[0] = lo
    else:
        upper[0] = -1 if lo == entries - 1 else lo + 1


cdef inline void _find_slots(const unsigned char* data, int esz, Py_ssize_t entries,
                             int64_t target, bint by_value,
                             Py_ssize_t* lower, Py_ssize_t* upper) noexcept nogil:
    # (largest slot <= target, smallest slot >= target); -1 where there is none.
    # Warm tail first, cold part only for targets before it (see the comment above).
    cdef Py_ssize_t first_hot
    if entries == 0:
        lower[0] = -1
        upper[0] = -1
        return
    first_hot = entries - 1 - WARM_SECTION_BYTES // esz
    if first_hot < 0:
        first_hot = 0
    if _field(data, esz, first_hot, by_value) < target:
        _search_range(data, esz, entries, first_hot, entries - 1, target, by_value, lower, upper)
        return
    if _field(data, esz, 0, by_value) > target:
        lower[0] = -1
        upper[0] = 0
        return
    _search_range(data, esz, entries, 0, first_hot, target, by_value, lower, upper)


cdef class AbstractIndex:
    """Owns one memory-mapped index file: mapping, resize/trim, search; not thread-safe."""

    def __cinit__(self, *args, **kwargs):
        self._loaded = 0
        self._dirty = 0
        self._data = NULL
        self._length = 0
        self._reserved = 0
        self._entries = 0
        self._max_entries = 0
        self._pending = 0
        self._deferred = 0

    def __init__(self, path, int64_t base_offset, Py_ssize_t max_index_size=DEFAULT_MAX_INDEX_SIZE,
                 bint writable=True):
        self.path = os.fspath(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        newly_created = not os.path.exists(self.path)
        cdef Py_ssize_t full = _round_down(max_index_size, self._entry_size)
        if newly_created and writable and full > 0:
            # No file until an entry or a resize needs one (see the module comment).
            self._pending = full
            self._max_entries = full // self._entry_size
            return
        if writable and not newly_created:
            # Opened when first needed (see the module comment): only its size now.
            length = os.stat(self.path).st_size
            self._deferred = 1
            self._length = length
            self._max_entries = length // self._entry_size
            self._entries = self._max_entries
            self._reserved = _round_down(self._entries * self._entry_size, RESERVE_CHUNK)
            return
        if writable:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        else:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            length = os.fstat(fd).st_size
            self._map(fd, length)
        finally:
            os.close(fd)
        # An existing file holds exactly its entries (it was trimmed when its segment became
        # inactive or was closed); a torn or zero-padded one is caught by sanity_check().
        self._entries = 0 if newly_created else length // self._entry_size
        # Pages holding entries were written, hence backed; the rest may be a hole.
        self._reserved = _round_down(self._entries * self._entry_size, RESERVE_CHUNK)

    def __dealloc__(self):
        self._unmap()

    cdef int _map(self, int fd, Py_ssize_t length) except -1:
        # Map `length` bytes of the file open as fd (which the caller closes after).
        cdef void* p
        cdef int prot = PROT_READ | (PROT_WRITE if self.writable else 0)
        if length > 0:
            with nogil:
                p = mmap(NULL, <size_t>length, prot, MAP_SHARED, fd, 0)
            if p == MAP_FAILED:
                raise OSError(errno, os.strerror(errno), self.path)
            if self.writable:
                # A fault reads only its own page (see "Read-around" above).
                madvise(p, <size_t>length, MADV_RANDOM)
            self._data = <unsigned char*>p
        else:
            self._data = NULL
        self._length = length
        self._max_entries = length // self._entry_size
        self._loaded = 1
        if self.writable:
            self._dirty = 1  # (a new or resized file; flush() makes it durable)
        return 0

    cdef void _unmap(self) noexcept:
        if self._data != NULL:
            munmap(self._data, <size_t>self._length)
            self._data = NULL
        self._length = 0
        self._max_entries = 0
        self._loaded = 0

    cdef int _check_open(self) except -1:
        if self._deferred:
            # (no entries: every lookup answers without the file; writes open it)
            return 0 if self._entries == 0 else self._open_deferred()
        if not self._loaded and self._pending == 0:
            raise ValueError(f"index {self.path} is closed")
        return 0

    cdef int _open_deferred(self) except -1:
        # Open and map the existing file of a deferred index (its entries are known).
        if not self._deferred:
            return 0
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        cdef Py_ssize_t length = self._length
        cdef bint resized = 0
        try:
            if os.fstat(fd).st_size != length:  # resized while not opened
                os.ftruncate(fd, length)
                resized = 1
            self._map(fd, length)
        finally:
            os.close(fd)
        self._dirty = resized
        self._entries = min(self._entries, self._max_entries)
        self._reserved = min(self._reserved, length)
        self._deferred = 0
        return 0

    cdef int _write_whole(self, bytes data) except -1:
        # A new index's file written whole with `data` (its entries), not mapped: from
        # then on as a loaded index that is not used yet.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            if data and os.write(fd, data) != len(data):
                raise OSError(f"short write to {self.path}")
        finally:
            os.close(fd)
        self._pending = 0
        self._deferred = 1
        self._length = len(data)
        self._entries = self._max_entries = len(data) // self._entry_size
        self._reserved = 0
        self._dirty = 1
        return 0

    cdef int _materialize(self) except -1:
        # Create the file of a new index at its full (sparse) size and map it.
        cdef Py_ssize_t size = self._pending
        if size == 0:
            return 0
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            # Preallocated (sparse) so that appends are plain stores into the mapping.
            os.ftruncate(fd, size)
            self._map(fd, size)
        finally:
            os.close(fd)
        self._pending = 0
        return 0

    cdef int _reserve(self, Py_ssize_t end) except -1:
        # Make the file system back bytes [0, end) of the file (whole chunks, within the
        # file) before entries are stored there; OSError(ENOSPC) when the disk is full.
        cdef Py_ssize_t start = self._reserved, stop
        cdef int err
        if self._deferred:
            self._open_deferred()
        if end <= start:
            return 0
        if self._pending:
            self._materialize()
        stop = min(self._length, ((end + RESERVE_CHUNK - 1) // RESERVE_CHUNK) * RESERVE_CHUNK)
        if stop <= start:
            return 0
        cdef int fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        with nogil:
            err = posix_fallocate(fd, start, stop - start)
        os.close(fd)
        if err == 0:
            self._reserved = stop
        elif err == EOPNOTSUPP or err == EINVAL:
            # A file system without fallocate (glibc emulates it almost everywhere):
            # nothing to reserve with, so behave as before.
            self._reserved = self._length
        else:
            raise OSError(err, os.strerror(err), self.path)
        return 0

    cdef int _reserve_entries(self, Py_ssize_t more, bint touch) except -1:
        cdef Py_ssize_t start = self._entries * self._entry_size
        cdef Py_ssize_t end = (self._entries + max(0, more)) * self._entry_size
        self._reserve(end)
        end = min(end, self._length)
        if touch and self.writable and self._data != NULL and end > start:
            with nogil:
                memset(self._data + start, 0, end - start)
        return 0

    # Entry fields as signed integers: a negative one marks a corrupt file in sanity_check().
    cdef int64_t _key(self, Py_ssize_t n) noexcept nogil:
        cdef const unsigned char* p = self._data + n * self._entry_size
        if self._entry_size == 8:
            return <int32_t>fl_be32(p)
        return <int64_t>fl_be64(p)

    cdef int64_t _value(self, Py_ssize_t n) noexcept nogil:
        cdef const unsigned char* p = self._data + n * self._entry_size
        if self._entry_size == 8:
            return <int32_t>fl_be32(p + 4)
        return <int32_t>fl_be32(p + 8)

    cdef void _binary_search(self, Py_ssize_t begin, Py_ssize_t end, int64_t target,
                             bint by_value, Py_ssize_t* lower, Py_ssize_t* upper) noexcept nogil:
        _search_range(self._data, self._entry_size, self._entries, begin, end, target,
                      by_value, lower, upper)

    cdef void _slot_range(self, int64_t target, bint by_value,
                          Py_ssize_t* lower, Py_ssize_t* upper) noexcept nogil:
        _find_slots(self._data, self._entry_size, self._entries, target, by_value, lower, upper)

    cdef Py_ssize_t _largest_lower_bound(self, int64_t target, bint by_value) noexcept nogil:
        cdef Py_ssize_t lower, upper
        self._slot_range(target, by_value, &lower, &upper)
        return lower

    cdef Py_ssize_t _smallest_upper_bound(self, int64_t target, bint by_value) noexcept nogil:
        cdef Py_ssize_t lower, upper
        self._slot_range(target, by_value, &lower, &upper)
        return upper

    cdef void _truncate_to_relative(self, int64_t relative, bint by_value) noexcept:
        # Keep only the entries whose offset field (key or value) is below `relative`.
        cdef Py_ssize_t slot = self._largest_lower_bound(relative, by_value)
        if slot < 0:
            self._entries = 0
        elif _field(self._data, self._entry_size, slot, by_value) == relative:
            self._entries = slot
        else:
            self._entries = slot + 1

    # ---- housekeeping shared by both indexes ----

    @property
    def entries(self):
        """Number of valid entries."""
        return self._entries

    @property
    def max_entries(self):
        return self._max_entries

    @property
    def length(self):
        """Current size of the file (and of the mapping) in bytes; for a new index without
        its file yet, the size the file will be created at."""
        return self._pending or self._length

    @property
    def has_file(self):
        """False for a new index whose file is not created yet."""
        return self._pending == 0

    @property
    def size_in_bytes(self):
        """Bytes taken by valid entries."""
        return self._entries * self._entry_size

    @property
    def entry_size(self):
        return self._entry_size

    @property
    def closed(self):
        return not self._loaded and self._pending == 0 and not self._deferred

    @property
    def is_open(self):
        """True while the index holds a mapping of its file."""
        return self._loaded == 1

    cdef Py_ssize_t _room(self) noexcept:
        return self._max_entries - self._spare - self._entries

    @property
    def room(self):
        """Entries that can still be appended (the roll rule asks for one per batch)."""
        return self._room()

    @property
    def is_full(self):
        return self._room() <= 0

    def resize(self, Py_ssize_t new_size):
        """Remap the file at `new_size` bytes rounded down to whole entries; True if it changed.

        Entries beyond the new size are dropped. Called with the max size when a segment
        becomes active again and with the valid size when it becomes inactive."""
        if self.closed:
            raise ValueError(f"index {self.path} is closed")
        cdef Py_ssize_t rounded = _round_down(new_size, self._entry_size)
        if rounded == (self._pending or self._length):
            return False
        if not self.writable:
            raise ValueError(f"cannot resize read-only index {self.path}")
        if self._deferred:
            # Not opened: the file is given this size when it is (its size on disk only
            # changes then, so a resize back to it before that leaves the file as it is).
            self._length = rounded
            self._max_entries = rounded // self._entry_size
            self._entries = min(self._entries, self._max_entries)
            self._reserved = min(self._reserved, rounded)
            return True
        if self._pending and rounded == 0:
            # A new index closed without entries: an empty file (a segment's index exists
            # once it is closed), made without a mapping.
            self._write_whole(b"")
            return True
        if self._pending:
            self._pending = rounded
            self._max_entries = rounded // self._entry_size
            return True
        self._check_open()
        self._materialize()
        cdef Py_ssize_t entries = self._entries
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            self._unmap()
            os.ftruncate(fd, rounded)
            self._map(fd, rounded)
        finally:
            os.close(fd)
        self._entries = min(entries, self._max_entries)
        self._reserved = min(self._reserved, rounded)
        return True

    def reserve(self, Py_ssize_t more_entries):
        """Reserve disk space for `more_entries` entries after the current ones (capped at
        the file's size), so that appending them cannot fault on a full disk. Raises
        OSError (ENOSPC) when the file system cannot grant it."""
        self._check_open()
        self._reserve((self._entries + max(0, more_entries)) * self._entry_size)

    def trim_to_valid_size(self):
        """Shrink the file to exactly its entries (done when the segment stops being active)."""
        return self.resize(self._entries * self._entry_size)

    def truncate(self):
        """Drop every entry (the file keeps its size)."""
        self._entries = 0

    def reset(self):
        """Drop every entry and regrow the file to its maximum size (before a rebuild)."""
        self._entries = 0
        self.resize(self.max_index_size)

    def flush(self):
        """Make the entries durable: an fsync through a descriptor opened for it (the
        file's dirty pages are the mapping's). Callable from a background thread; a file
        renamed meanwhile is followed once, one deleted is left alone."""
        if self._pending or not self._dirty:
            return  # no file yet, or nothing written since the last flush
        self._dirty = 0  # (cleared first: a store after this is flushed next time)
        for _ in range(2):
            path = self.path
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                if self.path == path:
                    return
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return

    def unload(self):
        """Release the mapping of an index whose file holds exactly its entries (an
        inactive segment's, trimmed): the next use maps it again. False, and nothing
        done, for an index still at another size or without its file."""
        if not self._loaded or self._pending or self._length != self._entries * self._entry_size:
            return False
        self._unmap()
        self._deferred = 1
        self._length = self._entries * self._entry_size
        self._max_entries = self._entries
        return True

    def close_handler(self):
        """Release the mapping without trimming (idempotent)."""
        self._pending = 0
        self._deferred = 0
        self._unmap()

    def close(self):
        """Trim to the valid entries, then release the mapping."""
        if (self._loaded or self._pending or self._deferred) and self.writable:
            self.trim_to_valid_size()
        self.close_handler()

    def delete(self):
        """Close and remove the file; True if a file was removed."""
        self.close_handler()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path):
        """Rename the file (used to mark a segment `.deleted`); the mapping stays valid."""
        new_path = os.fspath(new_path)
        try:
            os.rename(self.path, new_path)
        except FileNotFoundError:
            pass
        self.path = new_path

    def update_parent_dir(self, new_dir):
        """Follow a rename of the partition directory (files move with it)."""
        self.path = os.path.join(os.fspath(new_dir), os.path.basename(self.path))

    def __repr__(self):
        return (f"{type(self).__name__}({self.path!r}, base_offset={self.base_offset}, "
                f"entries={self._entries}/{self._max_entries})")


cdef class OffsetIndex(AbstractIndex):
    """Sparse map from offset to the file position of the batch ending at that offset.

    All public methods take and return absolute offsets; the file stores them relative to
    `base_offset`. Owner thread only, except flush()."""

    def __cinit__(self, *args, **kwargs):
        self._entry_size = 8

    cdef int64_t _lookup(self, int64_t target, int64_t* position) noexcept nogil:
        cdef Py_ssize_t slot, upper
        _find_slots(self._data, 8, self._entries, target - self.base_offset, False, &slot, &upper)
        if slot < 0:
            position[0] = 0
            return self.base_offset
        position[0] = _field(self._data, 8, slot, True)
        return self.base_offset + _field(self._data, 8, slot, False)

    def lookup(self, int64_t target_offset):
        """(offset, position) of the largest entry <= target_offset, or (base_offset, 0)."""
        self._check_open()
        cdef int64_t position
        cdef int64_t offset = self._lookup(target_offset, &position)
        return offset, position

    def lookup_bounds(self, int64_t target_offset):
        """lookup() plus the position of the next entry (-1 if none): the batch holding
        target_offset starts at or before that position, which bounds a forward scan."""
        self._check_open()
        cdef Py_ssize_t slot = self._largest_lower_bound(target_offset - self.base_offset, False)
        if slot < 0:
            return self.base_offset, 0, (self._value(0) if self._entries > 0 else -1)
        return (self.base_offset + self._key(slot), self._value(slot),
                self._value(slot + 1) if slot + 1 < self._entries else -1)

    def lookup_many(self, const int64_t[::1] targets, int64_t[::1] out_offsets,
                    int64_t[::1] out_positions):
        """lookup() for every target in one call (benchmarks, bulk readers); returns count."""
        self._check_open()
        cdef Py_ssize_t n = targets.shape[0], i
        if out_offsets.shape[0] < n or out_positions.shape[0] < n:
            raise ValueError("output arrays are shorter than the targets")
        with nogil:
            for i in range(n):
                out_offsets[i] = self._lookup(targets[i], &out_positions[i])
        return n

    def entry(self, Py_ssize_t n):
        """The n-th entry as (offset, position)."""
        self._check_open()
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} out of range for {self._entries} entries in {self.path}")
        return self.base_offset + self._key(n), self._value(n)

    @property
    def last_offset(self):
        """Offset of the last entry, or base_offset when empty."""
        if self._entries and self._deferred:
            self._open_deferred()
        if self._entries == 0 or self._data == NULL:
            return self.base_offset
        return self.base_offset + self._key(self._entries - 1)

    def append(self, int64_t offset, int64_t position):
        """Add an entry; the offset must be larger than every offset already present."""
        self._check_open()
        self._append(offset, position)

    cdef int _append(self, int64_t offset, int64_t position) except -1:
        if self._deferred:
            self._open_deferred()
        if self._entries >= self._max_entries:
            raise IndexFullError(f"attempt to append to the full index {self.path} "
                                 f"({self._entries} entries)")
        if self._entries > 0 and offset <= self.base_offset + self._key(self._entries - 1):
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to position {self._entries} no larger than "
                f"the last offset {self.last_offset} in {self.path}")
        cdef int64_t relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit a relative offset from {self.base_offset}")
        if position < 0 or position > INT32_MAX:
            raise ValueError(f"position {position} out of range for {self.path}")
        self._reserve((self._entries + 1) * 8)
        cdef unsigned char* p = self._data + self._entries * 8
        self._dirty = 1
        fl_put_be32(p, <uint32_t>relative)
        fl_put_be32(p + 4, <uint32_t>position)
        self._entries += 1
        return 0

    def truncate_to(self, int64_t offset):
        """Remove every entry whose offset is >= `offset`."""
        self._check_open()
        self._truncate_to_relative(offset - self.base_offset, False)

    def fetch_upper_bound_offset(self, int64_t fetch_position, int64_t fetch_size):
        """Offset of the first entry at or beyond fetch_position + fetch_size, or None."""
        self._check_open()
        cdef Py_ssize_t slot = self._smallest_upper_bound(fetch_position + fetch_size, True)
        if slot < 0:
            return None
        return self.base_offset + self._key(slot)

    def sanity_check(self, segment_size=None):
        """Raise CorruptIndexError unless the entries are well formed.

        Stricter than a header check: offsets and positions must strictly increase and stay
        within the segment, which rejects zero-padded tails and garbage files."""
        if self._entries or not self._deferred:
            self._check_open()
        if self._length % 8 != 0:
            raise CorruptIndexError(
                f"index file {self.path} has size {self._length}, not a multiple of 8")
        cdef Py_ssize_t i, bad = -1
        cdef int64_t prev_key = -1, prev_pos = -1, key, pos
        cdef int64_t limit = INT32_MAX if segment_size is None else segment_size
        with nogil:
            for i in range(self._entries):
                key = self._key(i)
                pos = self._value(i)
                if key <= prev_key or pos <= prev_pos or pos >= limit:
                    bad = i
                    break
                prev_key = key
                prev_pos = pos
        if bad >= 0:
            raise CorruptIndexError(
                f"index file {self.path} entry {bad} is out of order or out of range "
                f"({self.base_offset + self._key(bad)}, {self._value(bad)})")


cdef class TimeIndex(AbstractIndex):
    """Sparse map from timestamp to the offset of the batch holding the largest timestamp
    seen so far; timestamps strictly increase. The last slot is kept for the entry written
    when the segment rolls. Owner thread only, except flush()."""

    def __cinit__(self, *args, **kwargs):
        self._entry_size = 12
        self._spare = 1

    def lookup(self, int64_t timestamp):
        """(timestamp, offset) of the largest entry with timestamp <= target, or
        (NO_TIMESTAMP, base_offset)."""
        self._check_open()
        cdef Py_ssize_t slot = self._largest_lower_bound(timestamp, False)
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._key(slot), self.base_offset + self._value(slot)

    def entry(self, Py_ssize_t n):
        """The n-th entry as (timestamp, offset)."""
        self._check_open()
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} out of range for {self._entries} entries in {self.path}")
        return self._key(n), self.base_offset + self._value(n)

    @property
    def last_entry(self):
        """The last (timestamp, offset), or (NO_TIMESTAMP, base_offset) when empty."""
        if self._entries and self._deferred:
            self._open_deferred()
        if self._entries == 0 or self._data == NULL:
            return NO_TIMESTAMP, self.base_offset
        return self._key(self._entries - 1), self.base_offset + self._value(self._entries - 1)

    def maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check=False):
        """Add (timestamp, offset) if the timestamp is larger than the last one.

        The final entry of a segment whose index never got a file (skip_full_check: the
        segment stops being active) is written as the whole file, one write of its 12
        bytes, instead of making the full sparse file, mapping it and trimming it."""
        self._check_open()
        if self._pending and self._entries == 0 and skip_full_check and self.writable:
            return self._write_only_entry(timestamp, offset)
        return self._maybe_append(timestamp, offset, skip_full_check) == 1

    def _write_only_entry(self, int64_t timestamp, int64_t offset):
        if timestamp <= NO_TIMESTAMP:
            return False
        cdef int64_t relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit a relative offset from {self.base_offset}")
        cdef unsigned char entry[12]
        fl_put_be64(entry, <uint64_t>timestamp)
        fl_put_be32(entry + 8, <uint32_t>relative)
        self._write_whole(<bytes>entry[:12])
        return True

    cdef int _maybe_append(self, int64_t timestamp, int64_t offset,
                           bint skip_full_check) except -1:
        # 1: appended, 0: timestamp not larger than the last one.
        if self._deferred:
            self._open_deferred()
        if not skip_full_check and self._room() <= 0:
            raise IndexFullError(f"attempt to append to the full time index {self.path}")
        if self._entries >= self._max_entries:
            raise IndexFullError(f"no slot left in the time index {self.path}")
        cdef int64_t last_ts = NO_TIMESTAMP, last_offset = self.base_offset
        if self._entries > 0:
            last_ts = self._key(self._entries - 1)
            last_offset = self.base_offset + self._value(self._entries - 1)
            if offset < last_offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {self._entries} smaller than "
                    f"the last offset {last_offset} in {self.path}")
            if timestamp < last_ts:
                raise InvalidOffsetError(
                    f"attempt to append timestamp {timestamp} to slot {self._entries} smaller "
                    f"than the last timestamp {last_ts} in {self.path}")
        if timestamp <= last_ts:
            return 0
        cdef int64_t relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit a relative offset from {self.base_offset}")
        self._reserve((self._entries + 1) * 12)
        cdef unsigned char* p = self._data + self._entries * 12
        self._dirty = 1
        fl_put_be64(p, <uint64_t>timestamp)
        fl_put_be32(p + 8, <uint32_t>relative)
        self._entries += 1
        return 1

    def truncate_to(self, int64_t offset):
        """Remove every entry whose offset is >= `offset`."""
        self._check_open()
        self._truncate_to_relative(offset - self.base_offset, True)

    def sanity_check(self, next_offset=None):
        """Raise CorruptIndexError unless timestamps strictly increase and offsets never
        decrease (and stay below next_offset when given)."""
        if self._entries or not self._deferred:
            self._check_open()
        if self._length % 12 != 0:
            raise CorruptIndexError(
                f"time index file {self.path} has size {self._length}, not a multiple of 12")
        cdef Py_ssize_t i, bad = -1
        cdef int64_t prev_ts = NO_TIMESTAMP, prev_off = 0, ts, off
        cdef int64_t limit = INT32_MAX if next_offset is None else next_offset - self.base_offset
        with nogil:
            for i in range(self._entries):
                ts = self._key(i)
                off = self._value(i)
                if ts <= prev_ts or off < prev_off or off >= limit:
                    bad = i
                    break
                prev_ts = ts
                prev_off = off
        if bad >= 0:
            raise CorruptIndexError(
                f"time index file {self.path} entry {bad} is out of order or out of range "
                f"({self._key(bad)}, {self.base_offset + self._value(bad)})")


# ---------------------------------------------------------------------------------------
# Per-batch work of the storage hot paths, in one compiled call per append / scan window.

def summarize_batches(list batches, Py_ssize_t max_batch_size, int64_t next_offset,
                      bint check_order, int32_t current_epoch):
    """What Log.append needs to know about a record set, in one pass over its headers.

    Returns (record count, max timestamp, offset of the max timestamp, epoch changes
    [(epoch, base offset)], index of the first bad batch or -1, reason). A batch is bad if
    larger than max_batch_size, or (check_order, for replicated appends) if its offsets
    do not increase from next_offset on."""
    cdef BatchHeader h
    cdef int64_t count = 0, max_ts = -1, off_max = -1, prev = next_offset - 1
    cdef int32_t epoch = current_epoch
    cdef Py_ssize_t i
    cdef list epochs = []
    for i in range(len(batches)):
        h = <BatchHeader?>batches[i]
        if <Py_ssize_t>h.batch_length + 12 > max_batch_size:
            return count, max_ts, off_max, epochs, i, "too_large"
        if check_order:
            if h.base_offset <= prev or h.last_offset_delta < 0:
                return count, max_ts, off_max, epochs, i, "order"
            prev = h.base_offset + h.last_offset_delta
        count += h.record_count
        if h.max_timestamp > max_ts or off_max < 0:
            max_ts = h.max_timestamp
            off_max = h.base_offset + h.last_offset_delta
        if h.partition_leader_epoch >= 0 and h.partition_leader_epoch != epoch:
            epoch = h.partition_leader_epoch
            epochs.append((epoch, h.base_offset))
    return count, max_ts, off_max, epochs, -1, None


cdef class SegmentIndexer:
    """The index-building state of one segment (LogSegment.append and recover): adds an
    offset entry (and a time entry) before a batch once more than interval bytes were
    written since the last entry, tracks the segment's largest timestamp, and in
    recovery mode stops at the first batch whose offsets do not increase. Owner thread."""

    # (its fields are declared in _index.pxd: the compiled leader append reads them)

    def __init__(self, OffsetIndex offset_index, TimeIndex time_index, Py_ssize_t interval,
                 Py_ssize_t bytes_since=0, int64_t max_timestamp=NO_TIMESTAMP,
                 offset_of_max_timestamp=None, int64_t prev_last_offset=-1,
                 int32_t last_epoch=-1):
        self.offset_index = offset_index
        self.time_index = time_index
        self.interval = interval
        self.bytes_since = bytes_since
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = (offset_index.base_offset if offset_of_max_timestamp
                                        is None else offset_of_max_timestamp)
        self.prev_last_offset = prev_last_offset
        self.last_epoch = last_epoch

    def reserve(self, Py_ssize_t batches, Py_ssize_t upto=INT32_MAX, bint touch=False):
        """Reserve index space for the entries `batches` more batches may add (at most one
        each), before their data is written: a full disk then fails the append as a whole
        (OSError) instead of after the data went out. `upto` is the byte count the batches
        but the last add to bytes_since: while it stays within the interval they add no
        entry, and indexes without a file yet stay so (the final time entry of a segment
        reserves its space when its file is made, at roll or close). touch: also store
        zeros there now (past the entries: no reader looks), so that the page faults, which
        may wait for the file system's journal, happen here: the write thread of a
        write-behind append (LogSegment.write_at) does so while the owner leaves the index
        alone."""
        self._reserve(batches, upto, touch)

    cdef int _reserve(self, Py_ssize_t batches, Py_ssize_t upto, bint touch) except -1:
        if ((self.offset_index._pending or self.offset_index._deferred)
                and (self.time_index._pending or self.time_index._deferred)
                and self.bytes_since + upto <= self.interval):
            return 0
        self.offset_index._reserve_entries(batches, touch)
        self.time_index._reserve_entries(batches + 1, touch)
        return 0

    def add(self, list batches, Py_ssize_t shift=0, bint check_offsets=False,
            list epoch_changes=None):
        """Index the batches, which sit at h.position + shift in the segment file; returns
        how many were accepted (all, unless check_offsets found one out of order).
        Newer leader epochs are appended to epoch_changes as (epoch, base offset)."""
        return self._add(batches, shift, check_offsets, epoch_changes)

    cdef Py_ssize_t _add(self, list batches, Py_ssize_t shift, bint check_offsets,
                         list epoch_changes) except -1:
        cdef BatchHeader h
        cdef Py_ssize_t i, n = len(batches)
        cdef int64_t last, base = self.offset_index.base_offset
        for i in range(n):
            h = <BatchHeader?>batches[i]
            last = h.base_offset + h.last_offset_delta
            if check_offsets and (h.base_offset <= self.prev_last_offset or last < h.base_offset
                                  or h.base_offset < base or last - base > INT32_MAX):
                return i
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = last
            if self.bytes_since > self.interval:
                self.offset_index._append(last, h.position + shift)
                self.time_index._maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                              False)
                self.bytes_since = 0
            self.bytes_since += <Py_ssize_t>h.batch_length + 12
            # Only a newer epoch is recorded (as Kafka's recovery does): re-reading old
            # batches must not rewrite the epoch history.
            if epoch_changes is not None and h.partition_leader_epoch > self.last_epoch:
                self.last_epoch = h.partition_leader_epoch
                epoch_changes.append((self.last_epoch, h.base_offset))
            self.prev_last_offset = last
        return n
