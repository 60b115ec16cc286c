"""Small-request latency while another client sends large compressed produce requests.

Every connection's requests are handled on one request loop, so a request whose work is
long (receiving, checking, writing a big gzip or zstd batch) would delay every other
client. fastlog receives such a frame on the loop, checks the batch in niced worker
processes and writes it on the I/O pool. This script starts one fastlog broker on a free
127.0.0.1 port and measures, in the same run:

  - a probe: one raw connection (its own process, TCP_NODELAY, gc off), one request in
    flight, at --rate requests/s on a fixed schedule: --probe produce (default) sends a
    Produce v8 of one uncompressed 100-byte record, acks=1, to topic `t` (a partition
    of its own); --probe apiversions sends ApiVersions v0 (no storage at all);
    --probe echo sends it to an echo process of the script's instead of the broker:
    what the same load does to a process that answers without any work (the two
    cores' run queues, loopback's packet processing), the floor under the broker's
    figures;
  - a load: --streams processes, each on its own connection sending, one after the
    other, Produce requests of one --codec batch of --batch-records records
    (--record-size bytes of text-like data each) to topic `big`, back to back or at
    most --load-rate a second per stream.

--segments times, a quiet window (the probe alone) and a loaded window (the probe while
the load runs), each --window seconds, in alternating order (even segments quiet first);
a loaded window starts --settle seconds after the load does, and a quiet one only after
the load's last request was answered and --settle seconds more. A segment's ratio is its
loaded p99 over its quiet p99; the result is the median of the segments' ratios and
their range (goal: at most 2). Processes other than these (other people's work on a
shared machine) move single windows; the alternation spreads that over both kinds.

Latency is taken two ways: `p99_ms` from the time the request was due on the probe's
schedule to its answer (as a client producing at that rate sees it: a 30 ms stall delays
every request due within it, not only the one in flight), replayed from the measured
round trips so that the probe's own late wake-ups do not count (a process that only
sleeps 1 ms at a time wakes up to 4-20 ms late at the 99th percentile on this shared
2-core machine at load 2.7; `probe_late_p99_ms` shows it), and `rtt_p99_ms` from the
send to the answer (the round trip alone). Per window also the share of time some task
of the machine waited for a CPU (/proc/pressure/cpu) and the broker's threads' waits for
one: the quiet tail moves with them.

On a machine shared with other work, --nice -10 (as root) runs the broker, the probe
and the load before it, so that a window measures them rather than the other work: the
check workers, at +10 from the broker, then run at the others' priority. The large
producer would be another machine in a deployment; here its sending (a core's worth of
loopback TCP at 150 MB/s) competes with the broker for the same two cores, and
--load-nice 10 has the kernel give it the CPU last.

Prints one JSON line per segment, then a summary line. --tree runs another built
checkout's broker instead of this one (an A/B of two trees: run both, alternating).

Usage: .venv/bin/python perf/large_produce_latency.py [--codec gzip] [--batch-records N]
           [--record-size B] [--streams S] [--rate R] [--probe produce|apiversions]
           [--segments N] [--window S] [--settle S] [--nice N] [--load-nice N]
           [--load-rate R] [--probe echo]
           [--tree DIR]
           [--override KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import random
import socket
import statistics
import struct
import sys
import tempfile
import time
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from compare import accept_one, raw_connection, recv_exact, start_fastlog  # noqa: E402

from fastlog import _codec, protocol  # noqa: E402
from fastlog.compression import CODEC_NAMES  # noqa: E402
from fastlog.protocol import ApiKey  # noqa: E402

PROBE_TOPIC, BIG_TOPIC = "t", "big"
CODECS = {name: codec for codec, name in CODEC_NAMES.items() if codec}
WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf", b"hotel",
         b"india", b"juliet", b"kilo", b"lima", b"mike", b"november", b"oscar", b"papa"]
# A schedule this far behind (a probe process descheduled for long) restarts from now
# instead of sending the missed requests back to back.
MAX_BEHIND_S = 1.0


def _produce_request(topic: str, records_blob: bytes, client_id: str) -> bytes:
    """One framed Produce v8 request, acks=1, of one batch to partition 0 of topic."""
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": records_blob}]}]}
    return protocol.encode_request(ApiKey.PRODUCE, 8, 1, client_id, body, framed=True)


def _big_request(codec: int, records: int, size: int) -> bytes:
    """The load's request: a batch of text-like records (compresses ~4:1)."""
    rng = random.Random(size)
    values = []
    for _ in range(records):
        words = []
        n = 0
        while n < size:
            w = rng.choice(WORDS) + b"%d " % rng.randrange(1000)
            words.append(w)
            n += len(w)
        values.append(b"".join(words)[:size])
    now = int(time.time() * 1000)
    blob = _codec.build_batch([(now, None, v) for v in values], compression=codec)
    return _produce_request(BIG_TOPIC, blob, "large-produce")


