"""fastlog._net.SocketServer over real sockets on 127.0.0.1: framing, order, bad frames,
file regions, acks=0, handler errors, idle timeout, max connections, a throttled
(muted) connection, and shutdown.

Every test runs in both processor modes (inline on the API loop, and two processor
threads); every wait is bounded by asyncio.wait_for.
"""

import asyncio
import logging
import os
import socket
import struct
import tempfile

import pytest
import uvloop
from fastlog._net import CloseConnection, Connection, ConnectionQuotas, SocketServer

try:
    from fastlog._codec import FileRegion
except ImportError:  # the codec's FileRegion not built yet: the server duck-types regions
    class FileRegion:
        def __init__(self, file, position, length):
            self.file, self.position, self.length = file, position, length

TIMEOUT = 20

MODES = [
    pytest.param({"num_network_threads": 1}, id="inline"),
    pytest.param({"num_network_threads": 2}, id="threads"),
]


def run(coro, loop_factory=uvloop.new_event_loop):
    async def bounded():
        return await asyncio.wait_for(coro, TIMEOUT)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(bounded())


class Echo:
    """Test handler; the first byte of a frame says what to do with the rest."""

    def __init__(self):
        self.release = None          # asyncio.Event a parked handler waits for
        self.seen = []
        self.regions = {}            # name -> list of parts, for b"F" requests

    async def __call__(self, conn: Connection, frame: memoryview):
        assert isinstance(conn, Connection)
        data = bytes(frame)
        self.seen.append(data)
        op, body = data[:1], data[1:]
        if op == b"E":
            return [body]
        if op == b"S":               # S<ms>:<payload>: sleep, then echo the payload
            ms, payload = body.split(b":", 1)
            await asyncio.sleep(int(ms) / 1000)
            return [memoryview(payload)]
        if op == b"T":               # T<ms>:<payload>: throttle the connection, echo
            ms, payload = body.split(b":", 1)
            conn.throttle(int(ms))
            return [payload]
        if op == b"N":
            return None
        if op == b"X":
            raise ValueError("handler bug")
        if op == b"C":
            raise CloseConnection("told to close")
        if op == b"P":
            await self.release.wait()
            return [b"released"]
        if op == b"F":
            return self.regions[body.decode()]
        if op == b"I":
            conn.state["hits"] = conn.state.get("hits", 0) + 1
            return [f"{conn.id} {conn.peer[0]} {conn.state['hits']}".encode()]
        raise AssertionError(f"unknown op {op!r}")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(reader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def start(handler, **kw):
    server = SocketServer(handler, host="127.0.0.1", port=0, **kw)
    await server.start()
    assert server.port > 0
    return server


async def connect(server):
    return await asyncio.open_connection("127.0.0.1", server.port)


async def connect_waiting(server, payload: bytes):
    """A connection the server does not accept yet (the kernel completes it, the server
    waits at a connection limit): its request stays unanswered for 0.5 s. Keep the
    writer too: a writer collected closes the connection."""
    r, w = await connect(server)
    w.write(frame(payload))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(r.readexactly(1), 0.5)
    return r, w


async def closed_by_server(reader, limit=1 << 30) -> bool:
    """True once the server closed the connection (EOF or reset) after at most
    ``limit`` more bytes; False if it stays open for 5 s."""
    got = 0
    try:
        while got <= limit:
            data = await asyncio.wait_for(reader.read(1 << 20), 5)
            if not data:
                return True
            got += len(data)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def mixed_parts(f, content):
    """Response parts of every kind (bytes, bytearray, memoryview, file regions of f,
    which holds content, one of them empty) and the bytes they make."""
    parts = [b"head", FileRegion(f, 5, 2 * 1024 * 1024 + 3), bytearray(b"-mid-"),
             FileRegion(f, 0, 0), FileRegion(f, 100, 1000), memoryview(b"tail")]
    expect = (b"head" + content[5:5 + 2 * 1024 * 1024 + 3] + b"-mid-" + content[100:1100]
              + b"tail")
    return parts, expect


async def still_serves(server):
    r, w = await connect(server)
    w.write(frame(b"Eok"))
    assert await read_frame(r) == b"ok"
    w.close()


@pytest.mark.parametrize("mode", MODES)
def test_pipelined_frames_round_trip_in_order(mode):
    async def main():
        server = await start(Echo(), **mode)
        r, w = await connect(server)
        payloads = [b"E" + os.urandom(i % 300) + str(i).encode() for i in range(500)]
        w.write(b"".join(frame(p) for p in payloads))
        for p in payloads:
            assert await read_frame(r) == p[1:]
        w.close()
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_throttled_connection_answers_then_waits_while_others_are_served(mode):
    async def main():
        server = await start(Echo(), **mode)
        loop = asyncio.get_running_loop()
        r, w = await connect(server)
        r2, w2 = await connect(server)
        start_t = loop.time()
        w.write(frame(b"T400:first") + frame(b"Esecond"))
        assert await read_frame(r) == b"first"     # the throttled request is answered
        second = asyncio.ensure_future(read_frame(r))
        w2.write(frame(b"Eother"))
        assert await read_frame(r2) == b"other"    # another connection is served meanwhile
        assert not second.done()
        assert await second == b"second"           # the muted one resumes by itself
        assert loop.time() - start_t >= 0.35
        # a throttle of 0 does nothing; the connection goes on as usual
        w.write(frame(b"T0:x") + frame(b"Ey"))
        assert [await read_frame(r), await read_frame(r)] == [b"x", b"y"]
        # many short throttles in a row, pipelined: each one ends (a timer the loop fires
        # a little early must not leave the connection muted for good)
        w.write(b"".join(frame(b"T%d:%d" % (1 + i % 4, i)) for i in range(200)))
        for i in range(200):
            assert await read_frame(r) == str(i).encode()
        w.close()
        w2.close()
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_frames_split_at_arbitrary_points_reassemble(mode):
    """The byte stream arrives in random pieces (size fields split too) and still frames."""
    import random
    rng = random.Random(4)

    async def main():
        server = await start(Echo(), max_request_size=300000, **mode)
        r, w = await connect(server)
        w.transport.set_write_buffer_limits(0)
        payloads = [b"E" + rng.randbytes(rng.choice([0, 1, 3, 100, 5000, 70000, 120000]))
                    for _ in range(60)]
        stream = b"".join(frame(p) for p in payloads)
        pos = 0
        while pos < len(stream):
            step = rng.choice([1, 2, 3, 5, 7, 1000, 65536])
            w.write(stream[pos:pos + step])
            await w.drain()
            pos += step
            if rng.random() < 0.05:
                await asyncio.sleep(0.001)
        for p in payloads:
            assert await read_frame(r) == p[1:]
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_slow_first_request_still_answered_first(mode):
    async def main():
        server = await start(Echo(), **mode)
        r, w = await connect(server)
        w.write(frame(b"S150:first") + frame(b"S0:second") + frame(b"Ethird"))
        assert [await read_frame(r) for _ in range(3)] == [b"first", b"second", b"third"]
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_slow_request_between_fast_ones_keeps_order(mode):
    """Fast responses of one pipelined read are written together; a slow one between
    them still holds back the ones after it."""
    async def main():
        server = await start(Echo(), **mode)
        r, w = await connect(server)
        for _ in range(3):
            w.write(frame(b"Ea") + frame(b"Eb") + frame(b"S80:slow") + frame(b"Ec")
                    + frame(b"N") + frame(b"Ed"))
            assert [await read_frame(r) for _ in range(5)] == [b"a", b"b", b"slow", b"c", b"d"]
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_one_request_per_connection_at_a_time(mode):
    """The broker never sees two requests of one connection at once (Kafka's muting),
    while requests of different connections overlap."""
    active, most, overlap = {}, {}, []

    async def handler(conn, frame):
        active[conn.id] = active.get(conn.id, 0) + 1
        most[conn.id] = max(most.get(conn.id, 0), active[conn.id])
        overlap.append(sum(1 for v in active.values() if v))
        await asyncio.sleep(0.002 if frame[0] == 0x53 else 0)
        active[conn.id] -= 1
        return [bytes(frame[1:])]

    async def main():
        server = await start(handler, **mode)

        async def client(i):
            r, w = await connect(server)
            msgs = [b"%d-%d" % (i, j) for j in range(30)]
            w.write(b"".join(frame((b"S" if j % 3 else b"E") + m) for j, m in enumerate(msgs)))
            assert [await read_frame(r) for _ in msgs] == msgs
        await asyncio.gather(*(client(i) for i in range(4)))
        await server.stop()
    run(main())
    assert len(most) == 4 and set(most.values()) == {1}
    assert max(overlap) > 1


@pytest.mark.parametrize("mode", MODES)
def test_handler_context_variables_do_not_leak(mode):
    import contextvars
    var = contextvars.ContextVar("request", default=None)

    async def handler(conn, frame):
        before = var.get()
        var.set(bytes(frame))
        if frame[0] == 0x53:
            await asyncio.sleep(0.001)
        assert var.get() == bytes(frame)
        return [repr(before).encode()]

    async def main():
        server = await start(handler, **mode)
        r, w = await connect(server)
        w.write(frame(b"Ea") + frame(b"Sb") + frame(b"Ec"))
        assert [await read_frame(r) for _ in range(3)] == [b"None"] * 3
        await server.stop()
    run(main())


def test_empty_host_listens_on_every_interface():
    async def main():
        server = SocketServer(Echo(), host="", port=0)
        await server.start()
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(frame(b"Eany"))
        assert await read_frame(r) == b"any"
        await server.stop()
    run(main())


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "task"])
def test_stdlib_asyncio_loop_as_api_loop(eager):
    async def main():
        echo = Echo()
        server = await start(echo, eager=eager)
        with tempfile.TemporaryFile() as f:
            f.write(b"0123456789" * 100000)
            f.flush()
            echo.regions["r"] = [b"[", FileRegion(f, 10, 500000), b"]"]
            r, w = await connect(server)
            w.write(frame(b"Ex") + frame(b"S20:y") + frame(b"Fr"))
            assert await read_frame(r) == b"x"
            assert await read_frame(r) == b"y"
            assert await read_frame(r) == b"[" + (b"0123456789" * 50000) + b"]"
        await server.stop()
    run(main(), loop_factory=asyncio.new_event_loop)


