# fastlog/server/log/_append.pyx — LeaderAppend: a log's everyday leader append, compiled.
#
# Owns no file and no format of its own: it writes the log's active `.log` segment (v2
# record batches back to back, as producers sent them but for baseOffset and
# partitionLeaderEpoch) and its `.index`/`.timeindex` entries through the segment's
# SegmentIndexer (fastlog._index), byte for byte what Log.append's own path writes.
#
# Log.append (log.py) hands it every leader append (offsets assigned, written inline), and
# fastlog/server/_leader_produce.pyx a Produce request's everyday batch (append_c: the
# same step with its figures in an AppendResult struct instead of a LogAppendInfo); it
# takes the common case in one call: stamp offsets and the leader epoch, check the
# batch sizes and the roll rule (segment.bytes, segment.ms by record time, an index without
# room for one entry per batch, a relative offset past 4 bytes), reserve index space
# (posix_fallocate: a full disk is an OSError here, never a SIGBUS), one pwrite with the
# interpreter lock released, index entries every index.interval.bytes and the largest
# timestamp, then the segment's size
# and next offset, the log end offset, the high watermark on a single replica and
# flush.messages' fsync request, as Log._published does. Anything else -- a roll, a new
# leader epoch, a batch over max.message.bytes, a buffer that is not writable, a closed log
# or a write-behind append in flight -- gets None back before anything changed, and Log's
# own path does it. The state it holds (the active segment's descriptor, size, base and
# roll settings, the log end offset, the topic settings it needs) is taken by arm() after
# an append of Log's own path and dropped by disarm() whenever the segment list, the
# configuration or the log's life changes (Log._publish, update_config, close, ...); the
# log end offset is checked against the log's on every call.
#
# Figures: the log's size, log end offset (and high watermark) also go into its slot of the
# LogManager's LogFigures (_figures.pyx) through a pointer taken at arm(), as
# Log.note_figures would write them.
#
# Threads: the log's owner thread (the broker's event loop) only. The pwrite runs without
# the interpreter lock; nothing else writes this segment meanwhile (flush() on the I/O
# worker only fsyncs).

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport EINTR, EIO, errno
from libc.stdint cimport INT32_MAX, int32_t, int64_t
from posix.types cimport off_t
from posix.unistd cimport ftruncate, pwrite

from fastlog._codec cimport BatchHeader, stamp_batch_headers
from fastlog._index cimport SegmentIndexer
from fastlog.server.log._figures cimport FIG_HIGH_WATERMARK, FIG_LOG_END, FIG_SIZE, LogFigures

import os