def _probe_request(kind: str) -> tuple[bytes, int, int]:
    """(framed request, api key, version) of one probe request."""
    if kind in ("apiversions", "echo"):
        return (protocol.encode_request(ApiKey.API_VERSIONS, 0, 1, "probe", {}, framed=True),
                ApiKey.API_VERSIONS, 0)
    blob = _codec.build_batch([(int(time.time() * 1000), None, b"p" * 100)])
    return _produce_request(PROBE_TOPIC, blob, "probe"), ApiKey.PRODUCE, 8


def _recv_frame(s: socket.socket, view: memoryview) -> int:
    """One response into view (size prefix dropped); its length. Responses larger than
    the buffer are not expected from the probe's requests."""
    recv_exact(s, view, 4)
    size = struct.unpack_from(">i", view, 0)[0]
    if not 0 < size <= len(view):
        raise ConnectionError(f"a response of {size} bytes")
    recv_exact(s, view, size)
    return size


def _probe_main(port: int, kind: str, rate: int, out_path: str, ready, quit_) -> None:
    """Probe process: requests on a fixed schedule until quit_; writes (due, sent,
    answered) monotonic-clock triples to out_path."""
    gc.disable()
    request, api_key, version = _probe_request(kind)
    buf = bytearray(1 << 16)
    view = memoryview(buf)
    rows = array("d")
    period = 1.0 / rate
    clock, sleep = time.monotonic, time.sleep
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(request)
        n = _recv_frame(s, view)
        if kind == "echo":
            if bytes(view[:n]) != request[4:]:
                raise RuntimeError("the echo server answered other bytes")
        else:
            _, body = protocol.decode_response(api_key, version, bytes(view[:n]))
            code = (body.error_code if api_key == ApiKey.API_VERSIONS
                    else body.responses[0].partition_responses[0].error_code)
            if code:
                raise RuntimeError(f"the probe's first request answered error {code}")
        ready.set()
        due = clock()
        checks = 0
        while True:
            checks += 1
            if checks % 64 == 0 and quit_.is_set():
                break
            now = clock()
            if now < due:
                sleep(due - now)
            sent = clock()
            s.sendall(request)
            _recv_frame(s, view)
            done = clock()
            rows.extend((due, sent, done))
            due += period
            if done - due > MAX_BEHIND_S:
                due = done
    Path(out_path).write_bytes(rows.tobytes())


def _echo_main(port, ready) -> None:
    """Echo process (--probe echo): one connection, each frame sent back as it came; no
    broker work at all, so the probe measures what the load costs any process answering
    on this machine (the CPUs' run queues, loopback's softirq work), the floor under the
    broker's figures."""
    gc.disable()
    with accept_one(port, ready) as conn:
        view = memoryview(bytearray(1 << 16))
        while True:
            try:
                n = _recv_frame(conn, view[4:])
            except (ConnectionError, OSError):
                return
            struct.pack_into(">i", view, 0, n)
            conn.sendall(view[:4 + n])


def _load_main(port: int, request_path: str, active, idle, quit_, answered,
               nice: int, rate: float) -> None:
    """Load process: while `active` is set, large requests back to back (rate 0) or at
    most `rate` a second; `idle` is set whenever no request is outstanding; answered
    counts the responses."""
    if nice:
        os.nice(nice)
    period = 1.0 / rate if rate else 0.0
    request = Path(request_path).read_bytes()
    view = memoryview(bytearray(1 << 16))
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        idle.set()
        while not quit_.is_set():
            if not active.wait(0.05):
                continue
            idle.clear()
            due = time.monotonic()
            while active.is_set():
                if period:
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    due = max(due + period, time.monotonic() - period)
                s.sendall(request)
                _recv_frame(s, view)
                answered.value += 1
            idle.set()


