"""Requests that would cost the broker more than it could ever honour: a real broker under
a memory cap (prlimit --as) must refuse them with Kafka's error code, keep answering a
probe connection meanwhile, and log no traceback. Also the produce checks' order (cheap
structural rules before any decompression) and the large batches checked off the loop."""

import gzip
import random
import threading
import time

import pytest

from fastlog import _codec
from fastlog.compression import CODEC_NAMES
from fastlog.protocol import ApiKey, Errors
from fastlog.testing import BrokerProcess
from tests.server.wire import Wire, batch, create_topic, fetch_body, healthy, produce

# Address space for the capped broker: its threads' stacks and libraries fit easily; the
# 2**31-1 replica lists the old CreatePartitions built (22 GB) would not.
MEMORY_CAP = 3 << 30
INT32_MAX = (1 << 31) - 1


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("capped") / "data", limits={"as": MEMORY_CAP})
    b.start()
    yield b
    if b.alive():
        b.stop()


def _no_traceback(b):
    text = b.log_path.read_text(errors="replace")
    assert "Traceback" not in text and "MemoryError" not in text, b.log_tail()


def _probe_while(b, fn):
    """Run fn() on a thread while a probe connection asks ApiVersions+Metadata over and
    over; returns fn's result and the number of probe round trips answered."""
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", fn()), daemon=True)
    t.start()
    answered = 0
    deadline = time.monotonic() + 60
    while t.is_alive() and time.monotonic() < deadline:
        assert healthy(b)
        answered += 1
    t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not t.is_alive(), "the hostile request got no answer within 60 s"
    assert healthy(b)
    return result["r"], answered + 1


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_partitions_with_int32_max_count_is_refused(capped, validate_only):
    topic = f"grow-huge-{int(validate_only)}"
    create_topic(capped, topic)

    def grow():
        w = Wire(capped)
        try:
            return w.call(ApiKey.CREATE_PARTITIONS, 1, {
                "topics": [{"name": topic, "count": INT32_MAX, "assignments": None}],
                "timeout_ms": 10000, "validate_only": validate_only}).results[0]
        finally:
            w.close()

    r, _ = _probe_while(capped, grow)
    assert r.error_code == Errors.INVALID_PARTITIONS
    assert "partitions" in r.error_message
    assert capped.alive()
    _no_traceback(capped)


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_with_int32_max_partitions_is_refused(capped, validate_only):
    def create():
        w = Wire(capped)
        try:
            return w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
                "name": f"huge-{int(validate_only)}", "num_partitions": INT32_MAX,
                "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout_ms": 10000, "validate_only": validate_only}).topics[0]
        finally:
            w.close()

    r, _ = _probe_while(capped, create)
    assert r.error_code == Errors.INVALID_PARTITIONS
    w = Wire(capped)
    try:
        meta = w.call(ApiKey.METADATA, 4, {"topics": [{"name": f"huge-{int(validate_only)}"}],
                                           "allow_auto_topic_creation": False})
        assert meta.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        w.close()
    _no_traceback(capped)


def _garbage_payload_batch(codec: int, size: int) -> bytes:
    """A batch whose header and CRC are right but whose compressed records are noise:
    only decompressing it can find the problem."""
    good = bytearray(batch([b"x" * 100], compression=codec))
    body = bytes((i * 131 + 7) & 0xFF for i in range(size))
    out = bytearray(good[:61]) + body
    out[8:12] = (len(out) - 12).to_bytes(4, "big")
    out[17:21] = _codec.crc32c(bytes(out[21:])).to_bytes(4, "big")
    return bytes(out)


@pytest.mark.parametrize("codec", [1, 4])   # gzip, zstd
def test_many_batches_are_refused_before_any_is_decompressed(capped, codec):
    topic = f"many-{codec}"
    create_topic(capped, topic)
    one = _garbage_payload_batch(codec, 2000)
    w = Wire(capped)
    try:
        # Decompressed first, the noise would be refused as bad gzip/zstd data; the
        # one-batch rule, checked on the headers alone, comes first.
        r = produce(w, topic, one * 200, version=8, acks=1)
        assert r.error_code == Errors.INVALID_RECORD
        assert "one batch per partition" in r.error_message
        # A single such batch is decompressed, and refused for its content.
        r = produce(w, topic, one, version=8, acks=1)
        assert r.error_code == Errors.INVALID_RECORD
        assert f"invalid {CODEC_NAMES[codec]} data" in r.error_message
    finally:
        w.close()
    assert healthy(capped)


def _big_gzip_batch(records: int, value_size: int) -> bytes:
    rng = random.Random(records)
    return batch([rng.randbytes(value_size) for _ in range(records)], compression=1)


def test_large_compressed_batches_are_checked_and_stored(capped):
    """A batch over the inline bounds (3 MB of random values: gzip cannot shrink them)
    goes through the verification pool: appended when good, refused when not."""
    topic = "big-gzip"
    create_topic(capped, topic, configs={"max.message.bytes": str(16 << 20)})
    big = _big_gzip_batch(2500, 1200)
    assert len(big) > (1 << 20)
    w = Wire(capped)
    try:
        r = produce(w, topic, big, acks=1)
        assert r.error_code == Errors.NONE and r.base_offset == 0
        r = produce(w, topic, _garbage_payload_batch(1, 3 << 20), version=8, acks=1)
        assert r.error_code == Errors.INVALID_RECORD
        assert "invalid gzip data" in r.error_message
        r = produce(w, topic, batch([b"after"]), acks=1)
        assert r.error_code == Errors.NONE and r.base_offset == 2500
    finally:
        w.close()


def test_small_batch_that_inflates_is_checked_off_the_loop(capped):
    """A few KiB of gzip that inflate to 48 MiB of records: checked (on the pool) and
    stored, while the probe keeps being answered."""
    topic = "inflating"
    create_topic(capped, topic, configs={"max.message.bytes": str(16 << 20)})
    records = [(0, None, b"\0" * (1 << 20)) for _ in range(48)]
    bomb = _codec.build_batch(records, compression=1)
    assert len(bomb) < (1 << 20)
    assert len(gzip.decompress(bomb[61:])) > (32 << 20)   # far past the inline bound

    def send():
        w = Wire(capped)
        try:
            return [produce(w, topic, bomb, acks=1).error_code for _ in range(3)]
        finally:
            w.close()

    codes, answered = _probe_while(capped, send)
    assert codes == [Errors.NONE] * 3
    assert answered >= 1
    _no_traceback(capped)


def test_large_batch_recompressed_for_the_topic_on_the_pool(capped):
    """A topic with compression.type=zstd stores a large uncompressed batch compressed
    (on the verification pool); consumers read the same records back."""
    topic = "recompress-zstd"
    create_topic(capped, topic, configs={"compression.type": "zstd",
                                         "max.message.bytes": str(16 << 20)})
    values = [(b"%06d " % i) * 150 for i in range(400)]   # ~420 KB uncompressed
    w = Wire(capped)
    try:
        r = produce(w, topic, batch(values), acks=1)
        assert r.error_code == Errors.NONE
        resp = w.call(ApiKey.FETCH, 11, fetch_body(topic, 0, 100))
        blob = resp.responses[0].partitions[0].records
        header = _codec.read_batch_header(blob)
        assert header.compression == 4
        assert [rec.value for rec in _codec.iter_records(blob)] == values
    finally:
        w.close()