cdef class LeaderAppend:
    """The compiled leader append of one Log (see the module comment), which passes itself
    to arm() and append(). Owner thread only."""

    def __init__(self, info_type):
        self.info_type = info_type
        self.enabled = True
        self.armed = False
        self.appends = 0

    def disarm(self):
        """Forget the log's state: the next append takes Log's own path (which arms again)."""
        self.armed = False
        self.segment = None
        self.indexer = None
        self.fig = NULL

    def arm(self, log, segment, config):
        """Take the log's state after an append of Log's own path: `segment` is its active
        one, `config` its settings. Stays disarmed (False) while the segment is not
        ready for the compiled path: empty, its first timestamp or largest timestamp not
        known yet, its file closed, or its end not the log's."""
        self.disarm()
        if (not self.enabled or segment.size == 0 or segment.rolling_based_timestamp is None
                or not segment._max_ts_loaded or segment.file.closed
                or segment.next_offset != log.log_end_offset):
            return False
        self.segment = segment
        self.indexer = <SegmentIndexer?>segment._indexer
        self.fd = segment.file.fileno()
        self.base_offset = segment.base_offset
        self.size = segment.size
        self.next_offset = segment.next_offset
        self.rolling_ts = segment.rolling_based_timestamp
        self.created_ms = segment.created_ms
        self.roll_ms = config.segment_ms - segment.roll_jitter_ms
        self.segment_bytes = config.segment_bytes
        self.max_batch_size = config.max_message_bytes
        self.flush_messages = config.flush_messages
        self.log_append_time = config.log_append_time
        figures = log._figures
        if figures is not None:  # (slot_ptr: NULL for no slot)
            self.fig = (<LogFigures?>figures).slot_ptr(log._figure_slot)
            self.sealed = log._sealed_bytes
        self.armed = True
        return True

    def append(self, log, records, object batches, int32_t leader_epoch, now_ms):
        """Append to `log` (its owner, passed in so that the two hold no reference cycle)
        validated batches whose headers the codec found in `records` (writable), assigning
        offsets from the log end offset: the LogAppendInfo, or None (nothing done) when
        this is not the common case. OSError (reported to the log dir's failure
        channel first) when the write fails: nothing of it stays in the file."""
        cdef AppendResult out
        if type(batches) is not list:
            return None
        done = self.append_c(log, records, <list>batches, leader_epoch,
                             -1 if now_ms is None else now_ms, &out)
        if done is None:
            return None
        info = self.info_type(out.first_offset, out.last_offset, out.max_timestamp,
                              out.offset_of_max_timestamp, out.log_append_time, out.count,
                              out.length, out.log_start_offset)
        if done is not False:
            info.flush_future = done
        return info

    cdef object append_c(self, log, records, list batches, int32_t leader_epoch,
                         int64_t now, AppendResult *out):
        """append() for compiled callers (`now` < 0: read the log's clock when needed):
        None when not taken (nothing done), else `out` filled and False, or the future of
        the fsync flush.messages asked for."""
        if not self.armed:
            return None
        cdef Py_ssize_t n = len(batches)
        if (n == 0 or log.closed or log.pending_append is not None
                or log.log_end_offset != self.next_offset):
            return None
        # LeaderEpochFileCache.latest_epoch, read from its list (no property call per
        # append; -1 when it is empty, which differs from any leader epoch >= 0)
        cdef list epochs = log.leader_epoch_cache._epochs
        if leader_epoch >= 0 and (len(epochs) == 0 or epochs[len(epochs) - 1] != leader_epoch):
            return None   # a new epoch begins: Log's path records it
        cdef BatchHeader h, first = <BatchHeader?>batches[0], last = <BatchHeader?>batches[n - 1]
        cdef int64_t offset = self.next_offset, count = 0, max_ts = -1, off_max = -1
        cdef int64_t last_offset, waited
        cdef Py_ssize_t i
        # Every check first: a refused append leaves the log and the buffer as they were.
        for i in range(n):
            h = <BatchHeader?>batches[i]
            if <int64_t>h.batch_length + 12 > self.max_batch_size:
                return None
            last_offset = offset + h.last_offset_delta
            count += h.record_count
            if h.max_timestamp > max_ts or off_max < 0:
                max_ts = h.max_timestamp
                off_max = last_offset
            offset = last_offset + 1
        last_offset = offset - 1
        cdef Py_ssize_t start = first.position
        cdef Py_ssize_t length = last.position + <Py_ssize_t>last.batch_length + 12 - start
        # (locals: a disarm from another thread while the GIL is released keeps them valid)
        cdef SegmentIndexer ix = self.indexer
        seg = self.segment
        if (self.size > self.segment_bytes - length
                or ix.offset_index._room() < n or ix.time_index._room() < n
                or last_offset - self.base_offset > INT32_MAX):
            return None
        if self.rolling_ts >= 0:
            waited = max_ts - self.rolling_ts
        else:
            if now < 0:
                now = log._now_ms()
            waited = now - self.created_ms
        if waited > self.roll_ms:
            return None
        cdef Py_buffer view
        try:
            PyObject_GetBuffer(records, &view, PyBUF_WRITABLE)
        except BufferError:
            return None
        cdef int64_t physical = self.size
        cdef Py_ssize_t written = 0
        cdef ssize_t r
        cdef int err = 0
        try:
            if start < 0 or start + length > view.len:
                return None
            stamp_batch_headers(<unsigned char*>view.buf, view.len, batches, self.next_offset,
                                leader_epoch)
            try:
                # Index space first: a full disk fails the whole append here.
                ix._reserve(n, last.position - start, False)
            except OSError as e:
                log.report_failure("append", e)
                raise
            with nogil:
                while written < length:
                    r = pwrite(self.fd, <unsigned char*>view.buf + start + written,
                               length - written, <off_t>(physical + written))
                    if r > 0:
                        written += r
                    elif r < 0 and errno == EINTR:
                        continue
                    else:
                        err = errno if r < 0 else EIO
                        ftruncate(self.fd, <off_t>physical)   # nothing of it stays behind
                        break
        finally:
            PyBuffer_Release(&view)
        if err:
            e = OSError(err, os.strerror(err))
            log.report_failure("append", e)
            raise e
        try:
            ix._add(batches, physical - start, False, None)
        except OSError as e:
            log.report_failure("append", e)
            raise
        self.size = physical + length
        self.next_offset = last_offset + 1
        seg.size = self.size
        seg._next_offset = self.next_offset
        log.log_end_offset = self.next_offset
        if self.fig != NULL:
            self.fig[FIG_SIZE] = self.sealed + self.size
            self.fig[FIG_LOG_END] = self.next_offset
        if log.hw_follows_leo:
            log.high_watermark = self.next_offset
            if self.fig != NULL:
                self.fig[FIG_HIGH_WATERMARK] = self.next_offset
        if self.log_append_time and now < 0:
            now = log._now_ms()
        self.appends += 1
        out.first_offset = first.base_offset
        out.last_offset = last_offset
        out.max_timestamp = max_ts
        out.offset_of_max_timestamp = off_max
        out.log_append_time = now if self.log_append_time else -1
        out.count = count
        out.length = length
        out.log_start_offset = log.log_start_offset
        if self.flush_messages <= self.next_offset and (
                self.next_offset - log.recovery_point >= self.flush_messages):
            return log._request_flush(self.next_offset)
        return False
