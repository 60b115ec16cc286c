"""The network limits of a real fastlog-server process, each against the abuse that
found it missing, with a probe client checking that the broker still answers others:
many big unfinished frames (queued.max.request.bytes: RSS stays bounded), more
connections than the open-file limit allows (accepts pause, the broker's own files
still open), max.connections.per.ip and its overrides, max.connections over two
listeners (the inter-broker one exempt), connections.max.idle.ms, clients trickling a
request (fastlog.request.receive.timeout.ms) and queued.max.requests.

Every wait is bounded; bounds on time only detect a stall.
"""

import select
import socket
import struct
import threading
import time

import pytest

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import BrokerProcess, wait_until
from tests.server.wire import Wire, batch, fetch_body, healthy, produce

MiB = 1 << 20


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.fixture
def start_broker(tmp_path):
    made = []

    def make(overrides=None, limits=None):
        b = BrokerProcess(tmp_path / f"data{len(made)}", overrides, limits=limits)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        if b.alive():
            assert b.stop() == 0, b.log_tail()
        assert "Traceback" not in b.log_path.read_text(errors="replace"), b.log_tail()


def test_many_big_unfinished_frames_keep_rss_bounded(start_broker):
    # Ten connections each send most of a 32 MiB frame: unbounded, the broker would hold
    # over 300 MiB (measured: +366 MiB); with a 32 MiB pool, one frame is let in at a
    # time (measured: +111 MiB, the frame and the buffers it grew through).
    frame_max = 32 * MiB
    b = start_broker({"socket.request.max.bytes": str(frame_max),
                      "queued.max.request.bytes": str(frame_max)})
    pid = b.proc.pid
    rss_before = status_kib(pid, "VmRSS")
    socks = [socket.create_connection((b.host, b.port), timeout=10) for _ in range(10)]
    chunk = bytes(MiB)

    def send_most(s):
        s.settimeout(2.0)   # a muted connection's send stops here, by design
        try:
            s.sendall(struct.pack(">i", frame_max - 4))
            for _ in range(30):
                s.sendall(chunk)
        except OSError:
            pass

    threads = [threading.Thread(target=send_most, args=(s,), daemon=True) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert healthy(b)   # the probe is answered while the ten hold their frames
    peak = status_kib(pid, "VmHWM")
    for s in socks:
        s.close()
    grown_mib = (peak - rss_before) / 1024
    assert grown_mib < 200, f"broker RSS grew by {grown_mib:.0f} MiB"


def auto_create(w, topic):
    def ready():
        md = w.call(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
        return md.topics[0].error_code == Errors.NONE
    wait_until(ready, 10, what=f"topic {topic} created")


def test_connections_beyond_the_open_file_limit(start_broker):
    # The broker keeps 1024 files spare for new partitions, so it needs a limit above
    # that to start at all; the flood takes every descriptor it would give connections.
    b = start_broker({"offsets.topic.num.partitions": "1"}, limits={"nofile": "1400:1400"})
    probe = Wire(b)   # connected before the flood
    flood = []
    try:
        for _ in range(1450):
            flood.append(socket.create_connection((b.host, b.port), timeout=10))
        wait_until(lambda: "not accepting connections" in b.log_path.read_text(), 10,
                   what="accepts paused")
        # The broker keeps serving, and opens the files of a new topic.
        assert probe.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
        auto_create(probe, "fd-limit")
        assert produce(probe, "fd-limit", batch([b"v1", b"v2"])).error_code == 0
    finally:
        for s in flood:
            s.close()
    # The flood gone, new connections are accepted again.
    wait_until(lambda: _healthy_now(b), 15, what="a new connection served")
    probe.close()


def _healthy_now(b) -> bool:
    try:
        return healthy(b)
    except (OSError, AssertionError):
        return False


def test_max_connections_per_ip_and_overrides(start_broker):
    b = start_broker({"max.connections.per.ip": "2",
                      "max.connections.per.ip.overrides": "127.0.0.2:4"})
    kept = []
    for source, allowed in (("127.0.0.1", 2), ("127.0.0.2", 4)):
        results = []
        for _ in range(allowed + 1):
            s = socket.create_connection((b.host, b.port), timeout=5,
                                         source_address=(source, 0))
            kept.append(s)
            w = Wire.__new__(Wire)
            w.sock, w.cid = s, 0
            try:
                w.send(ApiKey.API_VERSIONS, 2, {})
                results.append(w.recv_frame() is not None)
            except OSError:
                results.append(False)
        assert results == [True] * allowed + [False], (source, results)
    log = b.log_path.read_text()
    assert "refusing connection from 127.0.0.1" in log and "max.connections.per.ip" in log
    for s in kept:
        s.close()


def _api_versions_answered(s: socket.socket, wait: float) -> bool:
    """Send ApiVersions on s; True when answered within `wait` seconds."""
    w = Wire.__new__(Wire)
    w.sock, w.cid = s, 0
    w.send(ApiKey.API_VERSIONS, 2, {})
    s.settimeout(wait)
    try:
        return w.recv_frame() is not None
    except TimeoutError:
        return False
    finally:
        s.settimeout(10)


def test_max_connections_counts_both_listeners_and_exempts_the_inter_broker_one(
        start_broker):
    b = start_broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "max.connections": "3"})
    client, internal = b.ports["PLAINTEXT"], b.ports["INTERNAL"]

    def connect(port):
        return socket.create_connection((b.host, port), timeout=10)

    oldest = connect(client)
    assert _api_versions_answered(oldest, 10)
    time.sleep(0.2)
    others = [connect(client), connect(internal)]
    for s in others:
        assert _api_versions_answered(s, 10)
    # three open over the two listeners: a fourth client connection waits, unserved
    waiting = connect(client)
    w = Wire.__new__(Wire)
    w.sock, w.cid = waiting, 0
    w.send(ApiKey.API_VERSIONS, 2, {})
    waiting.settimeout(1.0)
    with pytest.raises(TimeoutError):
        waiting.recv(1)
    # the inter-broker listener still accepts; the least recently active client
    # connection is closed to make room, the more recent one stays
    broker_conn = connect(internal)
    assert _api_versions_answered(broker_conn, 10)
    oldest.settimeout(10)
    try:
        assert oldest.recv(1) == b""
    except ConnectionResetError:
        pass
    assert _api_versions_answered(others[0], 10)
    # a connection closes: the waiting one is accepted and answered
    broker_conn.close()
    waiting.settimeout(10)
    w.sock = waiting
    assert w.recv_frame() is not None
    log = b.log_path.read_text()
    assert "max.connections" in log and "least recently active" in log
    for s in others + [waiting]:
        s.close()


