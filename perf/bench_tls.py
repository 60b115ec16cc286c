"""TLS in the network layer: fastlog._net.SocketServer(ssl_context=...) against the same
server in plaintext, measured in the same run.

(1) Handshakes: a client process opens connections one after the other (handshake, one
    small request, close) against an EC P-256 and an RSA-2048 certificate; the server's
    CPU per handshake, and the round-trip latency of an established connection probing
    the same server meanwhile (how long handshakes on the shared loop hold others up).
(2) Small requests: one connection with 10 in flight, server CPU per request, TLS and
    plaintext.
(3) Large responses: 64 B header + 1 MiB FileRegion of a page-cached 256 MiB file (a
    fetch), 4 in flight; plaintext goes out with sendfile, TLS with pread + encryption.
    GB/s and server CPU per GiB, and TLS / plaintext ratios.

Servers run in their own process (perf/bench_net.py's), clients here. Certificates are
made with the openssl tool in a temporary directory. Last line: one JSON object.
Usage: .venv/bin/python perf/bench_tls.py [--reps 3] [--large-mib 1024] [--handshakes 200]
"""

import argparse
import json
import multiprocessing as mp
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_net import (  # noqa: E402  (perf/bench_net.py: server process, large client)
    SMALL_REQ,
    SMALL_RESP,
    large_client,
    page_cached_file,
    server_cpu,
    start_server,
    stop_server,
)

KEYS = {"ec": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
        "rsa": ["-newkey", "rsa:2048"]}


