# fastlog/server/http.py — HttpServer: the broker's HTTP endpoint (http.listener=HOST:PORT).
#
# Owns: an HTTP/1.1 server on its own thread ("fastlog-http") with its own asyncio loop
# (not uvloop: asyncio's sockets release the interpreter lock around each send, uvloop's
# writes hold it), so that neither a scrape's collection (milliseconds to a few hundred
# with tens of thousands of series) nor a slow or malformed HTTP client ever runs on the
# broker's request loop. Paths, GET (and HEAD) only:
#   /metrics        the broker's registry (fastlog/server/metrics.py) in Prometheus' text
#                   format, or OpenMetrics when the Accept header asks for it;
#   /health/live    200 while the process serves HTTP at all;
#   /health/ready   200 "ready" once every hosted partition is open (and, in cluster mode,
#                   the broker is registered), else 503 with the reason on one line.
# Anything else is 404 (405 for another method on a known path).
# Requests are parsed by httptools (llhttp, in C); the Python per request is a few of its
# callbacks and the dispatch here. That matters because this thread shares the
# interpreter lock with the request loop: aiohttp's server ran about 65 us more Python per
# request, all of it holding the lock, which a Kafka request arriving meanwhile waited for.
# For the same reason the loop's selector (PoliteSelector) ends a wait that a request
# woke by resting while the request loop is busy, before it takes the lock.
# Bounds: a request's line and headers at most MAX_HEAD_BYTES (414 or 431 and the
# connection closed; what the parser holds of an unfinished head is at most that plus one
# read), a body (GET has none) at most MAX_BODY_BYTES (413), at most MAX_PIPELINED
# requests queued per connection (the rest unanswered, the connection closed after
# those), a request received whole within REQUEST_TIMEOUT_S of its first byte, and a
# connection making no progress (nothing read, nothing written) for KEEPALIVE_TIMEOUT_S
# closed; a malformed request gets 400 and a closed connection. At most MAX_CONNECTIONS
# HTTP connections are open at once (the process's file handles are the Kafka listeners'
# too): one more is closed as soon as it is accepted. A response is handed to the socket
# in compiled code with the lock released (_exposition.send_polite: a transport runs
# Python holding the lock for every piece the socket takes, and takes the lock back after
# every send); what a slow reader has not taken within SEND_WAIT_MS (or after a stall of
# SEND_STALL_MS) goes through the transport a piece at a time (each piece once the
# previous one is in the socket), so such a client holds this thread at most that long
# per response, and holds only its own response's pieces. The thread watches the request
# loop all its life (metrics.watch_request_loop): its Python rests while the loop runs, a
# request's arrival and answer as well as a scrape.
# Called from: BrokerServer.startup / shutdown on the broker's loop (start, stop), which
# wait for this thread with a bound.
"""The broker's HTTP endpoint: /metrics, /health/live, /health/ready."""

from __future__ import annotations

import asyncio
import logging
import math
import select
import selectors
import threading
import time
from collections import deque
from email.utils import formatdate
from urllib.parse import unquote_to_bytes

import httptools

from fastlog.logs import RateLimitedLog
from fastlog.server._exposition import polite_epoll_wait, send_polite
from fastlog.server.metrics import (
    GIL_BREAK_NS,
    GIL_BREAKS_IN_A_ROW,
    readiness,
    watch_request_loop,
)

