# fastlog._net: the broker's socket server (Kafka's SocketServer, in one module).
#
# Owns: the listening socket (acceptor), the processor loops, every client connection
# and its bytes. Reads Kafka framing (a 4-byte big-endian signed size, then that many
# bytes of request) and writes responses the same way, from parts: bytes-like objects
# and file regions (anything without the buffer protocol that has .file/.position/
# .length, i.e. fastlog._codec.FileRegion), the latter without copying through Python.
#
# Threading model. One acceptor (on the API loop: accepts are rare) hands each new socket
# round-robin to one of N processors. A processor owns its connections for their whole
# life and does all their socket I/O on its own event loop. Handler coroutines ALWAYS run
# on the API loop (the loop that owns broker state), so the broker needs no locks:
#   - inline mode (default for num_network_threads=1): the single processor IS the API
#     loop; a frame goes straight to the handler, its parts straight to the socket.
#   - threaded mode (num_network_threads>1): N processor threads, each with its own
#     uvloop; frames reach the API loop in batches by call_soon_threadsafe and parts
#     come back the same way. Only socket I/O (with the GIL released) happens off the
#     API loop.
# Per-connection order: like Kafka, the broker sees one request per connection at a time:
# the next request of a connection starts only when the previous one has returned its
# response parts (or None, acks=0), and reading stops while a response cannot be written
# ("muted"), so responses leave in request order; other connections go on meanwhile.
# A handler may await for as long as it likes (a parked fetch) without blocking anyone.
#
# Untrusted input: a size <= 0 or > max_request_size closes the connection with a log
# line before anything is allocated; a frame's claim is reserved in the memory pool
# before its buffer grows, and the buffer is unzeroed (its pages are touched only as
# bytes arrive), so a client claiming a big (legal) frame gets memory only as it sends
# bytes, and all claims together stay within the pool (unbounded pool: a buffer grows
# at most to eight times the bytes actually received).
#
# Limits, all shared by the processors of one SocketServer (Kafka's keys in brackets):
#   - memory: a frame bigger than the first read buffer reserves its claimed size in the
#     MemoryPool before its buffer grows [queued.max.request.bytes]; with the pool used
#     up, connections needing memory are muted and wait in line (see MemoryPool);
#   - requests read and waiting for their handler [queued.max.requests]: at the bound,
#     connections with a new frame are muted and wait in line (threaded mode; inline, a
#     frame's handler starts as soon as it is read, so nothing queues);
#   - connections [max.connections.per.ip(.overrides)]: a new socket over the limit is
#     closed; [max.connections]: counted over every listener of the broker (one
#     ConnectionQuotas), and per listener [listener.name.<l>.max.connections]; at a
#     limit a listener stops accepting until a connection closes (the socket waits in
#     the backlog), except the inter-broker listener at the broker-wide limit, whose
#     accepts go on and close the least recently active connection of another listener
#     instead (Kafka's ConnectionQuotas); open files: accepts pause while the
#     connections would eat into the files kept for the broker's own use;
#   - client quotas: a handler calls conn.throttle(ms) for a client over its quota, and
#     the connection reads and dispatches nothing more until a timer on its processor
#     loop ends the throttle (KIP-219's muting; the response already queued is written);
#   - time: connections.max.idle.ms, and a deadline for the rest of a request once it
#     began to arrive [fastlog.request.receive.timeout.ms], so a client trickling bytes
#     is closed although it is never idle.
# Repeated warnings (bad frames, refusals, paused accepts, expired requests) go through
# fastlog.logs.RateLimitedLog: one line per interval, with the count of those not logged.
#
# TLS (SocketServer(ssl_context=...)): Python's ssl with two MemoryBIOs per connection
# (SSLContext.wrap_bio), driven by the processor's own non-blocking recv and send; no
# asyncio transport, no blocking socket, and OpenSSL releases the GIL while it works.
#   - Handshake: on the processor loop, a step per readable event. Not finished within
#     ssl_handshake_timeout_ms (10 s), or failed (a plaintext client, no certificate or a
#     refused one, a truncated hello, garbage): the connection closes with one
#     rate-limited line (tls_log; a peer closing first is an info line). TLS 1.2
#     renegotiation is refused, as in Kafka.
#   - Reads: ciphertext is received 64 KiB at a time, and only while less than one
#     largest record waits undecrypted in the incoming BIO; it is decrypted straight into
#     rbuf, so framing, the memory pool (which counts plaintext), muting and the receive
#     deadline are those of the plaintext path. What the TLS object still holds when a
#     muted connection resumes is fetched at once: no readable event will announce it.
#   - Writes: a response is encrypted 256 KiB of plaintext at a time (consecutive small
#     parts copied into one record; file regions pread into the processor's scratch
#     buffer, as sendfile cannot encrypt), and the next chunk only once the socket took
#     the previous one's ciphertext: at most one chunk waits per connection, whatever the
#     size of the region, and a slow reader mutes its connection as in plaintext.
#   - close_notify is sent on close when no record is half sent.
#   - Handlers: conn.getpeercert() (kept at the end of the handshake, so
#     fastlog.security.peer_principal(conn) maps it on the API loop), conn.ssl_object.
#   Figures (perf/bench_tls.py, two runs, 2-core box shared with other work; perf/README.md,
#   TLS): server CPU per connection (handshake, one request, close) 0.16-0.19 ms in
#   plaintext, 0.80-0.84 ms with an EC P-256 certificate, 1.18-1.27 ms with RSA-2048
#   (the handshake alone, in memory: 0.30 and 0.69 ms); another connection's round trip
#   meanwhile: p99 0.5-2 ms, worst 1-9.5 ms (4-4.4 ms under plaintext connection churn),
#   so handshakes stay inline. Large FileRegion responses: 0.56-0.80 s of server CPU per
#   GiB against 0.17-0.29 s with sendfile in the same run (2.8-3.3x; AES-256-GCM alone is
#   0.3 s/GiB here by `openssl speed`, the rest is pread, the BIO's copies and send),
#   0.36-0.53x the throughput, with the TLS client spending as much CPU as the server.
#   The chunk was chosen by server CPU per GiB: 64 KiB 0.88-0.93 s, 256 KiB 0.68-0.74 s,
#   1 MiB 0.65-0.89 s (noisy; 256 KiB keeps the working set well inside L2).
#   Kernel TLS (sendfile of encrypted records) is not used.
#
# Decisions, measured with perf/bench_net.py on the 2-core dev box (noisy: other jobs ran;
# figures in perf/README.md, Network):
#   - Requests reach handlers INLINE, started EAGERLY. The handler coroutine is driven by
#     hand up to its first real suspension; most finish there with no Task at all, and
#     only a suspended one is wrapped in a Task (_Resumed). Server CPU per small request
#     (1 and 4 connections x 10 in flight, trivial handler), six runs:
#       inline+eager                 2.6-4.2 us  (45k-132k round trips/s)
#       inline, a Task per request  15.4-22.7 us (7k-23k/s)
#       1 processor thread           4.6-10.3 us (19k-79k/s)
#       2 processor threads          4.4-5.6 us  (26k-100k/s)
#     Threads were 25-50 us before their hand-offs were batched and frames dispatched
#     ahead (see _process); on 2 cores, with the GIL, they still cost more CPU than
#     doing the socket work on the API loop, so N=1 runs inline and threads are used
#     when num_network_threads > 1 is asked for. Consequence for handlers: before its
#     first suspension a handler runs outside any Task (asyncio.current_task() is None
#     there; use asyncio.wait_for / loop.call_later rather than asyncio.timeout there).
#   - Small responses of one pipelined read are corked into one writev (22k -> 52k
#     round trips/s in the same conditions): fewer syscalls and client wake-ups.
#   - File regions go out with sendfile(2), not pread+send. performance-anchors.md §3
#     found pread+sendall faster with BLOCKING 1 MiB sends; on our non-blocking sockets
#     pread+send must re-read whatever the socket did not take, while sendfile copies
#     only what fits. Server CPU per GiB of 1 MiB regions (robust to the box's noise):
#     sendfile 0.105 s, pread+send 0.371 s, a plain sendall pump's sender 0.198 s.
#     Throughput, inline, four runs: sendfile 1.68 / 1.22 / 0.58 / 0.84 GB/s against
#     pread+send 0.83 / 0.58 / 0.37 / 0.45 GB/s. SocketServer(zero_copy=False) keeps
#     the pread path for comparison on other machines.
#   - uvloop for processor threads, and recommended for the API loop: inline on uvloop
#     3.3-3.6 us of server CPU per small request, on the stdlib loop 4.0-4.2 us.

from cpython.buffer cimport (
    PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer,
)
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.contextvars cimport PyContext_CopyCurrent, PyContext_Enter, PyContext_Exit
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from libc.errno cimport EAGAIN, EINTR, errno  # EWOULDBLOCK == EAGAIN on Linux
from libc.stdint cimport int32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.types cimport off_t
from posix.uio cimport iovec, writev

from fastlog._codec cimport FileRegion, fl_be32, fl_put_be32

import asyncio
import errno as errno_mod
import logging
import os
import resource
import socket
import ssl
import threading
from collections import deque
from heapq import heapify, heappop, heappush

from fastlog.logs import RateLimitedLog

try:
    import uvloop as _uvloop
except ImportError:  # pragma: no cover - uvloop is a runtime dependency
    _uvloop = None

