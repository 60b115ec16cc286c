"""Legacy message sets (magic 0 and 1) in fastlog._codec: reading kafka-python's sets,
kafka-python reading ours, compressed wrappers with relative offsets, CRC-32 checks, and
conversion to and from v2 batches."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import legacy_records as kp_legacy
from kafka.record.memory_records import MemoryRecords

from fastlog import _codec as c


def kp_build(magic, codec, n=4, wrapper_offset=None):
    b = kp_legacy.LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(n):
        b.append(i, 1000 + i if magic else None, b"k%d" % i if i else None,
                 b"value-%d" % i if i != 2 else None)
    data = bytearray(b.build())
    if wrapper_offset is not None:
        struct.pack_into(">q", data, 0, wrapper_offset)
    return bytes(data)


def kp_read(data):
    records = MemoryRecords(bytes(data))
    out = []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
                for r in batch]
    return out


def ours(messages):
    return [(m.offset, m.timestamp, m.key, m.value) for m in messages]


# kafka-python needs the xxhash package for magic-0 lz4 (the broken header checksum).
COMBOS = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)]


@pytest.mark.parametrize("magic,codec", COMBOS)
def test_kafka_python_sets_read_by_us(magic, codec):
    data = kp_build(magic, codec)
    assert ours(c.read_message_set(data)) == kp_read(data)
    assert [m.magic for m in c.read_message_set(data)] == [magic] * 4


@pytest.mark.parametrize("magic,codec", COMBOS + [(0, 3)])
def test_our_sets_read_by_kafka_python(magic, codec):
    records = [(2000 + i, b"k%d" % i, None if i == 1 else b"v%d" % i) for i in range(5)]
    data = c.build_message_set(records, magic, codec, base_offset=40)
    expected = [(40 + i, 2000 + i if magic else -1, k, v)
                for i, (_ts, k, v) in enumerate(records)]
    assert ours(c.read_message_set(data)) == expected
    if (magic, codec) != (0, 3):
        assert kp_read(data) == expected


def test_v1_wrapper_offsets_are_relative_to_the_last_inner_message():
    data = kp_build(1, c.COMPRESSION_GZIP, n=4, wrapper_offset=103)
    assert [m.offset for m in c.read_message_set(data)] == [100, 101, 102, 103]


def test_v1_log_append_time_wrapper_overrides_inner_timestamps():
    data = bytearray(c.build_message_set([(5, b"a", b"b"), (6, b"c", b"d")], 1,
                                          c.COMPRESSION_GZIP, timestamp_type=1))
    msgs = list(c.read_message_set(bytes(data)))
    assert [m.timestamp for m in msgs] == [6, 6]
    assert all(m.timestamp_type == 1 for m in msgs)


def test_bad_crc32_is_corrupt():
    data = bytearray(kp_build(1, 0))
    data[-1] ^= 0x55
    with pytest.raises(c.CorruptRecordError):
        list(c.read_message_set(bytes(data)))


def test_bad_magic_and_sizes():
    data = bytearray(kp_build(1, 0, n=1))
    data[16] = 2
    with pytest.raises(c.InvalidMagicError):
        list(c.read_message_set(bytes(data)))
    data = bytearray(kp_build(1, 0, n=1))
    struct.pack_into(">i", data, 8, 3)
    with pytest.raises(c.InvalidRecordError):
        list(c.read_message_set(bytes(data)))


def test_partial_last_message_is_ignored():
    data = kp_build(0, 0, n=3)
    assert len(list(c.read_message_set(data[:-3]))) == 2


@pytest.mark.parametrize("magic,codec", COMBOS)
def test_convert_to_v2_keeps_offsets_timestamps_and_codec(magic, codec):
    data = kp_build(magic, codec, wrapper_offset=53 if codec else None)
    v2 = c.convert_to_v2(data)
    result = c.scan_batches(v2)
    assert result.error is None
    assert [h.compression for h in result.batches] == [codec]
    expected = ours(c.read_message_set(data))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in c.read_records(v2)] == expected
    assigned = c.convert_to_v2(data, assign_offsets=True)
    assert [r.offset for r in c.read_records(assigned)] == [0, 1, 2, 3]
    c.validate_record_set(assigned, verify_records=True)


def test_convert_from_v2_round_trips_through_kafka_python():
    batches = (
        c.build_batch([(10 + i, b"k%d" % i, b"v%d" % i, [("h", b"x")]) for i in range(3)],
                      base_offset=7)
        + c.build_batch([(20 + i, None, b"w%d" % i, None) for i in range(2)],
                        base_offset=10, compression=c.COMPRESSION_GZIP)
        + c.build_control_batch(True, 1, 0, 12, 30)
        + c.build_batch([(40, b"s", b"snappy", None)], base_offset=13,
                        compression=c.COMPRESSION_SNAPPY)
    )
    expected = [(7, 10, b"k0", b"v0"), (8, 11, b"k1", b"v1"), (9, 12, b"k2", b"v2"),
                (10, 20, None, b"w0"), (11, 21, None, b"w1"), (13, 40, b"s", b"snappy")]
    v1 = c.convert_from_v2(batches, 1)
    assert kp_read(v1) == expected
    assert ours(c.read_message_set(v1)) == expected
    v0 = c.convert_from_v2(batches, 0)
    assert kp_read(v0) == [(o, -1, k, v) for o, _ts, k, v in expected]


def test_convert_from_v2_refuses_zstd():
    zstd = c.build_batch([(1, b"k", b"v", None)], compression=c.COMPRESSION_ZSTD)
    with pytest.raises(c.UnsupportedCodecError):
        c.convert_from_v2(zstd, 1)


@settings(max_examples=100, deadline=None)
@given(combo=st.sampled_from(COMBOS), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
    cut=st.integers(0, 10**6))
def test_mutated_legacy_sets_raise_codec_error_or_parse(combo, edits, cut):
    magic, codec = combo
    data = bytearray(c.build_message_set([(5, b"k", b"v" * 20), (6, None, b"w")], magic, codec))
    for pos, value in edits:
        data[pos % len(data)] = value
    data = bytes(data[:len(data) - cut % 8])
    try:
        list(c.read_message_set(data, decompress_limit=1 << 16))
        c.convert_to_v2(data, decompress_limit=1 << 16)
    except c.CodecError:
        pass
