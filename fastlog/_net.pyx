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
# line before anything is allocated; a buffer grows at most to twice the bytes actually
# received, so a client claiming a big (legal) frame gets memory only as it sends bytes.
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
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.contextvars cimport PyContext_CopyCurrent, PyContext_Enter, PyContext_Exit
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from libc.errno cimport EAGAIN, EINTR, errno  # EWOULDBLOCK == EAGAIN on Linux
from libc.stdint cimport int32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memmove
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.types cimport off_t
from posix.uio cimport iovec, writev

from fastlog._codec cimport FileRegion, fl_be32, fl_put_be32

import asyncio
import logging
import os
import socket
import threading
from collections import deque

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


class CloseConnection(Exception):
    """Raised by a handler to close the connection it is serving (after a log line)."""


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


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
        self.state = {}
        self.api_queue = deque()
        self.rbuf = bytearray(READ_BUFFER)
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
        if not self.reading and not self.closed and not self.eof:
            self.reading = True
            self.proc.loop.add_reader(self.fd, self._on_readable)

    cdef void _stop_reading(self):
        if self.reading:
            self.reading = False
            self.proc.loop.remove_reader(self.fd)

    cdef int32_t _head_size(self) noexcept:
        """The size field of the frame at rstart (the caller checked 4 bytes are there)."""
        return <int32_t>fl_be32(
            <const unsigned char *>PyByteArray_AS_STRING(self.rbuf) + self.rstart)

    cdef int _make_room(self) except -1:
        """Room at the end of rbuf for the next recv (never called while muted)."""
        cdef Py_ssize_t avail = self.rend - self.rstart
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
            return 0
        # The buffer is full of one incomplete frame: grow, but at most to twice what was
        # received (never to the claimed size directly: the claim is untrusted).
        cap = min(need, 2 * cap)
        grown = bytearray(cap)
        grown[:avail] = memoryview(self.rbuf)[self.rstart:self.rend]
        self.rbuf = grown   # a new object: views a handler kept on the old one stay valid
        self.rstart = 0
        self.rend = avail
        return 0

    def _on_readable(self):
        cdef ssize_t n
        cdef Py_ssize_t free_space
        cdef char *p
        if self.closed:
            return
        try:
            free_space = len(self.rbuf) - self.rend
            if free_space == 0:
                if self.ahead or self.writing:
                    # Keep in-flight frames intact: stop reading until their responses are out.
                    self._stop_reading()
                    return
                self._make_room()
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
                self.last_active = _now()
                if not self.writing:
                    self._process()
            elif n == 0:
                if self.ahead or self.writing:
                    # Let the in-flight requests finish (its response may still be read by
                    # a half-closed peer), then close.
                    self.eof = True
                    self._stop_reading()
                elif self.rend > self.rstart:
                    self._close(f"peer closed the connection in the middle of a request "
                                f"({self.rend - self.rstart} bytes of it received)")
                else:
                    self._close("peer closed the connection", True)
            else:
                if errno == EAGAIN or errno == EINTR:
                    return
                self._close(f"read failed: {os.strerror(errno)}")
        except BaseException as exc:
            log.exception("connection %s %s: read path failed", self.id, self.peer)
            self._close(f"read path failed: {exc!r}")

    def _process_soon(self):
        if not self.closed:
            self._process()

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
        if self.in_process:
            return
        self.in_process = True
        try:
            while not self.writing and self.ahead < self.proc.max_ahead and not self.closed:
                avail = self.rend - self.rstart
                if avail < 4:
                    break
                size = self._head_size()
                if size <= 0 or size > server.max_request_size:
                    log.warning(
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
                count += 1
                frame = memoryview(self.rbuf)[self.rstart + 4:self.rstart + 4 + size]
                self.rstart += 4 + size
                self.ahead += 1
                self.proc._dispatch(self, frame)
                frame = None
            if self.wparts is not None and not self.writing and not self.closed:
                self._on_writable()   # corked responses
            if not self.ahead and not self.writing and not self.closed:
                if self.rstart == self.rend:
                    self.rstart = self.rend = 0
                    if len(self.rbuf) > READ_BUFFER_KEEP:
                        self.rbuf = bytearray(READ_BUFFER)
                if self.eof:
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
            done = self._flush()
        except OSError as exc:
            self._close(f"write failed: {exc.strerror or exc}")
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
            if self.eof and not self.ahead:
                self._close("peer closed the connection", True)
            else:
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
                if type(part) is FileRegion:
                    length = (<FileRegion>part).length
                    infd = (<FileRegion>part).file.fileno()
                    pos = <off_t>((<FileRegion>part).position + self.woff)
                else:
                    length = part.length
                    infd = part.file.fileno()
                    pos = <off_t>(part.position + self.woff)
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
        self.wparts = None
        try:
            self.sock.close()
        except OSError:
            pass
        self.proc.connections.pop(self.id, None)
        self.proc.server.connection_count -= 1


cdef class Processor:
    """One processor loop: owns a set of connections and does their socket I/O."""

    def __cinit__(self, SocketServer server, int index, bint threaded):
        self.server = server
        self.index = index
        self.threaded = threaded
        self.connections = {}
        self.to_api = []
        self.to_net = []
        self.max_ahead = MAX_AHEAD if threaded else 1
        self.api_loop = server.loop
        if not server.zero_copy:   # pread+send needs a bounce buffer; sendfile does not
            self.scratch_size = FILE_CHUNK
            self.scratch = <unsigned char *>malloc(self.scratch_size)
            if self.scratch is NULL:
                raise MemoryError()
        if not threaded:
            self.loop = server.loop

    def __dealloc__(self):
        free(self.scratch)

    def _run_thread(self, ready):
        loop = _uvloop.new_event_loop() if _uvloop is not None else asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        if self.server.idle_timeout > 0:
            self._schedule_idle_check()
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
            if self.server.idle_timeout > 0:
                self._schedule_idle_check()
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

    def _schedule_idle_check(self):
        period = min(max(self.server.idle_timeout / 4, 0.01), 1.0)
        self.idle_handle = self.loop.call_later(period, self._idle_check)

    def _idle_check(self):
        cdef Connection conn
        cdef double now = _now()
        cdef double limit = self.server.idle_timeout
        for conn in list(self.connections.values()):
            if not conn.ahead and not conn.writing and now - conn.last_active > limit:
                conn._close(f"idle for more than {limit * 1000:.0f} ms "
                            "(connections.max.idle.ms)")
        self._schedule_idle_check()

    def add_connection(self, sock, peer, long long conn_id):
        cdef Connection conn = Connection()
        conn.sock = sock
        conn.fd = sock.fileno()
        conn.peer = peer
        conn.id = conn_id
        conn.proc = self
        conn.last_active = _now()
        self.connections[conn_id] = conn
        if self.server.stopping:
            conn._close("server stopping", True)
            return
        conn._start_reading()

    def shutdown(self, done=None):
        """Close every connection; in threaded mode also stop the loop. Runs on self.loop."""
        cdef Connection conn
        if self.idle_handle is not None:
            self.idle_handle.cancel()
            self.idle_handle = None
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
            return   # stop() no longer waits for new requests; their connections close
        for conn, frame in batch:
            if conn.api_dead:
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


def _set_done(fut):
    if not fut.done():
        fut.set_result(None)


cdef class SocketServer:
    """Acceptor + processors for one listener; handlers run on the API loop.

    ``handler(conn, frame)`` is a coroutine function returning a list of response parts
    or None. ``start()``/``stop()`` are awaited on the API loop (``loop`` or the running
    one). See the module comment for the threading model.
    """

    def __init__(self, handler, host="127.0.0.1", port=0, num_network_threads=1,
                 max_request_size=100 * 1024 * 1024, max_connections=2 ** 31 - 1,
                 idle_timeout_ms=600000, loop=None, threaded=None, eager=True,
                 zero_copy=None):
        if num_network_threads < 1:
            raise ValueError("num_network_threads must be at least 1")
        if max_request_size < 1:
            raise ValueError("max_request_size must be positive")
        self.handler = handler
        self.host = host
        self.port = port
        self.num_network_threads = num_network_threads
        self.max_request_size = min(max_request_size, 0x7fffffff)
        self.max_connections = 2 ** 31 - 1 if max_connections is None else max_connections
        self.idle_timeout = (idle_timeout_ms or 0) / 1000.0
        self.loop = loop
        self.threaded = (num_network_threads > 1) if threaded is None else threaded
        self.eager = eager
        self.zero_copy = True if zero_copy is None else zero_copy
        self.processors = []
        self.inflight = set()

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
        nproc = self.num_network_threads if self.threaded else 1
        for i in range(nproc):
            proc = Processor(self, i, self.threaded)
            self.processors.append(proc)
            await proc.start()
        self.loop.add_reader(lsock.fileno(), self._on_accept)
        log.info("listening on %s:%d (%d %s processor%s)", self.host, self.port, nproc,
                 "threaded" if self.threaded else "inline", "s" if nproc > 1 else "")

    def _resume_accept(self):
        if self.lsock is not None and not self.stopping:
            self.loop.add_reader(self.lsock.fileno(), self._on_accept)

    def _on_accept(self):
        cdef Processor proc
        for _ in range(64):
            try:
                sock, addr = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors and the like: back off instead of spinning.
                log.error("accept failed: %s; pausing accepts for 100 ms", exc)
                self.loop.remove_reader(self.lsock.fileno())
                self.loop.call_later(0.1, self._resume_accept)
                return
            if self.connection_count >= self.max_connections:
                now = _now()
                if now - self.last_refusal_log >= 1.0:   # at most one line a second
                    self.last_refusal_log = now
                    log.warning("refusing connection from %s: %d connections open "
                                "(max.connections)", addr[:2], self.connection_count)
                sock.close()
                continue
            sock.setblocking(False)
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connection_count += 1
            self.next_id += 1
            proc = self.processors[self.next_proc]
            self.next_proc = (self.next_proc + 1) % len(self.processors)
            proc.call_in_loop(proc.add_connection, sock, tuple(addr[:2]), self.next_id)

    # ---- handler side (API loop) ---------------------------------------------------

    cdef void _run_handler(self, Connection conn, object frame):
        cdef PyObject *out = NULL
        cdef bint finished
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

    cdef void _handler_done(self, Connection conn, object frame, object result, object exc):
        cdef Processor proc = conn.proc
        try:
            frame.release()   # a handler that kept the frame gets an error, not stale bytes
        except Exception:
            pass   # it kept a slice: that slice stays valid (see _make_room)
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
            self._run_next(conn)
        else:
            conn._respond(result)

    cdef void _run_next(self, Connection conn):
        """Threaded mode, API loop: start the connection's next queued request, if any."""
        if conn.api_queue and not conn.closed and not self.stopping:
            self._run_handler(conn, conn.api_queue.popleft())
        else:
            self._drop_queued(conn)

    cdef void _drop_queued(self, Connection conn):
        conn.api_running = False
        if conn.api_queue:
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