log = logging.getLogger("fastlog.server.http")

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
# A connection with nothing read or written for this long is closed (an idle keep-alive
# connection, or a client that stopped reading its response).
KEEPALIVE_TIMEOUT_S = 30.0
# A request must arrive whole within this long of its first byte.
REQUEST_TIMEOUT_S = 30.0
# How often the connections are checked against the two timeouts.
SWEEP_INTERVAL_S = 1.0
# Open HTTP connections at most (scrapers, probes and a browser need a handful).
MAX_CONNECTIONS = 64
# A request's line and headers at most (aiohttp's and nginx's 8 KiB a line, two lines).
MAX_HEAD_BYTES = 16 << 10
# A request body at most (the paths take none; a small one is read and dropped).
MAX_BODY_BYTES = 64 << 10
# Requests received ahead of their answers (pipelined) at most per connection.
MAX_PIPELINED = 16
# /metrics is written in pieces of at least this many bytes (a run of small chunks of the
# exposition joined; a larger chunk alone).
WRITE_PIECE_BYTES = 1 << 16
# ... and of at most this many (a longer chunk is written as views of this size).
MAX_PIECE_BYTES = 1 << 18
# A response is first written straight to the socket, the interpreter lock released
# (_exposition.send_polite), waiting for a slow reader at most this long in all, and at
# most SEND_STALL_MS for the socket to take anything more: a client that reads nothing
# holds this thread that long once per connection (its next answer waits for this one),
# so the most connections there are hold it 128 ms; what the socket has not taken by
# then goes through the transport, a piece at a time.
SEND_WAIT_MS = 20
SEND_STALL_MS = 2

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            413: "Content Too Large", 414: "URI Too Long",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}
_TEXT = "text/plain; charset=utf-8"
_PATHS = (b"/metrics", b"/health/live", b"/health/ready")


def write_pieces(chunks: list[bytes], least: int) -> list[bytes]:
    """`chunks` in order as fewer pieces: a run of chunks smaller than `least` bytes
    joined until it reaches `least` or a larger chunk comes, a chunk of `least` bytes or
    more as it is."""
    pieces: list[bytes] = []
    run: list[bytes] = []
    size = 0
    for chunk in chunks:
        if len(chunk) >= least:
            if run:
                pieces.append(b"".join(run))
                run, size = [], 0
            pieces.append(chunk)
            continue
        run.append(chunk)
        size += len(chunk)
        if size >= least:
            pieces.append(b"".join(run))
            run, size = [], 0
    if run:
        pieces.append(b"".join(run))
    return pieces


def request_path(url: bytes) -> bytes:
    """The path of a request target: without its query or fragment, percent-escapes
    decoded (as a router compares it)."""
    path = url.split(b"?", 1)[0].split(b"#", 1)[0]
    return unquote_to_bytes(path) if b"%" in path else path


class _DateHeader:
    """The Date header's line, made once a second (an origin server with a clock sends
    one on every response)."""

    def __init__(self):
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._line = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._line


def response_head(date: bytes, status: int, content_type: str, length: int,
                  keep_alive: bool, extra: str = "") -> bytes:
    """A response's status line and headers, the blank line after them included."""
    connection = "" if keep_alive else "Connection: close\r\n"
    return (f"HTTP/1.1 {status} {_REASONS[status]}\r\nServer: fastlog\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n"
            f"{extra}{connection}").encode() + date + b"\r\n"


def unsent(pieces: list[bytes], sent: int) -> list:
    """What is left of `pieces` after their first `sent` bytes (a piece begun: a view
    of its rest)."""
    for i, piece in enumerate(pieces):
        if sent < len(piece):
            rest = pieces[i:]
            if sent:
                rest[0] = memoryview(piece)[sent:]
            return rest
        sent -= len(piece)
    return []


def sliced(pieces: list[bytes], most: int) -> list:
    """`pieces` with each longer than `most` bytes cut into views of at most `most`: what
    the socket does not take of one is copied into the transport's buffer holding the
    interpreter lock, so no piece is large."""
    out = []
    for piece in pieces:
        if len(piece) <= most:
            out.append(piece)
        else:
            view = memoryview(piece)
            out.extend(view[i:i + most] for i in range(0, len(piece), most))
    return out


