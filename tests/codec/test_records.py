"""Record iteration in fastlog._codec: iter_records (one batch, lazy), record_keys (one
batch's offsets, keys and tombstones), read_records and read_columns (a whole fetched
blob), and the errors a malformed records section raises."""

import struct

import pytest

from fastlog import _codec as c


def _batch(n=4, **kwargs):
    return c.build_batch(
        [(100 + i, b"k%d" % i, b"v%d" % i, [("i", b"%d" % i)]) for i in range(n)], **kwargs)


def test_iter_records_is_lazy_and_yields_offsets_from_the_base():
    data = b"pad" + _batch(3, base_offset=500)
    it = c.iter_records(data, 3)
    first = next(it)
    assert (first.offset, first.timestamp, first.key, first.value) == (500, 100, b"k0", b"v0")
    assert first.headers == [("i", b"0")] and first.timestamp_type == 0
    assert [r.offset for r in it] == [501, 502]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_record_keys_are_the_records_offsets_keys_and_tombstones(codec):
    records = [(100 + i, None if i % 3 == 0 else b"k%d" % i,
                None if i % 4 == 0 else b"v%d" % i) for i in range(10)]
    data = b"pad" + c.build_batch(records, base_offset=500, compression=codec)
    assert c.record_keys(data, 3) == [(r.offset, r.key, r.value is None)
                                      for r in c.iter_records(data, 3)]
    assert c.record_keys(data, 3)[:2] == [(500, None, True), (501, b"k1", False)]


def test_read_records_spans_batches_and_ignores_a_partial_tail():
    blob = _batch(2, base_offset=0) + _batch(3, base_offset=2)
    assert [r.offset for r in c.read_records(blob)] == [0, 1, 2, 3, 4]
    assert [r.offset for r in c.read_records(blob[:-10])] == [0, 1]
    assert c.read_records(b"") == []


def test_read_records_raises_on_corruption_before_the_tail():
    blob = bytearray(_batch(2) + _batch(2, base_offset=2))
    blob[70] ^= 0xFF
    with pytest.raises(c.CorruptRecordError):
        c.read_records(blob)


def test_read_columns():
    cols = c.read_columns(_batch(3, base_offset=7))
    assert cols["offsets"] == [7, 8, 9]
    assert cols["timestamps"] == [100, 101, 102]
    assert cols["keys"] == [b"k0", b"k1", b"k2"]
    assert cols["values"] == [b"v0", b"v1", b"v2"]
    assert cols["headers"][2] == [("i", b"2")]


def test_records_work_over_a_memoryview_of_a_larger_buffer():
    blob = bytearray(b"x" * 10 + _batch(2) + b"y" * 5)
    view = memoryview(blob)[10:-5]
    assert [r.value for r in c.read_records(view)] == [b"v0", b"v1"]
    batches = c.validate_record_set(view)
    assert c.stamp_batches(view, batches, 40, 2) == 42
    assert [r.offset for r in c.read_records(blob[10:-5])] == [40, 41]


def _reseal(data):
    struct.pack_into(">I", data, 17, c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_fewer_records_than_the_count_is_invalid():
    data = bytearray(_batch(2))
    struct.pack_into(">i", data, 57, 3)
    struct.pack_into(">i", data, 23, 2)
    data = _reseal(data)
    with pytest.raises(c.InvalidRecordError):
        list(c.iter_records(data))
    with pytest.raises(c.InvalidRecordError):
        c.record_keys(data)
    with pytest.raises(c.InvalidRecordError):
        c.read_records(data)


def test_record_length_overrunning_the_batch_is_truncated():
    data = bytearray(_batch(1))
    data[61] = 0x7E  # record length varint: 63 bytes, more than are there
    with pytest.raises(c.TruncatedError):
        list(c.iter_records(_reseal(data)))


def test_record_headers_count_beyond_the_record_is_invalid():
    data = bytearray(c.build_batch([(1, b"k", b"v", None)]))
    data[-1] = 0x08  # header count 4, no header bytes follow
    with pytest.raises(c.InvalidRecordError):
        list(c.iter_records(_reseal(data)))


def test_non_utf8_header_key_is_replaced_not_fatal():
    data = c.build_batch([(1, None, b"v", [("k", b"x")])])
    raw = bytearray(data)
    pos = raw.rindex(b"k")
    raw[pos] = 0xFF
    (rec,) = c.iter_records(_reseal(raw))
    assert rec.headers == [("\ufffd", b"x")]


def test_record_equality_and_repr():
    a = c.read_records(_batch(1))[0]
    b = c.read_records(_batch(1))[0]
    assert a == b and "offset=0" in repr(a)
    with pytest.raises(AttributeError):
        a.value = b"changed"
