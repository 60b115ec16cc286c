"""fastlog._net.SocketServer's limits over real sockets on 127.0.0.1: the request memory
pool (queued.max.request.bytes), queued.max.requests, per-ip connection limits, the
open-file reserve at accept, the receive deadline of a started request, and the
rate-limited warning lines.

Both processor modes (inline, two threads); every wait is bounded. A check that a
request is *not* answered while the server holds it back waits a short, fixed time: it
asserts a mute, never a speed.
"""

import asyncio
import logging

import pytest

from fastlog.logs import RateLimitedLog
from tests.net.test_socket_server import (
    MODES,
    Echo,
    closed_by_server,
    connect,
    frame,
    read_frame,
    run,
    start,
    still_serves,
)

HELD = 0.4   # how long a muted request is watched for an answer it must not get


async def not_answered(reader, wait=HELD) -> bool:
    try:
        await asyncio.wait_for(reader.readexactly(4), wait)
    except TimeoutError:
        return True
    return False


async def parking_server(**kw):
    """A server whose b"P" requests park until echo.release is set."""
    echo = Echo()
    echo.release = asyncio.Event()
    return echo, await start(echo, **kw)


async def frames_bigger_than_the_pool_all_finish(server, connect):
    """5 connections (made by ``connect(server)``) each send a frame of 600 kB to a
    server whose pool holds 1 MiB: all are answered and the pool is whole again."""
    conns = [await connect(server) for _ in range(5)]
    bodies = [bytes([65 + i]) * (600_000 + i) for i in range(5)]
    for (_, w), body in zip(conns, bodies, strict=True):
        w.write(frame(b"E" + body))
    for (r, _), body in zip(conns, bodies, strict=True):
        assert await read_frame(r) == body
    for _, w in conns:
        w.close()
    for _ in range(100):
        if server.memory_pool.available == 1 << 20:
            break
        await asyncio.sleep(0.02)
    assert server.memory_pool.available == 1 << 20


@pytest.mark.parametrize("mode", MODES)
def test_frames_bigger_than_the_pool_all_finish(mode):
    """Several connections each send a frame; the pool holds less than two of them at
    once: every frame is still answered (no deadlock) and the pool is whole again."""
    async def main():
        server = await start(Echo(), queued_max_request_bytes=1 << 20,
                             max_request_size=1 << 20, **mode)
        await frames_bigger_than_the_pool_all_finish(server, connect)
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_exhausted_pool_mutes_big_frames_not_small_requests(mode):
    async def main():
        server = await start(Echo(), queued_max_request_bytes=256 << 10,
                             max_request_size=1 << 20, **mode)
        # A claims a 1 MiB frame and sends part of it: its reservation uses up the pool.
        ra, wa = await connect(server)
        body_a = b"a" * ((1 << 20) - 1)
        wa.write(frame(b"E" + body_a)[:300_000])
        await wa.drain()
        for _ in range(100):
            if server.memory_pool.available <= 0:
                break
            await asyncio.sleep(0.02)
        assert server.memory_pool.available <= 0
        # B's whole 300 kB frame waits for memory ...
        rb, wb = await connect(server)
        body_b = b"b" * 300_000
        wb.write(frame(b"E" + body_b))
        assert await not_answered(rb)
        # ... while small requests of other connections are served.
        await still_serves(server)
        # A finishes: both are answered, in the pool's order.
        wa.write(frame(b"E" + body_a)[300_000:])
        assert await read_frame(ra) == body_a
        assert await read_frame(rb) == body_b
        wa.close()
        wb.close()
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_parked_requests_do_not_count_against_queued_max_requests(mode):
    """queued.max.requests bounds requests waiting for their handler, as Kafka's request
    queue does: requests already running (parked) leave room for everyone else."""
    async def main():
        echo, server = await parking_server(queued_max_requests=2, **mode)
        parked = [await connect(server) for _ in range(3)]
        for _, w in parked:
            w.write(frame(b"P"))
        r4, w4 = await connect(server)
        w4.write(frame(b"Enot held"))
        assert await asyncio.wait_for(read_frame(r4), 5) == b"not held"
        assert server.queued_requests == 0
        echo.release.set()
        for r, _ in parked:
            assert await read_frame(r) == b"released"
        await still_serves(server)
        await server.stop()
    run(main())


def test_queued_max_requests_mutes_while_requests_wait_for_their_handler():
    """Threaded mode: frames read ahead behind a running request wait for their handler
    and fill the queue; another connection's request is then not read until they run."""
    async def main():
        echo, server = await parking_server(queued_max_requests=2, num_network_threads=2)
        ra, wa = await connect(server)
        wa.write(frame(b"P") + frame(b"Ea1") + frame(b"Ea2") + frame(b"Ea3"))
        for _ in range(100):
            if server.queued_requests == 2:
                break
            await asyncio.sleep(0.02)
        assert server.queued_requests == 2
        rb, wb = await connect(server)
        wb.write(frame(b"Eb"))
        assert await not_answered(rb)
        echo.release.set()
        assert [await read_frame(ra) for _ in range(4)] == [b"released", b"a1", b"a2", b"a3"]
        assert await read_frame(rb) == b"b"
        await still_serves(server)
        assert server.queued_requests == 0
        await server.stop()
    run(main())


async def connect_from(server, source):
    return await asyncio.open_connection("127.0.0.1", server.port, local_addr=(source, 0))


async def served(conn) -> bool:
    r, w = conn
    w.write(frame(b"Ehi"))
    try:
        return await asyncio.wait_for(read_frame(r), 5) == b"hi"
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return False


