"""Network layer speed: fastlog._net.SocketServer against this machine's loopback limit.

(1) Small request/response round trips per second with a trivial handler: one connection
    with 10 requests in flight, and 4 connections with 10 each; for each processor mode
    (inline on the API loop with eager or Task handlers, on uvloop or the stdlib loop;
    one or two processor threads), with the server's CPU time per request.
(2) Large responses: a handler answering each request with a 64-byte header + a 1 MiB
    FileRegion of a page-cached 256 MiB file (a fetch of 64 KiB records), written with
    sendfile or pread+send, read by a lean recv_into client; against a plain socket pump
    (sendall -> recv_into, 1 MiB chunks) between two processes measured in the same run.

The server always runs in its own process; the client in this one. Prints a table and,
last, one JSON line with rps_small and large_vs_loopback (default mode, best of reps).
Usage: .venv/bin/python perf/bench_net.py [--reps 3] [--small-seconds 2] [--large-mib 2048]
"""

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import selectors
import socket
import struct
import sys
import tempfile
import time

FILE_SIZE = 256 * 1024 * 1024
REGION = 1024 * 1024
HEADER = b"h" * 64

MODES = {
    "inline": dict(num_network_threads=1, threaded=False, eager=True),
    "inline-aio": dict(num_network_threads=1, threaded=False, eager=True),   # stdlib loop
    "inline-task": dict(num_network_threads=1, threaded=False, eager=False),
    "thread-1": dict(num_network_threads=1, threaded=True, eager=True),
    "thread-2": dict(num_network_threads=2, threaded=True, eager=True),
}


# ---- server process -------------------------------------------------------------------

def serve(conn, mode, path, zero_copy, keystore=None):
    import uvloop
    from fastlog._net import SocketServer

    from fastlog._codec import FileRegion
    from fastlog.security import server_context

    async def main():
        f = open(path, "rb") if path else None
        state = {"pos": 0, "n": 0}
        small = [b"r" * 16]

        async def handler(c, frame):
            if frame[0] == 0x53:                  # b"S": small echo-ish response
                state["n"] += 1
                return small
            pos = state["pos"]
            state["pos"] = (pos + REGION) % FILE_SIZE
            return [HEADER, FileRegion(f, pos, REGION)]

        ctx = None   # keystore: a PEM file (key + certificate) for a TLS listener
        if keystore:
            ctx = server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore})
        server = SocketServer(handler, port=0, zero_copy=zero_copy, ssl_context=ctx,
                              **MODES[mode])
        await server.start()
        conn.send(server.port)
        loop = asyncio.get_running_loop()
        while True:   # "cpu": report CPU seconds and requests so far; "stop": stop
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd != "cpu":
                break
            conn.send((time.process_time(), state["n"]))
        await server.stop()
    if mode.endswith("-aio"):
        asyncio.run(main())
    else:
        uvloop.run(main())


def start_server(mode, path=None, zero_copy=True, keystore=None):
    parent, child = mp.Pipe()
    proc = mp.Process(target=serve, args=(child, mode, path, zero_copy, keystore), daemon=True)
    proc.start()
    port = parent.recv()
    return proc, parent, port


def server_cpu(pipe):
    pipe.send("cpu")
    return pipe.recv()


def stop_server(proc, pipe):
    pipe.send("stop")
    proc.join(10)
    if proc.is_alive():
        proc.kill()


# ---- clients --------------------------------------------------------------------------

SMALL_REQ = struct.pack(">i", 20) + b"S" + b"q" * 19
SMALL_RESP = 4 + 16


def small_client(port, nconns, inflight, seconds):
    """Round trips/s with `inflight` requests outstanding per connection."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(nconns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(SMALL_REQ * inflight)
        sel.register(s, selectors.EVENT_READ, [0])   # [pending bytes]
        socks.append(s)
    buf = bytearray(1 << 16)
    done = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        for key, _ in sel.select(1):
            s, st = key.fileobj, key.data
            n = s.recv_into(buf)
            if not n:
                raise RuntimeError("server closed")
            total = st[0] + n
            k, st[0] = divmod(total, SMALL_RESP)
            if k:
                done += k
                s.sendall(SMALL_REQ * k)
        if time.perf_counter() >= end:
            break
    elapsed = time.perf_counter() - t0
    for s in socks:
        s.close()
    return done / elapsed


def large_client(port, total_bytes, inflight=4, tls=None):
    """GB/s of fetch-like responses (64 B header + 1 MiB region each); ``tls``: an
    ssl.SSLContext to connect with (to localhost)."""
    resp = 4 + len(HEADER) + REGION
    want = max(1, total_bytes // REGION)
    req = struct.pack(">i", 4) + b"Fxxx"
    s = socket.create_connection(("127.0.0.1", port))
    if tls is not None:
        s = tls.wrap_socket(s, server_hostname="localhost")
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    sent = min(inflight, want)
    s.sendall(req * sent)
    got = 0
    t0 = time.perf_counter()
    while got < want * resp:
        n = s.recv_into(view)
        if not n:
            raise RuntimeError("server closed")
        got += n
        finished = got // resp
        if sent < want and sent - finished < inflight:
            more = min(inflight - (sent - finished), want - sent)
            s.sendall(req * more)
            sent += more
    elapsed = time.perf_counter() - t0
    s.close()
    return want * REGION / elapsed / 1e9


def pump_sender(port, total, pipe):
    s = socket.create_connection(("127.0.0.1", port))
    chunk = b"p" * (1 << 20)
    cpu0 = time.process_time()
    for _ in range(total // len(chunk)):
        s.sendall(chunk)
    s.close()
    pipe.send(time.process_time() - cpu0)


def loopback_pump(total):
    """The anchor: plain sendall -> recv_into between two processes.
    Returns (GB/s, sender CPU seconds per GiB)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    parent, child = mp.Pipe()
    proc = mp.Process(target=pump_sender, args=(ls.getsockname()[1], total, child),
                      daemon=True)
    proc.start()
    s, _ = ls.accept()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    got = 0
    t0 = time.perf_counter()
    while True:
        n = s.recv_into(view)
        if not n:
            break
        got += n
    elapsed = time.perf_counter() - t0
    s.close()
    ls.close()
    cpu = parent.recv()
    proc.join(10)
    return got / elapsed / 1e9, cpu / (got / 2**30)