def _latencies(flat: array) -> list[tuple[float, float, float, float]]:
    """(due, latency, round trip, probe lateness) per probe request from the probe's
    (due, sent, answered) triples. The latency is the round trip plus the wait behind the
    requests before it, as if each had been sent when due or when the one before it was
    answered, whichever is later (a queue replayed with the measured round trips): a
    stall delays every request due within it, while the probe's own late wake-ups (its
    lateness: the send after max(due, the previous answer)) count for nothing."""
    out = []
    wait, prev_due, prev_rtt, prev_done = 0.0, None, 0.0, 0.0
    for i in range(0, len(flat), 3):
        due, sent, done = flat[i], flat[i + 1], flat[i + 2]
        rtt = done - sent
        if prev_due is not None:
            wait = max(0.0, wait + prev_rtt - (due - prev_due))
        out.append((due, wait + rtt, rtt, sent - max(due, prev_done)))
        prev_due, prev_rtt, prev_done = due, rtt, done
    return out


def _stats(rows: list[tuple[float, float, float, float]]) -> dict:
    """Percentiles of one window's _latencies rows."""
    if not rows:
        return {"count": 0}
    lat = sorted(r[1] for r in rows)
    rtt = sorted(r[2] for r in rows)
    late = sorted(r[3] for r in rows)

    def q(xs, p):
        return round(xs[min(len(xs) - 1, int(p * len(xs)))] * 1000, 3)
    return {"count": len(lat), "p50_ms": q(lat, .5), "p99_ms": q(lat, .99),
            "p999_ms": q(lat, .999), "max_ms": round(lat[-1] * 1000, 3),
            "rtt_p50_ms": q(rtt, .5), "rtt_p99_ms": q(rtt, .99),
            "rtt_max_ms": round(rtt[-1] * 1000, 3), "probe_late_p99_ms": q(late, .99)}


def _cpu_some_s() -> float:
    """Seconds that some task of this machine waited for a CPU (/proc/pressure/cpu), 0
    where the kernel does not report it."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


def _sched_s(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a CPU) of the threads of pid, or of
    its thread tid only (/proc/PID/task/*/schedstat)."""
    cpu = wait = 0
    tasks = [Path(f"/proc/{pid}/task/{tid}")] if tid else Path(f"/proc/{pid}/task").iterdir()
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
            cpu += int(fields[0])
            wait += int(fields[1])
        except (OSError, ValueError, IndexError):
            pass   # a thread that ended meanwhile
    return cpu / 1e9, wait / 1e9


