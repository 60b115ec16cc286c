# fastlog._index declarations: the memory-mapped offset and time indexes of a log segment.
# Byte order: the codec's inline big-endian helpers (fastlog/_codec.pxd), so that the
# search loops compile to plain loads.

from libc.stdint cimport int32_t, int64_t


cdef class AbstractIndex:
    cdef readonly object path
    cdef readonly int64_t base_offset
    cdef readonly Py_ssize_t max_index_size
    cdef readonly bint writable
    cdef bint _loaded          # the file is mapped (no descriptor is kept)
    cdef bint _dirty           # written (entries, size) since the last flush()
    cdef unsigned char* _data
    cdef Py_ssize_t _length
    cdef Py_ssize_t _reserved
    cdef Py_ssize_t _entries
    cdef Py_ssize_t _max_entries
    cdef int _entry_size
    # Last slots kept back from appends (TimeIndex: one, for the entry its segment's roll
    # writes).
    cdef Py_ssize_t _spare
    cdef Py_ssize_t _pending   # > 0: no file yet; created at this size when needed
    cdef bint _deferred        # the file exists, not opened yet (sizes known from a stat)

    cdef Py_ssize_t _room(self) noexcept
    cdef int _map(self, int fd, Py_ssize_t length) except -1
    cdef void _unmap(self) noexcept
    cdef int _check_open(self) except -1
    cdef int _open_deferred(self) except -1
    cdef int _materialize(self) except -1
    cdef int _write_whole(self, bytes data) except -1
    cdef int _reserve(self, Py_ssize_t end) except -1
    cdef int _reserve_entries(self, Py_ssize_t more, bint touch) except -1
    cdef int64_t _key(self, Py_ssize_t n) noexcept nogil
    cdef int64_t _value(self, Py_ssize_t n) noexcept nogil
    cdef void _truncate_to_relative(self, int64_t relative, bint by_value) noexcept
    cdef Py_ssize_t _largest_lower_bound(self, int64_t target, bint by_value) noexcept nogil
    cdef Py_ssize_t _smallest_upper_bound(self, int64_t target, bint by_value) noexcept nogil
    cdef void _slot_range(self, int64_t target, bint by_value,
                          Py_ssize_t* lower, Py_ssize_t* upper) noexcept nogil
    cdef void _binary_search(self, Py_ssize_t begin, Py_ssize_t end, int64_t target,
                             bint by_value, Py_ssize_t* lower, Py_ssize_t* upper) noexcept nogil


cdef class OffsetIndex(AbstractIndex):
    cdef int64_t _lookup(self, int64_t target, int64_t* position) noexcept nogil
    cdef int _append(self, int64_t offset, int64_t position) except -1


cdef class TimeIndex(AbstractIndex):
    cdef int _maybe_append(self, int64_t timestamp, int64_t offset,
                           bint skip_full_check) except -1


cdef class SegmentIndexer:
    cdef readonly OffsetIndex offset_index
    cdef readonly TimeIndex time_index
    cdef public Py_ssize_t interval
    cdef public Py_ssize_t bytes_since
    cdef public int64_t max_timestamp
    cdef public int64_t offset_of_max_timestamp
    cdef public int64_t prev_last_offset
    cdef public int32_t last_epoch

    cdef int _reserve(self, Py_ssize_t batches, Py_ssize_t upto, bint touch) except -1
    cdef Py_ssize_t _add(self, list batches, Py_ssize_t shift, bint check_offsets,
                         list epoch_changes) except -1
