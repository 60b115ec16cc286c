"""fastlog/server/http.py: the pieces /metrics is written in, and the HTTP server's
framing and bounds against a broker in this process (what it serves is tested against a
broker process in tests/server/test_metrics.py)."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time

from fastlog.server._exposition import scrape_loop_watched
from prometheus_client.parser import text_string_to_metric_families

from fastlog.server import http
from fastlog.server.broker import BrokerServer
from fastlog.server.http import write_pieces
from fastlog.testing import _free_port, wait_until
from tests.replication.test_replica_manager import _config


def test_write_pieces_join_runs_of_small_chunks_and_keep_large_ones_whole():
    rng = random.Random(7)
    for _ in range(200):
        chunks = [bytes([65 + i % 26]) * rng.choice((0, 1, 5, 40, 99, 100, 250))
                  for i in range(rng.randrange(0, 30))]
        pieces = write_pieces(chunks, 100)
        assert b"".join(pieces) == b"".join(chunks)
        big = [c for c in chunks if len(c) >= 100]
        assert [p for p in pieces if p in big] == big  # (each alone, in order)
        # every piece but the last and those just before a large chunk reaches the least
        for i, piece in enumerate(pieces[:-1]):
            if len(piece) < 100:
                assert len(pieces[i + 1]) >= 100 and pieces[i + 1] in big
    assert write_pieces([], 100) == []
    assert write_pieces([b"a", b"b"], 100) == [b"ab"]


# ---------------------------------------------------------------------------------------
# The server itself, against a broker in this process (so the timeouts can be shortened)

def with_broker(tmp_path, client, partitions: int = 0):
    """Run `client(port)` (blocking, on a thread; `client.server` is the broker's
    HttpServer) against an in-process broker serving HTTP on a free port, with a topic of
    `partitions` partitions when asked."""
    port = _free_port()

    async def main():
        b = BrokerServer(_config(1, tmp_path / "d", **{
            "http.listener": f"127.0.0.1:{port}", "min.insync.replicas": "1"}))
        await b.startup()
        try:
            if partitions:
                await b.create_topic("many", partitions, 1, {})
            client.server = b.http_server
            return await asyncio.to_thread(client, port)
        finally:
            await b.shutdown()

    return asyncio.run(main())


def connect(port: int, receive_buffer: int = 0) -> socket.socket:
    """A connection to the endpoint; with `receive_buffer`, a receive buffer of about that
    size set before connecting (the kernel then does not grow it: what the client does
    not read soon fills the sockets' buffers)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    if receive_buffer:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    s.connect(("127.0.0.1", port))
    return s


def read_response(f, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of the next response on `f`."""
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    n = 0 if head_only else int(headers["content-length"])
    body = f.read(n)
    assert len(body) == n
    return status, headers, body


def closed(s: socket.socket) -> bool:
    """Whether the server has closed `s` (EOF or a reset), reading what is left."""
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_pipelined_requests_are_answered_in_order_on_one_connection(tmp_path):
    def client(port):
        with connect(port) as s, s.makefile("rb") as f:
            s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /nope?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /health/%6Cive HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /metrics?name=x HTTP/1.1\r\nHost: x\r\n"
                      b"Accept: application/openmetrics-text; version=1.0.0\r\n\r\n")
            live = read_response(f)
            assert (live[0], live[2]) == (200, b"live\n")
            assert "connection" not in live[1] and live[1]["date"].endswith("GMT")
            assert read_response(f)[0] == 404
            status, headers, _ = read_response(f, head_only=True)
            assert status == 200 and int(headers["content-length"]) > 1000
            status, headers, _ = read_response(f)
            assert status == 405 and headers["allow"] == "GET, HEAD"
            assert read_response(f)[:3:2] == (200, b"live\n")
            status, headers, body = read_response(f)
            assert status == 200 and headers["content-type"].startswith(
                "application/openmetrics-text")
            assert body.endswith(b"# EOF\n")
            # and the connection stays open for more
            s.sendall(b"GET /health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(f)[:3:2] == (200, b"ready\n")

    with_broker(tmp_path, client)


def test_the_last_request_closes_the_connection_once_answered(tmp_path):
    def client(port):
        for request in (b"GET /health/live HTTP/1.1\r\nConnection: close\r\n\r\n",
                        b"GET /health/live HTTP/1.0\r\n\r\n"):
            with connect(port) as s, s.makefile("rb") as f:
                # (a request after the last one is not answered)
                s.sendall(request + b"GET /health/live HTTP/1.1\r\n\r\n")
                status, headers, body = read_response(f)
                assert (status, headers["connection"], body) == (200, "close", b"live\n")
                assert f.read() == b""
        with connect(port) as s, s.makefile("rb") as f:  # HTTP/1.0 asking for keep-alive
            for _ in range(2):
                s.sendall(b"GET /health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                assert read_response(f)[0] == 200

    with_broker(tmp_path, client)


def test_requests_past_a_bound_are_refused_and_their_connection_closed(tmp_path):
    from fastlog.server.http import MAX_BODY_BYTES, MAX_HEAD_BYTES, MAX_PIPELINED

    def refused(port, request: bytes, status: int, answered: int = 0):
        with connect(port) as s, s.makefile("rb") as f:
            try:
                s.sendall(request)
            except OSError:  # (the server closed while the request was being sent)
                pass
            for _ in range(answered):
                assert read_response(f)[0] == 200
            got = read_response(f)
            assert got[0] == status, got
            assert got[1]["connection"] == "close"
            assert closed(s)

    def client(port):
        long = b"a" * (MAX_HEAD_BYTES + 1)
        refused(port, b"GET /" + long + b" HTTP/1.1\r\n\r\n", 414)
        refused(port, b"GET /metrics HTTP/1.1\r\nX-Big: " + long + b"\r\n\r\n", 431)
        # an unfinished head past the bound, in several reads: refused without its end
        with connect(port) as s, s.makefile("rb") as f:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: ")
            for _ in range(4):
                time.sleep(0.05)
                s.sendall(b"b" * (MAX_HEAD_BYTES // 2))
            assert read_response(f)[0] == 431
        body = b"c" * (MAX_BODY_BYTES + 1)
        refused(port, b"GET /health/live HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body, 413)
        refused(port, b"\x00\x01 not http\r\n\r\n", 400)
        # a request to switch protocols: answered without switching, the last one
        with connect(port) as s, s.makefile("rb") as f:
            s.sendall(b"GET /health/live HTTP/1.1\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\n\r\nGET /health/live HTTP/1.1\r\n\r\n")
            status, headers, _ = read_response(f)
            assert (status, headers["connection"]) == (200, "close")
            assert f.read() == b""
        # a request with a small body is answered (the body read and dropped), then a
        # malformed one after it: the first answered, then 400
        refused(port, b"GET /health/live HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                b"GET / HTTP/9\r\n\r\n", 400, answered=1)
        # more pipelined requests than the bound: those within it answered, then closed
        with connect(port) as s, s.makefile("rb") as f:
            s.sendall(b"GET /health/live HTTP/1.1\r\n\r\n" * (MAX_PIPELINED + 5))
            answers = [read_response(f) for _ in range(MAX_PIPELINED)]
            assert all(a[0] == 200 for a in answers)
            assert answers[-1][1]["connection"] == "close"
            assert f.read() == b""
        # and the server goes on serving
        with connect(port) as s, s.makefile("rb") as f:
            s.sendall(b"GET /health/live HTTP/1.1\r\n\r\n")
            assert read_response(f)[0] == 200

    with_broker(tmp_path, client)


def test_idle_unfinished_and_unread_connections_are_closed_by_the_timeouts(
        tmp_path, monkeypatch):
    monkeypatch.setattr(http, "KEEPALIVE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(http, "REQUEST_TIMEOUT_S", 1.0)
    monkeypatch.setattr(http, "SWEEP_INTERVAL_S", 0.1)

    def client(port):
        connections = client.server.connections
        idle, trickling, unread = connect(port), connect(port), connect(port, 1 << 16)
        try:
            with idle.makefile("rb") as f:
                idle.sendall(b"GET /health/live HTTP/1.1\r\n\r\n")
                assert read_response(f)[0] == 200
            # a client that asks for more than the sockets' buffers hold and never reads
            unread.sendall(b"GET /metrics HTTP/1.1\r\n\r\n" * 16)
            wait_until(lambda: any(c._paused for c in connections), 10,
                       what="the unread responses filling the sockets' buffers")
            request = b"GET /health/live HTTP/1.1\r\nHost: trickled\r\n"
            for i in range(40):  # (bytes keep coming: only the request's timeout ends it)
                try:
                    trickling.sendall(request[i % len(request):][:1])
                except OSError:
                    break
                time.sleep(0.1)
            else:
                raise AssertionError("an unfinished request was kept past its timeout")
            wait_until(lambda: not connections, 10, what="all three connections closed")
            assert closed(idle)
            # and others are served meanwhile
            with connect(port) as s, s.makefile("rb") as f:
                s.sendall(b"GET /health/live HTTP/1.1\r\n\r\n")
                assert read_response(f)[0] == 200
        finally:
            for s in (idle, trickling, unread):
                s.close()

    with_broker(tmp_path, client, partitions=2000)


def test_large_expositions_read_slowly_arrive_whole_and_in_order(tmp_path):
    """Pipelined /metrics far larger together than the sockets' buffers, read a little at
    a time: each arrives whole (as many bytes as its Content-Length says) and parses, the
    connection is served in order and stays open."""
    def client(port):
        with connect(port, 1 << 16) as s, s.makefile("rb") as f:
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n" * 15
                      + b"GET /health/live HTTP/1.1\r\n\r\n")
            wait_until(lambda: any(c._paused for c in client.server.connections), 10,
                       what="the responses filling the sockets' buffers")
            for _ in range(15):
                status, headers, body = read_response(f)
                time.sleep(0.05)
                assert status == 200
                families = text_string_to_metric_families(body.decode())
                sizes = [s for fam in families if fam.name == "kafka_log_log_size"
                         for s in fam.samples if s.labels["topic"] == "many"]
                assert len(sizes) == 2000
            assert read_response(f)[:3:2] == (200, b"live\n")
            assert len(client.server.connections) == 1

    with_broker(tmp_path, client, partitions=2000)


def test_the_http_thread_watches_the_request_loop_all_its_life(tmp_path):
    """The broker's HTTP thread watches the request loop's clock (its Python rests while
    the loop runs) from its start, not only while it scrapes; other threads do not."""
    def client(port):
        server = client.server
        on_thread = server._loop.call_soon_threadsafe  # (runs on the HTTP thread)
        seen = []
        done = threading.Event()
        on_thread(lambda: (seen.append(scrape_loop_watched()), done.set()))
        assert done.wait(10)
        assert seen == [True]
        assert not scrape_loop_watched()

    with_broker(tmp_path, client)
