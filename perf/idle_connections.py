"""Produce latency and broker cost with thousands of idle client connections open.

A broker that serves a few busy clients usually also holds many idle ones (pools of
application clients, consumers between polls). Their cost should be flat: memory per
connection, and nothing per connection on the request loop's path. This script starts a
fresh broker from each given source tree in turn (or the installed one), makes a topic,
keeps a librdkafka consumer reading it, and --segments times in a row measures, with no
idle connection and with --idle of them open (each has sent one ApiVersions request and
waits, as a client between requests does; they are closed again within the segment; odd
segments measure with them first, so neither case always runs first):

  - the p50/p99 produce latency of a librdkafka producer at --rate records/s (acks=1,
    linger 0, 100-byte records: perf/compare.py's latency probe);
  - the broker's CPU per second while nothing but the consumer runs (the cost of the idle
    connections themselves: timers, scans), from the scheduler's count of its threads' time;
  - the broker's resident memory (VmRSS), hence the memory per idle connection (from
    the first segment: the later ones reuse memory the earlier closes freed).

The anchor is the same stream on the same broker without idle connections, in the same
segment; a segment's ratio is p99 with / p99 without, and each figure is the median over
the segments (the machine's other work moves single probes a lot). It raises this process's RLIMIT_NOFILE (the broker inherits it) to hold the idle
sockets. 127.0.0.1 only. Prints one JSON line per broker run, then per tree the medians
and ``idle_conn_p99_ratio``.

    .venv/bin/python perf/idle_connections.py                      # installed tree
    .venv/bin/python perf/idle_connections.py base=/tmp/base new=. --segments 5

With --loop it measures instead the request loop's own cost per idle connection, without
a broker: in a child process per tree, a SocketServer (inline, uvloop, the broker's
connections.max.idle.ms and receive timeout) holds --idle connections opened by the same
process, and the process's CPU over --quiet seconds is read with and without them
(nothing else runs there, so the difference is the expiry check and the loop's timers).
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402  (perf/compare.py: broker process helpers)

ROOT = Path(__file__).resolve().parent.parent

# ApiVersions v0 with client id "idle": size, api key 18, version 0, correlation id 1
_API_VERSIONS = struct.pack(">ihhih4s", 2 + 2 + 4 + 2 + 4, 18, 0, 1, 4, b"idle")


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < need:
        raise compare.RunError(f"RLIMIT_NOFILE is {soft} (hard {hard}); "
                               f"{need} files are needed for the idle connections")


def open_idle(host: str, port: int, count: int) -> list[socket.socket]:
    """count connections, each having sent ApiVersions and read its answer."""
    socks = []
    try:
        for _ in range(count):
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(_API_VERSIONS)
            socks.append(s)
        for s in socks:
            size = struct.unpack(">i", _recv(s, 4))[0]
            _recv(s, size)
    except BaseException:
        close_all(socks)
        raise
    return socks


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise compare.RunError("the broker closed an idle connection during setup")
        out += chunk
    return out


def close_all(socks) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def _consume(bootstrap: str, topic: str, stop: threading.Event, counts: dict) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-perf",
                  "auto.offset.reset": "latest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        while not stop.is_set():
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                counts["records"] += 1
    finally:
        c.close()


def _quiet_cpu(broker, seconds: float) -> float:
    """The broker's CPU seconds per second over `seconds`."""
    c0, t0 = compare.cpu_ns(broker.pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = compare.cpu_ns(broker.pid), time.monotonic()
    return (c1 - c0) / 1e9 / (t1 - t0)


def _without(broker, opts, got: dict, idle: list) -> None:
    """Quiet CPU and the latency probe with no idle connection open."""
    got["cpu0"] = _quiet_cpu(broker, opts.quiet)
    got["base"] = compare.latency_probe(broker.bootstrap, "idle", opts.rate, opts.seconds)


def _with_idle(broker, opts, got: dict, idle: list) -> None:
    """RSS before and after opening the idle connections (kept in `idle` while open, so
    the caller closes them if this fails), quiet CPU and the probe; then closes them."""
    host, port = broker.bootstrap.rsplit(":", 1)
    got["rss0"] = broker.rss_mb()
    idle.extend(open_idle(host, int(port), opts.idle))
    time.sleep(1.0)
    got["rss1"] = broker.rss_mb()
    got["cpu1"] = _quiet_cpu(broker, opts.quiet)
    got["loaded"] = compare.latency_probe(broker.bootstrap, "idle", opts.rate, opts.seconds)
    # each must still be open: a connection the broker closed is not idle
    got["alive"] = sum(1 for s in idle if _still_open(s))
    close_all(idle)
    idle.clear()
    time.sleep(1.0)   # the broker sees the closes


def one_run(tree: Path | None, name: str, opts) -> dict:
    """One broker; --segments times: the probe and the quiet CPU without idle
    connections, then with them (opened for the segment, closed after it)."""
    with tempfile.TemporaryDirectory(prefix="fastlog-idle-") as d:
        broker = compare.start_fastlog(Path(d), name, tree=tree)
        stop = threading.Event()
        counts = {"records": 0}
        consumer = None
        idle: list = []
        segs = []
        try:
            w = compare.raw_connection(broker)
            try:
                compare.create_topic_raw(w, "idle", 1)
            finally:
                w.close()
            consumer = threading.Thread(target=_consume, args=(
                broker.bootstrap, "idle", stop, counts), daemon=True)
            consumer.start()
            compare.latency_probe(broker.bootstrap, "idle", opts.rate, opts.warmup)
            for seg in range(opts.segments):
                got: dict = {}
                # odd segments measure with the idle connections first
                steps = (_with_idle, _without) if seg % 2 else (_without, _with_idle)
                for step in steps:
                    step(broker, opts, got, idle)
                base, loaded = got["base"], got["loaded"]
                cpu0, cpu1, rss0, rss1 = got["cpu0"], got["cpu1"], got["rss0"], got["rss1"]
                alive = got["alive"]
                segs.append({
                    "p99_ms": base["p99_ms"], "p99_idle_ms": loaded["p99_ms"],
                    "p99_ratio": round(loaded["p99_ms"] / base["p99_ms"], 3),
                    "p50_ms": base["p50_ms"], "p50_idle_ms": loaded["p50_ms"],
                    "rate": base["records_per_s"], "rate_idle": loaded["records_per_s"],
                    "quiet_cpu_ms_per_s": round(cpu0 * 1000, 3),
                    "quiet_cpu_idle_ms_per_s": round(cpu1 * 1000, 3),
                    "kib_per_idle_conn": round((rss1 - rss0) * 1024 / opts.idle, 2),
                    "idle_alive": alive})
        finally:
            close_all(idle)
            stop.set()
            if consumer is not None:
                consumer.join(30)
            broker.stop()

    def med(key):
        return statistics.median(g[key] for g in segs)
    return {"tree": name, "idle": opts.idle, "segments": len(segs),
            **{k: med(k) for k in segs[0]}, "p99_ratios": [g["p99_ratio"] for g in segs],
            # the first segment's: later ones reuse the memory freed by the closes before
            "kib_per_idle_conn": segs[0]["kib_per_idle_conn"],
            "consumed": counts["records"]}


def _still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


async def _loop_child(count: int, seconds: float) -> dict:
    """In a child process: process CPU per second of an inline SocketServer over `seconds`
    with no connection, then with `count` idle ones."""
    import asyncio

    from fastlog._net import SocketServer

    async def handler(conn, frame):
        return None

    server = SocketServer(handler, host="127.0.0.1", port=0, idle_timeout_ms=600000,
                          receive_timeout_ms=30000)
    await server.start()

    async def cpu_per_s() -> float:
        c0, t0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        return (time.process_time() - c0) / (time.monotonic() - t0)

    out = {"without_ms_per_s": round(await cpu_per_s() * 1000, 4)}
    socks: list = []
    for _ in range(200 * count):   # bounded: in steps the listen backlog holds
        if len(socks) == count and server.connection_count == count:
            break
        if len(socks) < count and len(socks) - server.connection_count < 200:
            socks.extend(socket.create_connection(("127.0.0.1", server.port))
                         for _ in range(min(100, count - len(socks))))
        await asyncio.sleep(0.01)   # the server's loop accepts them meanwhile
    await asyncio.sleep(1.5)   # past the first expiry check
    out["with_ms_per_s"] = round(await cpu_per_s() * 1000, 4)
    out["us_per_idle_conn_per_s"] = round(
        (out["with_ms_per_s"] - out["without_ms_per_s"]) * 1000 / count, 4)
    close_all(socks)
    await server.stop()
    return out


def loop_runs(trees: dict, opts) -> int:
    import subprocess

    per: dict[str, list[float]] = {}
    for rep in range(opts.reps):
        for name, path in trees.items():
            env = dict(__import__("os").environ)
            if path is not None:
                env["PYTHONPATH"] = str(path)
            r = subprocess.run([sys.executable, __file__, "--loop-child", "--idle",
                                str(opts.idle), "--quiet", str(opts.quiet)],
                               capture_output=True, text=True, env=env,
                               timeout=opts.quiet * 3 + 120, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                print(f"idle_connections.py: the {name} child failed: "
                      f"{(r.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                return 1
            res = json.loads(r.stdout.strip().splitlines()[-1])
            per.setdefault(name, []).append(res["us_per_idle_conn_per_s"])
            print(json.dumps({"rep": rep, "tree": name, "idle": opts.idle, **res}), flush=True)
    for name, vals in per.items():
        print(json.dumps({"tree": name, "idle": opts.idle,
                          "median_us_per_idle_conn_per_s": statistics.median(vals),
                          "all": vals}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", metavar="NAME=PATH",
                    help="built fastlog checkouts (default: the installed one)")
    ap.add_argument("--reps", type=int, default=1, help="brokers started per tree")
    ap.add_argument("--segments", type=int, default=5,
                    help="without/with idle connections pairs per broker")
    ap.add_argument("--idle", type=int, default=2000, help="idle connections")
    ap.add_argument("--rate", type=int, default=1000, help="probe records/s")
    ap.add_argument("--seconds", type=float, default=5.0, help="each latency probe")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--quiet", type=float, default=5.0, help="each idle CPU interval")
    ap.add_argument("--loop", action="store_true",
                    help="the request loop's CPU per idle connection, without a broker")
    ap.add_argument("--loop-child", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    trees = compare.source_trees(opts.trees) if opts.trees else {"fastlog": None}
    if trees is None:
        return 2
    if (not 1 <= opts.reps <= 20 or not 1 <= opts.segments <= 50 or not 1 <= opts.idle <= 20_000
            or not 10 <= opts.rate <= 20_000 or not 1 <= opts.seconds <= 300
            or not 1 <= opts.warmup <= 60 or not 1 <= opts.quiet <= 60):
        print("idle_connections.py: --reps 1-20, --segments 1-50, --idle 1-20,000, --rate 10-20,000, "
              "--seconds 1-300, --warmup 1-60, --quiet 1-60", file=sys.stderr)
        return 2
    try:
        _raise_nofile(2 * opts.idle + 1024)   # --loop: both ends in one process
    except compare.RunError as e:
        print(f"idle_connections.py: {e}", file=sys.stderr)
        return 1
    if opts.loop_child:
        import asyncio

        import uvloop
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            print(json.dumps(runner.run(_loop_child(opts.idle, opts.quiet))))
        return 0
    if opts.loop:
        return loop_runs(trees, opts)
    runs: dict[str, list[dict]] = {}
    for rep in range(opts.reps):
        for name, path in trees.items():
            r = one_run(path, name, opts)
            runs.setdefault(name, []).append(r)
            print(json.dumps({"rep": rep, **r}), flush=True)
    for name, rs in runs.items():
        def med(key, rs=rs):
            return statistics.median(r[key] for r in rs)
        print(json.dumps({
            "tree": name, "idle": opts.idle, "p99_ms": med("p99_ms"),
            "p99_idle_ms": med("p99_idle_ms"),
            "idle_conn_p99_ratio": round(med("p99_ratio"), 3),
            "p99_ratios": [x for r in rs for x in r["p99_ratios"]],
            "quiet_cpu_ms_per_s": med("quiet_cpu_ms_per_s"),
            "quiet_cpu_idle_ms_per_s": med("quiet_cpu_idle_ms_per_s"),
            "kib_per_idle_conn": med("kib_per_idle_conn")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
