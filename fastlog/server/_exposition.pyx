# fastlog/server/_exposition.pyx — GaugeRows: the samples of the gauge families with one
# sample per partition or per committed offset (kafka_log_log_*, kafka_consumergroup_*),
# kept as C arrays and written as exposition text in compiled code.
#
# Owns: per row, a label head (an index into a list of pre-encoded label texts, e.g.
# b'topic="orders",' or b'consumergroup="g",topic="orders",'), the partition label's
# value (when the rows are `partitioned`) and `width` int64 values, one per family.
# Format: text(column, name, heads) writes one line per row,
#   name{HEAD partition="P"} VALUE\n     (partitioned rows; HEAD ends with a comma)
#   name{HEAD} VALUE\n                   (other rows)
# with integers in decimal (prometheus_client writes the same values as floats, "42.0";
# both formats parse either to the same sample value). The caller escapes the label
# values in the heads (metrics.label_value) and writes the family's HELP and TYPE lines.
# Why: a scrape of a broker with thousands of partitions wrote tens of thousands of lines
# with a Python f-string each while holding the interpreter lock; the request loop then
# waited for the lock and shared its core with that work. Here a row costs one call, and
# the text is written with the interpreter lock released.
# Also here, the scrape's other walks over every partition, each one compiled pass that
# reads the objects' attributes without a Python call per partition: offline_partitions
# (the controller's counts over the metadata's PartitionStates) and replica_counts (the
# replica manager's gauges over its Partitions: the check of the counts it keeps,
# partition.PartitionCounts, every few scrapes, and the test's reference). The walks stay
# apart because their sets differ: the log rows are every log in an online dir (a log
# stays when its partition is no longer a replica here; an offline partition's log is not
# listed), the replica counts every hosted Partition, the controller counts every
# partition of the cluster. The log rows come from the log manager's LogFigures
# (add_figure_rows: a copy of contiguous C arrays the logs write as their figures change;
# add_log_rows, the walk over the Logs, where a log has no slot, and figure_mismatches,
# the scrape's periodic check of the slots against it). Either also notes the high
# watermark of each log whose partition is hosted and online in a HostedWatermarks (C
# arrays by topic and partition number; the caller adds the offline ones;
# add_figure_rows takes which slots are hosted from hosted_slots, which the caller keeps
# between scrapes), which the lag rows of every group then read instead of looking each
# committed offset's Partition up and reading it and its Log; replica_counts can note
# them too (a hosted partition without an online log).
# The lag rows of a group come from its OffsetFigures (add_offset_figure_rows: its
# committed offsets in a C array the group writes as they change,
# fastlog/server/group/_offset_figures.pyx, copied, read against the HostedWatermarks and
# ordered with the interpreter lock released; only a partition led elsewhere reads the
# remote high watermarks, Python objects, with it), or from its dict (add_offset_rows).
# And hand_over, the sleep of the scrape's breaks (metrics.GilBreaks): the interpreter lock
# released for as long as the request loop's thread keeps running; every stretch here
# without the lock ends the same way when the loop ran during it (set_scrape_loop,
# _polite_return), so the scrape does not ask for the lock while the loop is mid-request;
# the scrape's Python between two breaks rests the same way (_polite_profile, the
# thread's profile hook while it watches the loop, all its life on the HTTP thread,
# looking at the loop's clock every few microseconds), and so do polite_epoll_wait, the
# HTTP thread's wait for its sockets, and send_polite, its writes to them (an answer
# handed to the socket without the lock).
# Called from: the HTTP endpoint's thread (fastlog/server/metrics.py, BrokerCollector),
# one GaugeRows per scrape; not shared between threads. Every walk holds the interpreter
# lock and calls the caller's pause (metrics.GilBreaks) every `every` rows.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from libc.errno cimport EINTR, errno
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcpy, memset, strerror
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, nanosleep, timespec
from posix.types cimport clockid_t

from fastlog.server.log._figures cimport (
    FIG_HIGH_WATERMARK,
    FIG_IN_USE,
    FIG_LOG_END,
    FIG_LOG_START,
    FIG_PARTITION,
    FIG_SEGMENTS,
    FIG_SIZE,
    FIG_TOPIC,
    LogFigures,
)
from fastlog._rawbytes cimport _bytes_data, _new_bytes, _PyBytes_Resize
from fastlog.server.group._offset_figures cimport OffsetEntry, OffsetFigures

cdef extern from *:
    """
    /* While this thread scrapes: whether a request loop is watched, its CPU clock (a
       thread's clock id, negative), and the sleep and the most sleeps of a rest
       (set_scrape_loop). Per thread: each broker's HTTP thread scrapes its own broker. */
    static __thread int fl_scrape_watched = 0;
    static __thread long fl_scrape_loop_clock = 0;
    static __thread long long fl_scrape_rest_ns = 0;
    static __thread int fl_scrape_rest_most = 0;
    static __thread long fl_scrape_rests = 0;  /* rests taken since set */
    static void fl_set_scrape_loop(int watched, long clock, long long rest_ns, int most) {
        fl_scrape_watched = watched;
        fl_scrape_loop_clock = clock;
        fl_scrape_rest_ns = rest_ns;
        fl_scrape_rest_most = most;
        fl_scrape_rests = 0;
    }
    static void fl_count_rest(void) { fl_scrape_rests += 1; }
    /* The profile hook's (_polite_profile): events since its last look at the loop's
       clock, and the clock then (-1: not looked yet). */
    static __thread unsigned fl_prof_events = 0;
    static __thread long long fl_prof_seen = -1;
    static __thread int fl_prof_installed = 0;  /* set_scrape_loop installed the hook */
    static int fl_prof_due(unsigned every) { return ++fl_prof_events % every == 0; }
    static void fl_prof_set_seen(long long seen) { fl_prof_seen = seen; }
    """
    int fl_scrape_watched
    long fl_scrape_loop_clock
    long long fl_scrape_rest_ns
    int fl_scrape_rest_most
    long fl_scrape_rests
    void fl_set_scrape_loop(int watched, long clock, long long rest_ns, int most) noexcept nogil
    void fl_count_rest() noexcept nogil
    long long fl_prof_seen
    int fl_prof_installed
    int fl_prof_due(unsigned every) noexcept nogil
    void fl_prof_set_seen(long long seen) noexcept nogil

cdef extern from "Python.h":
    ctypedef struct PyFrameObject:
        pass
    ctypedef int (*Py_tracefunc)(PyObject*, PyFrameObject*, int, PyObject*) noexcept
    void PyEval_SetProfile(Py_tracefunc func, PyObject* obj)

cdef enum:
    # the profile hook looks at the loop's clock once every this many of its events
    # (calls and returns of Python and C functions: a few microseconds of the scrape's
    # Python)
    PROFILE_EVERY = 32

