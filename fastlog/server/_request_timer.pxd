# fastlog.server._request_timer declarations: TimedHandler, the socket server's handler
# with each request counted and timed (see the .pyx's module comment).


cdef class TimedHandler:
    cdef object handle           # KafkaApis.handle
    cdef object stats            # RequestMetrics.stats
    cdef list table              # [RequestStats or None] by API key * 32 + version
    cdef double bounds[64]       # the histogram's bucket bounds (ms)
    cdef Py_ssize_t nbounds
    cdef object logging_on       # the request log's isEnabledFor
    cdef object log_request      # request_metrics._log_request
    cdef object listener         # the listener's name, noted on each connection (or None)

    cdef object _find(self, frame)
    cdef int _done(self, conn, frame, result, double ms) except -1
