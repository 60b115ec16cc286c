"""What a /metrics scrape costs a broker hosting many partitions, and whether it delays
the request loop.

Starts one fastlog-server (http.listener on a free port; it lifts its soft open-file
limit to the hard one, and each written partition keeps its .log open, so the hard limit
bounds --partitions), creates one topic with --partitions partitions, produces one record
to each,
commits an offset for each in one group (so the lag series are as many as the
partitions), then:
  - scrapes /metrics --scrapes times from a child process of its own (so reading the
    bodies never competes with the probe for this process's interpreter lock), on one
    HTTP connection kept open from scrape to scrape as Prometheus keeps it
    (--new-connections: a new one per scrape, as curl makes them; accepting it is Python
    work on the HTTP thread that the scrape's breaks do not reach); per scrape, the wall
    time of the GET, the broker's CPU (the run time of its threads in
    /proc/PID/task/*/schedstat, nanoseconds, around it), of it the HTTP thread's (the
    busiest thread but the loop's: an upper bound on the scrape's hold of the
    interpreter lock) and the body's size;
  - meanwhile a probe sends round trips on one connection, 2 ms apart (--probe: a Produce
    of one record with acks=1, the default, a Fetch of one partition, or ApiVersions); their
    latencies while scraping (the whole window, 0.5 s between scrapes included, and the
    round trips that overlapped a scrape's GET) are compared with the same probe's
    without scrapes, and (in the same window, so other work on the machine weighs on
    both alike) the round trips that overlapped a GET with those between the GETs;
  - the anchor (unless --no-anchor): 0.25 s after each scrape the child makes the same
    GET of a null server, another process that spends the CPU the broker's HTTP thread
    just spent on the scrape (a copy of the body, then a busy loop on its own CPU clock)
    and then sends the same body. The machine does the same work at the same moment,
    only outside the broker's process: the probes that overlapped a null scrape show
    what any scrape's CPU and bytes cost the probe on this machine (two cores, shared),
    and the probes that overlapped the broker's scrapes, compared with them, what the
    broker's own scrape adds (its hold of the interpreter lock the request loop needs).
Prints one row per scrape and a JSON line of medians, with a 95% bootstrap interval of
each in-scrape vs null ratio (an interval holding 1: the run does not tell the broker's
scrape from the null one). --tree runs another built checkout's broker instead of this
one (an A/B of two trees; alternate the runs).

    .venv/bin/python perf/metrics_scrape.py [--partitions 10000] [--scrapes 5] [--tree DIR]
                                            [--probe produce|fetch|apiversions] [--no-anchor]
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastlog import _codec  # noqa: E402
from fastlog.protocol import ApiKey, Errors  # noqa: E402
from fastlog.testing import BrokerProcess, Wire, _free_port  # noqa: E402

NL = b"\n"
# Wall clock shared by this process and its scraper child (both read CLOCK_MONOTONIC).
_CLOCK = time.CLOCK_MONOTONIC


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time (ns) of each thread of process `pid` (a thread gone meanwhile: left out)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return out


def scrape_cpu(before: dict[int, int], after: dict[int, int], pid: int) -> tuple[float, float]:
    """The broker's CPU seconds between two thread_cpu_ns readings, and of it the busiest
    thread's other than the main one (the request loop's): the HTTP thread that served the
    scrape. That thread's CPU bounds from above how long the scrape held the interpreter
    lock (it includes the text written and the body sent with the lock released)."""
    spent = {tid: ns - before.get(tid, 0) for tid, ns in after.items()}
    return (sum(spent.values()) / 1e9,
            max((ns for tid, ns in spent.items() if tid != pid), default=0) / 1e9)


def probe_call(kind: str):
    """The probe's round trip on a Wire: `kind` "produce" (one 100-byte record, acks=1, to
    partition 0), "fetch" (partition 1 from offset 0, at most 1 KiB, no wait) or
    "apiversions"; each asserts its answer carries no error."""
    if kind == "apiversions":
        return lambda w: w.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
    if kind == "fetch":
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1024,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": "many", "partitions": [{
                    "partition": 1, "current_leader_epoch": -1, "fetch_offset": 0,
                    "log_start_offset": -1, "partition_max_bytes": 1024}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        return lambda w: w.call(ApiKey.FETCH, 11, body).responses[0].partitions[0] \
            .error_code == 0

    def produce(w):
        records = bytes(_codec.build_batch([(int(time.time() * 1000), None, b"p" * 100)]))
        r = w.call(ApiKey.PRODUCE, 7, {
            "transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [{
                "name": "many", "partition_data": [{"index": 0, "records": records}]}]})
        return r.responses[0].partition_responses[0].error_code == 0
    return produce


def probe(w: Wire, stop: threading.Event, out: list[float], spans=None,
          kind: str = "produce") -> None:
    """Round trips of probe_call(kind) until `stop`: their latencies (ms) in `out`, and
    their (start, end) CLOCK_MONOTONIC times in `spans` when given."""
    call = probe_call(kind)
    while not stop.is_set():
        t0 = time.clock_gettime(_CLOCK)
        assert call(w)
        t1 = time.clock_gettime(_CLOCK)
        out.append((t1 - t0) * 1000)
        if spans is not None:
            spans.append((t0, t1))
        time.sleep(0.002)


def probe_window(w: Wire, seconds: float, kind: str) -> list[float]:
    stop, lat = threading.Event(), []
    t = threading.Thread(target=probe, args=(w, stop, lat, None, kind))
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join(10)
    return lat


class Scraper:
    """GETs of one server's URL, as Prometheus makes them: on one connection kept open
    from one scrape to the next (HTTP/1.1 keep-alive), or with `fresh` a new connection
    for each (as curl or urllib make them)."""

    def __init__(self, url: str, fresh: bool = False):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path or "/"
        self.fresh = fresh
        self.conn: http.client.HTTPConnection | None = None

    def body(self, query: str = "") -> bytes:
        if self.conn is None or self.fresh:
            if self.conn is not None:
                self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        self.conn.request("GET", self.path + query)
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"GET {self.path}{query}: {r.status}")
        return body


def get(scraper: Scraper, pid: int, kind: str, query: str = "") -> list:
    """One GET of the scraper's URL (with `query`), timed: [its start (CLOCK_MONOTONIC),
    wall time, the CPU process `pid` used meanwhile and of it the busiest thread's but the
    main one's (scrape_cpu), the body's size and lines, `kind`]."""
    c0, t0 = thread_cpu_ns(pid), time.clock_gettime(_CLOCK)
    body = scraper.body(query)
    wall = time.clock_gettime(_CLOCK) - t0
    cpu, http_cpu = scrape_cpu(c0, thread_cpu_ns(pid), pid)
    return [t0, wall, cpu, http_cpu, len(body), body.count(NL), kind]


def scraper(url: str, pid: int, scrapes: int, null_url: str, null_pid: int,
            fresh: bool) -> None:
    """The child process: `scrapes` GETs of `url`, 0.5 s apart, each printed as a JSON
    list (get); with a null server (null_pid > 0), 0.25 s after each, a GET of it asking
    for the CPU the broker's HTTP thread spent on that scrape, printed alike. `fresh`: a
    new connection for every GET (Scraper)."""
    broker = Scraper(url, fresh)
    null = Scraper(null_url, fresh) if null_pid > 0 else None
    for _ in range(scrapes):
        row = get(broker, pid, "broker")
        print(json.dumps(row), flush=True)
        if null is not None:
            time.sleep(0.25)
            print(json.dumps(get(null, null_pid, "null", f"?cpu_ns={int(row[3] * 1e9)}")),
                  flush=True)
            time.sleep(0.25)
        else:
            time.sleep(0.5)


class NullScrape(http.server.BaseHTTPRequestHandler):
    """The null server's answer to GET /?cpu_ns=N: a fresh copy of the body (the broker's,
    read once at the start: as many bytes written as the scrape writes), then a busy loop
    until its thread has spent N ns of CPU in all, then the body sent as /metrics sends
    it."""

    body = b""
    protocol_version = "HTTP/1.1"  # (keep-alive, as the broker serves /metrics)

    def do_GET(self):  # noqa: N802 (http.server's name)
        _, _, query = self.path.partition("?cpu_ns=")
        end = time.thread_time_ns() + int(query or 0)
        body = bytes(bytearray(self.body))  # (the text written once, as a scrape writes it)
        while time.thread_time_ns() < end:
            pass
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def null_server(port: int, body_path: str) -> None:
    """The null server's process: serves NullScrape on 127.0.0.1:`port` until killed."""
    NullScrape.body = Path(body_path).read_bytes()
    http.server.HTTPServer(("127.0.0.1", port), NullScrape).serve_forever()


