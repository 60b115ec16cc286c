# fastlog.server.log._figures declarations: LogFigures, the figures of every listed log in
# C arrays, one slot per log (see the .pyx's module comment).

from libc.stdint cimport int64_t

# A slot's int64 fields.
cdef enum:
    FIG_SIZE = 0          # bytes of the log's segments
    FIG_LOG_END = 1       # log end offset
    FIG_LOG_START = 2     # log start offset
    FIG_SEGMENTS = 3      # number of segments
    FIG_HIGH_WATERMARK = 4
    FIG_PARTITION = 5
    FIG_TOPIC = 6         # the topic's id (an index into LogFigures.topics)
    FIG_IN_USE = 7        # 1 while a log holds the slot
    FIG_WIDTH = 8
    PAGE_SLOTS = 1024     # slots per page (a page never moves once made)
    MAX_PAGES = 4096


cdef class LogFigures:
    cdef int64_t* _pages[MAX_PAGES]
    cdef readonly Py_ssize_t high      # slots ever handed out (0..high-1)
    cdef readonly Py_ssize_t in_use    # slots a log holds
    cdef readonly Py_ssize_t untracked  # logs refused a slot (every page full)
    cdef readonly Py_ssize_t generation  # slots taken and released so far
    cdef list _free                    # released slots, taken again first
    cdef readonly list topics          # topic id -> topic (ids are never reused)
    cdef dict _topic_ids               # topic -> its id
    cdef int64_t* slot_ptr(self, Py_ssize_t slot) noexcept