cdef extern from "Python.h":
    # 0: the coroutine returned (*out = its value); 1: it yielded (*out = what); -1 raises
    int PyIter_Send(object iterator, object arg, PyObject **out) except -1

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    int MSG_NOSIGNAL

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void *buf, size_t n, off_t offset)

log = logging.getLogger("fastlog.net")

# Initial per-connection read buffer; enough for most requests in one recv.
cdef Py_ssize_t READ_BUFFER = 16384
# Buffers grown beyond this for one big frame go back to READ_BUFFER once it is consumed.
cdef Py_ssize_t READ_BUFFER_KEEP = 1 << 20
# Frames handled in one go per readable event before yielding to other connections.
cdef int FRAMES_PER_EVENT = 32
# Threaded mode: frames of one connection handed to the API loop before the first of them
# is answered (they still run one at a time there; this only saves thread hops).
cdef int MAX_AHEAD = 16
# Largest response that may wait for the end of a pipelined walk (see _respond).
cdef long long CORK_BYTES = 65536
# writev batch (Linux IOV_MAX is 1024; a bigger response just takes several calls).
cdef int MAX_IOV = 64
# Chunk for sendfile / pread+send of one file region step.
cdef size_t FILE_CHUNK = 1 << 20
# TLS: plaintext encrypted per step of a response (a file region is pread this much at a
# time); the next step is encrypted only once the ciphertext of this one is in the socket.
cdef Py_ssize_t TLS_CHUNK = 256 * 1024
# TLS: ciphertext received per recv, done only while less than the largest record TLS
# allows (2^14 + 2048 + header) waits in the incoming BIO undecrypted: a muted connection
# holds at most ~82 KiB of it, and more than that always holds a whole record, so the
# decryption that stopped for want of bytes can never be the one waiting for this recv.
cdef Py_ssize_t TLS_RECV = 64 * 1024
cdef Py_ssize_t TLS_RECORD = 16384 + 2048 + 5


# A peer that went away (closed or reset while we wrote or read): an everyday event, so
# the close is logged at DEBUG like an orderly one.
PEER_GONE = frozenset((errno_mod.EPIPE, errno_mod.ECONNRESET))


class CloseConnection(Exception):
    """Raised by a handler to close the connection it is serving (after a log line)."""


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef int _region_at(object part, long long done, long long *length, off_t *pos) except -1:
    """A file region part: its file descriptor (returned), its length, and the file
    position after its first ``done`` bytes."""
    if type(part) is FileRegion:
        length[0] = (<FileRegion>part).length
        pos[0] = <off_t>((<FileRegion>part).position + done)
        return (<FileRegion>part).file.fileno()
    length[0] = part.length
    pos[0] = <off_t>(part.position + done)
    return part.file.fileno()


cdef class _Waiters:
    """Connections muted until a shared resource has room, served first come first served.

    Used by the MemoryPool (queued.max.request.bytes) and the queued.max.requests bound.
    A connection that finds others waiting queues behind them even if there is room, so
    a busy connection cannot take every freed byte or slot; the head is woken (on its
    processor's loop, ``Connection._wake``) when room frees. Any thread; ``lock`` guards
    the queue and the resource's counter, which the owner updates while holding it.
    """

    def __cinit__(self):
        self.lock = threading.Lock()
        self.queue = deque()
        self.members = set()

    cdef bint _enter_locked(self, Connection conn, bint room):
        """True when conn may take the resource now (room, and it is first in line);
        else it is queued (once). The caller holds self.lock."""
        cdef bint waiting = conn in self.members
        if room and (self.count == 0 or (waiting and self.queue[0] is conn)):
            if waiting:
                self.queue.popleft()
                self.members.discard(conn)
                self.count -= 1
            return True
        if not waiting:
            self.queue.append(conn)
            self.members.add(conn)
            self.count += 1
        return False

    cdef void wake(self):
        """Wake the first waiting connection; it takes the room or keeps its place."""
        cdef Connection head
        if self.count == 0:
            return
        with self.lock:
            if self.count == 0:
                return
            head = self.queue[0]
        try:
            head.proc.loop.call_soon_threadsafe(head._wake)
        except RuntimeError:   # its processor stopped (shutdown)
            pass

    cdef void forget(self, Connection conn):
        """conn closed: leave the line (waking the next one if it was first)."""
        cdef bint was_head
        if conn not in self.members:
            return
        with self.lock:
            if conn not in self.members:
                return
            was_head = self.queue[0] is conn
            self.queue.remove(conn)
            self.members.discard(conn)
            self.count -= 1
        if was_head:
            self.wake()


