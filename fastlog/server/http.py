# fastlog/server/http.py — HttpServer: the broker's HTTP endpoint (http.listener=HOST:PORT).
#
# Owns: one aiohttp low-level server on its own thread ("fastlog-http") with its own
# asyncio loop (not uvloop: asyncio's sockets release the interpreter lock around each
# send, uvloop's writes hold it), so that neither a scrape's collection (milliseconds to
# a few hundred with tens of thousands of series) nor a slow or malformed HTTP client
# ever runs on the broker's request loop. Paths, GET only:
#   /metrics        the broker's registry (fastlog/server/metrics.py) in Prometheus' text
#                   format, or OpenMetrics when the Accept header asks for it;
#   /health/live    200 while the process serves HTTP at all;
#   /health/ready   200 "ready" once every hosted partition is open (and, in cluster mode,
#                   the broker is registered), else 503 with the reason on one line.
# Anything else is 404 (405 for another method on a known path); a malformed
# request gets aiohttp's 400 and a closed connection. Header lines and fields are bounded
# by aiohttp (8190 bytes), so a client cannot make the server buffer more than that per
# line; a client trickling bytes holds one coroutine of this thread and nothing else.
# At most MAX_CONNECTIONS HTTP connections are open at once (the process's file handles
# are the Kafka listeners' too): one more is closed as soon as it is accepted.
# Called from: BrokerServer.startup / shutdown on the broker's loop (start, stop), which
# wait for this thread with a bound.
"""The broker's HTTP endpoint: /metrics, /health/live, /health/ready."""

from __future__ import annotations

import asyncio
import logging
import threading

from aiohttp import web

from fastlog.logs import RateLimitedLog
from fastlog.server.metrics import readiness

log = logging.getLogger("fastlog.server.http")

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
# Keep-alive connections idle longer than this are closed.
KEEPALIVE_TIMEOUT_S = 30.0
# Open HTTP connections at most (scrapers, probes and a browser need a handful).
MAX_CONNECTIONS = 64
# /metrics is written in pieces of at least this many bytes (a run of small chunks of the
# exposition joined; a larger chunk alone).
WRITE_PIECE_BYTES = 1 << 16


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


class _Refused(asyncio.Protocol):
    """A connection over MAX_CONNECTIONS: closed at once, nothing read."""

    def connection_made(self, transport):
        transport.abort()


class _LimitedSite(web.TCPSite):
    """aiohttp's TCP site whose protocol factory refuses connections over a limit."""

    def __init__(self, runner, host, port, limit: int):
        super().__init__(runner, host, port, reuse_address=True)
        self._limit = limit
        self._refusals = RateLimitedLog(log)

    def _protocol(self):
        server = self._runner.server
        if len(server.connections) >= self._limit:
            self._refusals.log(logging.WARNING, "an HTTP connection over %d open ones refused",
                               self._limit)
            return _Refused()
        return server()

    async def start(self) -> None:
        await web.BaseSite.start(self)
        self._server = await asyncio.get_running_loop().create_server(
            self._protocol, self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address)


class HttpServer:
    """See the module comment."""

    def __init__(self, broker, metrics, host: str, port: int):
        self.broker = broker
        self.metrics = metrics
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
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
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:  # noqa: BLE001 - handed to start()
            if not self._started.is_set():
                self._error = e
        finally:
            self._started.set()
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        # aiohttp's low-level server with the three paths dispatched here: an Application's
        # router and middlewares were Python work on every request holding the
        # interpreter lock before the scrape's first break (0.2 ms and more a request)
        self._routes = {"/metrics": self._metrics, "/health/live": self._live,
                        "/health/ready": self._ready}
        server = web.Server(self._dispatch, access_log=None,
                            keepalive_timeout=KEEPALIVE_TIMEOUT_S)
        runner = web.ServerRunner(server, handle_signals=False)
        await runner.setup()
        self._runner = runner
        try:
            site = _LimitedSite(runner, self.host, self.port, MAX_CONNECTIONS)
            await site.start()
            sockets = getattr(site._server, "sockets", None) or []
            if sockets:
                self.port = sockets[0].getsockname()[1]
            log.info("HTTP endpoint on http://%s:%d (/metrics, /health/live, /health/ready)",
                     self.host, self.port)
            self._started.set()
            await self._stopping.wait()
        finally:
            await runner.cleanup()
            await self.metrics.remote_high_watermarks.close()

    # ------------------------------------------------------------------ handlers
    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        """The path's handler; 404 for another path, 405 for another method than GET."""
        handler = self._routes.get(request.path)
        if handler is None:
            return web.Response(status=404, text="404: Not Found")
        if request.method != "GET":
            return web.Response(status=405, text="405: Method Not Allowed",
                                headers={"Allow": "GET"})
        return await handler(request)

    async def _metrics(self, request: web.BaseRequest) -> web.StreamResponse:
        await self.metrics.remote_high_watermarks.refresh()
        chunks, content_type = self.metrics.render_chunks(request.headers.get("Accept"))
        response = web.StreamResponse(headers={"Content-Type": content_type})
        response.content_length = sum(len(c) for c in chunks)
        await response.prepare(request)
        # (not joined: a megabyte or more with many partitions; each write's send releases
        # the interpreter lock, its Python around the send holds it: few writes)
        for piece in write_pieces(chunks, WRITE_PIECE_BYTES):
            await response.write(piece)
        await response.write_eof()
        return response

    async def _live(self, request: web.BaseRequest) -> web.Response:
        return web.Response(text="live\n")

    async def _ready(self, request: web.BaseRequest) -> web.Response:
        try:
            reason = readiness(self.broker)
        except Exception as e:  # noqa: BLE001 - a state read mid-change: not ready now
            reason = f"readiness unknown: {e!r}"
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=reason + "\n")