class _Connection(asyncio.Protocol):
    """One HTTP connection: httptools' callbacks gather each request, answered in order
    (see the module comment for the bounds)."""

    def __init__(self, server: HttpServer):
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._fd = -1  # the transport's socket
        self._parser = httptools.HttpRequestParser(self)
        # (method, path, Accept, keep-alive) not yet answered; a refusal is (None, status, ..)
        self._requests: deque = deque()
        self._out: deque = deque()  # the pieces of the response being written
        self._paused = False  # the transport holds bytes the socket did not take
        self._busy = False  # a response is being made or written
        self._reading = True  # False: further input is ignored (a refusal, a last request)
        self._final = False  # the last response (Connection: close) is answered
        self._last = time.monotonic()  # last progress: a read, a piece sent, an answer
        # the request being received
        self._receiving = False  # from its first byte to its end
        self._began = 0.0  # when its first byte came
        self._in_head = False  # its line and headers not all read yet
        self._head_fed = 0  # bytes read since the read its head began in
        self._head_seen = 0  # bytes of its target and headers parsed
        self._url = b""
        self._accept: str | None = None
        self._body_bytes = 0
        self._refusal = 0  # the status it is refused with (a bound passed)

    # ------------------------------------------------------------ asyncio's callbacks
    def connection_made(self, transport) -> None:
        server = self._server
        if len(server.connections) >= MAX_CONNECTIONS:
            server.refusals.log(logging.WARNING, "an HTTP connection over %d open ones refused",
                                MAX_CONNECTIONS)
            transport.abort()
            return
        self._transport = transport
        self._fd = transport.get_extra_info("socket").fileno()
        # paused as soon as the socket takes less than a whole piece: the rest of the
        # response waits in _out, not copied into the transport's buffer
        transport.set_write_buffer_limits(high=0)
        server.connections.add(self)

    def connection_lost(self, exc) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._reading = False
        self._requests.clear()
        self._out.clear()

    def data_received(self, data: bytes) -> None:
        if not self._reading:
            return  # (not progress: a client that only sends cannot keep its connection)
        self._last = time.monotonic()
        if self._in_head:
            self._head_fed += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # (a request asking to switch protocols: answered as HTTP/1.1, the Upgrade
            # header ignored as a server may, and the last on the connection, since the
            # parser reads nothing after it)
            self._reading = False
        except httptools.HttpParserError:
            self._refuse(400)
        else:
            if self._refusal:
                self._refuse(self._refusal)
            elif self._in_head and self._head_fed > MAX_HEAD_BYTES:
                # (unfinished: the target so far is most of it, or the headers are)
                self._refuse(414 if len(self._url) > MAX_HEAD_BYTES // 2 else 431)
        self._serve()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._last = time.monotonic()
        if self._pump():
            self._serve()

    # ------------------------------------------------------------ httptools' callbacks
    def on_message_begin(self) -> None:
        self._in_head = self._receiving = True
        self._began = time.monotonic()
        self._head_fed = self._head_seen = self._body_bytes = 0
        self._url = b""
        self._accept = None

    def on_url(self, url: bytes) -> None:
        self._head_seen += len(url)
        if self._head_seen > MAX_HEAD_BYTES:
            self._refusal = self._refusal or 414
        else:
            self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_seen += len(name) + len(value)
        if self._head_seen > MAX_HEAD_BYTES:
            self._refusal = self._refusal or 431
        elif len(name) == 6 and name.lower() == b"accept":
            self._accept = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._in_head = False

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > MAX_BODY_BYTES:
            self._refusal = self._refusal or 413

    def on_message_complete(self) -> None:
        self._receiving = False
        if self._refusal or not self._reading:
            return
        if len(self._requests) >= MAX_PIPELINED:
            self._reading = False  # this one dropped, those queued answered, then closed
            return
        keep_alive = self._parser.should_keep_alive()
        self._requests.append((self._parser.get_method(), request_path(self._url),
                               self._accept, keep_alive))
        if not keep_alive:
            self._reading = False  # the last one (its answer says so)

    # ------------------------------------------------------------ answering
    def _refuse(self, status: int) -> None:
        """Answer what is queued, then `status`, then close: the parser cannot go on."""
        if self._reading:
            self._reading = False
            self._requests.append((None, status, None, False))

    def _serve(self) -> None:
        """Answer queued requests in order while none is being made or written; close
        once the last is written."""
        while self._requests and not self._busy and not self._final:
            method, path, accept, keep_alive = self._requests.popleft()
            if not self._reading and not self._requests:
                keep_alive = False  # nothing more will be read
            if method is None:  # a refusal: path is its status
                self._answer(path, _TEXT, f"{path}: {_REASONS[path]}\n".encode(), False)
            else:
                self._dispatch(method, path, accept, keep_alive)
        if not self._busy and (self._final or (not self._reading and not self._requests)):
            self._close()

    def _dispatch(self, method: bytes, path: bytes, accept: str | None,
                  keep_alive: bool) -> None:
        if path not in _PATHS:
            self._answer(404, _TEXT, b"404: Not Found\n", keep_alive)
            return
        head = method == b"HEAD"
        if method != b"GET" and not head:
            self._answer(405, _TEXT, b"405: Method Not Allowed\n", keep_alive,
                         "Allow: GET, HEAD\r\n")
            return
        if path == b"/metrics":
            remote = self._server.metrics.remote_high_watermarks
            if remote is not None and remote.due():
                # (cluster mode: the high watermarks led elsewhere asked for first)
                self._busy = True
                task = asyncio.get_running_loop().create_task(remote.refresh())
                task.add_done_callback(
                    lambda _t: self._metrics(accept, head, keep_alive, resumed=True))
            else:
                self._metrics(accept, head, keep_alive)
        elif path == b"/health/live":
            self._answer(200, _TEXT, b"live\n", keep_alive, head=head)
        else:
            try:
                reason = readiness(self._server.broker)
            except Exception as e:  # noqa: BLE001 - a state read mid-change: not ready now
                reason = f"readiness unknown: {e!r}"
            if reason is None:
                self._answer(200, _TEXT, b"ready\n", keep_alive, head=head)
            else:
                self._answer(503, _TEXT, (reason + "\n").encode(), keep_alive, head=head)

    def _metrics(self, accept: str | None, head: bool, keep_alive: bool,
                 resumed: bool = False) -> None:
        self._busy = False
        if self._transport is None:
            return
        try:
            chunks, content_type = self._server.metrics.render_chunks(accept)
        except Exception:  # noqa: BLE001 - a scrape that failed is a 500, not a dead thread
            self._server.failures.log(logging.ERROR, "a /metrics scrape failed", exc_info=True)
            self._answer(500, _TEXT, b"500: Internal Server Error\n", False)
        else:
            self._answer(200, content_type, chunks, keep_alive, head=head)
        if resumed:
            self._serve()

    def _answer(self, status: int, content_type: str, body: bytes | list[bytes],
                keep_alive: bool, extra: str = "", head: bool = False) -> None:
        """Write a response (body: bytes, or the chunks it is made of; HEAD: only its
        head); not keep_alive: the last on this connection."""
        chunks = [body] if isinstance(body, bytes) else body
        pieces = [response_head(self._server.date.line(), status, content_type,
                                sum(len(c) for c in chunks), keep_alive, extra)]
        if not head:
            pieces.extend(chunks)
        if not keep_alive:
            self._final = True
        self._busy = True
        transport = self._transport
        if transport is not None and not self._out and not self._paused \
                and transport.get_write_buffer_size() == 0:
            # the socket takes what it can straight from the pieces, the lock released
            sent = send_polite(self._fd, pieces, SEND_WAIT_MS, SEND_STALL_MS)
            pieces = unsent(pieces, sent)
        self._out.extend(sliced(write_pieces(pieces, WRITE_PIECE_BYTES), MAX_PIECE_BYTES))
        self._pump()

    def _pump(self) -> bool:
        """Write the response's pieces while the socket takes them whole; True when the
        response is all written (the next request may be answered)."""
        out, transport = self._out, self._transport
        if transport is None:
            return False
        while out and not self._paused:
            transport.write(out.popleft())
        if out or self._paused:
            return False
        self._busy = False
        self._last = time.monotonic()
        return True

    def _close(self) -> None:
        # (on the next turn of the loop: closed from within resume_writing, asyncio's
        # selector transport of Python 3.11 would end the connection twice)
        asyncio.get_running_loop().call_soon(self._close_now)

    def _close_now(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()  # (once the transport's buffer is sent)

    def overdue(self, now: float) -> bool:
        """Whether the sweep should close this connection (see the module comment)."""
        if self._receiving and now - self._began > REQUEST_TIMEOUT_S:
            return True
        return now - self._last > KEEPALIVE_TIMEOUT_S

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class PoliteSelector(selectors.EpollSelector):
    """The HTTP loop's selector: epoll, whose wait ends with a rest while the request
    loop runs when it ran during the wait (_exposition.polite_epoll_wait), so a request
    that wakes this thread does not take the interpreter lock from a Kafka request being
    served. `loop_clock`: the request loop thread's CPU clock (None: a plain wait)."""

    def __init__(self, loop_clock: int | None):
        super().__init__()
        self._loop_clock = loop_clock

    def select(self, timeout: float | None = None):
        if timeout is None:
            ms = -1
        elif timeout <= 0:
            ms = 0
        else:
            ms = math.ceil(timeout * 1e3)
        keys = self.get_map()
        ready = []
        for fd, event in polite_epoll_wait(self.fileno(), ms, len(keys), self._loop_clock,
                                           GIL_BREAK_NS, GIL_BREAKS_IN_A_ROW):
            key = keys.get(fd)
            if key is not None:
                events = ((selectors.EVENT_WRITE if event & ~select.EPOLLIN else 0)
                          | (selectors.EVENT_READ if event & ~select.EPOLLOUT else 0))
                ready.append((key, events & key.events))
        return ready


class HttpServer:
    """See the module comment."""

    def __init__(self, broker, metrics, host: str, port: int):
        self.broker = broker
        self.metrics = metrics
        self.host = host
        self.port = port
        self.connections: set[_Connection] = set()
        self.refusals = RateLimitedLog(log)
        self.failures = RateLimitedLog(log)
        self.date = _DateHeader()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Bind and serve on the thread; returns once bound. OSError when the address
        cannot be bound."""
        self._thread = threading.Thread(target=self._run, name="fastlog-http", daemon=True)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise OSError(f"the HTTP server did not start within {START_TIMEOUT_S:g} s")
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return
        try:
            loop.call_soon_threadsafe(self._stopping.set)
        except RuntimeError:  # the loop has ended already
            pass
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning("the HTTP server thread did not stop within %g s", STOP_TIMEOUT_S)

    def _run(self) -> None:
        loop_clock = self.metrics.loop_clock
        loop = asyncio.SelectorEventLoop(PoliteSelector(loop_clock))
        self._loop = loop
        # all of this thread's Python rests while the request loop runs, not only a
        # scrape's: a request's arrival and its answer hold the lock too
        watch_request_loop(loop_clock)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:  # noqa: BLE001 - handed to start()
            if not self._started.is_set():
                self._error = e
        finally:
            watch_request_loop(None)
            self._started.set()
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Connection(self), self.host, self.port,
                                          reuse_address=True)
        self._sweep_handle = loop.call_later(SWEEP_INTERVAL_S, self._sweep)
        try:
            self.port = server.sockets[0].getsockname()[1]
            log.info("HTTP endpoint on http://%s:%d (/metrics, /health/live, /health/ready)",
                     self.host, self.port)
            self._started.set()
            await self._stopping.wait()
        finally:
            self._sweep_handle.cancel()
            server.close()
            for conn in list(self.connections):
                conn.abort()
            await server.wait_closed()
            if self.metrics.remote_high_watermarks is not None:
                await self.metrics.remote_high_watermarks.close()

    def _sweep(self) -> None:
        """Close the connections past a timeout; again in SWEEP_INTERVAL_S."""
        now = time.monotonic()
        for conn in [c for c in self.connections if c.overdue(now)]:
            conn.abort()
        self._sweep_handle = asyncio.get_running_loop().call_later(SWEEP_INTERVAL_S,
                                                                   self._sweep)