cdef class MemoryPool:
    """Bytes of the requests being received, across all connections of a SocketServer
    (Kafka's queued.max.request.bytes and its non-strict SimpleMemoryPool).

    A connection reserves the claimed size of a frame that outgrows its first read buffer
    (READ_BUFFER, not counted) before the buffer grows; its pages are still touched only
    as bytes arrive. As in Kafka a reservation succeeds while any memory is left, even
    if it is bigger than what is left, so a frame of up to socket.request.max.bytes
    always fits in the end and the total stays below capacity + one frame. Holding its
    whole reservation, a connection that started a frame can always finish it: no
    deadlock. While nothing is left, connections that need memory are muted and queue
    for it (_Waiters); they are woken in order as reservations are released (the request
    answered, or its connection closed). ``capacity`` <= 0: unbounded (Kafka's -1).
    """

    def __cinit__(self, long long capacity):
        self.capacity = capacity
        self.available = capacity
        self.waiters = _Waiters()

    cdef bint try_reserve(self, Connection conn, long long n):
        cdef bint ok
        if self.capacity <= 0:
            return True
        with self.waiters.lock:
            ok = self.waiters._enter_locked(conn, self.available > 0)
            if ok:
                self.available -= n
        conn.pool_waiting = not ok
        if ok and self.available > 0:
            self.waiters.wake()   # room left for the next in line
        return ok

    cdef void release(self, long long n):
        if self.capacity <= 0 or n == 0:
            return
        with self.waiters.lock:
            self.available += n
        if self.available > 0:
            self.waiters.wake()

    cdef bint keeps_buffers(self) noexcept:
        """Whether an idle connection may keep (and stay charged for) a grown buffer:
        only while the pool is more than half free and nobody waits, so kept buffers can
        never hold more than half of it."""
        return self.capacity <= 0 or (
            self.waiters.count == 0 and self.available > self.capacity // 2)


cdef class _Resumed:
    """Continues, inside an asyncio Task, a handler coroutine that was started eagerly.

    The handler ran synchronously up to its first suspension (most requests finish there
    and never need a Task); if it suspended, this object re-yields the future it was
    waiting on to the Task and then forwards send/throw/close, exactly as ``await`` does.
    """
    cdef object coro
    cdef object first
    cdef bint started

    def __cinit__(self, coro, first):
        self.coro = coro
        self.first = first

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        if not self.started:
            self.started = True
            first = self.first
            self.first = None
            return first
        return self.coro.send(value)

    def throw(self, typ, val=None, tb=None):
        self.started = True
        self.first = None
        if val is None:
            return self.coro.throw(typ)
        return self.coro.throw(typ, val, tb)

    def close(self):
        self.first = None
        return self.coro.close()


cdef class Connection:
    """One client connection: its socket, read buffer, mute state and pending response.

    Owned by one Processor; ``close()`` may be called from any thread. ``state`` is a
    dict for the broker's per-connection data (client id, fetch sessions ...).
    """

    def __cinit__(self):
        self.buffer_holders = 1
        self.state = {}
        self.api_queue = deque()
        # Not zeroed: an idle connection's buffer costs memory only where bytes arrived.
        self.rbuf = PyByteArray_FromStringAndSize(NULL, READ_BUFFER)
        self.rstart = 0
        self.rend = 0
        self.fd = -1

    def __repr__(self):
        return f"<Connection {self.id} {self.peer}{' closed' if self.closed else ''}>"

    def close(self):
        """Close the connection (thread-safe; a no-op if already closed)."""
        if self.closed:
            return
        if self.proc.threaded and threading.get_ident() != self.proc.thread.ident:
            try:
                self.proc.loop.call_soon_threadsafe(self._close_from_api)
            except RuntimeError:   # the processor loop is already closed
                pass
        else:
            self._close("closed by the broker")

    def _close_from_api(self):
        self._close("closed by the broker")

    # ---- reading -------------------------------------------------------------------

    cdef void _start_reading(self):
        if (not self.reading and not self.closed and not self.eof and not self.pool_waiting
                and not self.gated and not self.throttled):
            self.reading = True
            self.proc.loop.add_reader(self.fd, self._on_readable)
            # Bytes already received and decrypted (or received, not yet decrypted) wait
            # in the TLS object, where no readable event will announce them: go and get them.
            if (self.tls is not None and not self.tls_kick_pending
                    and (self.tls_in.pending or self.tls.pending())):
                self.tls_kick_pending = True
                self.proc.loop.call_soon(self._tls_kick)

    def _tls_kick(self):
        self.tls_kick_pending = False
        if self.reading and not self.closed:
            self._on_readable()

    cdef void _stop_reading(self):
        if self.reading:
            self.reading = False
            self.proc.loop.remove_reader(self.fd)

    cdef int32_t _head_size(self) noexcept:
        """The size field of the frame at rstart (the caller checked 4 bytes are there)."""
        return <int32_t>fl_be32(
            <const unsigned char *>PyByteArray_AS_STRING(self.rbuf) + self.rstart)

    cdef int _make_room(self) except -1:
        """Room at the end of rbuf for the next recv (never called while muted): 1, or
        0 when the frame needs memory the pool has not got (the connection then waits
        for it in line, muted, and Connection._wake tries again)."""
        cdef Py_ssize_t avail = self.rend - self.rstart
        cdef long long extra
        cdef Py_ssize_t cap = len(self.rbuf)
        cdef Py_ssize_t need = 4
        cdef int32_t size
        cdef char *p
        cdef bytearray grown
        if avail >= 4:
            size = self._head_size()
            need = 4 + <Py_ssize_t>size   # size was validated by _process
        if self.rstart > 0 and need <= cap:
            p = PyByteArray_AS_STRING(self.rbuf)
            memmove(p, p + self.rstart, avail)
            self.rend = avail
            self.rstart = 0
            return 1
        # The buffer is full of one incomplete frame: grow. The whole claim is reserved in
        # the pool first, so the frame can always be finished. With a bounded pool
        # [queued.max.request.bytes] the claims of all connections are bounded, so the
        # buffer is the frame's size at once: it is not zeroed, so its pages cost memory
        # only as bytes arrive, and the frame is received into it with no copy on the way
        # (growing by steps copied 1.2 MB of a 6 MB frame on the request loop, and a
        # recv had less room). With an unbounded pool the claim is untrusted: the buffer
        # grows to at most eight times what was received (16 KiB, 128 KiB, 1 MiB, ...).
        extra = <long long>(need - READ_BUFFER) - self.pool_bytes
        if need > cap and extra > 0:
            if not self.proc.server.memory_pool.try_reserve(self, extra):
                return 0
            self.pool_bytes += extra
        if avail < 4 or self.proc.server.memory_pool.capacity <= 0:
            cap = min(need, 8 * cap)
        else:
            cap = need
        grown = PyByteArray_FromStringAndSize(NULL, cap)
        memcpy(PyByteArray_AS_STRING(grown),
               PyByteArray_AS_STRING(self.rbuf) + self.rstart, avail)
        self.rbuf = grown   # a new object: views a handler kept on the old one stay valid
        self.rstart = 0
        self.rend = avail
        return 1

    def _on_readable(self):
        cdef ssize_t n
        cdef Py_ssize_t free_space
        cdef char *p
        if self.closed:
            return
        if self.tls is not None:
            self._tls_readable()
            return
        try:
            free_space = len(self.rbuf) - self.rend
            if free_space == 0:
                if self.ahead or self.writing:
                    # Keep in-flight frames intact: stop reading until their responses are out.
                    self._stop_reading()
                    return
                if not self._make_room():
                    self._stop_reading()   # muted until the pool has memory (_wake)
                    return
                free_space = len(self.rbuf) - self.rend
                if free_space == 0:
                    # Complete frames are waiting for _process (deferred): read later.
                    self._stop_reading()
                    return
            p = PyByteArray_AS_STRING(self.rbuf) + self.rend
            with nogil:
                n = recv(self.fd, p, <size_t>free_space, 0)
            if n > 0:
                self.rend += n
                self._note_arrival()
                if not self.writing:
                    self._process()
            elif n == 0:
                self._on_peer_eof()
            else:
                if errno == EAGAIN or errno == EINTR:
                    return
                self._close(f"read failed: {os.strerror(errno)}", errno in PEER_GONE)
        except BaseException as exc:
            log.exception("connection %s %s: read path failed", self.id, self.peer)
            self._close(f"read path failed: {exc!r}")

    cdef void _note_arrival(self):
        """Request bytes arrived: the connection is active, and a request began unless
        one was already arriving (the receive deadline, see _expire_check)."""
        self.last_active = _now()
        if self.frame_start == 0:
            self.frame_start = self.last_active
            self._watch()

    cdef void _watch(self):
        """List the connection for the receive deadline (Processor.watched): at most once
        per expiry period, however many requests it sends meanwhile."""
        if not self.watched and self.proc.server.receive_timeout > 0:
            self.watched = True
            self.proc.watched.add(self)

    cdef void _on_peer_eof(self):
        if self.ahead or self.writing:
            # Let the in-flight requests finish (its response may still be read by a
            # half-closed peer), then close.
            self.eof = True
            self._stop_reading()
        elif self.rend > self.rstart:
            self._close(f"peer closed the connection in the middle of a request "
                        f"({self.rend - self.rstart} bytes of it received)")
        else:
            self._close("peer closed the connection", True)

    # ---- TLS -----------------------------------------------------------------------

    cdef void _tls_readable(self):
        """The TLS read path: ciphertext from the socket into tls_in (bounded), the
        handshake while it lasts, then plaintext into rbuf exactly as the plaintext path
        reads it (same framing, pool reservations and muting)."""
        cdef ssize_t n = 0
        cdef Py_ssize_t free_space
        cdef bint unprocessed = False   # plaintext added since _process last ran
        cdef bint peer_eof = False
        cdef char *p
        cdef Processor proc = self.proc
        try:
            if self.tls_in.pending < TLS_RECORD and not self.tls_in.eof:
                p = PyByteArray_AS_STRING(proc.tls_rbuf)
                with nogil:
                    n = recv(self.fd, p, <size_t>TLS_RECV, 0)
                if n > 0:
                    self.tls_in.write(memoryview(proc.tls_rbuf)[:n])
                    self.last_active = _now()
                elif n == 0:
                    self.tls_in.write_eof()   # decrypting what is left then raises EOF
                elif errno != EAGAIN and errno != EINTR:
                    self._close(f"read failed: {os.strerror(errno)}", errno in PEER_GONE)
                    return
            if self.handshaking and not self._tls_handshake():
                return
            # Plaintext into rbuf for as long as it has room (the TLS object may hold more
            # than the socket announces: _start_reading comes back for it). A full buffer
            # first has its complete frames handed out, as the plaintext path does after
            # each recv, so it is compacted or grown only for an incomplete one.
            while True:
                free_space = len(self.rbuf) - self.rend
                if free_space == 0 and unprocessed and not self.writing:
                    unprocessed = False
                    self._note_arrival()
                    self._process()
                    if self.closed:
                        return
                    free_space = len(self.rbuf) - self.rend
                if free_space == 0:
                    if self.ahead or self.writing or not self._make_room():
                        self._stop_reading()   # muted; resumed by _start_reading / _wake
                        break
                    free_space = len(self.rbuf) - self.rend
                    if free_space == 0:
                        self._stop_reading()   # complete frames wait for _process
                        break
                try:
                    with memoryview(self.rbuf) as whole:
                        n = self.tls.read(free_space, whole[self.rend:])
                except ssl.SSLWantReadError:
                    break
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    peer_eof = True   # close_notify, or the socket closed without it
                    break
                if n <= 0:
                    # SSLObject.read answers 0 bytes, not SSLZeroReturnError, for the
                    # peer's close_notify (a client closing cleanly waits for ours)
                    peer_eof = True
                    break
                self.rend += n
                unprocessed = True
            if self.tls_out.pending and not self.writing:
                self._tls_send_out()   # e.g. a key update the peer asked for
            if unprocessed:
                self._note_arrival()
                if not self.writing:
                    self._process()
            if peer_eof and not self.closed:
                self._on_peer_eof()
        except ssl.SSLError as exc:
            self.proc.server.tls_log.log(
                logging.WARNING, "connection %s %s: closing: TLS record error: %s",
                self.id, self.peer, exc.reason or exc)
            self._close("TLS error", True)
        except BaseException as exc:
            log.exception("connection %s %s: TLS read path failed", self.id, self.peer)
            self._close(f"read path failed: {exc!r}")

    cdef int _tls_handshake(self) except -1:
        """Advance the handshake with what tls_in holds: True once it is done (the
        connection then reads requests), False while it waits for the peer or after it
        failed (the connection is then closed, with one rate-limited line)."""
        cdef SocketServer server = self.proc.server
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            if self.tls_out.pending:
                self._tls_send_out()
            return False
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            # e.g. a port probe: a connection that closes before any handshake
            server.tls_log.log(
                logging.INFO, "connection %s %s: closing: peer closed the connection "
                "during the TLS handshake", self.id, self.peer)
            self._close("closed during the TLS handshake", True)
            return False
        except (ssl.SSLError, OSError) as exc:
            why = getattr(exc, "reason", None) or str(exc)
            if getattr(exc, "verify_message", None):   # the peer's certificate was refused
                why = f"{why} ({exc.verify_message})"
            server.tls_log.log(
                logging.WARNING, "connection %s %s: closing: TLS handshake failed: %s",
                self.id, self.peer, why)
            self._tls_send_alert()
            self._close("TLS handshake failed", True)
            return False
        self.handshaking = False
        self.peer_cert_der = self.tls.getpeercert(True)
        self.peer_cert_dict = self.tls.getpeercert(False)
        if self.tls_out.pending:
            self._tls_send_out()   # the handshake's last flight and session tickets
        return not self.closed

    def _tls_send_out(self):
        """Send the ciphertext waiting in tls_out; whatever the socket does not take now
        is sent when it becomes writable (the connection is muted meanwhile)."""
        if self.writing or self.closed:
            return
        try:
            if self._tls_send():
                return
        except OSError as exc:
            self._close(f"write failed: {exc.strerror or exc}", exc.errno in PEER_GONE)
            return
        self.writing = True
        self.proc.loop.add_writer(self.fd, self._on_writable)

    def _tls_send_alert(self):
        """Best effort, never blocks: the alert OpenSSL wrote for a failed handshake."""
        try:
            if self.wpending is None and self.tls_out.pending:
                self.sock.send(self.tls_out.read(), socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except OSError:
            pass

    cdef int _tls_send(self) except -1:
        """Send wpending and then tls_out: 1 when all is in the socket, 0 when it is full."""
        cdef ssize_t n
        cdef const char *p
        cdef Py_ssize_t left
        while True:
            if self.wpending is None:
                if not self.tls_out.pending:
                    return 1
                self.wpending = self.tls_out.read()
                self.wpoff = 0
            p = <const char *>self.wpending + self.wpoff
            left = len(self.wpending) - self.wpoff
            with nogil:
                n = send(self.fd, p, <size_t>left, MSG_NOSIGNAL)
            if n < 0:
                if errno == EINTR:
                    continue
                if errno == EAGAIN:
                    return 0
                raise OSError(errno, os.strerror(errno))
            self.wpoff += n
            if self.wpoff == len(self.wpending):
                self.wpending = None

    cdef int _flush_tls(self) except -1:
        """_flush for a TLS connection: the parts are encrypted TLS_CHUNK of plaintext
        at a time and each chunk's ciphertext is sent before the next is made, so a
        response (a large file region too) never sits whole in memory, encrypted or not.
        Consecutive small buffer parts are copied into one chunk (one TLS record for a
        corked run of small responses); a file region is pread into the processor's
        scratch buffer. 1 when all is out, 0 if the socket is full."""
        cdef Py_ssize_t nparts
        cdef Py_ssize_t take
        cdef Py_ssize_t size
        cdef ssize_t n
        cdef long long length
        cdef off_t pos
        cdef int infd
        cdef char *scratch
        cdef Processor proc = self.proc
        cdef bytearray batch
        while True:
            if not self._tls_send():
                return 0
            if self.wparts is None:
                return 1
            nparts = len(self.wparts)
            if self.widx >= nparts:
                return 1
            part = self.wparts[self.widx]
            if PyObject_CheckBuffer(part):
                with memoryview(part) as raw, raw.cast("B") as view:
                    size = len(view)
                    if size - self.woff >= TLS_CHUNK:   # a big part: encrypted in place
                        self.tls.write(view[self.woff:self.woff + TLS_CHUNK])
                        self.woff += TLS_CHUNK
                        if self.woff == size:
                            self.widx += 1
                            self.woff = 0
                        continue
                batch = bytearray()
                while self.widx < nparts and len(batch) < TLS_CHUNK:
                    part = self.wparts[self.widx]
                    if not PyObject_CheckBuffer(part):
                        break
                    with memoryview(part) as raw, raw.cast("B") as view:
                        size = len(view)
                        take = min(size - self.woff, TLS_CHUNK - len(batch))
                        batch += view[self.woff:self.woff + take]
                    self.woff += take
                    if self.woff == size:
                        self.widx += 1
                        self.woff = 0
                if batch:
                    self.tls.write(batch)
            else:
                infd = _region_at(part, self.woff, &length, &pos)
                if self.woff >= length:   # an empty region
                    self.widx += 1
                    self.woff = 0
                    continue
                take = <Py_ssize_t>min(length - self.woff, <long long>TLS_CHUNK)
                scratch = PyByteArray_AS_STRING(proc.tls_scratch)
                with nogil:
                    n = pread(infd, scratch, <size_t>take, pos)
                    while n < 0 and errno == EINTR:
                        n = pread(infd, scratch, <size_t>take, pos)
                if n == 0:
                    raise ValueError(f"file region {part!r} extends past the end of its file")
                if n < 0:
                    raise OSError(errno, os.strerror(errno))
                with memoryview(proc.tls_scratch) as whole:
                    self.tls.write(whole[:n])
                self.woff += n
                if self.woff == length:
                    self.widx += 1
                    self.woff = 0

    cdef void _tls_close_notify(self):
        """Best effort, never blocks: a close_notify alert before the socket closes,
        when the handshake finished and no record is half sent."""
        if self.handshaking or self.wpending is not None or self.tls_in.eof:
            return
        try:
            if self.tls_out.pending:
                return
            try:
                self.tls.unwrap()
            except ssl.SSLError:
                pass   # SSLWantReadError: the peer's close_notify is not awaited
            if self.tls_out.pending:
                self.sock.send(self.tls_out.read(), socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except Exception:
            pass

    # ---- certificate and session, for handlers (any thread) --------------------------

    @property
    def ssl_object(self):
        """The connection's ssl.SSLObject (None on a plaintext listener). Its processor
        thread drives it: from a handler, read only what the handshake fixed (version(),
        cipher(), getpeercert(), all safe once a request arrived)."""
        return self.tls

    def getpeercert(self, binary_form=False):
        """The peer's certificate as ssl.SSLObject.getpeercert gives it (DER bytes with
        binary_form, else a dict; None without TLS or when the peer sent none), kept when
        the handshake finished; so fastlog.security.peer_principal(conn) maps it."""
        return self.peer_cert_der if binary_form else self.peer_cert_dict

    def _process_soon(self):
        if not self.closed:
            self._process()

    def _wake(self):
        """Its turn for pool memory or a queued.max.requests slot (_Waiters): try again."""
        if self.closed:
            return
        try:
            if self.pool_waiting:
                if not self._make_room():
                    return   # still not first, or no memory yet: keeps its place
                # The wait was the broker's doing: the receive deadline starts afresh.
                self.frame_start = _now()
            self._process()
        except BaseException as exc:
            log.exception("connection %s %s: wake-up failed", self.id, self.peer)
            self._close(f"wake-up failed: {exc!r}")

    cdef bint _may_dispatch(self):
        """Take a queued.max.requests slot for one more frame (else wait for one, muted)."""
        cdef SocketServer server = self.proc.server
        cdef _Waiters waiters = server.queue_waiters
        cdef bint ok
        if waiters.count == 0 and server.queued_requests < server.queued_max_requests:
            server.queued_requests += 1   # C arithmetic under the GIL: no thread switch
            self.gated = False
            return True
        with waiters.lock:
            ok = waiters._enter_locked(
                self, server.queued_requests < server.queued_max_requests)
            if ok:
                server.queued_requests += 1
        self.gated = not ok
        if not ok:
            self._stop_reading()
        elif server.queued_requests < server.queued_max_requests:
            waiters.wake()
        return ok

    cdef void _process(self):
        """Hand complete frames to the handler (the connection mutes while it may not).

        Inline, one frame at a time: the next is dispatched once the previous response is
        queued. Threaded, up to proc.max_ahead frames go to the API loop in one hand-off;
        the API loop still runs them one after the other (Connection.api_queue), so the
        request order seen by the broker and the response order are the same.
        """
        cdef Py_ssize_t avail
        cdef int32_t size
        cdef int count = 0
        cdef SocketServer server = self.proc.server
        cdef bint was_reading = self.reading
        if self.in_process:
            return
        self.in_process = True
        try:
            while (not self.writing and self.ahead < self.proc.max_ahead and not self.closed
                   and not self.throttled):
                avail = self.rend - self.rstart
                if avail < 4:
                    break
                size = self._head_size()
                if size <= 0 or size > server.max_request_size:
                    server.frame_log.log(
                        logging.WARNING,
                        "connection %s %s: closing: request size %d is outside 1..%d "
                        "(socket.request.max.bytes)",
                        self.id, self.peer, size, server.max_request_size)
                    self._close("bad frame size", True)
                    return
                if avail < 4 + <Py_ssize_t>size:
                    break
                if server.stopping or count >= FRAMES_PER_EVENT:
                    if not server.stopping:
                        self.proc.loop.call_soon(self._process_soon)
                    break
                if not self._may_dispatch():
                    break   # muted: queued.max.requests reached; _wake resumes it
                count += 1
                frame = memoryview(self.rbuf)[self.rstart + 4:self.rstart + 4 + size]
                self.rstart += 4 + size
                self.ahead += 1
                self.proc._dispatch(self, frame)
                frame = None
            if self.wparts is not None and not self.writing and not self.closed:
                self._on_writable()   # corked responses
            if self.rstart == self.rend:
                self.frame_start = 0
            elif count or not was_reading:
                self.frame_start = _now()   # the rest began after a frame, or after a mute
                self._watch()
            if not self.ahead and not self.writing and not self.closed:
                if self.rstart == self.rend:
                    self.rstart = self.rend = 0
                    if self.pool_bytes or len(self.rbuf) > READ_BUFFER_KEEP:
                        self._release_buffer()
                if self.eof:
                    if not self.gated:   # else its complete requests run first (_wake)
                        self._close("peer closed the connection", True)
                else:
                    self._start_reading()
            elif self.ahead and not self.closed and not self.eof:
                self._start_reading()   # more frames may be dispatched ahead
        except BaseException as exc:
            log.exception("connection %s %s: request dispatch failed", self.id, self.peer)
            self._close(f"dispatch failed: {exc!r}")
        finally:
            self.in_process = False

    def throttle(self, double delay_ms):
        """Mute the connection for `delay_ms` (a client quota's throttle time, KIP-219):
        the response being written still goes out, but no further request is read or
        dispatched until the time is up; other connections are not affected. Callable
        from the API loop (threaded mode: handed to the connection's processor)."""
        if delay_ms <= 0 or self.closed:
            return
        if self.proc.threaded and threading.get_ident() != self.proc.thread.ident:
            # frames already handed to the API loop wait too (SocketServer._handler_done)
            self.api_hold_until = max(self.api_hold_until, _now() + delay_ms / 1000.0)
            try:
                self.proc.loop.call_soon_threadsafe(self._begin_throttle, delay_ms)
            except RuntimeError:   # the processor loop is already closed
                pass
        else:
            self._begin_throttle(delay_ms)

    def _begin_throttle(self, double delay_ms):
        cdef double until = _now() + delay_ms / 1000.0
        if self.closed or until <= self.throttle_until:
            return
        self.throttle_until = until
        if not self.throttled:
            self.throttled = True
            self._stop_reading()
        self.proc.loop.call_later(delay_ms / 1000.0, self._end_throttle)

    def _end_throttle(self):
        cdef double left
        if not self.throttled or self.closed:
            return
        left = self.throttle_until - _now()
        if left > 0.001:
            # extended meanwhile (a later timer ends it too), or this timer fired early
            # (the loop's clock is coarser): wait for the rest, never stay muted
            self.proc.loop.call_later(left, self._end_throttle)
            return
        self.throttled = False
        self.throttle_until = 0
        if self.frame_start:
            self.frame_start = _now()   # the wait was the broker's doing
        self._unmute()   # dispatches what waits in rbuf, and reads again

    @property
    def is_throttled(self):
        return self.throttled

    def _release_buffer(self):
        """All frames answered: give the pool back the memory of a grown buffer, keeping
        the buffer (and its charge) only if it is small and the pool has plenty."""
        cdef MemoryPool pool = self.proc.server.memory_pool
        cdef long long keep = 0
        if len(self.rbuf) <= READ_BUFFER_KEEP and pool.keeps_buffers():
            keep = min(self.pool_bytes, <long long>(len(self.rbuf) - READ_BUFFER))
        else:
            self.rbuf = PyByteArray_FromStringAndSize(NULL, READ_BUFFER)
        if self.pool_bytes > keep:
            pool.release(self.pool_bytes - keep)
            self.pool_bytes = keep

    cdef void _unmute(self):
        if self.closed or self.writing:
            return
        if self.in_process:
            return   # the _process loop on the stack continues with the next frame
        self._process()

    # ---- writing -------------------------------------------------------------------

    cdef void _respond(self, object parts):
        """Queue one response (a list of parts, or None for no response) and write it.

        Small all-bytes responses produced while _process is still walking pipelined
        frames of the same read are "corked": queued, the connection unmuted, and all of
        them written by one writev when the walk ends (fewer syscalls and client wakeups;
        order is unchanged since they are queued in request order). While a write is
        pending the connection stays muted, as in Kafka.
        """
        cdef long long total = 0
        cdef Py_buffer view
        cdef unsigned char prefix[4]
        cdef long long length
        cdef bint has_region = False
        if self.closed:
            return
        if self.ahead > 0:
            self.ahead -= 1
        if self.frame_start:
            self.frame_start = _now()   # its partial frame waited for this answer
        if parts is None:
            self._unmute()
            return
        try:
            for part in parts:
                if type(part) is bytes:
                    total += len(<bytes>part)
                elif PyObject_CheckBuffer(part):
                    PyObject_GetBuffer(part, &view, PyBUF_SIMPLE)
                    total += view.len
                    PyBuffer_Release(&view)
                elif type(part) is FileRegion:   # positions/lengths checked by its __init__
                    total += (<FileRegion>part).length
                    has_region = True
                else:   # anything region-like (.file/.position/.length)
                    length = part.length
                    if length < 0 or part.position < 0:
                        raise ValueError(f"bad file region {part!r}")
                    total += length
                    has_region = True
            if total > 0x7fffffff:
                raise ValueError(f"response of {total} bytes does not fit a Kafka frame")
        except Exception:
            log.exception("connection %s %s: closing: handler returned bad response parts",
                          self.id, self.peer)
            self._close("bad response parts", True)
            return
        fl_put_be32(prefix, <unsigned int>total)
        if self.wparts is None:
            self.wparts = []
            self.widx = 0
            self.woff = 0
        self.wparts.append(PyBytes_FromStringAndSize(<char *>prefix, 4))
        self.wparts.extend(parts)
        if self.writing:
            return   # stays muted until everything queued is out (_on_writable)
        if self.in_process and not has_region and total <= CORK_BYTES:
            return   # corked: _process writes it with the next ones
        self._on_writable()

    def _on_writable(self):
        cdef int done
        if self.closed:
            return
        try:
            done = self._flush() if self.tls is None else self._flush_tls()
        except OSError as exc:
            self._close(f"write failed: {exc.strerror or exc}", exc.errno in PEER_GONE)
            return
        except ValueError as exc:   # a file region that the file no longer covers
            log.warning("connection %s %s: closing: %s", self.id, self.peer, exc)
            self._close("response could not be written", True)
            return
        except BaseException as exc:
            log.exception("connection %s %s: write failed", self.id, self.peer)
            self._close(f"write failed: {exc!r}")
            return
        if done:
            self.wparts = None
            if self.writing:
                self.writing = False
                self.proc.loop.remove_writer(self.fd)
            self.last_active = _now()
            # A half-closed peer's requests still in rbuf run first; _process closes it
            # once nothing is left to answer.
            self._unmute()
        elif not self.writing:
            self.writing = True
            self.proc.loop.add_writer(self.fd, self._on_writable)

    cdef int _flush(self) except -1:
        """Write as much of wparts as the socket takes: 1 when all is out, 0 if it is full."""
        cdef iovec iov[64]
        cdef Py_buffer views[64]
        cdef int nv = 0
        cdef int i
        cdef ssize_t n
        cdef size_t want
        cdef Py_ssize_t nparts = len(self.wparts)
        cdef Py_ssize_t j
        cdef off_t pos
        cdef long long length
        cdef int infd
        cdef int outfd = self.fd
        cdef size_t chunk
        cdef bint zero_copy = self.proc.server.zero_copy
        cdef unsigned char *scratch
        while self.widx < nparts:
            part = self.wparts[self.widx]
            if PyObject_CheckBuffer(part):
                # Gather consecutive buffer parts into one writev.
                nv = 0
                want = 0
                j = self.widx
                try:
                    while j < nparts and nv < MAX_IOV:
                        part = self.wparts[j]
                        if not PyObject_CheckBuffer(part):
                            break
                        PyObject_GetBuffer(part, &views[nv], PyBUF_SIMPLE)
                        iov[nv].iov_base = views[nv].buf
                        iov[nv].iov_len = <size_t>views[nv].len
                        if nv == 0:
                            iov[0].iov_base = <char *>views[0].buf + self.woff
                            iov[0].iov_len -= <size_t>self.woff
                        want += iov[nv].iov_len
                        nv += 1
                        j += 1
                    with nogil:
                        n = writev(outfd, iov, nv)
                        if n < 0 and errno == EINTR:
                            n = writev(outfd, iov, nv)
                    if n < 0:
                        if errno == EAGAIN:
                            return 0
                        raise OSError(errno, os.strerror(errno))
                    # Advance over what was written.
                    i = 0
                    while i < nv and n >= <ssize_t>iov[i].iov_len:
                        n -= <ssize_t>iov[i].iov_len
                        self.widx += 1
                        self.woff = 0
                        i += 1
                    if i < nv:
                        self.woff += n
                        return 0   # short write: the socket buffer is full
                finally:
                    for i in range(nv):
                        PyBuffer_Release(&views[i])
            else:
                infd = _region_at(part, self.woff, &length, &pos)
                if zero_copy:
                    while self.woff < length:
                        chunk = <size_t>min(length - self.woff, <long long>FILE_CHUNK)
                        with nogil:
                            n = sendfile(outfd, infd, &pos, chunk)
                        if n > 0:
                            self.woff += n
                        elif n == 0:
                            raise ValueError(
                                f"file region {part!r} extends past the end of its file")
                        elif errno == EINTR:
                            continue
                        elif errno == EAGAIN:
                            return 0
                        else:
                            raise OSError(errno, os.strerror(errno))
                else:
                    scratch = self.proc.scratch
                    while self.woff < length:
                        chunk = <size_t>min(length - self.woff, <long long>self.proc.scratch_size)
                        with nogil:
                            n = pread(infd, scratch, chunk, pos)
                        if n == 0:
                            raise ValueError(
                                f"file region {part!r} extends past the end of its file")
                        if n < 0:
                            if errno == EINTR:
                                continue
                            raise OSError(errno, os.strerror(errno))
                        want = <size_t>n
                        with nogil:
                            n = send(outfd, scratch, want, MSG_NOSIGNAL)
                        if n < 0:
                            if errno == EINTR:
                                continue
                            if errno == EAGAIN:
                                return 0
                            raise OSError(errno, os.strerror(errno))
                        self.woff += n
                        pos += n
                        if <size_t>n < want:
                            return 0
                self.widx += 1
                self.woff = 0
        return 1

    cdef void _close(self, str why, bint quiet=False):
        if self.closed:
            return
        self.closed = True
        if quiet:
            log.debug("connection %s %s closed: %s", self.id, self.peer, why)
        else:
            log.info("connection %s %s closed: %s", self.id, self.peer, why)
        try:
            if self.reading:
                self.reading = False
                self.proc.loop.remove_reader(self.fd)
            if self.writing:
                self.writing = False
                self.proc.loop.remove_writer(self.fd)
        except Exception:   # the loop may already be closed during shutdown
            pass
        if self.tls is not None:
            self._tls_close_notify()
        self.wparts = None
        try:
            self.sock.close()
        except OSError:
            pass
        self.proc.connections.pop(self.id, None)
        if self.watched:
            self.watched = False
            self.proc.watched.discard(self)
        server = self.proc.server
        server.connection_count -= 1
        server.quotas.connection_closed()
        server._forget_ip(self.ip)
        if self.pool_waiting:
            self.pool_waiting = False
            server.memory_pool.waiters.forget(self)
        if self.gated:
            self.gated = False
            server.queue_waiters.forget(self)
        self._let_go_of_buffer()

    cdef void _let_go_of_buffer(self):
        """One holder of the read buffer is done with it (see buffer_holders). Plain C
        arithmetic under the GIL: the decrement and the test cannot interleave with the
        other thread's."""
        cdef long long held
        self.buffer_holders -= 1
        if self.buffer_holders == 0 and self.pool_bytes:
            held = self.pool_bytes
            self.pool_bytes = 0
            self.proc.server.memory_pool.release(held)


cdef class Processor:
    """One processor loop: owns a set of connections and does their socket I/O."""

    def __cinit__(self, SocketServer server, int index, bint threaded):
        self.server = server
        self.index = index
        self.threaded = threaded
        self.connections = {}
        self.watched = set()
        self.idle_heap = []
        self.to_api = []
        self.to_net = []
        self.max_ahead = MAX_AHEAD if threaded else 1
        self.api_loop = server.loop
        if not server.zero_copy:   # pread+send needs a bounce buffer; sendfile does not
            self.scratch_size = FILE_CHUNK
            self.scratch = <unsigned char *>malloc(self.scratch_size)
            if self.scratch is NULL:
                raise MemoryError()
        if server.ssl_context is not None:
            self.tls_rbuf = bytearray(TLS_RECV)
            self.tls_scratch = bytearray(TLS_CHUNK)
        if not threaded:
            self.loop = server.loop

    def __dealloc__(self):
        free(self.scratch)

    def _run_thread(self, ready):
        loop = _uvloop.new_event_loop() if _uvloop is not None else asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        self._schedule_expire_check()
        self.api_loop.call_soon_threadsafe(ready.set_result, None)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def start(self):
        """Start the thread (threaded mode); returns a future done when its loop runs."""
        ready = self.api_loop.create_future()
        if not self.threaded:
            ready.set_result(None)
            self._schedule_expire_check()
        else:
            self.thread = threading.Thread(
                target=self._run_thread, args=(ready,),
                name=f"fastlog-network-{self.index}", daemon=True)
            self.thread.start()
        return ready

    def call_in_loop(self, fn, *args):
        if self.threaded:
            self.loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)

    def _schedule_expire_check(self):
        self.expire_period = 1.0
        limits = (self.server.idle_timeout, self.server.receive_timeout,
                  self.server.handshake_timeout if self.server.ssl_context is not None else 0)
        for limit in limits:
            if limit > 0:
                self.expire_period = min(self.expire_period, max(limit / 4, 0.01))
        if any(limit > 0 for limit in limits):
            self.expire_handle = self.loop.call_later(self.expire_period, self._expire_check)

    def _expire_check(self):
        """Close connections idle for connections.max.idle.ms, and those that began a
        request and did not send all of it within fastlog.request.receive.timeout.ms
        while we were reading (a client trickling bytes is not idle, but this catches
        it). Connections muted by the broker (a request in flight, a response being
        written, waiting for pool memory or a queue slot) are left alone. A TLS
        handshake not finished by its deadline closes the connection in any state.

        The work of a check does not grow with the connections that sit idle: the idle
        timeout looks only at the connections whose time may be up (idle_heap, each
        looked at about once per connections.max.idle.ms), the deadlines only at the
        connections with a request arriving or a handshake under way (watched)."""
        cdef Connection conn
        cdef double now = _now()
        cdef double idle = self.server.idle_timeout
        cdef double receive = self.server.receive_timeout
        cdef double due
        for conn in list(self.watched):
            if conn.handshaking:
                if now > conn.handshake_deadline:
                    self.server.tls_log.log(
                        logging.INFO, "connection %s %s: closing: TLS handshake not "
                        "finished within %.0f ms", conn.id, conn.peer,
                        self.server.handshake_timeout * 1000)
                    conn._close("TLS handshake not finished in time", True)
                continue
            if conn.frame_start == 0:
                conn.watched = False
                self.watched.discard(conn)
                continue
            if conn.ahead or conn.writing or conn.pool_waiting or conn.gated:
                continue
            if receive > 0 and conn.reading and now - conn.frame_start > receive:
                self.server.expire_log.log(
                    logging.INFO, "connection %s %s: closing: %d bytes of a request received "
                    "and the rest not within %.0f ms (fastlog.request.receive.timeout.ms)",
                    conn.id, conn.peer, conn.rend - conn.rstart, receive * 1000)
                conn._close("request not received in time", True)
        heap = self.idle_heap
        if idle > 0 and len(heap) > 2 * len(self.connections) + 1024:
            # Closed connections leave their entries behind until due: with many short
            # connections, rebuild from the open ones (each close pays O(1) for it).
            heap = self.idle_heap = []
            for conn in self.connections.values():
                heap.append((conn.last_active + idle, conn.id))
            heapify(heap)
        while heap and heap[0][0] <= now:
            conn_id = heappop(heap)[1]
            conn = self.connections.get(conn_id)
            if conn is None or conn.closed:
                continue
            if conn.ahead or conn.writing or conn.pool_waiting or conn.gated:
                due = now + self.expire_period   # muted by the broker: not idle; look again
            elif now - conn.last_active > idle:
                conn._close(f"idle for more than {idle * 1000:.0f} ms "
                            "(connections.max.idle.ms)")
                continue
            else:
                due = conn.last_active + idle
            heappush(heap, (due, conn_id))
        self._schedule_expire_check()

    def add_connection(self, sock, peer, long long conn_id):
        cdef Connection conn = Connection()
        conn.sock = sock
        conn.fd = sock.fileno()
        conn.peer = peer
        conn.ip = peer[0] if peer else None
        conn.id = conn_id
        conn.proc = self
        conn.last_active = _now()
        self.connections[conn_id] = conn
        if self.server.idle_timeout > 0:
            heappush(self.idle_heap, (conn.last_active + self.server.idle_timeout, conn_id))
        if self.server.stopping:
            conn._close("server stopping", True)
            return
        if self.server.ssl_context is not None:
            conn.tls_in = ssl.MemoryBIO()
            conn.tls_out = ssl.MemoryBIO()
            try:
                conn.tls = self.server.ssl_context.wrap_bio(
                    conn.tls_in, conn.tls_out, server_side=True)
            except Exception as exc:
                log.error("connection %s %s: closing: cannot set up TLS: %s",
                          conn_id, peer, exc)
                conn._close("TLS setup failed", True)
                return
            conn.handshaking = True
            conn.handshake_deadline = conn.last_active + self.server.handshake_timeout
            conn.watched = True
            self.watched.add(conn)
        conn._start_reading()

    def shutdown(self, done=None):
        """Close every connection; in threaded mode also stop the loop. Runs on self.loop."""
        cdef Connection conn
        if self.expire_handle is not None:
            self.expire_handle.cancel()
            self.expire_handle = None
        for conn in list(self.connections.values()):
            conn._close("server stopping", True)
        if self.threaded:
            self.loop.stop()
        if done is not None:
            self.api_loop.call_soon_threadsafe(_set_done, done)

    cdef void _dispatch(self, Connection conn, object frame):
        if not self.threaded:
            self.server._run_handler(conn, frame)
            return
        # Hand-offs between threads are batched: one wake-up of the other loop carries
        # everything queued until it runs. Append + length check cannot interleave with
        # the other side's swap (no GIL release in between), so nothing is ever stranded.
        self.to_api.append((conn, frame))
        if len(self.to_api) == 1:
            self.api_loop.call_soon_threadsafe(self._deliver_to_api)

    def _deliver_to_api(self):
        """API loop: run the handlers of every frame queued by this processor, one
        request per connection at a time (the others wait in conn.api_queue)."""
        cdef Connection conn
        batch = self.to_api
        self.to_api = []
        if self.server.stopping:
            self.server._requests_done(len(batch))
            return   # stop() no longer waits for new requests; their connections close
        for conn, frame in batch:
            if conn.api_dead:
                self.server._requests_done(1)
                continue   # an earlier request of this connection failed: it is closing
            if conn.api_running:
                conn.api_queue.append(frame)
            else:
                conn.api_running = True
                self.server._run_handler(conn, frame)

    cdef void _queue_response(self, Connection conn, object parts):
        self.to_net.append((conn, parts))
        if len(self.to_net) == 1:
            try:
                self.loop.call_soon_threadsafe(self._deliver_to_net)
            except RuntimeError:   # the processor already stopped (shutdown): drop it
                self.to_net = []

    def _deliver_to_net(self):
        """Processor loop: write every response the API loop queued for it; small ones
        of the same connection are corked into one writev by the _process that follows."""
        cdef Connection conn
        batch = self.to_net
        self.to_net = []
        touched = []
        for conn, parts in batch:
            if not conn.in_process:
                conn.in_process = True
                touched.append(conn)
            conn._respond(parts)
        for conn in touched:
            conn.in_process = False
            if not conn.closed:
                conn._process()


def _resolve_hosts(overrides):
    """{host or address: count} -> {address: count}, names resolved once (as Kafka does
    at startup); a name that does not resolve is kept as written, with a warning."""
    out = {}
    for host, count in overrides.items():
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s (%s); "
                        "it applies to that exact address only", host, exc)
            out[host] = count
            continue
        for info in infos:
            out[info[4][0]] = count
    return out


def _set_done(fut):
    if not fut.done():
        fut.set_result(None)


cdef class ConnectionQuotas:
    """max.connections over every listener of one broker (Kafka's ConnectionQuotas).

    Each SocketServer of the broker is given the same one; a SocketServer's own
    max_connections is its listener's limit (listener.name.<listener>.max.connections,
    by default the broker's). ``total`` counts the open connections of all of them
    (changed under the GIL by the acceptor, on the API loop, and by closes, on the
    processors' threads). A listener at the limit stops accepting
    and waits here until a connection of any listener closes; the protected listener
    (the inter-broker one, when the broker has more than one) accepts anyway, and a
    connection of another listener, the least recently active, is closed to make room.
    """

    def __init__(self, max_connections=2 ** 31 - 1):
        self.max_connections = max_connections
        self.waiting = []
        self.servers = []

    cdef void connection_closed(self):
        self.total -= 1
        self._wake_waiting()

    cdef void _wake_waiting(self):
        # every waiting listener looks again (its own limit may be what it waits for)
        cdef SocketServer server
        if self.waiting:
            waiting, self.waiting = self.waiting, []
            for server in waiting:
                try:
                    server.loop.call_soon_threadsafe(server._slot_free)
                except RuntimeError:   # its loop is closed: it has stopped
                    pass

    def set_max_connections(self, long max_connections):
        """A new broker-wide limit (dynamic max.connections); waiting listeners resume
        when it leaves room, and connections already open stay, as in Kafka."""
        self.max_connections = max_connections
        self._wake_waiting()

    def close_least_active(self):
        """Close the least recently active connection of an unprotected listener (the
        protected listener took the broker over its limit). On the API loop."""
        cdef SocketServer server
        cdef Processor proc
        cdef Connection conn, oldest = None
        for server in self.servers:
            if server.protected:
                continue
            for proc in server.processors:
                for conn in list(proc.connections.values()):
                    if not conn.closed and (oldest is None
                                            or conn.last_active < oldest.last_active):
                        oldest = conn
        if oldest is not None:
            oldest.proc.server.refusal_log.log(
                logging.WARNING, "closing connection %s %s, the least recently active: "
                "%d connections open (max.connections) and the inter-broker listener "
                "accepted one more", oldest.id, oldest.peer, self.total)
            oldest.close()


cdef class SocketServer:
    """Acceptor + processors for one listener; handlers run on the API loop.

    ``handler(conn, frame)`` is a coroutine function returning a list of response parts
    or None. ``start()``/``stop()`` are awaited on the API loop (``loop`` or the running
    one). See the module comment for the threading model.

    Limits (Kafka's keys): ``max_connections``, ``max_connections_per_ip`` and
    ``max_connections_per_ip_overrides`` ({host or address: count}) close a new socket
    over them; ``queued_max_request_bytes`` (<= 0: unbounded) bounds the memory of
    requests being received (MemoryPool); ``queued_max_requests`` bounds the requests
    handed to the handler and not yet answered, over all connections (a parked handler
    counts); ``receive_timeout_ms`` (0: none) closes a connection that began a request
    and did not send the rest in time; ``reserved_files`` (an int, or a callable read
    about once a second) is how many open files the process keeps for itself: accepts
    pause while the connections would leave fewer than that below RLIMIT_NOFILE.
    Repeated warnings are rate-limited to one line per ``log_interval`` seconds.

    TLS: with ``ssl_context`` (a server-side ssl.SSLContext, e.g. from
    fastlog.security.server_context) every accepted connection speaks TLS; a handshake
    not finished within ``ssl_handshake_timeout_ms`` closes it. Handlers find the peer's
    certificate with ``conn.getpeercert()`` and the session with ``conn.ssl_object``.
    """

    def __init__(self, handler, host="127.0.0.1", port=0, num_network_threads=1,
                 max_request_size=100 * 1024 * 1024, max_connections=2 ** 31 - 1,
                 idle_timeout_ms=600000, loop=None, threaded=None, eager=True,
                 zero_copy=None, max_connections_per_ip=2 ** 31 - 1,
                 max_connections_per_ip_overrides=None, queued_max_request_bytes=-1,
                 queued_max_requests=2 ** 31 - 1, receive_timeout_ms=0,
                 reserved_files=64, log_interval=10.0, ssl_context=None,
                 ssl_handshake_timeout_ms=10000, connection_quotas=None, protected=False):
        if num_network_threads < 1:
            raise ValueError("num_network_threads must be at least 1")
        if max_request_size < 1:
            raise ValueError("max_request_size must be positive")
        if queued_max_requests < 1:
            raise ValueError("queued_max_requests must be at least 1")
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError("ssl_context must be an ssl.SSLContext")
        if ssl_handshake_timeout_ms <= 0:
            raise ValueError("ssl_handshake_timeout_ms must be positive")
        self.handler = handler
        self.host = host
        self.port = port
        self.num_network_threads = num_network_threads
        self.max_request_size = min(max_request_size, 0x7fffffff)
        self.max_connections = 2 ** 31 - 1 if max_connections is None else max_connections
        if connection_quotas is None:
            connection_quotas = ConnectionQuotas(self.max_connections)
        self.quotas = connection_quotas
        self.quotas.servers.append(self)
        self.protected = protected
        self.idle_timeout = (idle_timeout_ms or 0) / 1000.0
        self.loop = loop
        self.threaded = (num_network_threads > 1) if threaded is None else threaded
        self.eager = eager
        self.zero_copy = True if zero_copy is None else zero_copy
        self.processors = []
        self.inflight = set()
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = _resolve_hosts(
            max_connections_per_ip_overrides or {})
        self.ip_counts = {}
        self.ip_lock = threading.Lock()
        self.memory_pool = MemoryPool(queued_max_request_bytes)
        self.queued_max_requests = queued_max_requests
        self.queue_waiters = _Waiters()
        self.receive_timeout = (receive_timeout_ms or 0) / 1000.0
        self.reserved_files = reserved_files
        self.files_limit = -1
        self.refusal_log = RateLimitedLog(log, log_interval)
        self.frame_log = RateLimitedLog(log, log_interval)
        self.expire_log = RateLimitedLog(log, log_interval)
        self.accept_log = RateLimitedLog(log, log_interval)
        self.tls_log = RateLimitedLog(log, log_interval)
        if ssl_context is not None:
            # As Kafka (SslTransportLayer refuses it): no TLS 1.2 renegotiation, which a
            # client could otherwise ask for again and again at the broker's CPU cost.
            ssl_context.options |= ssl.OP_NO_RENEGOTIATION
        self.ssl_context = ssl_context
        self.handshake_timeout = ssl_handshake_timeout_ms / 1000.0

    async def start(self):
        if self.started:
            raise RuntimeError("server already started")
        self.started = True
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        # An empty host (Kafka's "PLAINTEXT://:9092") means every interface.
        infos = socket.getaddrinfo(self.host or None, self.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, _, _, _, addr = infos[0]
        lsock = socket.socket(family, socket.SOCK_STREAM)
        try:
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind(addr)
            lsock.listen(1024)
            lsock.setblocking(False)
        except BaseException:
            lsock.close()
            raise
        self.lsock = lsock
        self.port = lsock.getsockname()[1]
        self._count_files(_now())
        nproc = self.num_network_threads if self.threaded else 1
        for i in range(nproc):
            proc = Processor(self, i, self.threaded)
            self.processors.append(proc)
            await proc.start()
        self.loop.add_reader(lsock.fileno(), self._on_accept)
        log.info("listening on %s:%d (%d %s processor%s%s)", self.host, self.port, nproc,
                 "threaded" if self.threaded else "inline", "s" if nproc > 1 else "",
                 ", TLS" if self.ssl_context is not None else "")

    def _resume_accept(self):
        if self.lsock is None or self.stopping:
            return
        if self.files_limit >= 0 and self._files_short(_now()):
            self.loop.call_later(0.1, self._resume_accept)   # still short: look again
            return
        if self.accept_paused:
            self.accept_paused = False
            log.info("accepting connections again (%d open)", self.connection_count)
        self.loop.add_reader(self.lsock.fileno(), self._on_accept)

    def _pause_accept(self):
        self.accept_paused = True
        self.loop.remove_reader(self.lsock.fileno())
        self.loop.call_later(0.1, self._resume_accept)

    def _slot_free(self):
        """A connection closed while this listener waited at max.connections (API loop)."""
        if not self.slot_waiting:
            return
        self.slot_waiting = False
        if self.lsock is None or self.stopping or self.accept_paused:
            return   # stopped, or the open-file pause resumes accepting itself
        self.loop.add_reader(self.lsock.fileno(), self._on_accept)

    def set_connection_limits(self, max_connections, max_connections_per_ip,
                              max_connections_per_ip_overrides):
        """New connection limits (Kafka's dynamic max.connections of this listener,
        max.connections.per.ip and its overrides; the broker-wide max.connections is
        ConnectionQuotas.set_max_connections), on the API loop: sockets accepted from
        now on are checked against them; connections already open stay, as in Kafka."""
        overrides = _resolve_hosts(max_connections_per_ip_overrides or {})
        self.max_connections = max_connections
        self.quotas._wake_waiting()
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = overrides

    cdef void _count_files(self, double now):
        """Refresh the open-file figures: the limit, the files open besides connections
        (counted in /proc/self/fd) and the reserve. files_limit -1: not known (no check)."""
        self.files_counted_at = now
        try:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if soft == resource.RLIM_INFINITY:
                self.files_limit = -1
                return
            # listdir holds one descriptor of its own while it counts
            self.other_files = len(os.listdir("/proc/self/fd")) - 1 - self.connection_count
            reserve = self.reserved_files
            self.files_reserve = max(0, int(reserve() if callable(reserve) else reserve))
            self.files_limit = soft
        except (OSError, ValueError):
            self.files_limit = -1
        except Exception:
            log.exception("counting open files failed; no open-file reserve for connections")
            self.files_limit = -1

    cdef bint _files_short(self, double now):
        """Whether one more connection would eat into the broker's reserve of files."""
        if now - self.files_counted_at >= (0.1 if self.accept_paused else 1.0):
            self._count_files(now)
        return (self.files_limit >= 0 and self.other_files + self.connection_count + 1
                + self.files_reserve > self.files_limit)

    cdef void _refuse(self, object sock, object addr, str why):
        self.refusal_log.log(logging.WARNING, "refusing connection from %s: %s",
                             addr[0] if addr else addr, why)
        sock.close()

    def _forget_ip(self, ip):
        """A connection from ip closed (any thread)."""
        if ip is None:
            return
        with self.ip_lock:
            n = self.ip_counts.get(ip, 0) - 1
            if n > 0:
                self.ip_counts[ip] = n
            else:
                self.ip_counts.pop(ip, None)

    def _on_accept(self):
        cdef Processor proc
        cdef long limit
        cdef ConnectionQuotas quotas = self.quotas
        for _ in range(64):
            if (self.connection_count >= self.max_connections
                    or (not self.protected and quotas.total >= quotas.max_connections)):
                # In line before anything can let another thread run; then look again,
                # as a connection may have closed since (the close wakes those in line).
                self.slot_waiting = True
                quotas.waiting.append(self)
                self.loop.remove_reader(self.lsock.fileno())
                quotas._wake_waiting()
                self.accept_log.log(
                    logging.WARNING, "not accepting connections: %d open on this listener "
                    "and %d in all (max.connections); accepting again when one closes",
                    self.connection_count, quotas.total)
                return
            if self.files_limit >= 0 and self._files_short(_now()):
                self.accept_log.log(
                    logging.WARNING, "not accepting connections: %d files open of %d "
                    "(ulimit -n) with %d of them connections, and %d are kept for the "
                    "broker's own files; accepting again when connections close",
                    self.other_files + self.connection_count, self.files_limit,
                    self.connection_count, self.files_reserve)
                self._pause_accept()
                return
            try:
                sock, addr = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors and the like: back off instead of spinning.
                self.accept_log.log(logging.ERROR, "accept failed: %s; pausing accepts "
                                    "for 100 ms", exc)
                self._pause_accept()
                return
            ip = addr[0] if sock.family != socket.AF_UNIX else None
            if ip is not None:
                limit = self.max_connections_per_ip_overrides.get(
                    ip, self.max_connections_per_ip)
                with self.ip_lock:
                    n = self.ip_counts.get(ip, 0)
                    if n < limit:
                        self.ip_counts[ip] = n + 1
                if n >= limit:
                    key = ("max.connections.per.ip.overrides"
                           if ip in self.max_connections_per_ip_overrides
                           else "max.connections.per.ip")
                    self._refuse(sock, addr, f"{n} connections open from it ({key})")
                    continue
            sock.setblocking(False)
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connection_count += 1
            quotas.total += 1
            if quotas.total > quotas.max_connections:
                quotas.close_least_active()   # only the protected listener gets here
            self.next_id += 1
            proc = self.processors[self.next_proc]
            self.next_proc = (self.next_proc + 1) % len(self.processors)
            proc.call_in_loop(proc.add_connection, sock, tuple(addr[:2]), self.next_id)

    # ---- handler side (API loop) ---------------------------------------------------

    cdef void _run_handler(self, Connection conn, object frame):
        cdef PyObject *out = NULL
        cdef bint finished
        # The request leaves the queue (queued.max.requests counts requests waiting for
        # a handler, as Kafka's request channel does; a parked fetch no longer waits).
        self._requests_done(1)
        conn.buffer_holders += 1
        try:
            coro = self.handler(conn, frame)
            if not self.eager:
                task = self.loop.create_task(coro)
            else:
                # A context of its own, as a Task would give it: context variables a
                # handler sets do not leak into the next request. PyIter_Send returns
                # the result of a finished coroutine without raising StopIteration.
                ctx = PyContext_CopyCurrent()
                PyContext_Enter(ctx)
                try:
                    finished = PyIter_Send(coro, None, &out) == 0
                finally:
                    PyContext_Exit(ctx)
                value = <object>out
                Py_XDECREF(out)
                if finished:
                    self._handler_done(conn, frame, value, None)
                    return
                task = self.loop.create_task(_Resumed(coro, value), context=ctx)
        except BaseException as exc:
            self._handler_done(conn, frame, None, exc)
            return
        self.inflight.add(task)
        task.add_done_callback(_TaskDone(self, conn, frame))

    cdef void _requests_done(self, long long n):
        """n requests handed to the handler are answered or dropped (any thread)."""
        if n <= 0:
            return
        self.queued_requests -= n
        if self.queue_waiters.count and self.queued_requests < self.queued_max_requests:
            self.queue_waiters.wake()

    cdef void _handler_done(self, Connection conn, object frame, object result, object exc):
        cdef Processor proc = conn.proc
        try:
            frame.release()   # a handler that kept the frame gets an error, not stale bytes
        except Exception:
            pass   # it kept a slice: that slice stays valid (see _make_room)
        conn._let_go_of_buffer()
        if exc is not None:
            if isinstance(exc, CloseConnection):
                log.info("connection %s %s: handler closed it: %s", conn.id, conn.peer, exc)
            elif isinstance(exc, asyncio.CancelledError):
                log.debug("connection %s %s: handler cancelled", conn.id, conn.peer)
            else:
                log.error("connection %s %s: handler failed, closing the connection",
                          conn.id, conn.peer, exc_info=exc)
            conn.api_dead = True
            conn.close()
            self._drop_queued(conn)
            return
        if result is not None and not isinstance(result, (list, tuple)):
            log.error("connection %s %s: handler returned %s, not a list of parts; closing",
                      conn.id, conn.peer, type(result).__name__)
            conn.api_dead = True
            conn.close()
            self._drop_queued(conn)
            return
        if proc.threaded:
            proc._queue_response(conn, result)
            if conn.api_hold_until:
                delay = conn.api_hold_until - _now()
                conn.api_hold_until = 0
                if delay > 0:   # throttled: its next request waits (api_running stays)
                    self.loop.call_later(delay, self._resume_api, conn)
                    return
            self._run_next(conn)
        else:
            conn._respond(result)

    def _resume_api(self, Connection conn):
        self._run_next(conn)

    cdef void _run_next(self, Connection conn):
        """Threaded mode, API loop: start the connection's next queued request, if any."""
        if conn.api_queue and not conn.closed and not self.stopping:
            self._run_handler(conn, conn.api_queue.popleft())
        else:
            self._drop_queued(conn)

    cdef void _drop_queued(self, Connection conn):
        conn.api_running = False
        if conn.api_queue:
            self._requests_done(len(conn.api_queue))
            conn.api_queue.clear()

    async def stop(self, drain_timeout=0.5):
        """Stop accepting, let in-flight handlers finish for up to ``drain_timeout``
        seconds (then cancel them), close every connection and stop the processors."""
        cdef Processor proc
        if not self.started or self.stopping:
            return
        self.stopping = True
        if self.lsock is not None:
            try:
                self.loop.remove_reader(self.lsock.fileno())
            except Exception:
                pass
            self.lsock.close()
            self.lsock = None
        if self.inflight:
            _, pending = await asyncio.wait(list(self.inflight), timeout=drain_timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        waits = []
        for proc in self.processors:
            if proc.threaded:
                done = self.loop.create_future()
                proc.loop.call_soon_threadsafe(proc.shutdown, done)
                waits.append(done)
            else:
                proc.shutdown()
        if waits:
            await asyncio.wait(waits, timeout=5)
        for proc in self.processors:
            if proc.thread is not None:
                proc.thread.join(timeout=5)
        log.info("stopped listening on %s:%d", self.host, self.port)


cdef class _TaskDone:
    """Done-callback of a handler Task: delivers its result to the connection."""
    cdef SocketServer server
    cdef Connection conn
    cdef object frame

    def __cinit__(self, SocketServer server, Connection conn, frame):
        self.server = server
        self.conn = conn
        self.frame = frame

    def __call__(self, task):
        self.server.inflight.discard(task)
        if task.cancelled():
            self.server._handler_done(self.conn, self.frame, None, asyncio.CancelledError())
            return
        exc = task.exception()
        if exc is not None:
            self.server._handler_done(self.conn, self.frame, None, exc)
        else:
            self.server._handler_done(self.conn, self.frame, task.result(), None)
