"""LogVerifier: the background CRC check of sealed segments finds a flipped byte on disk,
records the corrupt range once, and Log.read never serves it; the broker answers
KAFKA_STORAGE_ERROR for a fetch of it and logs it (a real broker, real files)."""

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from fastlog._codec import read_batch_header
from fastlog.protocol import ApiKey, Errors
from fastlog.server.log import CorruptSegmentError, LogVerifier
from fastlog.testing import BrokerProcess
from tests.server.log.conftest import append_n, open_log, read_all
from tests.server.wire import Wire, fetch_body


def flip(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x40]))


def batch_at(log, seg, n):
    """(position, BatchHeader) of the n-th batch of a segment."""
    for chunk in seg.batches():
        if n < len(chunk):
            return chunk[n]
        n -= len(chunk)
    raise IndexError(n)


@pytest.fixture
def log(tmp_path):
    lg = open_log(tmp_path / "v-0", segment_bytes=600, index_interval_bytes=100)
    append_n(lg, 30, records=2, value_size=20)
    assert lg.num_segments >= 3
    yield lg
    lg.close()


def test_a_flipped_payload_byte_is_found_once_and_never_served(log):
    seg = log.segments[1]
    h = batch_at(log, seg, 2)
    flip(seg.log_path, h.position + h.size - 3)  # inside the last record
    verifier = LogVerifier(lambda: [log], 1000, 1 << 30)
    assert verifier.run_pass() == 1
    assert log.corrupt_ranges == [(seg.base_offset, h.position, h.end)]
    assert verifier.stats["corrupt_batches"] == 1 and verifier.stats["passes"] == 1
    assert verifier.stats["bytes"] == sum(s.size for s in log.segments[:-1])
    verifier.run_pass()
    assert verifier.stats["corrupt_batches"] == 1  # known ranges are not counted again
    with pytest.raises(CorruptSegmentError):
        log.read(h.base_offset, 1 << 20)
    with pytest.raises(CorruptSegmentError):
        log.read(h.last_offset, 1 << 20)
    # A read that starts before the range stops at it; one after it is served.
    first = log.read(seg.base_offset, 1 << 20)
    assert first.regions[0].position + first.size == h.position
    after = read_all(log, h.next_offset)
    assert after[0][0] == h.next_offset and after[-1][0] < log.log_end_offset


def test_a_flipped_base_offset_is_found_by_the_offset_order(log):
    # The base offset lies outside the CRC: only the order of offsets tells.
    seg = log.segments[0]
    h = batch_at(log, seg, 1)
    flip(seg.log_path, h.position + 7)
    assert read_batch_header(open(seg.log_path, "rb").read(), h.position).base_offset != \
        h.base_offset
    assert LogVerifier(lambda: [log], 1000, 1 << 30).run_pass() == 1
    assert log.corrupt_ranges == [(0, h.position, h.end)]


def test_a_broken_length_makes_the_rest_of_the_segment_corrupt(log):
    seg = log.segments[0]
    h = batch_at(log, seg, 1)
    flip(seg.log_path, h.position + 8)  # the length's high byte: 1 GiB declared
    assert LogVerifier(lambda: [log], 1000, 1 << 30).run_pass() == 1
    assert log.corrupt_ranges == [(0, h.position, seg.size)]


def test_broker_answers_storage_error_for_a_corrupt_batch(tmp_path):
    b = BrokerProcess(tmp_path / "data", {
        "offsets.topic.num.partitions": "1", "log.segment.bytes": "2048",
        "fastlog.log.verification.interval.ms": "200",
        "fastlog.log.verification.bytes.per.sec": str(64 << 20)})
    with b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("verify", 1, 1)])["verify"].result(15)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(40):
            p.produce("verify", value=b"value-%03d" % i * 8, partition=0)
            assert p.flush(15) == 0
        seg0 = b.data_dir / "verify-0" / "00000000000000000000.log"
        data = seg0.read_bytes()
        h = read_batch_header(data, 0)
        flip(seg0, h.end - 5)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "is corrupt" not in b.log_path.read_text():
            time.sleep(0.2)
        assert "verify-0: segment 0 is corrupt at bytes 0.." in b.log_path.read_text()
        w = Wire(b)
        try:
            resp = w.call(ApiKey.FETCH, 11, fetch_body("verify", 0, 0))
            part = resp.responses[0].partitions[0]
            assert part.error_code == Errors.KAFKA_STORAGE_ERROR
            assert not part.records
            # The rest of the log is served as before.
            resp = w.call(ApiKey.FETCH, 11, fetch_body("verify", h.last_offset + 1, 0))
            part = resp.responses[0].partitions[0]
            assert part.error_code == Errors.NONE and part.records
        finally:
            w.close()
        assert "fetch at offset 0 refused" in b.log_path.read_text()
