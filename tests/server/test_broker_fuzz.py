"""Bounded live-socket fuzz: frames with a valid header for every served (api, version)
and a random body (some random, some a real request with random bytes flipped). The
broker must answer or close each, never crash, never log a handler failure, and keep
serving a well-behaved connection."""

import random
import socket
import struct

from fastlog import protocol
from fastlog.protocol import ApiKey
from tests.server.wire import Wire, batch, create_topic, healthy, produce

SEED = 20261121
FRAMES_PER_VERSION = 4


def _frames(rng):
    topic_req = {
        ApiKey.METADATA: {"topics": [{"name": "fz"}]},
        ApiKey.PRODUCE: {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                         "topic_data": [{"name": "fz", "partition_data": [
                             {"index": 0, "records": batch([b"fuzz" * 20])}]}]},
        ApiKey.LIST_OFFSETS: {"replica_id": -1, "topics": [
            {"name": "fz", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        ApiKey.WRITE_TXN_MARKERS: {"markers": [{
            "producer_id": 1, "producer_epoch": 0, "transaction_result": False,
            "coordinator_epoch": 0, "topics": [{"name": "fz", "partition_indexes": [0]}]}]},
        ApiKey.DESCRIBE_PRODUCERS: {"topics": [{"name": "fz", "partition_indexes": [0]}]},
    }
    for key, (lo, hi) in sorted(protocol.SUPPORTED_VERSIONS.items()):
        for version in range(lo, hi + 1):
            for i in range(FRAMES_PER_VERSION):
                header = struct.pack(">hhih", int(key), version, rng.randrange(1 << 31), 2) + b"fz"
                if protocol.REQUESTS[key].is_flexible(version):
                    header += b"\x00"
                if i % 2 == 0 or key not in topic_req:
                    yield header + rng.randbytes(rng.randrange(0, 120))
                else:
                    # a real request with a few bits of its body flipped
                    good = bytearray(protocol.encode_request(key, version, 1, "fz",
                                                             topic_req[key]))
                    for _ in range(rng.randrange(1, 4)):
                        pos = rng.randrange(len(header), len(good))
                        good[pos] ^= 1 << rng.randrange(8)
                    yield bytes(good)


def test_random_bodies_never_crash_the_broker(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    create_topic(b, "fz")
    rng = random.Random(SEED)
    sock = None
    sent = answered = 0
    for frame in _frames(rng):
        if sock is None:
            sock = socket.create_connection((b.host, b.port), timeout=5)
        try:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            head = sock.recv(4)
            if len(head) == 4:
                answered += 1
                (size,) = struct.unpack(">i", head)
                left = size
                while left > 0:
                    chunk = sock.recv(min(left, 65536))
                    if not chunk:
                        break
                    left -= len(chunk)
            else:
                sock.close()
                sock = None
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            sock.close()
            sock = None
        sent += 1
    if sock is not None:
        sock.close()
    assert sent > 300
    assert 0 < answered < sent  # some frames were answered, the undecodable ones closed
    assert b.alive()
    assert healthy(b)
    w = Wire(b)
    assert produce(w, "fz", batch([b"still fine"])).error_code == 0
    w.close()
    log = b.log_path.read_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 500:][:3000]
