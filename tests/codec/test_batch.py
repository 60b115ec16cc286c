"""Record batch v2 headers in fastlog._codec: parsing, validation (CRC-32C, counts,
attributes), scanning a log-like concatenation, in-place offset stamping, and the checks
validate_record_set applies to produced data. Batches come from aiokafka's builder, an
independent implementation."""

import mmap
import struct
import tempfile

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

from fastlog import _codec as c


def aio_batch(n=3, compression=0, transactional=False, pid=-1, epoch=-1, seq=-1, base=0,
              ts=1_700_000_000_000):
    b = AioBuilder(2, compression, transactional, pid, epoch, seq, 1 << 24)
    for i in range(n):
        b.append(i, ts + i, b"key%d" % i, b"value-%d" % i, [])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base)
    return bytes(data)


def test_header_fields_are_read():
    data = aio_batch(5, transactional=True, pid=42, epoch=3, seq=7, base=100)
    h = c.read_batch_header(data)
    assert h.position == 0
    assert h.size == len(data) == h.batch_length + c.LOG_OVERHEAD
    assert (h.base_offset, h.last_offset_delta, h.last_offset) == (100, 4, 104)
    assert h.magic == 2 and h.record_count == 5
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 7)
    assert h.is_transactional and not h.is_control
    assert h.compression == c.COMPRESSION_NONE and h.timestamp_type == 0
    assert (h.first_timestamp, h.max_timestamp) == (1_700_000_000_000, 1_700_000_000_004)
    assert h.partition_leader_epoch == -1
    assert h.crc == c.crc32c(data[21:])
    assert "base_offset=100" in repr(h)


def test_validate_batch_accepts_a_good_batch_at_an_offset():
    data = b"junk" + aio_batch(3)
    h = c.validate_batch(data, 4)
    assert h.position == 4 and h.record_count == 3


def test_bad_crc_is_corrupt_record():
    data = bytearray(aio_batch(3))
    data[-1] ^= 0xFF
    with pytest.raises(c.CorruptRecordError) as info:
        c.validate_batch(data)
    assert info.value.position == 17
    c.read_batch_header(data)  # header parse alone does not check the CRC


def test_wrong_magic_is_invalid_magic():
    data = bytearray(aio_batch(1))
    data[16] = 1
    with pytest.raises(c.InvalidMagicError):
        c.read_batch_header(data)


def test_short_batch_length_is_invalid_and_partial_batch_is_truncated():
    data = bytearray(aio_batch(2))
    with pytest.raises(c.TruncatedError):
        c.read_batch_header(data[:-1])
    with pytest.raises(c.TruncatedError):
        c.read_batch_header(data[:11])
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(c.InvalidRecordError):
        c.read_batch_header(data)


def _reseal(data):
    """Recompute the CRC after editing covered fields (to reach the semantic checks)."""
    struct.pack_into(">I", data, 17, c.crc32c(bytes(data[21:])))
    return data


def test_count_inconsistent_with_last_offset_delta_is_invalid():
    data = bytearray(aio_batch(3))
    struct.pack_into(">i", data, 57, 4)
    with pytest.raises(c.InvalidRecordError):
        c.validate_batch(_reseal(data))


def test_compacted_batch_with_fewer_records_than_offsets_is_valid_in_the_log():
    data = bytearray(aio_batch(3))
    struct.pack_into(">i", data, 23, 9)  # lastOffsetDelta kept by compaction
    h = c.validate_batch(_reseal(data))
    assert h.last_offset == 9
    with pytest.raises(c.InvalidRecordError):
        c.validate_record_set(bytes(data))  # but a producer may not send it


def test_unused_attribute_bits_and_unknown_codec_are_rejected():
    data = bytearray(aio_batch(1))
    struct.pack_into(">h", data, 21, 0x100)
    with pytest.raises(c.InvalidRecordError):
        c.validate_batch(_reseal(data))
    struct.pack_into(">h", data, 21, 6)
    with pytest.raises(c.UnsupportedCodecError):
        c.validate_batch(_reseal(data))


def test_transactional_batch_without_producer_id_is_invalid():
    data = bytearray(aio_batch(1, transactional=True, pid=-1, epoch=-1))
    with pytest.raises(c.InvalidRecordError):
        c.validate_batch(data)


def test_record_count_too_big_for_the_bytes_is_invalid():
    data = bytearray(aio_batch(1))
    struct.pack_into(">i", data, 57, 1000)
    struct.pack_into(">i", data, 23, 999)
    with pytest.raises(c.InvalidRecordError):
        c.validate_batch(_reseal(data))


def test_scan_batches_over_an_mmap_finds_every_batch():
    batches = [aio_batch(i + 1, base=10 * i) for i in range(5)]
    blob = b"".join(batches)
    with tempfile.TemporaryFile() as f:
        f.write(blob)
        f.flush()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            result = c.scan_batches(m)
            assert result.error is None
            assert result.valid_end == len(blob)
            assert [h.base_offset for h in result.batches] == [0, 10, 20, 30, 40]
            assert [h.position for h in result.batches] == [
                sum(map(len, batches[:i])) for i in range(5)]
            del result


def test_scan_batches_stops_at_partial_and_corrupt_batches():
    batches = [aio_batch(3, base=3 * i) for i in range(4)]
    blob = b"".join(batches)
    partial = c.scan_batches(blob[:-5])
    assert len(partial.batches) == 3
    assert partial.valid_end == len(blob) - len(batches[3])
    assert isinstance(partial.error, c.TruncatedError)
    bad = bytearray(blob)
    bad[len(batches[0]) + 70] ^= 1
    result = c.scan_batches(bad)
    assert len(result.batches) == 1 and result.valid_end == len(batches[0])
    assert isinstance(result.error, c.CorruptRecordError)
    assert c.scan_batches(bad, verify_crc=False).error is None
    ranged = c.scan_batches(blob, len(batches[0]), len(blob) - len(batches[3]))
    assert [h.base_offset for h in ranged.batches] == [3, 6]