@contextlib.contextmanager
def page_cached_file():
    """A temporary FILE_SIZE file of random bytes, read once so it is page-cached."""
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR")) as f:
        block = os.urandom(1 << 20)
        for _ in range(FILE_SIZE // len(block)):
            f.write(block)
        f.flush()
        with open(f.name, "rb") as warm:
            while warm.read(1 << 24):
                pass
        yield f


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--small-seconds", type=float, default=2.0)
    ap.add_argument("--large-mib", type=int, default=2048)
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()
    modes = args.modes.split(",")
    mp.set_start_method("fork")

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, reps={args.reps} (best)")
    print("\n(1) small round trips/s (trivial handler, 20 B requests, 16 B responses)")
    small = {}
    for mode in modes:
        proc, pipe, port = start_server(mode)
        try:
            cpu0, n0 = server_cpu(pipe)
            one = max(small_client(port, 1, 10, args.small_seconds) for _ in range(args.reps))
            four = max(small_client(port, 4, 10, args.small_seconds) for _ in range(args.reps))
            cpu1, n1 = server_cpu(pipe)
        finally:
            stop_server(proc, pipe)
        small[mode] = (one, four)
        us = (cpu1 - cpu0) / max(1, n1 - n0) * 1e6
        print(f"  {mode:12s} 1 conn x10 in flight: {one:9,.0f}/s   4 conns x10: {four:9,.0f}/s"
              f"   server CPU {us:5.1f} us/request")

    total = args.large_mib * 1024 * 1024
    with page_cached_file() as f:
        print(f"\n(2) large responses: {args.large_mib} MiB as 1 MiB FileRegions "
              "of a page-cached 256 MiB file, 4 in flight")
        pumps = [loopback_pump(total) for _ in range(args.reps)]
        anchor = max(g for g, _ in pumps)
        pump_cpu = min(c for _, c in pumps)
        print(f"  loopback pump (sendall -> recv_into, 1 MiB): {anchor:5.2f} GB/s,"
              f" sender CPU {pump_cpu:5.3f} s/GiB")
        large = {}
        for mode in [m for m in modes if m not in ("inline-task", "inline-aio")]:
            for zero_copy in (True, False):
                proc, pipe, port = start_server(mode, f.name, zero_copy)
                try:
                    cpu0, _ = server_cpu(pipe)
                    gbs = max(large_client(port, total) for _ in range(args.reps))
                    cpu1, _ = server_cpu(pipe)
                finally:
                    stop_server(proc, pipe)
                large[(mode, zero_copy)] = gbs
                how = "sendfile" if zero_copy else "pread+send"
                cpu = (cpu1 - cpu0) / (args.reps * total / 2**30)
                print(f"  {mode:12s} {how:10s}: {gbs:5.2f} GB/s  = {gbs / anchor:4.2f}x loopback,"
                      f" server CPU {cpu:5.3f} s/GiB")
        anchor2 = max(g for g, _ in (loopback_pump(total) for _ in range(args.reps)))
        print(f"  loopback pump again: {anchor2:5.2f} GB/s")
        anchor = max(anchor, anchor2)

    default = "inline" if "inline" in modes else modes[0]
    best_large = max(v for (m, _), v in large.items() if m == default)
    print(json.dumps({
        "rps_small": round(small[default][0]),
        "rps_small_4conns": round(small[default][1]),
        "large_gbs": round(best_large, 3),
        "loopback_gbs": round(anchor, 3),
        "large_vs_loopback": round(best_large / anchor, 3),
    }))


if __name__ == "__main__":
    main()
