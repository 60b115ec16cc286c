# fastlog/spark/_arrow.pxd: C-level declarations of the record-batch -> Arrow decoder.
#
# ColumnBuilder accumulates the columns of Spark's Kafka schema from fetched v2 record
# batches into growable byte buffers (see _arrow.pyx). One builder per executor task.

from libc.stdint cimport int32_t, int64_t


cdef struct GrowBuf:
    # A malloc'ed byte buffer that doubles when full; handed to Python as bytes at finish.
    unsigned char *data
    Py_ssize_t len
    Py_ssize_t cap


cdef class ColumnBuilder:
    cdef readonly bint include_headers
    cdef readonly Py_ssize_t rows
    cdef Py_ssize_t key_nulls
    cdef Py_ssize_t value_nulls
    cdef Py_ssize_t header_nulls
    cdef Py_ssize_t header_value_nulls
    cdef Py_ssize_t header_count
    cdef GrowBuf offsets        # int64 per row
    cdef GrowBuf timestamps     # int64 microseconds per row
    cdef GrowBuf ts_types       # int32 per row
    cdef GrowBuf key_valid      # validity bitmap
    cdef GrowBuf key_offsets    # int32, rows + 1
    cdef GrowBuf key_data
    cdef GrowBuf value_valid
    cdef GrowBuf value_offsets
    cdef GrowBuf value_data
    cdef GrowBuf hdr_valid      # list validity (null when a record has no headers)
    cdef GrowBuf hdr_offsets    # list offsets, rows + 1
    cdef GrowBuf hk_offsets     # header key (string) offsets, header_count + 1
    cdef GrowBuf hk_data
    cdef GrowBuf hv_valid
    cdef GrowBuf hv_offsets
    cdef GrowBuf hv_data
    cdef int _reset(self) except -1
    cdef void _free_headers(self) noexcept
    cdef int _add_records(self, const unsigned char *d, Py_ssize_t end, int64_t base_offset,
                          int32_t count, int64_t first_ts, int64_t max_ts, bint log_append,
                          int64_t start, int64_t stop, Py_ssize_t where) except -1
