"""Cross-checks of fastlog's v2 batches against independent implementations: aiokafka's
compiled record code and kafka-python's pure-Python one. Batches we build must read back
identically in theirs, and theirs in ours, for every codec, with headers, null keys and
null values; plus the compression framings other clients send (raw snappy as librdkafka
writes it, xerial snappy, lz4 frames with FLG 0x60/0x68/0x70)."""

import struct

import cramjam
import lz4.frame
import pytest
from aiokafka.record import default_records as aio_records
from kafka.record import default_records as kp_records

from fastlog import _codec as c

CODECS = [c.COMPRESSION_NONE, c.COMPRESSION_GZIP, c.COMPRESSION_SNAPPY, c.COMPRESSION_LZ4,
          c.COMPRESSION_ZSTD]

RECORDS = [
    (1_700_000_000_000, b"k0", b"v0", []),
    (1_700_000_000_005, None, b"value with null key", [("h1", b"x"), ("h2", None)]),
    (1_699_999_999_999, b"key with null value", None, []),
    (1_700_000_000_001, b"", b"", [("", b"")]),
    (1_700_000_000_002, b"k" * 300, b"v" * 5000, [("ü-header", b"\x00\xff" * 10)]),
    (1_700_000_000_003, None, None, []),
]


def _as_tuples(records):
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
            for r in records]


def _expected(base_offset=0):
    return [(base_offset + i, ts, k, v, hs) for i, (ts, k, v, hs) in enumerate(RECORDS)]


def test_aiokafka_compiled_code_is_what_we_compare_with():
    assert aio_records.DefaultRecordBatch.__module__.endswith("_crecords.default_records")


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_read_by_aiokafka_and_kafka_python(codec):
    data = c.build_batch(RECORDS, compression=codec, base_offset=50, producer_id=9,
                         producer_epoch=1, base_sequence=4)
    aio = aio_records.DefaultRecordBatch(bytes(data))
    assert aio.validate_crc()
    assert (aio.compression_type, aio.producer_id, aio.base_sequence) == (codec, 9, 4)
    assert _as_tuples(aio) == _expected(50)
    kp = kp_records.DefaultRecordBatch(bytes(data))
    assert kp.validate_crc()
    assert _as_tuples(kp) == _expected(50)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("maker", ["aiokafka", "kafka-python"])
def test_their_batches_read_by_us(codec, maker):
    module = aio_records if maker == "aiokafka" else kp_records
    b = module.DefaultRecordBatchBuilder(2, codec, 0, 7, 2, 11, 1 << 24)
    for i, (ts, k, v, hs) in enumerate(RECORDS):
        b.append(i, ts, k, v, hs)
    data = bytes(b.build())
    h = c.validate_batch(data)
    assert h.compression == codec and h.record_count == len(RECORDS)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 11)
    c.validate_record_set(data, verify_records=True)
    assert _as_tuples(c.iter_records(data)) == _expected()
    assert _as_tuples(c.read_records(data)) == _expected()


def test_builder_fields_and_log_append_time():
    b = c.BatchBuilder(timestamp_type=c.TIMESTAMP_LOG_APPEND_TIME, base_offset=10,
                       partition_leader_epoch=3)
    assert b.append(5, b"a", b"b") == 0
    assert b.append(9, b"a", b"b") == 1
    assert b.record_count == 2 and b.size_in_bytes > c.BATCH_HEADER_SIZE
    data = b.build()
    h = c.validate_batch(data)
    assert (h.timestamp_type, h.max_timestamp, h.first_timestamp) == (1, 9, 5)
    assert h.partition_leader_epoch == 3
    # With log-append time every record carries the batch's max timestamp.
    assert [r.timestamp for r in c.iter_records(data)] == [9, 9]
    assert [r.timestamp_type for r in aio_records.DefaultRecordBatch(data)] == [1, 1]


def test_empty_builder_refuses_to_build():
    with pytest.raises(ValueError):
        c.BatchBuilder().build()


