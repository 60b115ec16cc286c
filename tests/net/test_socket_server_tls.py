"""fastlog._net.SocketServer with an ssl_context, over real sockets on 127.0.0.1: framing
and order over TLS, frames and responses bigger than a TLS record, file regions (pread and
encrypted, never sendfile), mutual TLS and the peer principal, refused and broken
handshakes, the handshake deadline, the memory pool, a large region streamed to a slow
reader in bounded memory, and close_notify.

Contexts come from fastlog.security (Kafka's ssl.* keys), certificates from the security
tests' CA (tests/security/conftest.py). Both processor modes; every wait is bounded.
"""

import asyncio
import datetime
import hashlib
import logging
import os
import socket
import ssl
import tempfile
import threading
import time

import pytest

from fastlog._codec import FileRegion
from fastlog.security import client_context, peer_principal, server_context
from tests.net.test_socket_server import (
    MODES,
    Echo,
    closed_by_server,
    frame,
    mixed_parts,
    read_frame,
    run,
    start,
)
from tests.net.test_socket_server_limits import frames_bigger_than_the_pool_all_finish


def broker_cfg(certs, **extra):
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.keystore,
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.dir / "ca.pem")}
    cfg.update({k.replace("_", "."): v for k, v in extra.items()})
    return cfg


def client_cfg(certs, with_cert=False):
    """with_cert: True for the client certificate, or the path of another keystore."""
    cfg = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.dir / "ca.pem")}
    if with_cert:
        store = certs.client_keystore if with_cert is True else with_cert
        cfg.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": store})
    return cfg


async def start_tls(certs, handler, client_auth="none", **kw):
    ctx = server_context(broker_cfg(certs, ssl_client_auth=client_auth))
    return await start(handler, ssl_context=ctx, **kw)


async def connect_tls(server, certs, with_cert=False, now=None):
    """now: the time the client's own certificate is checked against (see client_context)."""
    return await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=client_context(client_cfg(certs, with_cert), now),
        server_hostname="localhost")


async def tls_serves(server, certs):
    r, w = await connect_tls(server, certs)
    w.write(frame(b"Eok"))
    assert await read_frame(r) == b"ok"
    w.close()


def logged(main, caplog, text):
    """Run main() with fastlog.net's INFO lines captured: the log records containing text."""
    with caplog.at_level(logging.INFO, logger="fastlog.net"):
        run(main())
    return [r for r in caplog.records if text in r.getMessage()]