def run(opts, emit) -> dict:
    codec = CODECS[opts.codec]
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="fastlog-large-produce-") as tmp:
        request_path = Path(tmp) / "request"
        request_path.write_bytes(_big_request(codec, opts.batch_records, opts.record_size))
        batch_bytes = request_path.stat().st_size
        raw_bytes = opts.batch_records * opts.record_size
        samples_path = Path(tmp) / "samples"
        broker = start_fastlog(Path(tmp), "fastlog", tree=opts.tree,
                               extra=("log.segment.bytes=268435456", *opts.override))
        procs = []
        quit_ = ctx.Event()
        try:
            w = raw_connection(broker)
            try:
                for name, configs in ((PROBE_TOPIC, []), (BIG_TOPIC, [
                        ("max.message.bytes", str(64 << 20)),
                        ("retention.bytes", str(256 << 20)),
                        ("segment.bytes", str(64 << 20))])):
                    r = w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
                        "name": name, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": [{"name": k, "value": v}
                                                       for k, v in configs]}],
                        "timeout_ms": 60000, "validate_only": False})
                    if r.topics[0].error_code:
                        raise RuntimeError(f"creating {name}: error {r.topics[0].error_code}")
            finally:
                w.close()
            port = probe_port = int(broker.bootstrap.rsplit(":", 1)[1])
            if opts.probe == "echo":
                echo_port, echo_ready = ctx.RawValue("i", 0), ctx.Event()
                echo = ctx.Process(target=_echo_main, args=(echo_port, echo_ready),
                                   daemon=True)
                echo.start()
                procs.append(echo)
                if not echo_ready.wait(60):
                    raise RuntimeError("the echo server did not start within 60 s")
                probe_port = echo_port.value
            ready = ctx.Event()
            probe = ctx.Process(target=_probe_main, args=(
                probe_port, opts.probe, opts.rate, str(samples_path), ready, quit_), daemon=True)
            probe.start()
            procs.append(probe)
            active, answered = ctx.Event(), ctx.RawValue("q", 0)
            idles = []
            for _ in range(opts.streams):
                idle = ctx.Event()
                p = ctx.Process(target=_load_main, args=(
                    port, str(request_path), active, idle, quit_, answered, opts.load_nice,
                    opts.load_rate),
                    daemon=True)
                p.start()
                procs.append(p)
                idles.append(idle)
            if not ready.wait(60) or not all(i.wait(60) for i in idles):
                raise RuntimeError("the probe or the load did not connect within 60 s")
            time.sleep(opts.settle + 1.0)   # the probe's first-use costs
            windows = []
            for seg in range(opts.segments):
                for loaded in ((False, True) if seg % 2 == 0 else (True, False)):
                    if loaded:
                        active.set()
                    time.sleep(opts.settle)
                    n0, t0 = answered.value, time.monotonic()
                    p0, b0, l0 = (_cpu_some_s(), _sched_s(broker.pid),
                                  _sched_s(broker.pid, broker.pid))
                    time.sleep(opts.window)
                    n1, t1 = answered.value, time.monotonic()
                    b1, l1 = _sched_s(broker.pid), _sched_s(broker.pid, broker.pid)
                    span = t1 - t0
                    waits = ((_cpu_some_s() - p0) / span, (b1[1] - b0[1]) / span,
                             (b1[0] - b0[0]) / span, (l1[0] - l0[0]) / span)
                    if loaded:
                        active.clear()
                        for i in idles:
                            if not i.wait(120):
                                raise RuntimeError("a large request was not answered in 120 s")
                    windows.append((seg, loaded, t0, t1, n1 - n0, waits))
            quit_.set()
            probe.join(60)
            if probe.exitcode != 0:
                raise RuntimeError(f"the probe process ended with {probe.exitcode}")
            flat = array("d")
            flat.frombytes(samples_path.read_bytes())
        finally:
            quit_.set()
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
            broker.stop()
    rows = _latencies(flat)
    segments = []
    for seg in range(opts.segments):
        got = {}
        for s, loaded, t0, t1, n, (some, delay, cpu, loop_cpu) in windows:
            if s != seg:
                continue
            st = _stats([r for r in rows if t0 <= r[0] < t1])
            # the share of the window in which some task waited for a CPU, and the
            # broker's threads' waits for one (CPU seconds per second)
            st["cpu_some_pct"] = round(some * 100, 1)
            st["broker_run_delay_ms_per_s"] = round(delay * 1000, 1)
            # the broker's CPU (its own threads; the check workers are other processes)
            # and its request loop's (the main thread), ms per second
            st["broker_cpu_ms_per_s"] = round(cpu * 1000, 1)
            st["loop_cpu_ms_per_s"] = round(loop_cpu * 1000, 1)
            if loaded:
                st["large_requests"] = n
                st["large_raw_mb_per_s"] = round(n * raw_bytes / (t1 - t0) / 1e6, 1)
            got["loaded" if loaded else "quiet"] = st
        q, lo = got["quiet"], got["loaded"]
        per_request = opts.window / max(lo["large_requests"], 1)
        seg_row = {"segment": seg, "quiet": q, "loaded": lo,
                   # what one large request added to the loop's and the broker's CPU
                   "loop_cpu_ms_per_large": round(
                       (lo["loop_cpu_ms_per_s"] - q["loop_cpu_ms_per_s"]) * per_request, 2),
                   "broker_cpu_ms_per_large": round(
                       (lo["broker_cpu_ms_per_s"] - q["broker_cpu_ms_per_s"]) * per_request, 2),
                   "p99_ratio": round(lo["p99_ms"] / max(q["p99_ms"], 1e-3), 2),
                   "rtt_p99_ratio": round(lo["rtt_p99_ms"] / max(q["rtt_p99_ms"], 1e-3), 2)}
        segments.append(seg_row)
        emit(seg_row)

    def med(key, kind):
        return round(statistics.median(s[kind][key] for s in segments), 3)
    ratios = [s["p99_ratio"] for s in segments]
    rtt_ratios = [s["rtt_p99_ratio"] for s in segments]
    summary = {
        "tree": str(opts.tree or "."), "probe": opts.probe, "codec": opts.codec,
        "batch_bytes": batch_bytes, "batch_raw_bytes": raw_bytes, "streams": opts.streams,
        "segments": opts.segments, "window_s": opts.window, "load_rate": opts.load_rate,
        "quiet_p50_ms": med("p50_ms", "quiet"), "quiet_p99_ms": med("p99_ms", "quiet"),
        "loaded_p50_ms": med("p50_ms", "loaded"), "loaded_p99_ms": med("p99_ms", "loaded"),
        "quiet_rtt_p99_ms": med("rtt_p99_ms", "quiet"),
        "quiet_probe_late_p99_ms": med("probe_late_p99_ms", "quiet"),
        "quiet_cpu_some_pct": med("cpu_some_pct", "quiet"),
        "loaded_rtt_p99_ms": med("rtt_p99_ms", "loaded"),
        "large_raw_mb_per_s": med("large_raw_mb_per_s", "loaded"),
        "loop_cpu_ms_per_large": round(statistics.median(
            s["loop_cpu_ms_per_large"] for s in segments), 2),
        "broker_cpu_ms_per_large": round(statistics.median(
            s["broker_cpu_ms_per_large"] for s in segments), 2),
        "p99_ratio": round(statistics.median(ratios), 2),
        "p99_ratio_range": [min(ratios), max(ratios)],
        "rtt_p99_ratio": round(statistics.median(rtt_ratios), 2),
        "rtt_p99_ratio_range": [min(rtt_ratios), max(rtt_ratios)]}
    emit(summary)
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codec", default="gzip", choices=sorted(CODECS),
                    help="codec of the large batches (default gzip)")
    ap.add_argument("--batch-records", type=int, default=20_000,
                    help="records per large batch (default 20,000)")
    ap.add_argument("--record-size", type=int, default=1000,
                    help="bytes per record of the large batches (default 1000)")
    ap.add_argument("--streams", type=int, default=1,
                    help="connections sending large batches (default 1)")
    ap.add_argument("--probe", default="produce", choices=("produce", "apiversions", "echo"),
                    help="the probe's request (default produce); echo: ApiVersions sent "
                         "to an echo process instead of the broker, the machine's floor "
                         "under the same load")
    ap.add_argument("--rate", type=int, default=1000, help="probe requests/s (default 1000)")
    ap.add_argument("--segments", type=int, default=6,
                    help="quiet and loaded window pairs (default 6)")
    ap.add_argument("--window", type=float, default=4.0,
                    help="seconds of each window (default 4)")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds between a change of load and the next window (default 0.5)")
    ap.add_argument("--nice", type=int, default=0,
                    help="added to this script's nice value, inherited by the broker, the "
                         "probe and the load (negative: before the machine's other work; "
                         "needs the privilege to raise priority)")
    ap.add_argument("--load-nice", type=int, default=0,
                    help="added to the load processes' nice value (e.g. 10: the large "
                         "producer's own CPU, on the broker's machine here, taken last)")
    ap.add_argument("--load-rate", type=float, default=0.0,
                    help="large requests a second per stream at most (default 0: back to "
                         "back, as fast as the broker answers)")
    ap.add_argument("--tree", type=Path, default=None,
                    help="run the broker of this built checkout instead")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config key for the run (repeatable), e.g. "
                         "num.network.threads=2")
    opts = ap.parse_args(argv)
    if (opts.batch_records < 1 or opts.record_size < 1 or not 1 <= opts.streams <= 16
            or not 1 <= opts.rate <= 20_000 or not 1 <= opts.segments <= 50
            or not 0.5 <= opts.window <= 120 or not 0 <= opts.settle <= 10
            or not -20 <= opts.nice <= 19 or not 0 <= opts.load_nice <= 19
            or not 0 <= opts.load_rate <= 1000
            or opts.batch_records * opts.record_size > (60 << 20)):
        print("large_produce_latency: --batch-records and --record-size must be positive, "
              "a batch at most 60 MiB of records, --streams 1 to 16, --rate 1 to 20,000, "
              "--segments 1 to 50, --window 0.5 to 120 s, --settle 0 to 10 s, --nice -20 to 19, --load-nice 0 to 19, "
              "--load-rate 0 to 1,000",
              file=sys.stderr)
        return 2
    if opts.tree is not None and not (opts.tree / "fastlog").is_dir():
        print(f"large_produce_latency: {opts.tree} is not a fastlog checkout", file=sys.stderr)
        return 2
    try:
        if opts.nice:
            os.nice(opts.nice)
        run(opts, lambda r: print(json.dumps(r), flush=True))
    except (RuntimeError, OSError) as exc:
        print(f"large_produce_latency: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