def test_scan_of_zero_padding_stops_without_raising():
    blob = aio_batch(2) + b"\x00" * 100
    result = c.scan_batches(blob)
    assert len(result.batches) == 1
    assert isinstance(result.error, c.CodecError)


def test_stamp_batches_writes_offsets_and_epoch_outside_the_crc():
    blob = bytearray(aio_batch(3) + aio_batch(2) + aio_batch(4))
    batches = c.validate_record_set(blob)
    next_offset = c.stamp_batches(blob, batches, 1000, 7)
    assert next_offset == 1009
    after = c.scan_batches(blob)
    assert after.error is None
    assert [h.base_offset for h in after.batches] == [1000, 1003, 1005]
    assert {h.partition_leader_epoch for h in after.batches} == {7}
    assert [r.offset for r in c.read_records(blob)] == list(range(1000, 1009))
    with pytest.raises(BufferError):
        c.stamp_batches(bytes(blob), batches, 0, 0)


def test_stamp_log_append_time_rewrites_type_max_timestamp_and_crc():
    blob = bytearray(aio_batch(3) + aio_batch(2, compression=c.COMPRESSION_GZIP))
    batches = c.validate_record_set(blob)
    c.stamp_log_append_time(blob, batches, 1_800_000_000_000)
    after = c.scan_batches(blob)
    assert after.error is None
    assert all(h.timestamp_type == 1 and h.max_timestamp == 1_800_000_000_000
               for h in after.batches)
    assert {r.timestamp for r in c.read_records(blob)} == {1_800_000_000_000}
    assert [h.crc for h in batches] == [h.crc for h in after.batches]


def test_validate_record_set_limits():
    blob = aio_batch(3) + aio_batch(2)
    assert [h.record_count for h in c.validate_record_set(blob)] == [3, 2]
    with pytest.raises(c.RecordTooLargeError):
        c.validate_record_set(blob, max_batch_size=50)
    with pytest.raises(c.TruncatedError):
        c.validate_record_set(blob[:-1])
    with pytest.raises(c.InvalidRecordError):
        c.validate_record_set(b"")
    zstd = aio_batch(3, compression=c.COMPRESSION_ZSTD)
    c.validate_record_set(zstd, verify_records=True)
    with pytest.raises(c.UnsupportedCodecError):
        c.validate_record_set(zstd, allow_zstd=False)


def test_verify_records_walks_each_record():
    data = bytearray(aio_batch(3))
    # Corrupt the second record's offset delta (record 0 is 14 bytes: k0/value-0).
    first_len = c.decode_varint(data, 61)[0]
    second = 61 + 1 + first_len
    # record: length, attributes, timestampDelta (1 byte), offsetDelta
    assert data[second + 3] == 2  # zig-zag of 1
    data[second + 3] = 6
    _reseal(data)
    c.validate_record_set(bytes(data))  # header-level checks do not look inside
    with pytest.raises(c.InvalidRecordError):
        c.validate_record_set(bytes(data), verify_records=True)


def test_verify_records_detects_count_mismatch_in_compressed_batch():
    data = bytearray(aio_batch(3, compression=c.COMPRESSION_GZIP))
    struct.pack_into(">i", data, 57, 2)
    struct.pack_into(">i", data, 23, 1)
    _reseal(data)
    c.validate_record_set(bytes(data))
    with pytest.raises(c.InvalidRecordError):
        c.validate_record_set(bytes(data), verify_records=True)


# --- recompress_batch (a topic's compression.type) ------------------------------------

RECOMPRESS_RECORDS = [(1_700_000_000_000 + i, b"k%d" % i if i % 3 else None,
                       b"value-%d-" % i + b"xy" * (i % 40), [("h", b"%d" % i)] if i % 5 == 0 else [])
                      for i in range(120)]


@pytest.mark.parametrize("target", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("source", [0, 1, 2, 3, 4])
def test_recompress_batch_changes_only_the_codec(source, target):
    original = c.build_batch(RECOMPRESS_RECORDS, compression=source, base_offset=40,
                                  producer_id=9, producer_epoch=3, base_sequence=17,
                                  partition_leader_epoch=5)
    # The batch sits after other bytes, as it does inside a produce request.
    buf = b"\x00" * 13 + original
    h = c.read_batch_header(buf, 13)
    out = c.recompress_batch(buf, h, target)
    assert isinstance(out, bytearray)
    n = c.validate_batch(out)   # one complete batch with a valid CRC
    assert n.compression == target
    assert n.size == len(out)
    for field in ("base_offset", "partition_leader_epoch", "last_offset_delta", "first_timestamp",
                  "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
                  "record_count", "timestamp_type", "is_transactional"):
        assert getattr(n, field) == getattr(h, field), field
    assert ([(r.offset, r.timestamp, r.key, r.value, r.headers) for r in c.read_records(out)]
            == [(r.offset, r.timestamp, r.key, r.value, r.headers)
                for r in c.read_records(original)])


def test_recompress_batch_refuses_a_header_outside_the_buffer():
    b = c.build_batch([(1, None, b"v")])
    h = c.read_batch_header(b)
    with pytest.raises(ValueError):
        c.recompress_batch(b[:-1], h, 1)
    with pytest.raises(c.UnsupportedCodecError):
        c.recompress_batch(b, h, 5)