def client_hello(certs) -> bytes:
    """The first flight of a real TLS client, made with a memory BIO (no socket)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_context(client_cfg(certs)).wrap_bio(incoming, outgoing,
                                                     server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("mode", MODES)
def test_pipelined_frames_round_trip_in_order(certs, mode):
    async def main():
        server = await start_tls(certs, Echo(), **mode)
        r, w = await connect_tls(server, certs)
        payloads = [b"E" + os.urandom(i % 300) + str(i).encode() for i in range(500)]
        w.write(b"".join(frame(p) for p in payloads))
        for p in payloads:
            assert await read_frame(r) == p[1:]
        # a slow request between fast ones still holds back the ones after it
        w.write(frame(b"Ea") + frame(b"S80:slow") + frame(b"N") + frame(b"Eb"))
        assert [await read_frame(r) for _ in range(3)] == [b"a", b"slow", b"b"]
        w.close()
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_frames_bigger_than_a_tls_record_both_ways(certs, mode):
    """Requests and responses of several MiB (hundreds of 16 KiB records each way),
    pipelined, with small ones between them."""
    async def main():
        server = await start_tls(certs, Echo(), max_request_size=8 << 20, **mode)
        r, w = await connect_tls(server, certs)
        payloads = [os.urandom(n) for n in (3 << 20, 17, 16384, 16385, 5 << 20, 1)]
        w.write(b"".join(frame(b"E" + p) for p in payloads))
        for p in payloads:
            assert await read_frame(r) == p
        w.close()
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_file_region_parts_arrive_byte_exact_and_in_order(certs, mode):
    async def main():
        echo = Echo()
        server = await start_tls(certs, echo, **mode)
        content = os.urandom(3 * 1024 * 1024 + 17)
        with tempfile.NamedTemporaryFile() as f:
            f.write(content)
            f.flush()
            echo.regions["mix"], expect = mixed_parts(f, content)
            echo.regions["short"] = [FileRegion(f, 7, 10)]
            r, w = await connect_tls(server, certs)
            w.write(frame(b"S50:before") + frame(b"Fmix") + frame(b"Fshort") + frame(b"Eafter"))
            assert await read_frame(r) == b"before"
            assert await read_frame(r) == expect
            assert await read_frame(r) == content[7:17]
            assert await read_frame(r) == b"after"
            w.close()
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_mutual_tls_principal_visible_to_the_handler(certs, mode):
    async def handler(conn, frame):
        cert = conn.getpeercert()
        return [f"{peer_principal(conn)}|{conn.ssl_object.version()}|"
                f"{bool(cert)}".encode()]

    async def main():
        server = await start_tls(certs, handler, client_auth="requested", **mode)
        r, w = await connect_tls(server, certs, with_cert=True)
        w.write(frame(b"who"))
        principal, version, has_cert = (await read_frame(r)).decode().split("|")
        assert principal == "User:CN=client1,OU=Eng,O=Acme,C=US"
        assert version.startswith("TLSv1.")
        assert has_cert == "True"
        w.close()
        # the same listener without a client certificate: anonymous
        r, w = await connect_tls(server, certs)
        w.write(frame(b"who"))
        assert (await read_frame(r)).decode().split("|")[0] == "User:ANONYMOUS"
        w.close()
        await server.stop()
    run(main())


async def refused(server, certs, with_cert, now) -> bool:
    try:
        # TLS 1.3: the client finishes its side first and learns of the refusal (an
        # alert, or the closed connection) when it reads.
        r, w = await connect_tls(server, certs, with_cert, now)
        w.write(frame(b"Eno"))
        await asyncio.wait_for(read_frame(r), 5)
    except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError):
        return True
    return False


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", ["no certificate", "expired certificate"])
def test_client_refused_when_client_auth_required(certs, mode, client, caplog):
    """Without a certificate, or with one the truststore does not accept: the connection
    is closed with one line naming the reason; a client with a good one is served."""
    store = client == "expired certificate" and certs.write(
        "expired.keystore.pem", certs.text("expired.key"), certs.text("expired.pem"))

    async def main():
        server = await start_tls(certs, Echo(), client_auth="required", **mode)
        # the expired certificate's own validity window, for the client to load it
        then = datetime.datetime(2020, 1, 15, tzinfo=datetime.UTC) if store else None
        assert await refused(server, certs, store, then)
        r, w = await connect_tls(server, certs, with_cert=True)
        w.write(frame(b"Eyes"))
        assert await read_frame(r) == b"yes"
        w.close()
        await server.stop()
    lines = logged(main, caplog, "TLS handshake failed")
    assert len(lines) == 1
    assert ("EXPIRED" if store else "CERTIFICATE") in lines[0].getMessage().upper()


@pytest.mark.parametrize("mode", MODES)
def test_plaintext_client_on_tls_port_is_closed_and_others_served(certs, mode, caplog):
    async def main():
        server = await start_tls(certs, Echo(), **mode)
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(frame(b"Eplain"))
        assert await closed_by_server(r, limit=1024)
        await tls_serves(server, certs)
        await server.stop()
    assert len(logged(main, caplog, "TLS handshake failed")) == 1


@pytest.mark.parametrize("mode", MODES)
def test_connection_closed_before_its_handshake_is_an_info_line(certs, mode, caplog):
    """A port probe (connect, close) is not a TLS failure worth a warning."""
    async def main():
        server = await start_tls(certs, Echo(), **mode)
        _, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.close()
        for _ in range(200):
            if server.connection_count == 0:
                break
            await asyncio.sleep(0.01)
        await tls_serves(server, certs)
        await server.stop()
    lines = logged(main, caplog, "during the TLS handshake")
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("mode", MODES)
def test_unfinished_handshakes_closed_by_the_deadline(certs, mode, caplog):
    """A truncated ClientHello, and a client that sends nothing: both closed when the
    handshake deadline passes, while a real client is served meanwhile."""
    hello = client_hello(certs)

    async def main():
        server = await start_tls(certs, Echo(), ssl_handshake_timeout_ms=400, **mode)
        r1, w1 = await asyncio.open_connection("127.0.0.1", server.port)
        w1.write(hello[:len(hello) // 2])
        r2, _ = await asyncio.open_connection("127.0.0.1", server.port)
        await tls_serves(server, certs)
        assert await closed_by_server(r1, limit=0)
        assert await closed_by_server(r2, limit=0)
        await tls_serves(server, certs)
        await server.stop()
    # two closed by the deadline, logged on one rate-limited line
    assert len(logged(main, caplog, "not finished within")) == 1


@pytest.mark.parametrize("mode", MODES)
def test_garbage_after_the_handshake_closes_only_that_connection(certs, mode, caplog):
    """A client that finishes the handshake, then writes bytes that are no TLS record."""
    def client(port):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        with client_context(client_cfg(certs)).wrap_socket(
                raw, server_hostname="localhost") as tls:
            tls.sendall(frame(b"Efine"))
            assert tls.recv(100) == frame(b"fine")
            with socket.socket(fileno=os.dup(tls.fileno())) as plain:   # the same stream
                plain.sendall(b"\x17\x03\x03\x00\x20" + b"x" * 32)   # bad MAC
                plain.settimeout(5)
                try:
                    for _ in range(100):
                        if not plain.recv(1024):
                            return True
                except ConnectionError:
                    return True
        return False

    async def main():
        server = await start_tls(certs, Echo(), **mode)
        assert await asyncio.to_thread(client, server.port)
        await tls_serves(server, certs)
        await server.stop()
    assert len(logged(main, caplog, "TLS record error")) == 1


@pytest.mark.parametrize("mode", MODES)
def test_memory_pool_still_bounds_tls_frames(certs, mode):
    """queued.max.request.bytes counts the decrypted bytes: several connections whose
    frames do not fit the pool together all finish, and the pool is whole again."""
    async def main():
        server = await start_tls(certs, Echo(), queued_max_request_bytes=1 << 20,
                                 max_request_size=1 << 20, **mode)
        await frames_bigger_than_the_pool_all_finish(
            server, lambda server: connect_tls(server, certs))
        await server.stop()
    run(main())


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("mode", MODES)
def test_large_region_to_a_slow_reader_in_bounded_memory(certs, mode, tmp_path):
    """A 64 MiB file region goes to a client reading 64 KiB at a time with pauses: it
    arrives byte-exact while the process's resident memory grows by far less than the
    region (the server encrypts it a chunk at a time, as the socket takes it)."""
    size = 64 << 20
    path = tmp_path / "segment"
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        block = os.urandom(1 << 20)
        for i in range(size >> 20):
            chunk = bytes([i & 0xFF]) + block[1:]
            digest.update(chunk)
            f.write(chunk)

    def slow_reader(port, out):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        with client_context(client_cfg(certs)).wrap_socket(
                raw, server_hostname="localhost") as tls:
            tls.sendall(frame(b"Fbig"))
            got, h = 0, hashlib.sha256()
            head = b""
            while got < size and time.monotonic() < out["deadline"]:
                data = tls.recv(64 << 10)
                if not data:
                    break
                if len(head) < 4:
                    need = 4 - len(head)
                    head += data[:need]
                    data = data[need:]
                h.update(data)
                got += len(data)
                if got % (1 << 20) < len(data):
                    time.sleep(0.01)   # a pause every MiB or so
            out.update(head=head, got=got, digest=h.hexdigest())

    async def main():
        echo = Echo()
        server = await start_tls(certs, echo, **mode)
        with open(path, "rb") as f:
            echo.regions["big"] = [FileRegion(f, 0, size)]
            base = rss_bytes()
            peak = base
            out = {"deadline": time.monotonic() + 15}
            thread = threading.Thread(target=slow_reader, args=(server.port, out), daemon=True)
            thread.start()
            while thread.is_alive() and time.monotonic() < out["deadline"] + 1:
                peak = max(peak, rss_bytes())
                await asyncio.sleep(0.005)
            thread.join(1)
        await server.stop()
        return base, peak, out

    base, peak, out = run(main())
    assert out.get("head") == size.to_bytes(4, "big")
    assert out["got"] == size and out["digest"] == digest.hexdigest()
    assert peak - base < 16 << 20, f"resident memory grew by {(peak - base) >> 20} MiB"


@pytest.mark.parametrize("mode", MODES)
def test_close_sends_close_notify(certs, mode):
    """A handler closing the connection: the client sees a clean TLS close (close_notify),
    not a truncated stream."""
    async def main():
        server = await start_tls(certs, Echo(), **mode)

        def client():
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            with client_context(client_cfg(certs)).wrap_socket(
                    raw, server_hostname="localhost", suppress_ragged_eofs=False) as tls:
                tls.sendall(frame(b"Eone"))
                data = tls.recv(100)
                tls.sendall(frame(b"Cbye"))
                # SSLEOFError here if the server closed without close_notify
                return data, tls.recv(100)
        data, tail = await asyncio.to_thread(client)
        assert data == frame(b"one") and tail == b""
        await server.stop()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_client_close_notify_is_answered(certs, mode):
    """A client closing cleanly (asyncio's SSL transport: close_notify, then it waits for
    the server's) is answered at once, not left to its shutdown timeout."""
    async def main():
        server = await start_tls(certs, Echo(), **mode)
        r, w = await connect_tls(server, certs)
        w.write(frame(b"Eok"))
        assert await read_frame(r) == b"ok"
        w.close()
        await asyncio.wait_for(w.wait_closed(), 5)
        await tls_serves(server, certs)
        await server.stop()
    run(main())