def test_control_batch_is_read_as_a_marker_by_aiokafka():
    data = c.build_control_batch(True, producer_id=5, producer_epoch=2, base_offset=77,
                                 timestamp=123, coordinator_epoch=4)
    h = c.validate_batch(data)
    assert h.is_control and h.is_transactional and h.record_count == 1
    aio = aio_records.DefaultRecordBatch(data)
    assert aio.is_control_batch
    (rec,) = list(c.iter_records(data))
    assert c.parse_control_record(rec) == (0, 1)
    assert rec.value == b"\x00\x00\x00\x00\x00\x04"
    assert c.read_records(data) == []  # consumers never see control records
    assert len(c.read_records(data, include_control=True)) == 1
    abort = c.build_control_batch(False, 5, 2, 78, 124)
    assert c.parse_control_record(next(c.iter_records(abort))) == (0, 0)


def test_client_control_batch_rejected_by_validate_record_set():
    marker = c.build_control_batch(True, producer_id=5, producer_epoch=0, base_offset=0,
                                   timestamp=1)
    c.validate_batch(marker)
    with pytest.raises(c.InvalidRecordError):
        c.validate_record_set(marker)


# --- framings from other clients ----------------------------------------------------


def _batch_with_payload(codec, payload, count):
    """A v2 batch whose records section is the given compressed payload."""
    header = bytearray(61)
    struct.pack_into(">qiibIhiqqqhii", header, 0, 0, 49 + len(payload), -1, 2, 0, codec,
                     count - 1, 1000, 1000 + count - 1, -1, -1, -1, count)
    data = header + payload
    struct.pack_into(">I", data, 17, c.crc32c(bytes(data[21:])))
    return bytes(data)


def _plain_records(n=50):
    b = c.BatchBuilder()
    for i in range(n):
        b.append(1000 + i, b"key-%d" % i, b"value-%d " % i * 20, [("n", b"%d" % i)])
    return b.build()[61:]


def test_raw_snappy_block_as_librdkafka_sends_it():
    raw = bytes(cramjam.snappy.compress_raw(_plain_records()))
    data = _batch_with_payload(c.COMPRESSION_SNAPPY, raw, 50)
    recs = c.read_records(data)
    assert [r.key for r in recs] == [b"key-%d" % i for i in range(50)]
    c.validate_record_set(data, verify_records=True)


def test_our_snappy_is_xerial_framed_like_java():
    data = c.build_batch([(1, b"k", b"v" * 100000, None)], compression=c.COMPRESSION_SNAPPY)
    assert data[61:69] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", data[69:77]) == (1, 1)


@pytest.mark.parametrize("flg_options", [
    dict(store_size=False, content_checksum=False),             # FLG 0x60 (librdkafka)
    dict(store_size=True, content_checksum=False),              # FLG 0x68 (kafka-python)
    dict(store_size=False, content_checksum=False, block_checksum=True),  # FLG 0x70
    dict(store_size=True, content_checksum=True, block_checksum=True),    # FLG 0x7c
])
def test_lz4_frame_variants(flg_options):
    plain = _plain_records()
    frame = lz4.frame.compress(plain, block_linked=False, **flg_options)
    expected_flg = (0x60 | (0x08 if flg_options.get("store_size") else 0)
                    | (0x04 if flg_options.get("content_checksum") else 0)
                    | (0x10 if flg_options.get("block_checksum") else 0))
    assert frame[4] == expected_flg
    data = _batch_with_payload(c.COMPRESSION_LZ4, frame, 50)
    assert len(c.read_records(data)) == 50


def test_our_lz4_is_block_independent_with_64k_blocks():
    data = c.build_batch([(1, b"k", b"v" * 1000, None)], compression=c.COMPRESSION_LZ4)
    assert data[61:65] == b"\x04\x22\x4d\x18"
    assert data[65] & 0x20 and data[66] == 0x40
