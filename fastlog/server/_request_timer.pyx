# fastlog/server/_request_timer.pyx — TimedHandler: the socket server's handler with each
# request counted and timed, compiled (RequestMetrics.instrument makes it).
#
# Owns no table of its own: it counts into RequestMetrics' RequestStats (per API key and
# version: count, time summed in ms, the histogram's bucket counts; request_metrics.py owns
# them, their keys and buckets, and the request log) what request_metrics.py's module
# comment describes: the time from the frame handed to the handler to the response parts
# returned (a handler that waits is timed to the end of its wait). Per request: the
# listener noted on a new connection's state, two reads of the monotonic clock, the API key
# and version from the frame's first four bytes, the stats found through a C table of the
# RequestStats objects already in RequestMetrics.by_request (entries there are never
# replaced or removed; a key not yet in it goes through RequestMetrics.stats, which adds
# it or counts it under (-1, -1)), three counts, and the request log's level check.
#
# Threads: the broker's asyncio API loop (the socket server calls it inline).

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

import logging

cdef enum:
    KEYS = 128      # API keys below this, versions 0-31: the C table's index
    VERSIONS = 32
    MAX_BUCKETS = 64

cdef object _DEBUG = logging.DEBUG


cdef inline double _now_ms() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6


cdef class TimedHandler:
    """`handle` (conn, frame) -> response parts, counted and timed (see the module
    comment); with `listener`, a connection's state first gets it as "listener" (the
    listener it arrived on, for answers that name broker endpoints)."""

    def __init__(self, handle, metrics, bounds, logging_on, log_request, listener=None):
        if len(bounds) > MAX_BUCKETS:
            raise ValueError(f"at most {MAX_BUCKETS} bucket bounds")
        self.handle = handle
        self.stats = metrics.stats
        self.table = [None] * (KEYS * VERSIONS)
        self.nbounds = len(bounds)
        for i, b in enumerate(bounds):
            self.bounds[i] = b
        self.logging_on = logging_on
        self.log_request = log_request
        self.listener = listener

    def __call__(self, conn, frame):
        if self.listener is not None:
            state = conn.state
            if "listener" not in state:
                state["listener"] = self.listener
        return _timed(self, conn, frame)

    cdef object _find(self, frame):
        """The RequestStats of the frame's API key and version (RequestMetrics.stats)."""
        cdef Py_buffer view
        cdef int api = -1, version = -1
        cdef const unsigned char *p
        PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
        try:
            if view.len < 4:
                return self.stats((-1, -1))
            p = <const unsigned char *>view.buf
            api = p[0] << 8 | p[1]
            version = p[2] << 8 | p[3]
        finally:
            PyBuffer_Release(&view)
        if api >= KEYS or version >= VERSIONS:
            return self.stats((api, version))
        s = self.table[api * VERSIONS + version]
        if s is None:
            s = self.stats((api, version))
            self.table[api * VERSIONS + version] = s
        return s

    cdef int _done(self, conn, frame, result, double ms) except -1:
        cdef Py_ssize_t i = 0
        s = self._find(frame)
        s.count += 1
        s.time_ms += ms
        while i < self.nbounds and self.bounds[i] < ms:   # bisect_left over the bounds
            i += 1
        buckets = s.buckets
        buckets[i] += 1
        if self.logging_on(_DEBUG):
            self.log_request(conn, frame, result, ms)
        return 0


async def _timed(TimedHandler t, conn, frame):
    cdef double start = _now_ms()
    result = None
    try:
        result = await t.handle(conn, frame)
        return result
    finally:
        t._done(conn, frame, result, _now_ms() - start)