# Rows allocated at first, and the most values a row holds.
cdef Py_ssize_t _FIRST_CAPACITY = 256
cdef Py_ssize_t _MAX_WIDTH = 4
# Bytes of a line beyond its name and head: '{', 'partition=""', '} ', two int64s of at
# most 20 characters each, '\n'.
cdef Py_ssize_t _LINE_EXTRA = 1 + 12 + 2 + 20 + 20 + 1
# HostedWatermarks: a partition not hosted here, one in a failed log dir, and the largest
# partition number noted (Kafka's partition numbers are int32).
cdef int64_t _NOT_HOSTED = -1
cdef int64_t _OFFLINE = -2
cdef int64_t _MAX_PARTITION = 0x7FFFFFFF
# add_offset_figure_rows: copies of a group's entries tried before it gives up (a copy is
# refused when an entry was added, moved or dropped while it was made).
cdef int _SNAPSHOT_ATTEMPTS = 3
OFFLINE = _OFFLINE


cdef struct _RowKey:
    int32_t rank      # the rank of the row's head (its topic's place in sorted order)
    int64_t partition
    Py_ssize_t row


cdef int _compare_keys(const void* a, const void* b) noexcept nogil:
    cdef const _RowKey* x = <const _RowKey*>a
    cdef const _RowKey* y = <const _RowKey*>b
    if x.rank != y.rank:
        return -1 if x.rank < y.rank else 1
    if x.partition != y.partition:
        return -1 if x.partition < y.partition else 1
    return -1 if x.row < y.row else (1 if x.row > y.row else 0)


cdef inline Py_ssize_t _write_int(char* out, int64_t value) noexcept nogil:
    """Writes `value` in decimal at `out`; returns the characters written (at most 20)."""
    cdef char digits[20]
    cdef Py_ssize_t n = 0, i = 0
    cdef uint64_t u
    if value < 0:
        out[0] = 45  # '-'
        i = 1
        u = <uint64_t>(-(value + 1)) + 1
    else:
        u = <uint64_t>value
    while True:
        digits[n] = <char>(48 + u % 10)  # '0' + the digit
        n += 1
        u //= 10
        if u == 0:
            break
    while n > 0:
        n -= 1
        out[i] = digits[n]
        i += 1
    return i


cdef class GaugeRows:
    """See the module comment. `width`: values per row (1-4); `partitioned`: rows carry a
    partition label after their head."""

    def __cinit__(self, Py_ssize_t width, bint partitioned=True):
        if width < 1 or width > _MAX_WIDTH:
            raise ValueError(f"a row holds 1 to {_MAX_WIDTH} values, not {width}")
        self.width = width
        self.partitioned = partitioned
        self._rows = 0
        self._capacity = 0
        self._heads = NULL
        self._partitions = NULL
        self._values = NULL

    def __dealloc__(self):
        free(self._heads)
        free(self._partitions)
        free(self._values)

    def __len__(self):
        return self._rows

    cdef int _grow(self, Py_ssize_t least) except -1:
        """Room for at least `least` rows (and at least twice the room there was)."""
        cdef Py_ssize_t capacity = self._capacity * 2 if self._capacity else _FIRST_CAPACITY
        if capacity < least:
            capacity = least
        cdef void* heads = realloc(self._heads, capacity * sizeof(int32_t))
        if heads == NULL:
            raise MemoryError()
        self._heads = <int32_t*>heads
        cdef void* partitions = realloc(self._partitions, capacity * sizeof(int64_t))
        if partitions == NULL:
            raise MemoryError()
        self._partitions = <int64_t*>partitions
        cdef void* values = realloc(self._values, capacity * self.width * sizeof(int64_t))
        if values == NULL:
            raise MemoryError()
        self._values = <int64_t*>values
        self._capacity = capacity
        return 0

    cdef int _append(self, int32_t head, int64_t partition, int64_t v0, int64_t v1,
                     int64_t v2, int64_t v3) except -1:
        if head < 0:
            raise ValueError(f"head index {head} is negative")
        if self._rows == self._capacity:
            self._grow(0)
        cdef Py_ssize_t row = self._rows
        cdef int64_t* values = self._values + row * self.width
        self._heads[row] = head
        self._partitions[row] = partition
        values[0] = v0
        if self.width > 1:
            values[1] = v1
        if self.width > 2:
            values[2] = v2
        if self.width > 3:
            values[3] = v3
        self._rows = row + 1
        return 0

    cdef int _reserve(self, Py_ssize_t more) except -1:
        """Room for `more` rows beyond those held (for _put without the lock), made in
        one step: the new memory is first touched by _put, not copied into here."""
        if self._capacity - self._rows < more:
            self._grow(self._rows + more)
        return 0

    cdef void _put(self, int32_t head, int64_t partition, int64_t v0) noexcept nogil:
        """A row of one value (the row's other values 0) in room _reserve made; the head
        must be one of the heads (>= 0)."""
        cdef Py_ssize_t row = self._rows, i
        cdef int64_t* values = self._values + row * self.width
        self._heads[row] = head
        self._partitions[row] = partition
        values[0] = v0
        for i in range(1, self.width):
            values[i] = 0
        self._rows = row + 1

    cdef int _sort_from(self, Py_ssize_t start, const int32_t* ranks,
                        Py_ssize_t nranks) except -1:
        """Orders rows start.. by (ranks[head], partition), with the interpreter lock
        released (each row's head must be below nranks); rows already in that order (a
        group's offsets as committed often are) are left as they are, nothing allocated."""
        cdef Py_ssize_t n = self._rows - start, i, w = self.width, row, bad = -1
        cdef bint ordered = True
        cdef int32_t* row_heads = self._heads
        cdef int64_t* row_partitions = self._partitions
        cdef _RowKey* keys = NULL
        cdef int32_t* heads = NULL
        cdef int64_t* partitions = NULL
        cdef int64_t* values = NULL
        cdef int64_t mark
        if n < 2:
            return 0
        with nogil:
            mark = _loop_mark()
            for i in range(start, self._rows):
                if row_heads[i] >= nranks:
                    bad = i
                    break
                if ordered and i > start and (
                        ranks[row_heads[i - 1]] > ranks[row_heads[i]]
                        or (ranks[row_heads[i - 1]] == ranks[row_heads[i]]
                            and row_partitions[i - 1] > row_partitions[i])):
                    ordered = False
            _polite_return(mark)
        if bad >= 0:
            raise IndexError(f"row {bad} names head {row_heads[bad]} of {nranks} ranked")
        if ordered:
            return 0
        try:
            keys = <_RowKey*>malloc(n * sizeof(_RowKey))
            heads = <int32_t*>malloc(n * sizeof(int32_t))
            partitions = <int64_t*>malloc(n * sizeof(int64_t))
            values = <int64_t*>malloc(n * w * sizeof(int64_t))
            if keys == NULL or heads == NULL or partitions == NULL or values == NULL:
                raise MemoryError()
            with nogil:
                mark = _loop_mark()
                for i in range(n):
                    row = start + i
                    keys[i].rank = ranks[row_heads[row]]
                    keys[i].partition = row_partitions[row]
                    keys[i].row = row
                qsort(keys, n, sizeof(_RowKey), _compare_keys)
                for i in range(n):
                    row = keys[i].row
                    heads[i] = row_heads[row]
                    partitions[i] = row_partitions[row]
                    memcpy(values + i * w, self._values + row * w, w * sizeof(int64_t))
                memcpy(row_heads + start, heads, n * sizeof(int32_t))
                memcpy(row_partitions + start, partitions, n * sizeof(int64_t))
                memcpy(self._values + start * w, values, n * w * sizeof(int64_t))
                _polite_return(mark)
        finally:
            with nogil:  # (large blocks go back to the system: munmap)
                mark = _loop_mark()
                free(keys)
                free(heads)
                free(partitions)
                free(values)
                _polite_return(mark)
        return 0

    def add(self, int32_t head, int64_t partition, int64_t v0, int64_t v1=0, int64_t v2=0,
            int64_t v3=0):
        """One row: its head's index, its partition (ignored unless `partitioned`) and its
        values (the first `width` of v0-v3)."""
        self._append(head, partition, v0, v1, v2, v3)

    def text(self, Py_ssize_t column, bytes name not None, heads) -> bytes:
        """The lines of every row's value `column` under the family `name`, heads[i] being
        the label text of head index i (bytes). IndexError for a row whose head is not in
        `heads`, TypeError for a head that is not bytes."""
        if column < 0 or column >= self.width:
            raise IndexError(f"column {column} of rows {self.width} wide")
        cdef tuple held = tuple(heads)  # keeps every head alive while the lock is released
        cdef Py_ssize_t count = len(held), rows = self._rows, i, h
        cdef const char** texts = NULL
        cdef Py_ssize_t* lengths = NULL
        cdef PyObject* written = NULL
        cdef int64_t mark
        cdef char* buf
        cdef char* out
        cdef const char* name_text = PyBytes_AS_STRING(name)
        cdef Py_ssize_t name_len = PyBytes_GET_SIZE(name), bound = 0, width = self.width
        cdef bint partitioned = self.partitioned
        cdef int32_t* row_heads = self._heads
        cdef int64_t* partitions = self._partitions
        cdef int64_t* values = self._values
        try:
            texts = <const char**>malloc((count + 1) * sizeof(char*))
            lengths = <Py_ssize_t*>malloc((count + 1) * sizeof(Py_ssize_t))
            if texts == NULL or lengths == NULL:
                raise MemoryError()
            for i in range(count):
                head = held[i]
                if type(head) is not bytes:
                    raise TypeError(f"head {i} is {type(head).__name__}, not bytes")
                texts[i] = PyBytes_AS_STRING(head)
                lengths[i] = PyBytes_GET_SIZE(head)
            for i in range(rows):
                h = row_heads[i]
                if h >= count:
                    raise IndexError(f"row {i} names head {h} of {count}")
                bound += name_len + lengths[h] + _LINE_EXTRA
            written = _new_bytes(NULL, bound)
            buf = _bytes_data(written)
            with nogil:
                mark = _loop_mark()
                out = buf
                for i in range(rows):
                    h = row_heads[i]
                    memcpy(out, name_text, name_len)
                    out += name_len
                    out[0] = 123  # '{'
                    out += 1
                    memcpy(out, texts[h], lengths[h])
                    out += lengths[h]
                    if partitioned:
                        memcpy(out, b'partition="', 11)
                        out += 11
                        out += _write_int(out, partitions[i])
                        out[0] = 34  # '"'
                        out += 1
                    out[0] = 125  # '}'
                    out[1] = 32  # ' '
                    out += 2
                    out += _write_int(out, values[i * width + column])
                    out[0] = 10  # newline
                    out += 1
                _polite_return(mark)
            _PyBytes_Resize(&written, out - buf)
            return <object>written  # a new reference; ours is dropped below
        finally:
            Py_XDECREF(written)
            free(texts)
            free(lengths)


