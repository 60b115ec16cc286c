"""Hypothesis properties of fastlog's v2 batch codec: build → parse returns the records
for every codec; random mutations and truncations never crash and either raise a
CodecError or validate (only when the bytes hit lie outside the CRC); scan_batches stops
exactly at a damaged batch."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastlog import _codec as c

CODECS = [c.COMPRESSION_NONE, c.COMPRESSION_GZIP, c.COMPRESSION_SNAPPY, c.COMPRESSION_LZ4,
          c.COMPRESSION_ZSTD]

header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record = st.tuples(
    st.integers(0, 2**41),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(header, max_size=3),
)
records = st.lists(record, min_size=1, max_size=20)

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Bytes of a v2 batch that its CRC does not cover: baseOffset and partitionLeaderEpoch.
# (batchLength and magic are outside it too, but changing either makes the batch fail
# other checks.)
OUTSIDE_CRC = set(range(0, 8)) | set(range(12, 16))


def _tuples(recs):
    return [(r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in recs]


@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(recs=records, base=st.integers(0, 2**40))
def test_build_then_parse_returns_the_records(codec, recs, base):
    data = c.build_batch(recs, compression=codec, base_offset=base)
    h = c.validate_record_set(data, verify_records=True)[0]
    assert h.record_count == len(recs) and h.base_offset == base
    assert h.max_timestamp == max(r[0] for r in recs)
    parsed = c.read_records(data)
    assert [r.offset for r in parsed] == list(range(base, base + len(recs)))
    assert _tuples(parsed) == [(ts, k, v, hs) for ts, k, v, hs in recs]
    assert _tuples(c.iter_records(data)) == _tuples(parsed)


def _mutate(data, edits):
    buf = bytearray(data)
    for pos, value in edits:
        buf[pos % len(buf)] = value
    return bytes(buf), {i for i in range(len(buf)) if buf[i] != data[i]}


@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(recs=records, edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                    min_size=1, max_size=4))
def test_mutations_raise_codec_error_or_lie_outside_the_crc(codec, recs, edits):
    data = c.build_batch(recs, compression=codec)
    mutated, touched = _mutate(data, edits)
    try:
        c.validate_batch(mutated)
    except c.CodecError:
        pass
    else:
        assert touched <= OUTSIDE_CRC
    # Decoding without the CRC's protection must still never crash.
    try:
        list(c.iter_records(mutated, verify_crc=False, decompress_limit=1 << 20))
        c.validate_record_set(mutated, verify_records=True, decompress_limit=1 << 20)
    except c.CodecError:
        pass


@SETTINGS
@given(recs=records, cut=st.integers(0, 10**6))
def test_truncations_raise_truncated(recs, cut):
    data = c.build_batch(recs)
    cut = 1 + cut % (len(data) - 1)
    with pytest.raises(c.TruncatedError):
        c.validate_batch(data[:cut])
    result = c.scan_batches(data[:cut])
    assert result.batches == [] and result.valid_end == 0
    assert isinstance(result.error, c.TruncatedError)
    assert c.read_records(data[:cut]) == []


@SETTINGS
@given(batches=st.lists(records, min_size=1, max_size=5), victim=st.integers(0, 100),
       where=st.integers(0, 10**6), flip=st.integers(1, 255))
def test_scan_stops_exactly_at_the_damaged_batch(batches, victim, where, flip):
    built = [c.build_batch(recs, base_offset=i * 100) for i, recs in enumerate(batches)]
    victim %= len(built)
    starts = [sum(map(len, built[:i])) for i in range(len(built))]
    blob = bytearray(b"".join(built))
    # Damage a byte the batch's checks cover: batchLength, magic, CRC or anything after.
    inside = list(range(8, 12)) + list(range(16, len(built[victim])))
    blob[starts[victim] + inside[where % len(inside)]] ^= flip
    result = c.scan_batches(blob)
    assert len(result.batches) == victim
    assert result.valid_end == starts[victim]
    assert isinstance(result.error, c.CodecError)
    assert [h.base_offset for h in result.batches] == [i * 100 for i in range(victim)]


@SETTINGS
@given(recs=records, edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                    min_size=1, max_size=3))
def test_resealed_record_damage_is_found_by_the_record_walk(recs, edits):
    # Edits inside the records region with the CRC recomputed: only the record walk can
    # catch them. The lean walk and the record-by-record parser must agree: either the
    # batch still reads as exactly its declared records, or the error names the fault
    # (never the catch-all raised when the two walks disagree).
    data = bytearray(c.build_batch(recs))
    for pos, value in edits:
        data[c.BATCH_HEADER_SIZE + pos % (len(data) - c.BATCH_HEADER_SIZE)] = value
    struct.pack_into(">I", data, 17, c.crc32c(bytes(data[21:])))
    try:
        h = c.validate_record_set(bytes(data), verify_records=True)[0]
    except c.CodecError as e:
        assert "malformed records" not in str(e)
    else:
        parsed = c.read_records(bytes(data))
        assert [r.offset for r in parsed] == list(range(h.record_count))
