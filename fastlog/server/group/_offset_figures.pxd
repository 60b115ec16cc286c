# fastlog.server.group._offset_figures declarations: OffsetFigures, a group's committed
# offsets in a C array, one entry per committed partition (see the .pyx's module comment).

from libc.stdint cimport int64_t


cdef struct OffsetEntry:
    int64_t topic       # the group's id of the topic (an index into OffsetFigures.topics)
    int64_t partition
    int64_t offset      # the committed offset


cdef class OffsetFigures:
    cdef OffsetEntry* _entries
    cdef Py_ssize_t _capacity
    cdef readonly Py_ssize_t count     # entries in use (0..count-1)
    cdef readonly int64_t version      # odd while an entry is added, moved or dropped
    cdef readonly Py_ssize_t readers   # scrapes reading the entries without the lock
    cdef list _retired                 # arrays grown out of while a scrape read (addresses)
    cdef dict _index                   # (topic, partition) -> its entry
    cdef list _keys                    # entry -> (topic, partition)
    cdef readonly list topics          # topic id -> topic (ids are never reused)
    cdef dict _topic_ids               # topic -> its id
    cdef readonly list topic_counts    # topic id -> entries of that topic
    cdef int _grow(self) except -1
    cdef void begin_read(self) noexcept
    cdef void end_read(self) noexcept
    cdef Py_ssize_t snapshot(self, OffsetEntry** out, int64_t version) noexcept nogil
