# Declarations of fastlog._net (see _net.pyx for the threading model and the decisions).
# A Connection belongs to exactly one Processor; every cdef method of both runs on that
# processor's loop thread, except the handler hand-off, which runs on the API loop.

from libc.stdint cimport int32_t


cdef class Processor

cdef class SocketServer


cdef class Connection:
    cdef readonly object peer
    cdef readonly long long id
    cdef public dict state
    cdef object sock
    cdef int fd
    cdef Processor proc
    # read side: rbuf[rstart:rend] holds unparsed bytes; the in-flight frame, if any,
    # lies before rstart and must not be overwritten while ahead > 0.
    cdef bytearray rbuf
    cdef Py_ssize_t rstart, rend
    cdef object frame
    cdef readonly bint closed
    # muted (Kafka's word): ahead == max_ahead (frames handed out and not yet answered;
    # at most 1 inline) or writing (output pending)
    cdef int ahead
    cdef bint reading, writing, eof, in_process
    # threaded mode, touched only on the API loop: requests waiting for the one running
    cdef object api_queue
    cdef bint api_running
    cdef bint api_dead    # a request failed: run none of the connection's later ones
    cdef double last_active
    # write side: the response being written, as parts; widx/woff say how far.
    cdef list wparts
    cdef Py_ssize_t widx
    cdef long long woff

    cdef void _start_reading(self)
    cdef void _stop_reading(self)
    cdef int32_t _head_size(self) noexcept
    cdef int _make_room(self) except -1
    cdef void _process(self)
    cdef void _unmute(self)
    cdef void _respond(self, object parts)
    cdef int _flush(self) except -1
    cdef void _close(self, str why, bint quiet=*)


cdef class Processor:
    cdef readonly int index
    cdef SocketServer server
    cdef object loop
    cdef object api_loop
    cdef bint threaded
    cdef object thread
    cdef dict connections
    cdef object idle_handle
    cdef unsigned char *scratch
    cdef Py_ssize_t scratch_size

    cdef int max_ahead
    cdef list to_api      # (conn, frame) for the API loop   } batched cross-thread
    cdef list to_net      # (conn, parts) for this processor } hand-offs (threaded mode)

    cdef void _dispatch(self, Connection conn, object frame)
    cdef void _queue_response(self, Connection conn, object parts)


cdef class SocketServer:
    cdef object handler
    cdef readonly str host
    cdef readonly int port
    cdef readonly int num_network_threads
    cdef readonly Py_ssize_t max_request_size
    cdef readonly long max_connections
    cdef readonly double idle_timeout
    cdef readonly bint threaded
    cdef readonly bint eager
    cdef readonly bint zero_copy
    cdef object loop
    cdef object lsock
    cdef list processors
    cdef Py_ssize_t next_proc
    cdef long long next_id
    cdef readonly long connection_count
    cdef double last_refusal_log
    cdef set inflight
    cdef bint stopping
    cdef bint started

    cdef void _run_handler(self, Connection conn, object frame)
    cdef void _handler_done(self, Connection conn, object frame, object result, object exc)
    cdef void _run_next(self, Connection conn)
    cdef void _drop_queued(self, Connection conn)