@pytest.mark.parametrize("mode", MODES)
def test_max_connections_per_ip_and_overrides(mode, caplog):
    async def main():
        server = await start(Echo(), max_connections_per_ip=2,
                             max_connections_per_ip_overrides={"127.0.0.2": 3}, **mode)
        ones = [await connect_from(server, "127.0.0.1") for _ in range(3)]
        twos = [await connect_from(server, "127.0.0.2") for _ in range(4)]
        assert [await served(c) for c in ones] == [True, True, False]
        assert [await served(c) for c in twos] == [True, True, True, False]
        # A closed connection frees its address's slot.
        ones[0][1].close()
        for _ in range(100):
            if server.connection_count == 4:
                break
            await asyncio.sleep(0.02)
        assert await served(await connect_from(server, "127.0.0.1"))
        await server.stop()
    with caplog.at_level(logging.WARNING, logger="fastlog.net"):
        run(main())
    refusals = [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]
    assert refusals and "max.connections.per.ip" in refusals[0]


def test_refusals_log_one_line_per_interval_with_a_count(caplog):
    async def main():
        server = await start(Echo(), max_connections_per_ip=1, log_interval=0.3)
        keep = await connect(server)
        assert await served(keep)
        for _ in range(5):
            assert await closed_by_server((await connect(server))[0])
        await asyncio.sleep(0.35)
        assert await closed_by_server((await connect(server))[0])
        await server.stop()
    with caplog.at_level(logging.WARNING, logger="fastlog.net"):
        run(main())
    lines = [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "4 more like this" in lines[1]


def test_rate_limited_log_counts_what_it_drops(caplog):
    limiter = RateLimitedLog(logging.getLogger("fastlog.test"), 3600)
    with caplog.at_level(logging.INFO, logger="fastlog.test"):
        assert limiter.log(logging.INFO, "event %d", 1)
        assert not limiter.log(logging.INFO, "event %d", 2)
        assert not limiter.log(logging.INFO, "event %d", 3)
    assert [r.getMessage() for r in caplog.records] == ["event 1"]
    assert limiter.suppressed == 2


@pytest.mark.parametrize("mode", MODES)
def test_trickling_request_closed_by_the_receive_deadline(mode):
    async def main():
        server = await start(Echo(), receive_timeout_ms=300, idle_timeout_ms=60000, **mode)
        r, w = await connect(server)
        # A complete request, then an idle pause longer than the deadline: not closed.
        w.write(frame(b"Eone"))
        assert await read_frame(r) == b"one"
        await asyncio.sleep(0.5)
        assert await served((r, w))
        # A request sent a byte at a time, never finished: closed although never idle.
        data = frame(b"E" + b"x" * 100)
        closed = False
        for i in range(40):
            try:
                w.write(data[i:i + 1])
                await w.drain()
            except ConnectionError:
                closed = True
                break
            if r.at_eof() or await closed_by_reader(r):
                closed = True
                break
        assert closed
        await still_serves(server)
        await server.stop()
    run(main())


async def closed_by_reader(reader) -> bool:
    """Within 0.1 s: True if the server closed the connection."""
    try:
        data = await asyncio.wait_for(reader.read(1), 0.1)
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return data == b""


@pytest.mark.parametrize("mode", MODES)
def test_accepts_pause_while_connections_would_use_the_file_reserve(mode, caplog):
    async def main():
        reserve = [1 << 40]   # more than any open-file limit: no room at all

        server = await start(Echo(), reserved_files=lambda: reserve[0], **mode)
        r, w = await connect(server)   # the kernel completes it; the broker does not take it
        w.write(frame(b"Ewaiting"))
        assert await not_answered(r)
        reserve[0] = 16
        assert await asyncio.wait_for(read_frame(r), 5) == b"waiting"
        await still_serves(server)
        await server.stop()
    with caplog.at_level(logging.INFO, logger="fastlog.net"):
        run(main())
    text = caplog.text
    assert "not accepting connections" in text and "accepting connections again" in text


@pytest.mark.parametrize("mode", MODES)
def test_half_closed_connection_waiting_for_a_slot_still_gets_its_answers(mode):
    async def main():
        echo, server = await parking_server(queued_max_requests=1, **mode)
        rb, wb = await connect(server)
        wb.write(frame(b"S500:first") + frame(b"Esecond"))
        wb.write_eof()   # B has sent everything; its first request is still running
        await asyncio.sleep(0.1)
        ra, wa = await connect(server)
        # Waits for the slot B's first request holds, then parks in it (inline), or
        # after B's second (threads: B asked for the slot first, dispatching ahead).
        wa.write(frame(b"P"))
        assert await read_frame(rb) == b"first"
        echo.release.set()
        assert await read_frame(ra) == b"released"
        assert await read_frame(rb) == b"second"
        assert await closed_by_server(rb)
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_pool_memory_of_a_reset_connection_returns_when_its_handler_ends(mode):
    """A peer that resets its connection while its big request is still being handled
    does not get that request's memory back early: the pool stays charged until the
    handler lets go of the frame, then is whole again."""
    import socket
    import struct

    async def main():
        pool = 4 << 20
        echo, server = await parking_server(queued_max_request_bytes=pool,
                                            max_request_size=2 << 20, **mode)
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(frame(b"P" + b"x" * (1 << 20)))
        for _ in range(100):
            if echo.seen:
                break
            await asyncio.sleep(0.02)
        assert echo.seen   # the handler runs (parked) on the frame
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()   # RST
        await asyncio.sleep(0.3)
        assert server.memory_pool.available <= pool - (1 << 19)   # still charged
        echo.release.set()
        for _ in range(100):
            if server.memory_pool.available == pool:
                break
            await asyncio.sleep(0.02)
        assert server.memory_pool.available == pool
        await still_serves(server)
        await server.stop()
    run(main())
