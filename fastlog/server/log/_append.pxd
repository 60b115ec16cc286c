# fastlog.server.log._append declarations: LeaderAppend, a log's everyday leader append.

from libc.stdint cimport int32_t, int64_t

from fastlog._index cimport SegmentIndexer
from fastlog.server.log._figures cimport LogFigures


cdef struct AppendResult:       # what LogAppendInfo says of an append
    int64_t first_offset
    int64_t last_offset
    int64_t max_timestamp
    int64_t offset_of_max_timestamp
    int64_t log_append_time
    int64_t count
    int64_t length
    int64_t log_start_offset


cdef class LeaderAppend:
    cdef object info_type        # LogAppendInfo
    cdef public bint enabled     # False: never armed (Log's own path for every append)
    cdef readonly bint armed     # the fields below describe the log as it is now
    cdef readonly int64_t appends  # appends taken here (tests read it)
    cdef object segment          # the active LogSegment
    cdef SegmentIndexer indexer  # its index-building state
    cdef int fd                  # its .log file's descriptor
    cdef int64_t base_offset
    cdef int64_t size            # its size in bytes
    cdef int64_t next_offset     # the log end offset
    cdef int64_t rolling_ts      # the timestamp time-based rolling counts from (-1: none)
    cdef int64_t created_ms
    cdef int64_t roll_ms         # segment.ms less the segment's jitter
    cdef int64_t segment_bytes
    cdef int64_t max_batch_size  # max.message.bytes
    cdef int64_t flush_messages
    cdef bint log_append_time
    cdef int64_t* fig            # the log's slot in its LogManager's LogFigures (or NULL)
    cdef int64_t sealed          # bytes of the log's other segments (Log._sealed_bytes)

    cdef object append_c(self, log, records, list batches, int32_t leader_epoch,
                         int64_t now, AppendResult *out)