def make_keystore(d, kind):
    """A self-signed certificate for localhost: (keystore PEM with key + cert, cert PEM)."""
    key, cert = f"{d}/{kind}.key", f"{d}/{kind}.pem"
    subprocess.run(["openssl", "req", "-x509", *KEYS[kind], "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    store = f"{d}/{kind}.keystore.pem"
    Path(store).write_text(Path(key).read_text() + Path(cert).read_text())
    return store, cert


def client_ctx(cert):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cert)
    return ctx


def round_trip(s):
    s.sendall(SMALL_REQ)
    got = 0
    while got < SMALL_RESP:
        n = len(s.recv(SMALL_RESP - got))
        if not n:
            raise RuntimeError("server closed")
        got += n


def connect(port, cert):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client_ctx(cert).wrap_socket(s, server_hostname="localhost") if cert else s


def handshake_load(port, cert, count, pipe):
    """Child process: `count` connections one after the other, each a handshake (none
    without cert), one small request and a close; sends back the seconds it took."""
    t0 = time.perf_counter()
    for _ in range(count):
        with connect(port, cert) as s:
            round_trip(s)
    pipe.send(time.perf_counter() - t0)


def probe(port, cert, stop, out):
    """Round trips of one established connection until stop is set (latencies in ms)."""
    with connect(port, cert) as s:
        while not stop.is_set() and len(out) < 1_000_000:
            t = time.perf_counter()
            round_trip(s)
            out.append((time.perf_counter() - t) * 1000)
            time.sleep(0.0005)


def probed(port, cert, seconds=None, load=None):
    """Probe latencies (p50, p99, max ms) for `seconds`, or while `load` runs."""
    stop, lat = threading.Event(), []
    t = threading.Thread(target=probe, args=(port, cert, stop, lat), daemon=True)
    t.start()
    result = None
    if load is None:
        time.sleep(seconds)
    else:
        result = load()
    stop.set()
    t.join(10)
    lat.sort()
    return (statistics.median(lat), lat[int(len(lat) * 0.99)], lat[-1]), result


def handshakes(store, cert, count):
    proc, pipe, port = start_server("inline", keystore=store)
    try:
        idle, _ = probed(port, cert, seconds=1.0)

        def load():
            spawn = mp.get_context("spawn")   # no fork while the probe thread runs
            parent, child = spawn.Pipe()
            p = spawn.Process(target=handshake_load, args=(port, cert, count, child), daemon=True)
            cpu0, _ = server_cpu(pipe)
            p.start()
            elapsed = parent.recv()
            cpu1, _ = server_cpu(pipe)
            p.join(10)
            return elapsed, cpu1 - cpu0
        busy, (elapsed, cpu) = probed(port, cert, load=load)
    finally:
        stop_server(proc, pipe)
    return {"per_s": count / elapsed, "server_cpu_ms": cpu / count * 1000,
            "probe_idle": idle, "probe_busy": busy}


def small_rate(port, seconds, tls=None, inflight=10):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is not None:
        s = tls.wrap_socket(s, server_hostname="localhost")
    s.sendall(SMALL_REQ * inflight)
    buf = bytearray(1 << 16)
    done = pending = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n = s.recv_into(buf)
        if not n:
            raise RuntimeError("server closed")
        k, pending = divmod(pending + n, SMALL_RESP)
        if k:
            done += k
            s.sendall(SMALL_REQ * k)
    elapsed = time.perf_counter() - t0
    s.close()
    return done / elapsed


def measure(mode, fn, path=None, keystore=None, reps=1):
    """Best of `reps` of fn(port) against a fresh server; with the server's and this
    client's CPU seconds and the requests served, over all reps."""
    proc, pipe, port = start_server(mode, path, keystore=keystore)
    try:
        cpu0, n0 = server_cpu(pipe)
        mine = time.process_time()
        best = max(fn(port) for _ in range(reps))
        mine = time.process_time() - mine
        cpu1, n1 = server_cpu(pipe)
    finally:
        stop_server(proc, pipe)
    return best, cpu1 - cpu0, n1 - n0, mine


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--large-mib", type=int, default=1024)
    ap.add_argument("--small-seconds", type=float, default=2.0)
    ap.add_argument("--handshakes", type=int, default=200)
    ap.add_argument("--modes", default="inline,thread-2")
    args = ap.parse_args()
    mp.set_start_method("fork")
    modes = args.modes.split(",")
    print(f"python {sys.version.split()[0]}, {ssl.OPENSSL_VERSION}, {os.cpu_count()} cpus, "
          f"reps={args.reps} (best), load average {os.getloadavg()[0]:.1f}")
    summary = {}
    with tempfile.TemporaryDirectory() as d:
        stores = {kind: make_keystore(d, kind) for kind in KEYS}
        store, cert = stores["ec"]
        tls = client_ctx(cert)

        print(f"\n(1) handshakes, inline server: {args.handshakes} connections one after "
              "the other (handshake + one request + close); probe = another connection's "
              "round trip; plain = the same without TLS")
        for kind, (kstore, kcert) in [("plain", (None, None)), *stores.items()]:
            h = handshakes(kstore, kcert, args.handshakes)
            (i50, i99, imax), (b50, b99, bmax) = h["probe_idle"], h["probe_busy"]
            print(f"  {kind:4s} {h['per_s']:7.0f}/s, server CPU {h['server_cpu_ms']:5.2f} ms/"
                  f"connection; probe p50/p99/max ms idle {i50:.2f}/{i99:.2f}/{imax:.2f}, "
                  f"during handshakes {b50:.2f}/{b99:.2f}/{bmax:.2f}")
            summary[f"connection_{kind}_server_ms"] = round(h["server_cpu_ms"], 3)
            summary[f"connection_{kind}_probe_max_ms"] = round(bmax, 2)

        print("\n(2) small requests, 1 connection x 10 in flight")
        for mode in modes:
            row = {}
            for name, ks, ctx in (("plain", None, None), ("tls", store, tls)):
                rate, cpu, n, _ = measure(mode, lambda p, c=ctx: small_rate(p, args.small_seconds, c),
                                       keystore=ks, reps=args.reps)
                row[name] = (rate, cpu / max(1, n) * 1e6)
            print(f"  {mode:9s} plaintext {row['plain'][0]:8,.0f}/s {row['plain'][1]:5.1f} us/req;"
                  f"  TLS {row['tls'][0]:8,.0f}/s {row['tls'][1]:5.1f} us/req"
                  f"  (TLS/plain CPU {row['tls'][1] / row['plain'][1]:.2f}x)")
            summary[f"small_{mode}_cpu_ratio"] = round(row["tls"][1] / row["plain"][1], 2)

        total = args.large_mib * 1024 * 1024
        with page_cached_file() as f:
            print(f"\n(3) large responses: {args.large_mib} MiB per rep as 1 MiB FileRegions, "
                  "4 in flight")
            for mode in modes:
                row = {}
                for name, ks, ctx in (("sendfile", None, None), ("tls", store, tls)):
                    gbs, cpu, _, client = measure(
                        mode, lambda p, c=ctx: large_client(p, total, tls=c), path=f.name,
                        keystore=ks, reps=args.reps)
                    gib = args.reps * total / 2**30
                    row[name] = (gbs, cpu / gib)
                    print(f"  {mode:9s} {name:9s} {gbs:5.2f} GB/s, server CPU "
                          f"{row[name][1]:5.3f} s/GiB, client CPU {client / gib:5.3f} s/GiB")
                speed = row["tls"][0] / row["sendfile"][0]
                cost = row["tls"][1] / row["sendfile"][1]
                print(f"  {mode:9s} TLS / plaintext: {speed:4.2f}x the throughput, "
                      f"{cost:4.1f}x the server CPU per GiB")
                summary[f"large_{mode}_tls_gbs"] = round(row["tls"][0], 3)
                summary[f"large_{mode}_plain_gbs"] = round(row["sendfile"][0], 3)
                summary[f"large_{mode}_tls_vs_plain"] = round(speed, 3)
                summary[f"large_{mode}_tls_cpu_s_per_gib"] = round(row["tls"][1], 3)
                summary[f"large_{mode}_plain_cpu_s_per_gib"] = round(row["sendfile"][1], 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
