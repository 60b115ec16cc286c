# fastlog/server/log/_figures.pyx — LogFigures: the figures the metrics scrape shows of every
# log a LogManager lists (size, log end offset, log start offset, segments, high watermark),
# one slot per log in C arrays, written where the figures change, so a scrape copies a few
# contiguous arrays instead of reading thousands of scattered Log and segment objects.
#
# Owns: slots of FIG_WIDTH int64s (_figures.pxd: the five figures, the partition number,
# the topic's id, in use) in pages of PAGE_SLOTS, made as needed and never moved or freed,
# so the compiled leader append (_append.pyx) keeps a pointer to its log's slot (a slot is
# reused once released); per topic id, the topic (an id stays its topic's for good, so a
# reader's label texts by id never go stale: one per topic name ever listed).
# Writers, all on the broker's loop thread and holding the interpreter lock: the
# LogManager takes a slot when it lists a log and releases it when it forgets it
# (Log.attach_figures, detach_figures); Log.note_figures writes all five after each change
# on Log's own paths (load, append, roll, truncation, retention, DeleteRecords, the high
# watermark, a compaction swap); LeaderAppend writes size, log end offset (and the high
# watermark on a single replica) after each compiled append, through its pointer.
# Reader: the metrics scrape's thread (fastlog/server/_exposition.pyx add_figure_rows),
# copying the slots while it holds the interpreter lock, so it sees each slot as of one
# moment (no writer runs meanwhile).

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.string cimport memset


cdef class LogFigures:
    """See the module comment. Made by a LogManager; loop thread for every change."""

    def __cinit__(self):
        memset(self._pages, 0, sizeof(self._pages))
        self.high = 0
        self.in_use = 0
        self.untracked = 0
        self.generation = 0
        self._free = []
        self.topics = []
        self._topic_ids = {}

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(MAX_PAGES):
            if self._pages[i] != NULL:
                PyMem_Free(self._pages[i])

    cdef int64_t* slot_ptr(self, Py_ssize_t slot) noexcept:
        """The slot's fields (NULL for a slot never handed out)."""
        if slot < 0 or slot >= self.high:
            return NULL
        return self._pages[slot // PAGE_SLOTS] + (slot % PAGE_SLOTS) * FIG_WIDTH

    def take(self, topic, Py_ssize_t partition) -> int:
        """A slot for the log of (topic, partition), its figures zero until noted; -1 when
        every page is full (counted in `untracked`)."""
        cdef Py_ssize_t slot, page, tid
        cdef int64_t* fig
        if self._free:
            slot = self._free.pop()
        else:
            slot = self.high
            page = slot // PAGE_SLOTS
            if page >= MAX_PAGES:
                self.untracked += 1
                return -1
            if self._pages[page] == NULL:
                self._pages[page] = <int64_t*>PyMem_Malloc(
                    PAGE_SLOTS * FIG_WIDTH * sizeof(int64_t))
                if self._pages[page] == NULL:
                    raise MemoryError()
                memset(self._pages[page], 0, PAGE_SLOTS * FIG_WIDTH * sizeof(int64_t))
            self.high = slot + 1
        found = self._topic_ids.get(topic)
        if found is None:
            tid = len(self.topics)
            self.topics.append(topic)
            self._topic_ids[topic] = tid
        else:
            tid = found
        fig = self.slot_ptr(slot)
        memset(fig, 0, FIG_WIDTH * sizeof(int64_t))
        fig[FIG_PARTITION] = partition
        fig[FIG_TOPIC] = tid
        fig[FIG_IN_USE] = 1
        self.in_use += 1
        self.generation += 1
        return slot

    def release(self, Py_ssize_t slot) -> None:
        """The slot's log is no longer listed: the slot may be taken again."""
        cdef int64_t* fig = self.slot_ptr(slot)
        if fig == NULL or not fig[FIG_IN_USE]:
            return
        fig[FIG_IN_USE] = 0
        self.in_use -= 1
        self.generation += 1
        self._free.append(slot)

    def put(self, Py_ssize_t slot, int64_t size, int64_t log_end_offset,
            int64_t log_start_offset, int64_t segments, int64_t high_watermark) -> None:
        """Notes a log's five figures in its slot (a slot not in use: nothing)."""
        cdef int64_t* fig = self.slot_ptr(slot)
        if fig == NULL or not fig[FIG_IN_USE]:
            return
        fig[FIG_SIZE] = size
        fig[FIG_LOG_END] = log_end_offset
        fig[FIG_LOG_START] = log_start_offset
        fig[FIG_SEGMENTS] = segments
        fig[FIG_HIGH_WATERMARK] = high_watermark

    def put_high_watermark(self, Py_ssize_t slot, int64_t high_watermark) -> None:
        """Notes a log's high watermark alone (Log.update_high_watermark: the replicated
        leader's and follower's every move)."""
        cdef int64_t* fig = self.slot_ptr(slot)
        if fig != NULL and fig[FIG_IN_USE]:
            fig[FIG_HIGH_WATERMARK] = high_watermark

    def get(self, Py_ssize_t slot):
        """(topic, partition, size, log end, log start, segments, high watermark) of a slot
        in use, else None."""
        cdef int64_t* fig = self.slot_ptr(slot)
        if fig == NULL or not fig[FIG_IN_USE]:
            return None
        return (self.topics[fig[FIG_TOPIC]], fig[FIG_PARTITION], fig[FIG_SIZE],
                fig[FIG_LOG_END], fig[FIG_LOG_START], fig[FIG_SEGMENTS],
                fig[FIG_HIGH_WATERMARK])
