# Declarations of fastlog._net (see _net.pyx for the threading model and the decisions).
# A Connection belongs to exactly one Processor; every cdef method of both runs on that
# processor's loop thread, except the handler hand-off, which runs on the API loop.

from libc.stdint cimport int32_t


cdef class Processor

cdef class SocketServer


cdef class ConnectionQuotas:
    cdef readonly long max_connections
    cdef readonly long total          # open connections of every listener
    cdef list waiting                 # listeners not accepting until a connection closes
    cdef readonly list servers        # every listener sharing the limit

    cdef void connection_closed(self)
    cdef void _wake_waiting(self)


cdef class _Waiters:
    cdef object lock
    cdef object queue
    cdef set members
    cdef readonly Py_ssize_t count

    cdef bint _enter_locked(self, Connection conn, bint room)
    cdef void wake(self)
    cdef void forget(self, Connection conn)


cdef class MemoryPool:
    cdef readonly long long capacity
    cdef readonly long long available
    cdef _Waiters waiters

    cdef bint try_reserve(self, Connection conn, long long n)
    cdef void release(self, long long n)
    cdef bint keeps_buffers(self) noexcept


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
    cdef str ip           # peer address, counted against max.connections.per.ip
    # bytes reserved in the server's MemoryPool for the frame being received (or for the
    # big buffer kept after one); released when it is answered or the connection closes
    cdef long long pool_bytes
    # who may still use the read buffer: the open connection (1) plus each handler running
    # on one of its frames; the last to let go returns pool_bytes (a handler can outlive
    # its connection, e.g. one reset by the peer while its batch is being checked)
    cdef int buffer_holders
    cdef bint pool_waiting    # muted until the pool has memory for its frame
    cdef bint gated           # muted until queued.max.requests has room
    # when the incomplete frame at rstart began to arrive (0: none); see _expire_check
    cdef double frame_start
    # muted (Kafka's word): ahead == max_ahead (frames handed out and not yet answered;
    # at most 1 inline) or writing (output pending)
    cdef int ahead
    cdef bint reading, writing, eof, in_process
    # muted for a client quota's throttle time (KIP-219): no frame is read or dispatched
    # until the timer ends it (Connection.throttle)
    cdef bint throttled
    cdef double throttle_until
    # threaded mode, API loop only: the connection's queued requests wait until then
    # (frames dispatched ahead before the processor muted it)
    cdef double api_hold_until
    # threaded mode, touched only on the API loop: requests waiting for the one running
    cdef object api_queue
    cdef bint api_running
    cdef bint api_dead    # a request failed: run none of the connection's later ones
    cdef double last_active
    # listed in proc.watched (a request arriving or a TLS handshake: deadlines apply)
    cdef bint watched
    # write side: the response being written, as parts; widx/woff say how far.
    cdef list wparts
    cdef Py_ssize_t widx
    cdef long long woff
    # TLS (None when the listener is plaintext): the ssl.SSLObject and its two MemoryBIOs
    # (ciphertext received / to send); wpending[wpoff:] is ciphertext taken from tls_out
    # and not yet accepted by the socket (one encrypted chunk at most, see _flush_tls)
    cdef object tls
    cdef object tls_in, tls_out
    cdef bytes wpending
    cdef Py_ssize_t wpoff
    cdef bint handshaking, tls_kick_pending
    cdef double handshake_deadline
    # the peer's certificate, kept when the handshake finished (read by handlers on the
    # API loop without touching the SSLObject, which its processor thread drives)
    cdef object peer_cert_der, peer_cert_dict

    cdef void _start_reading(self)
    cdef void _stop_reading(self)
    cdef int32_t _head_size(self) noexcept
    cdef int _make_room(self) except -1
    cdef bint _may_dispatch(self)
    cdef void _process(self)
    cdef void _unmute(self)
    cdef void _respond(self, object parts)
    cdef int _flush(self) except -1
    cdef void _close(self, str why, bint quiet=*)
    cdef void _let_go_of_buffer(self)
    cdef void _note_arrival(self)
    cdef void _watch(self)
    cdef void _on_peer_eof(self)
    cdef void _tls_readable(self)
    cdef int _tls_handshake(self) except -1
    cdef int _tls_send(self) except -1
    cdef int _flush_tls(self) except -1
    cdef void _tls_close_notify(self)


cdef class Processor:
    cdef readonly int index
    cdef SocketServer server
    cdef object loop
    cdef object api_loop
    cdef bint threaded
    cdef object thread
    cdef dict connections
    cdef object expire_handle
    cdef double expire_period
    # the expiry check's work lists (see _expire_check): connections a deadline may apply
    # to, and (time the connection may have been idle for long enough, id) as a heap
    cdef set watched
    cdef list idle_heap
    cdef unsigned char *scratch
    cdef Py_ssize_t scratch_size
    # TLS listeners: ciphertext is received into tls_rbuf; file regions are pread into
    # tls_scratch and encrypted from there (both used by this processor's thread only)
    cdef bytearray tls_rbuf
    cdef bytearray tls_scratch

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
    # max.connections over all the broker's listeners; protected: the inter-broker
    # listener, which accepts at the limit (see ConnectionQuotas)
    cdef readonly ConnectionQuotas quotas
    cdef readonly bint protected
    cdef bint slot_waiting
    cdef readonly double idle_timeout
    cdef readonly double receive_timeout
    cdef readonly long max_connections_per_ip
    cdef readonly dict max_connections_per_ip_overrides
    cdef dict ip_counts
    cdef object ip_lock
    # memory of requests being received (queued.max.request.bytes)
    cdef readonly MemoryPool memory_pool
    # requests handed to the API loop and not yet answered (queued.max.requests)
    cdef readonly long long queued_requests
    cdef readonly long long queued_max_requests
    cdef _Waiters queue_waiters
    # the open-file reserve: accepts pause while other_files + connections + reserve
    # would reach files_limit (RLIMIT_NOFILE)
    cdef object reserved_files
    cdef long files_limit
    cdef long other_files
    cdef long files_reserve
    cdef double files_counted_at
    cdef bint accept_paused
    cdef readonly object refusal_log
    cdef readonly object frame_log
    cdef readonly object expire_log
    cdef readonly object accept_log
    cdef readonly object tls_log
    # TLS listener: the context every accepted connection is wrapped with (None: plaintext)
    cdef readonly object ssl_context
    cdef readonly double handshake_timeout
    cdef readonly bint threaded
    cdef readonly bint eager
    cdef readonly bint zero_copy
    cdef object loop
    cdef object lsock
    cdef list processors
    cdef Py_ssize_t next_proc
    cdef long long next_id
    cdef readonly long connection_count
    cdef set inflight
    cdef bint stopping
    cdef bint started

    cdef void _run_handler(self, Connection conn, object frame)
    cdef void _handler_done(self, Connection conn, object frame, object result, object exc)
    cdef void _run_next(self, Connection conn)
    cdef void _drop_queued(self, Connection conn)
    cdef void _requests_done(self, long long n)
    cdef bint _files_short(self, double now)
    cdef void _count_files(self, double now)
    cdef void _refuse(self, object sock, object addr, str why)
