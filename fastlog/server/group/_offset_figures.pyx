# fastlog/server/group/_offset_figures.pyx — OffsetFigures: a group's committed offsets as
# the metrics scrape shows them (kafka_consumergroup_current_offset, _lag, _lag_sum), in a
# C array kept beside the group's dict of OffsetAndMetadata, written by every change of
# that dict, so a scrape copies one contiguous array without the interpreter lock instead
# of reading thousands of Python objects with it.
#
# Owns: entries (OffsetEntry, .pxd: the topic's id, the partition, the offset), dense
# (entries 0..count-1; a dropped entry is replaced by the last), in one array grown by
# doubling; per topic id, the topic (an id stays its topic's for the group's life, so the
# scrape's label texts by id never go stale) and how many entries it has; the entry of
# each (topic, partition) key.
# Writer: the broker's loop thread, holding the interpreter lock, through GroupMetadata's
# offset methods only (group.py: commit, a transaction's commit, deletion, expiry, load,
# the group's deletion), and GroupMetadata.rebuild_offset_figures when the scrape's check
# found a change missed. A new offset of a committed partition is one 8-byte store; an
# entry added, moved or dropped is written between two steps of `version` (odd meanwhile:
# a sequence lock), and an array grown while a scrape reads is freed once it is done.
# A scrape's copy sees each offset whole: an entry's offset is one aligned 8-byte word.
# Reader: the metrics scrape's thread (fastlog/server/_exposition.pyx
# add_offset_figure_rows): begin_read() with the lock, snapshot() without it (a copy of
# the entries, refused when `version` moved or is odd), end_read() with it again; and
# mismatches() with the lock, the scrape's periodic check of the entries against the dict.

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cdef extern from *:
    """
    static inline int64_t fl_load_acquire(const int64_t* p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void fl_store_relaxed(int64_t* p, int64_t v) {
        __atomic_store_n(p, v, __ATOMIC_RELAXED);
    }
    static inline void fl_store_release(int64_t* p, int64_t v) {
        __atomic_store_n(p, v, __ATOMIC_RELEASE);
    }
    static inline void fl_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
    """
    int64_t fl_load_acquire(const int64_t* p) noexcept nogil
    void fl_store_relaxed(int64_t* p, int64_t v) noexcept nogil
    void fl_store_release(int64_t* p, int64_t v) noexcept nogil
    void fl_fence() noexcept nogil

# Entries of a new array.
cdef Py_ssize_t _FIRST_CAPACITY = 16


cdef inline void _begin_write(OffsetFigures f) noexcept:
    fl_store_relaxed(&f.version, f.version + 1)  # odd: a reader's copy is refused
    fl_fence()


cdef inline void _end_write(OffsetFigures f) noexcept:
    fl_store_release(&f.version, f.version + 1)