@pytest.mark.parametrize("mode", MODES)
def test_many_concurrent_connections(mode):
    async def main():
        server = await start(Echo(), **mode)

        async def client(i):
            r, w = await connect(server)
            for j in range(20):
                msg = f"{i}-{j}".encode()
                w.write(frame(b"S1:" + msg) if j % 5 == 0 else frame(b"E" + msg))
                assert await read_frame(r) == msg
            w.close()
        await asyncio.gather(*(client(i) for i in range(50)))
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_parked_handler_does_not_delay_other_connections(mode):
    async def main():
        echo = Echo()
        echo.release = asyncio.Event()
        server = await start(echo, **mode)
        ra, wa = await connect(server)
        wa.write(frame(b"P"))
        rb, wb = await connect(server)
        for i in range(50):
            wb.write(frame(b"E%d" % i))
            assert await read_frame(rb) == b"%d" % i
        assert not echo.release.is_set()
        echo.release.set()
        assert await read_frame(ra) == b"released"
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_large_request_frame_arrives_whole(mode):
    async def main():
        server = await start(Echo(), max_request_size=8 * 1024 * 1024, **mode)
        r, w = await connect(server)
        big = os.urandom(5 * 1024 * 1024)
        w.write(frame(b"E" + big) + frame(b"Esmall"))
        assert await read_frame(r) == big
        assert await read_frame(r) == b"small"
        await server.stop()
    run(main())