cdef class HostedWatermarks:
    """The high watermark of each hosted partition as of one scrape's replica_counts walk,
    by (topic, partition), for the lag rows (add_offset_rows), so those need not look each
    committed offset's partition up and read its Partition and Log again. Per topic a C
    array by partition number: the high watermark, _NOT_HOSTED for a partition not hosted
    here, _OFFLINE for one in a failed log dir. Grown only by note() from the replica
    manager's own partitions; lookups of any other number (a client may commit an offset
    of any partition) are bounds-checked, never grown. One scrape, the HTTP thread."""

    def __cinit__(self):
        self._topics = {}
        self._arrays = NULL
        self._lengths = NULL
        self._count = 0
        self._capacity = 0

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._arrays != NULL:
            for i in range(self._count):
                free(self._arrays[i])
        free(self._arrays)
        free(self._lengths)

    cdef Py_ssize_t slot_for(self, topic) except -1:
        """The topic's slot, made when it has none yet."""
        cdef Py_ssize_t slot, capacity
        cdef void* grown
        found = self._topics.get(topic)
        if found is not None:
            return found
        if self._count == self._capacity:
            capacity = self._capacity * 2 if self._capacity else 16
            grown = realloc(self._arrays, capacity * sizeof(int64_t*))
            if grown == NULL:
                raise MemoryError()
            self._arrays = <int64_t**>grown
            grown = realloc(self._lengths, capacity * sizeof(Py_ssize_t))
            if grown == NULL:
                raise MemoryError()
            self._lengths = <Py_ssize_t*>grown
            self._capacity = capacity
        slot = self._count
        self._arrays[slot] = NULL
        self._lengths[slot] = 0
        self._count = slot + 1
        self._topics[topic] = slot
        return slot

    cdef int note(self, Py_ssize_t slot, int64_t partition, int64_t value) except -1:
        """Notes `value` for partition `partition` of the topic in `slot` (slot_for)."""
        cdef Py_ssize_t old, i, length
        cdef void* grown
        if partition < 0 or partition > _MAX_PARTITION:
            return 0  # (not a partition any topic here can have: looked up as not hosted)
        if partition >= self._lengths[slot]:
            old = self._lengths[slot]
            # (doubled: partitions noted in order grow it a few times, not every 64)
            length = max(partition + 64, 2 * old)
            grown = realloc(self._arrays[slot], length * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            self._arrays[slot] = <int64_t*>grown
            for i in range(old, length):
                self._arrays[slot][i] = _NOT_HOSTED
            self._lengths[slot] = length
        self._arrays[slot][partition] = value
        return 0

    cdef int64_t slot_of(self, topic) except -2:
        """The topic's slot, -1 when no partition of it is hosted."""
        found = self._topics.get(topic)
        return -1 if found is None else <int64_t>found

    cdef inline int64_t value(self, int64_t slot, int64_t partition) noexcept nogil:
        if slot < 0 or partition < 0 or partition >= self._lengths[slot]:
            return _NOT_HOSTED
        return self._arrays[slot][partition]

    def get(self, topic, int64_t partition):
        """The high watermark noted for (topic, partition); None when not hosted here,
        -2 (OFFLINE) for a partition in a failed log dir."""
        cdef int64_t v = self.value(self.slot_of(topic), partition)
        return None if v == _NOT_HOSTED else v

    def add(self, topic, int64_t partition, high_watermark, bint offline=False):
        """Notes one hosted partition (what replica_counts does for each)."""
        self.note(self.slot_for(topic), partition,
                  _OFFLINE if offline else <int64_t>high_watermark)


def add_log_rows(GaugeRows rows not None, dict heads not None, new_head, logs, pause,
                 Py_ssize_t every, HostedWatermarks marks=None, hosted=None, offline=None):
    """Adds to `rows` (4 wide) a row per log of `logs` (fastlog.server.log.Log): its
    partition, and its size (the sum of its segments' sizes), log end offset, log start
    offset and number of segments; headed by heads[its topic], or new_head(topic), which
    adds the topic's head and returns its index. With `marks`, also notes there the high
    watermark of each log whose (topic, partition) is in `hosted` (the replica manager's
    partitions) and not in `offline` (a set of keys, or None), for add_offset_rows, and
    returns how many it noted; else returns the logs' count. Calls pause() before every
    `every`-th log (metrics.GilBreaks: this loop holds the interpreter lock)."""
    cdef Py_ssize_t n = 0, noted = 0, slot = 0
    cdef int64_t size
    if rows.width != 4 or every < 1:
        raise ValueError("add_log_rows fills rows 4 wide, pausing every 1 or more")
    if marks is not None and hosted is None:
        raise ValueError("add_log_rows notes the high watermarks of the hosted logs only")
    last_topic = head = None
    for lg in logs:
        if n % every == 0:
            pause()
        n += 1
        segments = lg.segments  # an immutable snapshot
        size = 0
        for segment in segments:
            size += segment.size
        topic = lg.topic
        if topic is not last_topic:  # (a run of one topic's logs: one lookup)
            head = heads.get(topic)
            if head is None:
                head = new_head(topic)
            if marks is not None:
                slot = marks.slot_for(topic)
            last_topic = topic
        partition = lg.partition
        rows._append(head, partition, size, lg.log_end_offset, lg.log_start_offset,
                     len(segments))
        if marks is not None:
            key = (topic, partition)
            if key in hosted and (not offline or key not in offline):
                marks.note(slot, partition, lg.high_watermark)
                noted += 1
    return n if marks is None else noted


cdef int64_t* _slot_in_use(LogFigures figures, Py_ssize_t slot, Py_ssize_t* n, pause,
                           Py_ssize_t every) except? NULL:
    """The fields of `slot` of `figures` when it is in use, else NULL; pause() comes
    before every `every`-th slot in use (counted in n[0]), and a slot released during it
    is NULL too."""
    cdef int64_t* fig = figures.slot_ptr(slot)
    if not fig[FIG_IN_USE]:
        return NULL
    if n[0] % every == 0:
        pause()
        if not fig[FIG_IN_USE]:  # (released meanwhile)
            return NULL
    n[0] += 1
    return fig


def hosted_slots(LogFigures figures not None, hosted not None, offline, pause,
                 Py_ssize_t every) -> bytearray:
    """A byte per slot of `figures` (its `high` slots): 1 where the slot is in use and its
    (topic, partition) is in `hosted` (the replica manager's partitions) and not in
    `offline` (a set of keys, or None), else 0: the logs whose high watermark the lag rows
    take (add_figure_rows). A dict lookup per slot, holding the interpreter lock; the
    caller keeps the result for as long as neither the slots (figures.generation) nor the
    hosted partitions change. Calls pause() before every `every`-th slot in use."""
    cdef Py_ssize_t slot, high = figures.high, n = 0
    cdef int64_t* fig
    cdef list topics = figures.topics
    if every < 1:
        raise ValueError("hosted_slots pauses every 1 or more slots")
    mask = bytearray(high)
    cdef unsigned char[:] out = mask
    for slot in range(high):
        fig = _slot_in_use(figures, slot, &n, pause, every)
        if fig == NULL:
            continue
        key = (topics[fig[FIG_TOPIC]], fig[FIG_PARTITION])
        if key in hosted and (not offline or key not in offline):
            out[slot] = 1
    return mask


def add_figure_rows(GaugeRows rows not None, LogFigures figures not None, pause,
                    Py_ssize_t every, HostedWatermarks marks=None, mask=None):
    """Adds to `rows` (4 wide) what add_log_rows would of the logs the LogManager lists,
    from their slots in its `figures` (fastlog/server/log/_figures.pyx) instead of the Logs:
    a row per slot in use, in slot order, headed by its topic's id (the heads are one per
    topic id, figures.topics[i] the topic of id i). With `marks`, also notes there the
    high watermark of each slot `mask` (hosted_slots) marks as hosted, as add_log_rows
    does with its `hosted`, and returns how many it noted; else returns the rows added.
    One pass over contiguous C arrays without a Python object per row (a Python step per
    topic id met: its slot in `marks`), holding the interpreter lock (the writers hold it:
    each row is its log as of one moment) and calling pause() before every `every`-th
    row; topic ids are never reused, so a row's head stays its topic's across a pause."""
    cdef Py_ssize_t slot, high = figures.high, n = 0, noted = 0, tid
    cdef Py_ssize_t ntopics = len(figures.topics)
    cdef int64_t* fig
    cdef const unsigned char[:] hosted
    cdef Py_ssize_t* mark_slots = NULL  # per topic id: its slot in marks, -1 until met
    if rows.width != 4 or every < 1:
        raise ValueError("add_figure_rows fills rows 4 wide, pausing every 1 or more")
    if marks is not None:
        if mask is None:
            raise ValueError("add_figure_rows notes the high watermarks of the hosted logs only")
        hosted = mask
        mark_slots = <Py_ssize_t*>malloc((ntopics + 1) * sizeof(Py_ssize_t))
        if mark_slots == NULL:
            raise MemoryError()
        for tid in range(ntopics):
            mark_slots[tid] = -1
    try:
        for slot in range(high):
            fig = _slot_in_use(figures, slot, &n, pause, every)
            if fig == NULL:
                continue
            tid = fig[FIG_TOPIC]
            rows._append(<int32_t>tid, fig[FIG_PARTITION], fig[FIG_SIZE], fig[FIG_LOG_END],
                         fig[FIG_LOG_START], fig[FIG_SEGMENTS])
            if marks is None or slot >= hosted.shape[0] or not hosted[slot]:
                continue
            if tid >= ntopics:  # (a topic listed since the pass began)
                marks.note(marks.slot_for(figures.topics[tid]), fig[FIG_PARTITION],
                           fig[FIG_HIGH_WATERMARK])
            else:
                if mark_slots[tid] < 0:
                    mark_slots[tid] = marks.slot_for(figures.topics[tid])
                marks.note(mark_slots[tid], fig[FIG_PARTITION], fig[FIG_HIGH_WATERMARK])
            noted += 1
    finally:
        free(mark_slots)
    return n if marks is None else noted


def figure_mismatches(LogFigures figures not None, logs, pause, Py_ssize_t every):
    """How many of `logs` (the LogManager's, each holding a slot of `figures`) have a
    slot whose figures differ from the log's own (size as the sum of its segments', log
    end and start offsets, segments, high watermark, topic and partition), or no slot;
    each log compared with its slot in one step (no pause between). Calls pause() before
    every `every`-th log."""
    cdef Py_ssize_t n = 0, wrong = 0
    cdef int64_t size
    cdef int64_t* fig
    if every < 1:
        raise ValueError("figure_mismatches pauses every 1 or more logs")
    topics = figures.topics
    for lg in logs:
        if n % every == 0:
            pause()
        n += 1
        fig = NULL
        if lg._figures is figures:
            fig = figures.slot_ptr(lg._figure_slot)
        if fig == NULL or not fig[FIG_IN_USE]:
            wrong += 1
            continue
        segments = lg.segments
        size = 0
        for segment in segments:
            size += segment.size
        if (fig[FIG_SIZE] != size or fig[FIG_LOG_END] != lg.log_end_offset
                or fig[FIG_LOG_START] != lg.log_start_offset
                or fig[FIG_SEGMENTS] != len(segments)
                or fig[FIG_HIGH_WATERMARK] != lg.high_watermark
                or fig[FIG_PARTITION] != lg.partition
                or topics[fig[FIG_TOPIC]] != lg.topic):
            wrong += 1
    return wrong


def add_offset_rows(GaugeRows current not None, GaugeRows lag not None, dict heads not None,
                    new_head, offsets, HostedWatermarks marks not None, remote,
                    dict sums not None, pause, Py_ssize_t every):
    """For each ((topic, partition), committed) of `offsets` (a group's committed offsets,
    an OffsetAndMetadata each, in any order): a row of the committed offset in `current`;
    and where the partition's high watermark is known (the one `marks` noted for a
    hosted partition that is not offline, else for one not hosted here
    remote.get(topic, partition) unless `remote` is None; None: unknown), a row of the
    lag max(0, high watermark - offset) in `lag`, added to sums[topic] (summed per topic
    in C, added to `sums` at the end). The rows are headed by heads[topic], or
    new_head(topic), which adds the topic's head and returns its index; `heads` holds
    only the topics of `offsets` (one group's). The rows this call adds are then ordered
    by (topic, partition), as sorted() would order the keys, in compiled code without the
    interpreter lock (sorting the items in Python held the lock 0.5 ms for 3,000
    offsets). Calls pause() before every
    `every`-th offset."""
    cdef Py_ssize_t n = 0, first_current = current._rows, first_lag = lag._rows, i
    cdef Py_ssize_t h, capacity = 0
    cdef int64_t offset, behind, slot = -1, partition, noted, hw_value
    cdef int64_t* lag_sums = NULL  # per head index: the lag summed, -1 while none
    cdef void* grown
    if current.width != 1 or lag.width != 1 or every < 1:
        raise ValueError("add_offset_rows fills rows 1 wide, pausing every 1 or more")
    last_topic = head = None
    try:
        for key, committed in offsets:
            if n % every == 0:
                pause()
            n += 1
            topic, index = key
            if topic is not last_topic:  # (a run of one topic's offsets: one lookup)
                head = heads.get(topic)
                if head is None:
                    head = new_head(topic)
                slot = marks.slot_of(topic)
                last_topic = topic
            offset = committed.offset
            partition = index
            current._append(head, partition, offset, 0, 0, 0)
            noted = marks.value(slot, partition)
            if noted == _OFFLINE:
                continue
            if noted != _NOT_HOSTED:
                hw_value = noted
            else:
                hw = None if remote is None else remote.get(topic, index)
                if hw is None:
                    continue
                hw_value = hw
            behind = hw_value - offset
            if behind < 0:
                behind = 0
            lag._append(head, index, behind, 0, 0, 0)
            h = head  # (>= 0: _append refused a negative one)
            if h >= capacity:
                grown = realloc(lag_sums, (h + 64) * sizeof(int64_t))
                if grown == NULL:
                    raise MemoryError()
                lag_sums = <int64_t*>grown
                for i in range(capacity, h + 64):
                    lag_sums[i] = -1
                capacity = h + 64
            lag_sums[h] = behind if lag_sums[h] < 0 else lag_sums[h] + behind
        if lag_sums != NULL:
            for topic, head in heads.items():
                h = head
                if 0 <= h < capacity and lag_sums[h] >= 0:
                    sums[topic] = sums.get(topic, 0) + lag_sums[h]
    finally:
        free(lag_sums)
    _order_group_rows(current, lag, heads, first_current, first_lag)
    return n


cdef int _order_group_rows(GaugeRows current, GaugeRows lag, dict heads,
                           Py_ssize_t first_current, Py_ssize_t first_lag) except -1:
    """Orders one group's rows (current from first_current, lag from first_lag) by
    (topic, partition), `heads` being the group's {topic: head index}; the sort runs
    without the interpreter lock (GaugeRows._sort_from)."""
    cdef Py_ssize_t nranks, i
    cdef int32_t* ranks
    if not heads:
        return 0
    nranks = max(heads.values()) + 1
    ranks = <int32_t*>malloc(nranks * sizeof(int32_t))
    if ranks == NULL:
        raise MemoryError()
    try:
        for i in range(nranks):
            ranks[i] = -1
        for i, topic in enumerate(sorted(heads)):
            ranks[<Py_ssize_t>heads[topic]] = i
        current._sort_from(first_current, ranks, nranks)
        lag._sort_from(first_lag, ranks, nranks)
    finally:
        free(ranks)
    return 0


def add_offset_figure_rows(GaugeRows current not None, GaugeRows lag not None,
                           dict heads not None, new_head, OffsetFigures figures not None,
                           HostedWatermarks marks not None, remote, dict sums not None, pause,
                           Py_ssize_t every):
    """What add_offset_rows adds for a group's offsets, from the group's OffsetFigures
    (fastlog/server/group/_offset_figures.pyx) instead of its dict of Python objects: with
    the interpreter lock, per topic of the group (few) its head (heads[topic], or
    new_head(topic)) and its slot in `marks`; without it, the copy of the entries, a row
    per entry in `current`, the lag against the high watermark `marks` noted for a hosted
    partition (none for an offline one) in `lag` and its sum per topic, and then the order
    of the rows by (topic, partition). Only the entries of partitions not hosted here take
    their high watermark from remote.get(topic, partition) (a Python object: with the
    lock, pause() before every `every`-th). A copy is refused when an entry was added,
    moved or dropped meanwhile (OffsetFigures.snapshot); after _SNAPSHOT_ATTEMPTS refusals
    nothing is added and -1 returned (the caller then reads the group's dict). Else returns
    the entries' count."""
    cdef Py_ssize_t first_current = current._rows, first_lag = lag._rows
    cdef Py_ssize_t n = -1, nt = 0, tid, i, j, size, nremote = 0
    cdef int attempt
    cdef int64_t version, noted, behind
    cdef int32_t* head_of = NULL     # per topic id: the head index, -1 for no entry
    cdef int64_t* mark_of = NULL     # per topic id: its slot in `marks`
    cdef int64_t* lag_sums = NULL    # per topic id: the lag summed, -1 while none
    cdef Py_ssize_t* remote_rows = NULL  # the entries whose partition is not hosted
    cdef OffsetEntry* entries = NULL
    cdef OffsetEntry* e
    cdef bint has_remote = remote is not None
    cdef int64_t mark
    if current.width != 1 or lag.width != 1 or every < 1:
        raise ValueError("add_offset_figure_rows fills rows 1 wide, pausing every 1 or more")
    figures.begin_read()
    try:
        for attempt in range(_SNAPSHOT_ATTEMPTS):
            if attempt:
                pause()
            version = figures.version
            topics = figures.topics
            counts = figures.topic_counts
            nt = len(topics)
            free(head_of)
            free(mark_of)
            free(lag_sums)
            free(remote_rows)
            size = figures.count
            head_of = <int32_t*>malloc((nt + 1) * sizeof(int32_t))
            mark_of = <int64_t*>malloc((nt + 1) * sizeof(int64_t))
            lag_sums = <int64_t*>malloc((nt + 1) * sizeof(int64_t))
            remote_rows = <Py_ssize_t*>malloc((size + 1) * sizeof(Py_ssize_t))
            if head_of == NULL or mark_of == NULL or lag_sums == NULL or remote_rows == NULL:
                raise MemoryError()
            for tid in range(nt):
                head_of[tid] = -1
                mark_of[tid] = -1
                lag_sums[tid] = -1
                if counts[tid] > 0:
                    topic = topics[tid]
                    head = heads.get(topic)
                    if head is None:
                        head = new_head(topic)
                    head_of[tid] = head
                    mark_of[tid] = marks.slot_of(topic)
            current._reserve(size)
            lag._reserve(size)
            nremote = 0
            with nogil:
                mark = _loop_mark()
                n = figures.snapshot(&entries, version)
                if n > size:  # (never: the same version, the same count)
                    n = -1
                for i in range(n):
                    e = &entries[i]
                    tid = e.topic
                    if tid < 0 or tid >= nt or head_of[tid] < 0:  # (never, as above)
                        n = -1
                        break
                    current._put(head_of[tid], e.partition, e.offset)
                    noted = marks.value(mark_of[tid], e.partition)
                    if noted == _OFFLINE:
                        continue
                    if noted == _NOT_HOSTED:
                        if has_remote:
                            remote_rows[nremote] = i
                            nremote += 1
                        continue
                    behind = noted - e.offset
                    if behind < 0:
                        behind = 0
                    lag._put(head_of[tid], e.partition, behind)
                    lag_sums[tid] = behind if lag_sums[tid] < 0 else lag_sums[tid] + behind
                _polite_return(mark)
            if n == -2:
                raise MemoryError()
            if n >= 0:
                break
            free(entries)
            entries = NULL
            current._rows = first_current
            lag._rows = first_lag
        if n < 0:
            return -1
        for j in range(nremote):
            if j % every == 0:
                pause()
            e = &entries[remote_rows[j]]
            tid = e.topic
            hw = remote.get(topics[tid], e.partition)
            if hw is None:
                continue
            behind = <int64_t>hw - e.offset
            if behind < 0:
                behind = 0
            lag._append(head_of[tid], e.partition, behind, 0, 0, 0)
            lag_sums[tid] = behind if lag_sums[tid] < 0 else lag_sums[tid] + behind
        for tid in range(nt):
            if lag_sums[tid] >= 0:
                topic = topics[tid]
                sums[topic] = sums.get(topic, 0) + lag_sums[tid]
    finally:
        figures.end_read()
        with nogil:  # (the copy may be large: its munmap without the lock)
            mark = _loop_mark()
            free(entries)
            free(head_of)
            free(mark_of)
            free(lag_sums)
            free(remote_rows)
            _polite_return(mark)
    _order_group_rows(current, lag, heads, first_current, first_lag)
    return n


def replica_counts(partitions, dict min_isrs not None, min_isr_of, int64_t now_ms,
                   int64_t max_timeout_ms, pause, Py_ssize_t every,
                   HostedWatermarks marks=None):
    """The replica manager's gauges over `partitions` (fastlog.server.partition.Partition),
    in one pass: (leaders, under-replicated, under min ISR, offline, with a late
    transaction). An offline partition counts only as offline; a led one is under-
    replicated when its ISR is smaller than its replica set, under min ISR when smaller
    than min_isrs[its topic], or min_isr_of(topic), kept there (once per topic), and late
    when producer_state.has_late_transaction(now_ms, max_timeout_ms) (asked only when a
    transaction is open: `ongoing` is empty otherwise, as that method checks first).
    Leadership is Partition.is_leader spelled out (no call per partition). With `marks`,
    notes there each partition's high watermark (its log's; offline ones as offline), for
    add_offset_rows. Calls pause() before every `every`-th partition (metrics.GilBreaks)."""
    cdef Py_ssize_t n = 0, leaders = 0, under = 0, under_min = 0, offline = 0, late = 0
    cdef Py_ssize_t isr, slot = 0
    if every < 1:
        raise ValueError("replica_counts pauses every 1 or more partitions")
    last_topic = None
    for p in partitions:
        if n % every == 0:
            pause()
        n += 1
        if marks is not None:
            topic = p.topic
            if topic is not last_topic:  # (a run of one topic's partitions: one lookup)
                slot = marks.slot_for(topic)
                last_topic = topic
            marks.note(slot, p.partition, _OFFLINE if p.offline else p.log.high_watermark)
        if p.offline:
            offline += 1
            continue
        local = p.local_id
        if local is not None and p.leader_id != local:
            continue
        leaders += 1
        state = p.producer_state
        if state.ongoing and state.has_late_transaction(now_ms, max_timeout_ms):
            late += 1
        isr = len(p.isr)
        if isr < len(p.replicas):
            under += 1
        topic = p.topic
        least = min_isrs.get(topic)
        if least is None:
            least = min_isrs[topic] = min_isr_of(topic)
        if isr < least:
            under_min += 1
    return leaders, under, under_min, offline, late


def offline_partitions(states, live not None, pause, Py_ssize_t every):
    """The controller's counts over `states` (one iterable of PartitionState per topic):
    (partitions, partitions whose leader is not in `live`, or none). Calls pause() before
    every `every`-th partition."""
    cdef Py_ssize_t n = 0, offline = 0
    if every < 1:
        raise ValueError("offline_partitions pauses every 1 or more partitions")
    for topic_states in states:
        for ps in topic_states:
            if n % every == 0:
                pause()
            n += 1
            leader = ps.leader
            if leader < 0 or leader not in live:
                offline += 1
    return n, offline


cdef inline int64_t _clock_ns(clockid_t clock) noexcept nogil:
    """`clock`'s reading in ns, or -1 when it cannot be read (its thread has ended)."""
    cdef timespec ts
    if clock_gettime(clock, &ts) != 0:
        return -1
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef int _rest(clockid_t clock, int64_t pause_ns, int most, int64_t* slept) noexcept nogil:
    """Sleeps `pause_ns` at a time, at most `most` times, for as long as the thread whose
    CPU clock is `clock` keeps running (its clock read after each sleep: once it has not
    moved over a whole sleep, the thread is back in its poll). Returns the sleeps, -1 when
    the clock cannot be read (its thread has ended); the nanoseconds slept in *slept."""
    cdef timespec nap
    cdef int sleeps = 0
    cdef int64_t before, after, start
    nap.tv_sec = pause_ns // 1000000000
    nap.tv_nsec = pause_ns % 1000000000
    start = _clock_ns(CLOCK_MONOTONIC)
    before = _clock_ns(clock)
    while before >= 0 and sleeps < most:
        nanosleep(&nap, NULL)
        sleeps += 1
        after = _clock_ns(clock)
        if after == before:
            break
        before = after
    slept[0] = _clock_ns(CLOCK_MONOTONIC) - start
    return -1 if before < 0 else sleeps


cdef inline int64_t _loop_mark() noexcept nogil:
    """At the start of a stretch without the interpreter lock: the request loop's CPU
    clock while this thread scrapes (set_scrape_loop), else -1 (see _polite_return)."""
    if not fl_scrape_watched:
        return -1
    return _clock_ns(<clockid_t>fl_scrape_loop_clock)


cdef inline bint _rest_if_ran(clockid_t clock, int64_t mark, int64_t pause_ns,
                              int most) noexcept nogil:
    """When the thread whose CPU clock is `clock` has run since `mark` (a reading of that
    clock; -1: none), rests while it keeps running (_rest); whether it rested."""
    cdef int64_t slept
    if mark < 0 or _clock_ns(clock) == mark:
        return False
    _rest(clock, pause_ns, most, &slept)
    return True


cdef inline void _polite_return(int64_t mark) noexcept nogil:
    """At the end of a stretch without the interpreter lock that began at `mark`
    (_loop_mark): when the request loop has run meanwhile, rests while it keeps running
    before the lock is asked for again. A thread that asks for the lock while the loop
    holds it mid-request wins it at the loop's next release (its pwrite, CRC or send),
    and the loop then waits for the scrape's next break; resting first leaves the loop its
    request."""
    if _rest_if_ran(<clockid_t>fl_scrape_loop_clock, mark, fl_scrape_rest_ns,
                    fl_scrape_rest_most):
        fl_count_rest()


cdef int _polite_profile(PyObject* obj, PyFrameObject* frame, int what,
                         PyObject* arg) noexcept:
    """The scrape thread's profile hook while a loop is watched (set_scrape_loop): every
    PROFILE_EVERY events, when the request loop's clock has moved since the last look
    (it woke and waits for the interpreter lock, or runs between its releases of it),
    rests while it runs (_rest), the lock released. The breaks (metrics.GilBreaks) come
    only where the scrape calls them, between families; Python between two of them held
    the lock for tens of microseconds, and a loop that woke meanwhile waited for the
    switch interval and then, at each of its own releases, again."""
    cdef int64_t now, slept
    if not fl_prof_due(PROFILE_EVERY):
        return 0
    now = _clock_ns(<clockid_t>fl_scrape_loop_clock)
    if now == fl_prof_seen:
        return 0
    if fl_prof_seen >= 0 and now >= 0:
        with nogil:
            fl_count_rest()
            _rest(<clockid_t>fl_scrape_loop_clock, fl_scrape_rest_ns, fl_scrape_rest_most,
                  &slept)
        now = _clock_ns(<clockid_t>fl_scrape_loop_clock)
    fl_prof_set_seen(now)
    return 0


def set_scrape_loop(loop_clock=None, int64_t pause_ns=0, int most=0) -> None:
    """While this thread scrapes: the request loop thread's CPU clock (None when done or
    none), and the rest of every stretch without the interpreter lock here that the loop
    ran during (_polite_return: `pause_ns` at a time, at most `most` times); with a
    clock, the thread's Python rests the same way (_polite_profile, this thread's profile
    hook until the next call)."""
    global fl_prof_installed
    if loop_clock is None:
        fl_set_scrape_loop(0, 0, 0, 0)
        if fl_prof_installed:  # (a profiler of someone else's is left alone)
            PyEval_SetProfile(NULL, NULL)
            fl_prof_installed = 0
    else:
        fl_set_scrape_loop(1, loop_clock, pause_ns, most)
        fl_prof_set_seen(_clock_ns(<clockid_t>fl_scrape_loop_clock))
        PyEval_SetProfile(_polite_profile, NULL)
        fl_prof_installed = 1


def scrape_loop_watched() -> bool:
    """Whether this thread watches a request loop (set_scrape_loop with a clock)."""
    return fl_scrape_watched != 0


def scrape_rests() -> int:
    """The rests this thread has taken at the end of a stretch without the interpreter
    lock since its last set_scrape_loop."""
    return fl_scrape_rests


def hand_over(long loop_clock, int64_t pause_ns, int most):
    """The scrape's break (metrics.GilBreaks): sleeps `pause_ns` at a time, at most `most`
    times, with the interpreter lock released throughout, for as long as the thread whose
    CPU clock is `loop_clock` (the request loop's) keeps running: after each sleep its
    clock is read, and once it has not moved over a whole sleep (the loop is back in its
    poll, done with what woke it) the lock is taken back. Sleeping in Python instead
    (time.sleep) took the lock back at the end of each sleep and could win it from the
    loop at any of the loop's own releases (a pwrite, a CRC), which then waited for the
    scrape's next break. Returns (sleeps, the nanoseconds slept, with the lock released);
    sleeps is -1 when the loop's clock cannot be read (its thread has ended)."""
    cdef int sleeps
    cdef int64_t slept = 0
    with nogil:
        sleeps = _rest(<clockid_t>loop_clock, pause_ns, most, &slept)
    return sleeps, slept


cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        void* ptr
        int fd
        uint32_t u32
        uint64_t u64

    struct epoll_event:
        uint32_t events
        epoll_data_t data

    int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout)