def start_null_server(body: bytes, tmp: str) -> tuple[subprocess.Popen, str]:
    """The null server in a child process, serving `body`; its URL once it answers."""
    path = Path(tmp) / "body"
    path.write_bytes(body)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--null-server", str(port), str(path)])
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the null server did not start") from None
            time.sleep(0.05)


def quantile(xs: list[float], f: float) -> float:
    """The `f` quantile of `xs` (the value at that rank of the sorted samples; NaN for
    none)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")


def spread(xs: list[float], f: float) -> list[float]:
    """The median, the `f` quantile and the largest of `xs`, rounded (NaN for none)."""
    return [round(quantile(xs, .5), 2), round(quantile(xs, f), 2),
            round(max(xs, default=float("nan")), 2)]


def ratio_interval(xs: list[float], ys: list[float], f: float, rounds: int = 2000,
                   seed: int = 1) -> list[float] | None:
    """A 95% bootstrap interval of the ratio of the `f` quantile of `xs` to that of `ys`
    (each resampled with replacement, `rounds` times): an interval holding 1 means these
    samples do not tell the two apart."""
    if len(xs) < 10 or len(ys) < 10:
        return None
    rng = random.Random(seed)
    ratios = sorted(quantile(rng.choices(xs, k=len(xs)), f)
                    / quantile(rng.choices(ys, k=len(ys)), f) for _ in range(rounds))
    return [round(ratios[int(0.025 * rounds)], 2), round(ratios[int(0.975 * rounds) - 1], 2)]


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b > 0 and a == a and b == b else None


def main() -> int:
    if sys.argv[1:2] == ["--scraper"]:
        scraper(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
                int(sys.argv[6]), sys.argv[7] == "fresh")
        return 0
    if sys.argv[1:2] == ["--null-server"]:
        null_server(int(sys.argv[2]), sys.argv[3])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=5)
    ap.add_argument("--tree", type=Path, default=None,
                    help="run this built fastlog checkout's broker")
    ap.add_argument("--probe", choices=("produce", "fetch", "apiversions"),
                    default="produce", help="the probe's request (default produce)")
    ap.add_argument("--no-anchor", action="store_true",
                    help="no null server's scrapes beside the broker's")
    ap.add_argument("--new-connections", action="store_true",
                    help="a new HTTP connection for every scrape (default: one kept open, "
                         "as Prometheus keeps it)")
    args = ap.parse_args()
    if args.tree is not None:
        if not (args.tree / "fastlog").is_dir():
            print(f"metrics_scrape: {args.tree} is not a fastlog checkout", file=sys.stderr)
            return 2
        os.environ["PYTHONPATH"] = str(args.tree.resolve())
        # -P: not the current directory (a checkout too, maybe this one) before PYTHONPATH
        os.environ["FASTLOG_TEST_SERVER"] = f"{sys.executable} -P -m fastlog.cli.server"
    n = args.partitions
    http_port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", {
            "http.listener": f"127.0.0.1:{http_port}", "log.segment.bytes": str(1 << 20),
            "log.index.size.max.bytes": "4096", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "1"}, startup_timeout=60)
        b.start()
        try:
            w = Wire(b)
            w.sock.settimeout(600)  # creating thousands of partitions on a busy machine
            # opened first: with thousands of partitions the broker keeps its open files
            # for them and pauses accepting new connections (fastlog._net's file reserve)
            probe_wire = Wire(b)
            t0 = time.monotonic()
            resp = w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
                "name": "many", "num_partitions": n, "replication_factor": 1,
                "assignments": [], "configs": []}], "timeout_ms": 600_000,
                "validate_only": False})
            assert resp.topics[0].error_code == Errors.NONE, resp
            print(f"created {n} partitions in {time.monotonic() - t0:.1f} s", flush=True)
            one = bytes(_codec.build_batch([(int(time.time() * 1000), None, b"x")]))
            for start in range(0, n, 500):
                w.call(ApiKey.PRODUCE, 7, {
                    "transactional_id": None, "acks": 1, "timeout_ms": 30000,
                    "topic_data": [{"name": "many", "partition_data": [
                        {"index": i, "records": one} for i in range(start, min(n, start + 500))]}]})
            coord = w.call(ApiKey.FIND_COORDINATOR, 1, {"key": "lagging", "key_type": 0})
            assert coord.error_code == 0, coord
            for start in range(0, n, 1000):
                r = w.call(ApiKey.OFFSET_COMMIT, 2, {
                    "group_id": "lagging", "generation_id_or_member_epoch": -1,
                    "member_id": "", "retention_time_ms": -1, "topics": [{
                        "name": "many", "partitions": [
                            {"partition_index": i, "committed_offset": 0,
                             "committed_metadata": ""}
                            for i in range(start, min(n, start + 1000))]}]})
                assert all(p.error_code == 0 for p in r.topics[0].partitions)
            w.close()
            url = f"http://127.0.0.1:{http_port}/metrics"
            null, null_url = None, "-"
            if not args.no_anchor:
                with urllib.request.urlopen(url, timeout=120) as r:
                    null, null_url = start_null_server(r.read(), tmp)
            try:
                quiet = probe_window(probe_wire, 3.0, args.probe)
                stop, busy, spans = threading.Event(), [], []
                gets = {"broker": [], "null": []}
                scrapes = {"broker": [], "null": []}
                t = threading.Thread(target=probe,
                                     args=(probe_wire, stop, busy, spans, args.probe))
                t.start()
                child = subprocess.Popen(
                    [sys.executable, __file__, "--scraper", url, str(b.proc.pid),
                     str(args.scrapes), null_url, str(null.pid if null else 0),
                     "fresh" if args.new_connections else "kept"],
                    stdout=subprocess.PIPE, text=True)
                try:
                    for line in child.stdout:
                        t0, wall, cpu, http_cpu, size, lines, kind = json.loads(line)
                        gets[kind].append((t0, t0 + wall))
                        scrapes[kind].append((wall, cpu, size, http_cpu))
                        who = "broker" if kind == "broker" else "null server"
                        print(f"{kind} scrape {len(scrapes[kind]) - 1}: {wall * 1000:.1f} ms "
                              f"wall, {cpu * 1000:.1f} ms {who} CPU ({http_cpu * 1000:.1f} "
                              f"its busiest thread's but the main one's), {size / 1e6:.1f} "
                              f"MB, {lines} lines", flush=True)
                finally:
                    if child.wait(timeout=600) != 0:
                        raise RuntimeError(f"the scraper exited with {child.returncode}")
                stop.set()
                t.join(10)
                probe_wire.close()
            finally:
                if null is not None:
                    null.kill()
                    null.wait(10)
        finally:
            b.stop(timeout=120)

    during, in_null, between = [], [], []
    for (a, z), lat in zip(spans, busy, strict=False):
        if any(a < g1 and z > g0 for g0, g1 in gets["broker"]):
            during.append(lat)
        elif any(a < g1 and z > g0 for g0, g1 in gets["null"]):
            in_null.append(lat)
        else:
            between.append(lat)
    rows = scrapes["broker"]

    print(json.dumps({
        "partitions": n, "tree": str(args.tree or "."), "probe": args.probe,
        "connections": "new per scrape" if args.new_connections else "kept",
        "scrape_wall_ms_median": round(statistics.median(r[0] for r in rows) * 1000, 1),
        "scrape_broker_cpu_ms_median": round(statistics.median(r[1] for r in rows) * 1000, 1),
        "scrape_http_thread_cpu_ms_median": round(
            statistics.median(r[3] for r in rows) * 1000, 1),
        "body_mb": round(rows[-1][2] / 1e6, 2),
        "probe_ms_quiet_p50_p99_max": spread(quiet, .99),
        "probe_ms_scraping_p50_p99_max": spread(busy, .99),
        "probes_in_scrapes": len(during),
        "probe_ms_in_scrapes_p50_p90_max": spread(during, .9),
        "probe_ms_between_scrapes_p50_p90_max": spread(between, .9),
        **({} if args.no_anchor else {
            "probes_in_null_scrapes": len(in_null),
            "probe_ms_in_null_scrapes_p50_p90_max": spread(in_null, .9),
            # > 1: the broker's scrape delays the probe more than the same work done by
            # another process at the same moment
            "in_scrape_vs_null_p50": _ratio(quantile(during, .5), quantile(in_null, .5)),
            "in_scrape_vs_null_p90": _ratio(quantile(during, .9), quantile(in_null, .9)),
            "in_scrape_vs_null_p50_ci95": ratio_interval(during, in_null, .5),
            "in_scrape_vs_null_p90_ci95": ratio_interval(during, in_null, .9)}),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