BAD_PREFIXES = [
    pytest.param(struct.pack(">i", -1) + b"xxxx", id="negative"),
    pytest.param(struct.pack(">i", 0), id="zero"),
    pytest.param(struct.pack(">i", 1025) + b"x" * 100, id="over-max"),
    pytest.param(struct.pack(">I", 0x80000000), id="2GiB-negative"),
    pytest.param(struct.pack(">i", 0x7FFFFFFF), id="absurd"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad", BAD_PREFIXES)
def test_bad_frame_size_closes_only_that_connection(mode, bad, caplog):
    async def main():
        echo = Echo()
        server = await start(echo, max_request_size=1024, **mode)
        good_r, good_w = await connect(server)
        r, w = await connect(server)
        w.write(bad)
        assert await closed_by_server(r, limit=0)
        good_w.write(frame(b"Estill here"))
        assert await read_frame(good_r) == b"still here"
        await still_serves(server)
        await server.stop()
        return echo
    with caplog.at_level(logging.WARNING, logger="fastlog.net"):
        echo = run(main())
    assert echo.seen == [b"Estill here", b"Eok"]   # the bad frame never reached the handler
    assert any("request size" in rec.getMessage() for rec in caplog.records)


def test_absurd_size_allocates_nothing():
    """A 2 GiB claim over a small bound closes at once: no buffer grows from the claim."""
    import tracemalloc

    async def main():
        server = await start(Echo(), max_request_size=4096)
        r, w = await connect(server)
        tracemalloc.start()
        try:
            w.write(struct.pack(">i", 0x7FFFFFF0) + b"y" * 1000)
            assert await closed_by_server(r)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1024 * 1024
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_claimed_but_unsent_frame_grows_with_received_bytes_only(mode, caplog):
    """A legal but huge claimed size, then a trickle of bytes and EOF: closes, stays up."""
    async def main():
        server = await start(Echo(), max_request_size=100 * 1024 * 1024, **mode)
        r, w = await connect(server)
        w.write(struct.pack(">i", 90 * 1024 * 1024) + b"E" + b"z" * 50000)
        await w.drain()
        w.write_eof()   # truncated frame, then EOF
        assert await closed_by_server(r)
        await still_serves(server)
        await server.stop()
    with caplog.at_level(logging.INFO, logger="fastlog.net"):
        run(main())
    assert "in the middle of a request (50005 bytes of it received)" in caplog.text


@pytest.mark.parametrize("mode", MODES)
def test_reset_mid_response_leaves_server_up(mode, caplog):
    async def main():
        echo = Echo()
        server = await start(echo, max_request_size=1024, **mode)
        with tempfile.TemporaryFile() as f:
            f.write(os.urandom(16 * 1024 * 1024))
            f.flush()
            echo.regions["big"] = [FileRegion(f, 0, 16 * 1024 * 1024)]
            s = socket.create_connection(("127.0.0.1", server.port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(frame(b"Fbig"))
            await asyncio.sleep(0.1)
            # RST instead of FIN: SO_LINGER 0, close with unread data.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            await asyncio.sleep(0.1)
            await still_serves(server)
        await server.stop()
    with caplog.at_level(logging.DEBUG, logger="fastlog.net"):
        run(main())
    # the reset shows on whichever side of the socket the server touched first
    assert ("closed: read failed" in caplog.text) or ("closed: write failed" in caplog.text)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("zero_copy", [True, False], ids=["sendfile", "pread"])
def test_file_region_parts_arrive_byte_exact(mode, zero_copy):
    async def main():
        echo = Echo()
        server = await start(echo, zero_copy=zero_copy, **mode)
        content = os.urandom(3 * 1024 * 1024 + 17)
        with tempfile.NamedTemporaryFile() as f:
            f.write(content)
            f.flush()
            echo.regions["mix"], expect = mixed_parts(f, content)
            r, w = await connect(server)
            w.write(frame(b"Fmix") + frame(b"Eafter"))
            assert await read_frame(r) == expect
            assert await read_frame(r) == b"after"
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_many_parts_to_a_slow_reader_arrive_byte_exact(mode):
    """Hundreds of parts (more than one writev takes), big enough that writes stop part-way
    through a part, to a client that reads slowly."""
    import random
    rng = random.Random(7)

    async def main():
        echo = Echo()
        server = await start(echo, **mode)
        content = rng.randbytes(2 * 1024 * 1024)
        with tempfile.TemporaryFile() as f:
            f.write(content)
            f.flush()
            parts, expect = [], []
            for i in range(300):
                kind = i % 3
                if kind == 0:
                    b = rng.randbytes(rng.choice([0, 1, 7, 3000, 200000]))
                    parts.append(b)
                    expect.append(b)
                elif kind == 1:
                    pos, n = rng.randrange(len(content)), rng.choice([0, 1, 5000, 100000])
                    n = min(n, len(content) - pos)
                    parts.append(FileRegion(f, pos, n))
                    expect.append(content[pos:pos + n])
                else:
                    b = bytearray(rng.randbytes(rng.choice([2, 64, 70000])))
                    parts.append(memoryview(b))
                    expect.append(bytes(b))
            echo.regions["many"] = parts
            r, w = await connect(server)
            w.write(frame(b"Fmany") + frame(b"Eafter"))
            want = b"".join(expect)
            (size,) = struct.unpack(">i", await r.readexactly(4))
            assert size == len(want)
            got = bytearray()
            while len(got) < size:
                got += await r.read(min(size - len(got), 65536))
                await asyncio.sleep(0.0005)
            assert bytes(got) == want
            assert await read_frame(r) == b"after"
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_file_region_of_unlinked_file_still_arrives(mode):
    async def main():
        echo = Echo()
        server = await start(echo, **mode)
        content = os.urandom(1024 * 1024)
        d = tempfile.mkdtemp()
        path = os.path.join(d, "00000000000000000000.log")
        with open(path, "wb") as out:
            out.write(content)
        f = open(path, "rb")
        echo.regions["gone"] = [b"<", FileRegion(f, 0, len(content)), b">"]
        del f
        r, w = await connect(server)
        w.write(frame(b"S50:x") + frame(b"Fgone"))
        assert await read_frame(r) == b"x"
        os.unlink(path)   # while the region's response is queued behind the slow one
        os.rmdir(d)
        assert await read_frame(r) == b"<" + content + b">"
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_region_past_end_of_file_closes_connection(mode):
    async def main():
        echo = Echo()
        server = await start(echo, **mode)
        with tempfile.TemporaryFile() as f:
            f.write(b"short")
            f.flush()
            echo.regions["short"] = [FileRegion(f, 0, 100)]
            r, w = await connect(server)
            w.write(frame(b"Fshort"))
            # the 4-byte size and the 5 bytes there are, never the whole frame
            assert await closed_by_server(r, limit=9)
            await still_serves(server)
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_no_response_then_next_request_served(mode):
    async def main():
        echo = Echo()
        server = await start(echo, **mode)
        r, w = await connect(server)
        w.write(frame(b"N1") + frame(b"N2") + frame(b"Enext"))
        assert await read_frame(r) == b"next"
        assert echo.seen == [b"N1", b"N2", b"Enext"]
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", [b"X", b"C"], ids=["exception", "CloseConnection"])
def test_handler_error_closes_only_that_connection(mode, op, caplog):
    echo = Echo()

    async def main():
        server = await start(echo, **mode)
        good_r, good_w = await connect(server)
        r, w = await connect(server)
        w.write(frame(op) + frame(b"Enever"))
        assert await closed_by_server(r, limit=0)
        good_w.write(frame(b"Efine"))
        assert await read_frame(good_r) == b"fine"
        await server.stop()
    with caplog.at_level(logging.INFO, logger="fastlog.net"):
        run(main())
    assert echo.seen == [op, b"Efine"]   # the request behind the failed one never ran
    text = caplog.text
    assert ("handler bug" in text) if op == b"X" else ("told to close" in text)


@pytest.mark.parametrize("mode", MODES)
def test_connection_identity_and_state(mode):
    async def main():
        server = await start(Echo(), **mode)
        r1, w1 = await connect(server)
        r2, w2 = await connect(server)
        replies = []
        for r, w in ((r1, w1), (r1, w1), (r2, w2)):
            w.write(frame(b"I"))
            replies.append((await read_frame(r)).split())
        assert replies[0][1] == b"127.0.0.1"
        assert replies[0][0] == replies[1][0] != replies[2][0]
        assert [x[2] for x in replies] == [b"1", b"2", b"1"]
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_idle_connection_is_closed(mode):
    async def main():
        server = await start(Echo(), idle_timeout_ms=200, **mode)
        r, w = await connect(server)
        w.write(frame(b"Ehi"))
        assert await read_frame(r) == b"hi"
        assert await closed_by_server(r)
        await still_serves(server)
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_idle_timeout_counts_from_the_last_request(mode):
    # The idle check looks at a connection again when its time may be up: one that kept
    # sending stays open past several timeouts, one that stopped is closed, and many
    # that never sent anything are closed too.
    async def main():
        server = await start(Echo(), idle_timeout_ms=300, **mode)
        busy_r, busy_w = await connect(server)
        quiet_r, quiet_w = await connect(server)
        silent = [await connect(server) for _ in range(50)]
        quiet_w.write(frame(b"Eq"))
        assert await read_frame(quiet_r) == b"q"
        loop = asyncio.get_running_loop()
        end = loop.time() + 1.2
        while loop.time() < end:
            busy_w.write(frame(b"Eb"))
            assert await read_frame(busy_r) == b"b"
            await asyncio.sleep(0.1)
        assert await closed_by_server(quiet_r)
        for r, _ in silent:
            assert await closed_by_server(r)
        busy_w.write(frame(b"Estill"))
        assert await read_frame(busy_r) == b"still"
        assert server.connection_count == 1
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_max_connections_blocks_accepts_until_one_closes(mode):
    # Kafka's max.connections: at the limit the listener stops accepting; a new
    # connection waits (in the backlog) and is served once another one closes.
    async def main():
        server = await start(Echo(), max_connections=2, **mode)
        conns = [await connect(server) for _ in range(2)]
        for r, w in conns:
            w.write(frame(b"Eup"))
            assert await read_frame(r) == b"up"
        r3, _w3 = await connect_waiting(server, b"Ewaiting")
        assert server.connection_count == 2
        conns[0][1].close()
        assert await asyncio.wait_for(read_frame(r3), 5) == b"waiting"
        assert server.connection_count == 2
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_max_connections_counts_every_listener_and_the_protected_one_accepts(mode):
    # One limit over two listeners. At the limit the client listener waits; the
    # protected (inter-broker) listener still accepts and the least recently active
    # client connection is closed to make room.
    async def main():
        quotas = ConnectionQuotas(3)
        client = await start(Echo(), connection_quotas=quotas, **mode)
        inter = await start(Echo(), connection_quotas=quotas, protected=True, **mode)
        old_r, old_w = await connect(client)
        old_w.write(frame(b"Eold"))
        assert await read_frame(old_r) == b"old"
        await asyncio.sleep(0.05)
        fresh = [await connect(client) for _ in range(2)]
        for r, w in fresh:
            w.write(frame(b"Efresh"))
            assert await read_frame(r) == b"fresh"
        assert quotas.total == 3
        waiting_r, _waiting_w = await connect_waiting(client, b"Elater")
        ib_r, ib_w = await connect(inter)
        ib_w.write(frame(b"Ebroker"))
        assert await asyncio.wait_for(read_frame(ib_r), 5) == b"broker"
        assert await closed_by_server(old_r)   # the least recently active one
        for r, w in fresh:
            w.write(frame(b"Estill"))
            assert await read_frame(r) == b"still"
        assert quotas.total == 3
        ib_w.close()   # a slot frees: the waiting client connection is served
        assert await asyncio.wait_for(read_frame(waiting_r), 5) == b"later"
        await client.stop()
        await inter.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_a_listener_limit_holds_below_the_broker_wide_one(mode):
    # listener.name.<l>.max.connections: a listener at its own limit waits (the protected
    # one too) while the broker-wide count has room; a close on it lets the next in.
    async def main():
        quotas = ConnectionQuotas(10)
        inter = await start(Echo(), connection_quotas=quotas, protected=True,
                            max_connections=1, **mode)
        client = await start(Echo(), connection_quotas=quotas, **mode)
        r1, w1 = await connect(inter)
        w1.write(frame(b"Eone"))
        assert await read_frame(r1) == b"one"
        r2, _w2 = await connect_waiting(inter, b"Etwo")
        rc, wc = await connect(client)   # the other listener still accepts
        wc.write(frame(b"Eclient"))
        assert await read_frame(rc) == b"client"
        w1.close()
        assert await asyncio.wait_for(read_frame(r2), 5) == b"two"
        await client.stop()
        await inter.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_stop_with_open_connections_and_parked_handler_is_prompt(mode):
    async def main():
        echo = Echo()
        echo.release = asyncio.Event()
        server = await start(echo, **mode)
        r, w = await connect(server)
        w.write(frame(b"P"))
        idle_r, idle_w = await connect(server)
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await server.stop(drain_timeout=0.2)
        assert loop.time() - t0 < 3
        assert await closed_by_server(r)
        assert await closed_by_server(idle_r)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    run(main())