def test_a_listener_max_connections_limits_that_listener_only(start_broker):
    b = start_broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.plaintext.max.connections": "1"})
    first = socket.create_connection((b.host, b.port), timeout=10)
    assert _api_versions_answered(first, 10)
    second = socket.create_connection((b.host, b.port), timeout=10)
    assert not _api_versions_answered(second, 1.0)   # waits: the listener is full
    internal = [socket.create_connection((b.host, b.ports["INTERNAL"]), timeout=10)
                for _ in range(2)]
    for s in internal:
        assert _api_versions_answered(s, 10)
    first.close()
    second.settimeout(10)
    w = Wire.__new__(Wire)
    w.sock, w.cid = second, 1
    assert w.recv_frame() is not None   # accepted once the first closed, then answered
    for s in internal + [second]:
        s.close()


def test_idle_connections_are_closed(start_broker):
    b = start_broker({"connections.max.idle.ms": "1000"})
    idle = [socket.create_connection((b.host, b.port), timeout=10) for _ in range(20)]
    for s in idle:
        assert _api_versions_answered(s, 10)
    busy = socket.create_connection((b.host, b.port), timeout=10)
    end = time.monotonic() + 3.0
    while time.monotonic() < end:   # requests keep it from being idle
        assert _api_versions_answered(busy, 10)
        time.sleep(0.2)
    for s in idle:
        s.settimeout(10)
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass
    assert _api_versions_answered(busy, 10)
    busy.close()


def test_trickling_clients_are_closed_by_the_receive_deadline(start_broker):
    b = start_broker({"fastlog.request.receive.timeout.ms": "1000"})
    tricklers = [socket.create_connection((b.host, b.port), timeout=5) for _ in range(20)]
    data = struct.pack(">i", 200) + bytes(200)
    open_ = set(tricklers)
    deadline = time.monotonic() + 15
    i = 0
    while open_ and time.monotonic() < deadline:
        for s in list(open_):
            try:
                s.sendall(data[i:i + 1])
            except OSError:
                open_.discard(s)
                continue
            readable, _, _ = select.select([s], [], [], 0)
            if readable:
                try:
                    gone = s.recv(1) == b""
                except OSError:
                    gone = True
                if gone:
                    open_.discard(s)
        i = min(i + 1, len(data) - 2)   # never the last byte: the request never completes
        assert _healthy_now(b)           # others are answered meanwhile
        time.sleep(0.2)
    assert not open_, f"{len(open_)} trickling connections still open"
    for s in tricklers:
        s.close()
    assert "fastlog.request.receive.timeout.ms" in b.log_path.read_text()


def test_parked_fetches_do_not_hold_back_other_requests(start_broker):
    """queued.max.requests counts requests waiting for their handler, as Kafka's request
    queue: long-polling fetches beyond it leave every other client served."""
    b = start_broker({"queued.max.requests": "2"})
    w0 = Wire(b)
    auto_create(w0, "queued")
    assert produce(w0, "queued", batch([b"x"])).error_code == 0   # auto-created
    w0.close()
    fetchers = [Wire(b) for _ in range(3)]
    for w in fetchers:   # parked: nothing past offset 1 arrives within max_wait_ms
        w.send(ApiKey.FETCH, 11, fetch_body("queued", 1, max_wait_ms=2000))
    time.sleep(0.3)
    probe = Wire(b)
    probe.send(ApiKey.API_VERSIONS, 2, {})
    order = []
    names = ["f1", "f2", "f3", "probe"]
    pending = {w.sock: name for w, name in zip(fetchers + [probe], names, strict=True)}
    wires = {w.sock: w for w in fetchers + [probe]}
    deadline = time.monotonic() + 15
    while pending and time.monotonic() < deadline:
        readable, _, _ = select.select(list(pending), [], [], 0.5)
        for s in readable:
            assert wires[s].recv_frame() is not None
            order.append(pending.pop(s))
    assert not pending, f"not answered: {sorted(pending.values())}"
    assert order[0] == "probe", order   # answered while the three fetches stay parked
    for w in fetchers + [probe]:
        w.close()
    assert healthy(b)