cdef enum:
    # the events one wait returns at most (the HTTP thread has a listener and 64
    # connections)
    POLITE_WAIT_EVENTS = 128


def polite_epoll_wait(int epfd, int timeout_ms, int maxevents, loop_clock,
                      int64_t pause_ns, int most):
    """The HTTP thread's wait for its sockets (fastlog/server/http.py's selector): waits
    on the epoll instance `epfd` (Python's select.epoll, which registers each file with its
    descriptor as the event's data) as select.epoll.poll does, then, when events came and
    the request loop's thread (CPU clock `loop_clock`; None: none) ran during the wait, rests
    while it keeps running (_rest: `pause_ns` at a time, at most `most`) before the
    interpreter lock is asked for again. Woken by a request while the loop is mid-request,
    the thread would otherwise win the lock at the loop's next release (its pwrite, CRC or
    send) and keep it through the Python that starts answering. Returns [(fd, events)];
    [] when interrupted by a signal."""
    cdef epoll_event events[POLITE_WAIT_EVENTS]
    cdef int n, err = 0
    cdef bint watched = loop_clock is not None
    cdef clockid_t clock = <clockid_t>(loop_clock if watched else 0)
    cdef int64_t mark = -1
    if maxevents < 1:
        maxevents = 1
    elif maxevents > POLITE_WAIT_EVENTS:
        maxevents = POLITE_WAIT_EVENTS
    with nogil:
        if watched:
            mark = _clock_ns(clock)
        n = epoll_wait(epfd, events, maxevents, timeout_ms)
        if n < 0:
            err = errno
        elif n > 0:
            _rest_if_ran(clock, mark, pause_ns, most)
    if n < 0:
        if err == EINTR:
            return []
        raise OSError(err, strerror(err))
    return [(events[i].data.fd, events[i].events) for i in range(n)]


cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void* iov_base
        size_t iov_len

cdef extern from "<sys/socket.h>" nogil:
    struct msghdr:
        void* msg_name
        unsigned msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t sendmsg(int fd, const msghdr* msg, int flags)
    int MSG_NOSIGNAL
    int MSG_DONTWAIT

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, unsigned long nfds, int timeout)
    short POLLOUT

cdef extern from "<errno.h>" nogil:
    int EAGAIN
    int EWOULDBLOCK

cdef enum:
    # the pieces one sendmsg hands the socket at most (Linux's IOV_MAX is 1024)
    SEND_IOVECS = 512


def send_polite(int fd, chunks, int wait_ms, int stall_ms) -> int:
    """Writes the byte strings `chunks` in order to the non-blocking socket `fd` with the
    interpreter lock released throughout (the HTTP thread's answers: an asyncio transport
    runs Python, holding the lock, for every piece the socket takes, and takes the lock
    back after every send), waiting for the socket to take more at most `stall_ms` ms at
    a time and `wait_ms` ms in all (a peer that reads nothing costs the thread one stall);
    then, when the request loop ran meanwhile, rests while it keeps running before the
    lock is asked for again (_polite_return). Returns the bytes sent: fewer than all when
    the peer reads slowly or the socket failed (the caller hands the rest to its
    transport, which reports the failure as it does for its own writes)."""
    cdef tuple held = tuple(chunks)  # keeps every chunk alive while the lock is released
    cdef Py_ssize_t count = len(held), i, at = 0, sent = 0
    cdef iovec* vecs
    cdef msghdr msg
    cdef pollfd pfd
    cdef ssize_t n
    cdef int64_t mark, start, now, left_ms
    cdef int err
    for chunk in held:
        if not isinstance(chunk, bytes):
            raise TypeError("send_polite writes bytes")
    if count == 0:
        return 0
    vecs = <iovec*>malloc(count * sizeof(iovec))
    if vecs == NULL:
        raise MemoryError()
    for i in range(count):
        vecs[i].iov_base = <void*>PyBytes_AS_STRING(held[i])
        vecs[i].iov_len = <size_t>PyBytes_GET_SIZE(held[i])
    pfd.fd = fd
    pfd.events = POLLOUT
    try:
        with nogil:
            mark = _loop_mark()
            start = _clock_ns(CLOCK_MONOTONIC)
            while at < count:
                if vecs[at].iov_len == 0:
                    at += 1
                    continue
                memset(&msg, 0, sizeof(msg))
                msg.msg_iov = vecs + at
                msg.msg_iovlen = <size_t>(count - at if count - at < SEND_IOVECS
                                          else SEND_IOVECS)
                n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT)
                if n == 0:
                    break  # (nothing taken of a non-empty piece: left to the transport)
                if n > 0:
                    sent += n
                    while n > 0 and at < count:  # past what the socket took
                        if <size_t>n >= vecs[at].iov_len:
                            n -= vecs[at].iov_len
                            at += 1
                        else:
                            vecs[at].iov_base = <char*>vecs[at].iov_base + n
                            vecs[at].iov_len -= n
                            n = 0
                    continue
                err = errno
                if err == EINTR:
                    continue
                if err != EAGAIN and err != EWOULDBLOCK:
                    break  # (the transport meets the same failure and closes)
                now = _clock_ns(CLOCK_MONOTONIC)
                left_ms = wait_ms - (now - start) // 1000000
                if left_ms > stall_ms:
                    left_ms = stall_ms
                if left_ms <= 0 or poll(&pfd, 1, <int>left_ms) <= 0:
                    break  # a slow reader: the rest goes through the transport
            _polite_return(mark)
    finally:
        free(vecs)
    return sent
