# fastlog.server._exposition declarations: GaugeRows, the per-partition samples of a
# scrape as C arrays (see the .pyx's module comment).

from libc.stdint cimport int32_t, int64_t


cdef class GaugeRows:
    cdef readonly Py_ssize_t width     # values per row (one per family)
    cdef readonly bint partitioned     # rows carry a partition label
    cdef Py_ssize_t _rows
    cdef Py_ssize_t _capacity
    cdef int32_t* _heads               # per row: index into the heads list of text()
    cdef int64_t* _partitions          # per row: the partition label's value
    cdef int64_t* _values              # per row: `width` values
    cdef int _grow(self, Py_ssize_t least) except -1
    cdef int _append(self, int32_t head, int64_t partition, int64_t v0, int64_t v1,
                     int64_t v2, int64_t v3) except -1
    cdef int _reserve(self, Py_ssize_t more) except -1
    cdef void _put(self, int32_t head, int64_t partition, int64_t v0) noexcept nogil
    cdef int _sort_from(self, Py_ssize_t start, const int32_t* ranks,
                        Py_ssize_t nranks) except -1


cdef class HostedWatermarks:
    cdef dict _topics                  # topic -> its slot
    cdef int64_t** _arrays             # per slot: the values by partition number
    cdef Py_ssize_t* _lengths          # per slot: the values its array holds
    cdef Py_ssize_t _count
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t slot_for(self, topic) except -1
    cdef int note(self, Py_ssize_t slot, int64_t partition, int64_t value) except -1
    cdef int64_t slot_of(self, topic) except -2
    cdef inline int64_t value(self, int64_t slot, int64_t partition) noexcept nogil