cdef class OffsetFigures:
    """See the module comment. Made by a GroupMetadata; loop thread for every change."""

    def __cinit__(self):
        self._entries = NULL
        self._capacity = 0
        self.count = 0
        self.version = 0
        self.readers = 0
        self._retired = []
        self._index = {}
        self._keys = []
        self.topics = []
        self._topic_ids = {}
        self.topic_counts = []

    def __dealloc__(self):
        PyMem_Free(self._entries)
        if self._retired is not None:
            for address in self._retired:
                PyMem_Free(<void*><uintptr_t>address)

    def __len__(self):
        return self.count

    cdef int _grow(self) except -1:
        """Doubles the array (the old one kept until no scrape reads it)."""
        cdef Py_ssize_t capacity = self._capacity * 2 if self._capacity else _FIRST_CAPACITY
        cdef OffsetEntry* grown = <OffsetEntry*>PyMem_Malloc(capacity * sizeof(OffsetEntry))
        if grown == NULL:
            raise MemoryError()
        cdef OffsetEntry* old = self._entries
        if self.count:
            memcpy(grown, old, self.count * sizeof(OffsetEntry))
        if old != NULL and self.readers:
            self._retired.append(<uintptr_t>old)
        _begin_write(self)
        self._entries = grown
        self._capacity = capacity
        _end_write(self)
        if old != NULL and not self.readers:
            PyMem_Free(old)
        return 0

    def put(self, tuple key not None, int64_t offset) -> None:
        """Notes the committed offset of key (topic, partition)."""
        cdef Py_ssize_t i, tid
        cdef int64_t partition
        found = self._index.get(key)
        if found is not None:
            i = found
            fl_store_relaxed(&self._entries[i].offset, offset)
            return
        topic, partition = key  # (a key of another shape: refused before any change)
        found = self._topic_ids.get(topic)
        if found is None:
            tid = len(self.topics)
            self.topics.append(topic)
            self.topic_counts.append(0)
            self._topic_ids[topic] = tid
        else:
            tid = found
        if self.count == self._capacity:
            self._grow()
        i = self.count
        self._index[key] = i
        self._keys.append(key)
        self.topic_counts[tid] += 1
        _begin_write(self)
        self._entries[i].topic = tid
        self._entries[i].partition = partition
        self._entries[i].offset = offset
        self.count = i + 1
        _end_write(self)

    def remove(self, tuple key not None) -> None:
        """Drops the entry of key (topic, partition), if any."""
        found = self._index.pop(key, None)
        if found is None:
            return
        cdef Py_ssize_t i = found, last = self.count - 1
        self.topic_counts[self._entries[i].topic] -= 1
        moved = self._keys.pop()
        if i != last:
            self._keys[i] = moved
            self._index[moved] = i
        _begin_write(self)
        if i != last:
            self._entries[i] = self._entries[last]
        self.count = last
        _end_write(self)

    def clear(self) -> None:
        """Drops every entry (the topics keep their ids)."""
        cdef Py_ssize_t tid
        _begin_write(self)
        self.count = 0
        _end_write(self)
        self._index.clear()
        self._keys.clear()
        for tid in range(len(self.topic_counts)):
            self.topic_counts[tid] = 0

    def rebuild(self, dict offsets not None) -> None:
        """Every entry written anew from `offsets` ({(topic, partition): an
        OffsetAndMetadata}, the group's dict)."""
        self.clear()
        for key, committed in offsets.items():
            self.put(key, committed.offset)

    def get(self, tuple key not None):
        """The offset noted for key (topic, partition), or None."""
        found = self._index.get(key)
        if found is None:
            return None
        return self._entries[<Py_ssize_t>found].offset

    def entries(self) -> list:
        """(topic, partition, offset) of every entry, in entry order."""
        cdef Py_ssize_t i
        return [(self.topics[self._entries[i].topic], self._entries[i].partition,
                 self._entries[i].offset) for i in range(self.count)]

    def mismatches(self, dict offsets not None, pause, Py_ssize_t every) -> int:
        """How many entries differ from `offsets` (the group's dict: a key not there, or
        another offset; an entry whose topic and partition are not its key's), plus the
        keys of `offsets` without an entry; -1 when an entry was added, moved or dropped
        meanwhile (nothing can be said). Each entry is compared with the dict in one step;
        calls pause() before every `every`-th entry."""
        cdef Py_ssize_t i, wrong = 0, present = 0
        cdef int64_t version = self.version
        cdef OffsetEntry* e
        if every < 1:
            raise ValueError("mismatches pauses every 1 or more entries")
        i = 0
        while i < self.count:
            if i % every == 0:
                pause()
                if self.version != version:
                    return -1
                if i >= self.count:
                    break
            e = &self._entries[i]
            key = self._keys[i]
            committed = offsets.get(key)
            if committed is None:
                wrong += 1
            else:
                present += 1
                if (committed.offset != e.offset or e.partition != key[1]
                        or self.topics[e.topic] != key[0]):
                    wrong += 1
            i += 1
        if self.version != version:
            return -1
        return wrong + max(0, len(offsets) - present)

    cdef void begin_read(self) noexcept:
        """A scrape is about to read the entries without the lock (holding it now)."""
        self.readers += 1

    cdef void end_read(self) noexcept:
        """The scrape is done reading (holding the lock again): arrays grown out of
        meanwhile are freed."""
        self.readers -= 1
        if self.readers == 0 and self._retired:
            for address in self._retired:
                PyMem_Free(<void*><uintptr_t>address)
            self._retired.clear()

    cdef Py_ssize_t snapshot(self, OffsetEntry** out, int64_t version) noexcept nogil:
        """A copy of the entries in a new array (*out; the caller frees it) when `version`
        is the figures' version before and after the copy: its count, else -1 (an entry
        added, moved or dropped since; *out NULL); -2 when the copy cannot be allocated.
        Between begin_read() and end_read(), without the interpreter lock."""
        cdef Py_ssize_t n
        cdef OffsetEntry* copy
        out[0] = NULL
        if fl_load_acquire(&self.version) != version:
            return -1
        n = self.count
        copy = <OffsetEntry*>malloc((n if n else 1) * sizeof(OffsetEntry))
        if copy == NULL:
            return -2
        if n:
            memcpy(copy, self._entries, n * sizeof(OffsetEntry))
        fl_fence()
        if fl_load_acquire(&self.version) != version:
            free(copy)
            return -1
        out[0] = copy
        return n
