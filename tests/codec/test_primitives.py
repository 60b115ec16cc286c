"""Varints, CRCs and the protocol Reader/Writer of fastlog._codec: golden vectors,
round trips, and the errors that truncated or hostile input must raise."""

import mmap
import struct
import tempfile
import zlib

import crc32c as crc32c_pkg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog import _codec as c

# --- varints ------------------------------------------------------------------------

UVARINT_VECTORS = [
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (300, b"\xac\x02"),
    (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"),
    (2**31 - 1, b"\xff\xff\xff\xff\x07"),
    (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
]

VARINT_VECTORS = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
]

VARLONG_VECTORS = VARINT_VECTORS[:-2] + [
    (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
    (-(2**63), b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize("value,encoded", UVARINT_VECTORS)
def test_uvarint_golden_vectors(value, encoded):
    assert c.encode_uvarint(value) == encoded
    assert c.decode_uvarint(encoded + b"tail") == (value, len(encoded))


@pytest.mark.parametrize("value,encoded", VARINT_VECTORS)
def test_varint_golden_vectors(value, encoded):
    assert c.encode_varint(value) == encoded
    assert c.decode_varint(b"xx" + encoded, 2) == (value, 2 + len(encoded))


@pytest.mark.parametrize("value,encoded", VARLONG_VECTORS)
def test_varlong_golden_vectors(value, encoded):
    assert c.encode_varlong(value) == encoded
    assert c.decode_varlong(encoded) == (value, len(encoded))


@pytest.mark.parametrize("decode", [c.decode_uvarint, c.decode_varint, c.decode_varlong])
@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_varint_raises_truncated(decode, data):
    with pytest.raises(c.TruncatedError) as info:
        decode(data)
    assert info.value.position == 0


@pytest.mark.parametrize("decode", [c.decode_uvarint, c.decode_varint])
def test_varint_longer_than_5_bytes_is_invalid(decode):
    with pytest.raises(c.InvalidRecordError):
        decode(b"\x80\x80\x80\x80\x80\x01")


def test_varlong_longer_than_10_bytes_is_invalid():
    with pytest.raises(c.InvalidRecordError):
        c.decode_varlong(b"\x80" * 10 + b"\x01")


def test_varint_encoders_reject_out_of_range():
    for enc, bad in [
        (c.encode_uvarint, -1),
        (c.encode_uvarint, 2**32),
        (c.encode_varint, 2**31),
        (c.encode_varint, -(2**31) - 1),
        (c.encode_varlong, 2**63),
    ]:
        with pytest.raises((ValueError, OverflowError)):
            enc(bad)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(n):
    assert c.decode_varlong(c.encode_varlong(n)) == (n, len(c.encode_varlong(n)))


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip_matches_varlong_bytes(n):
    # Kafka's zig-zag varint and varlong agree on the bytes for 32-bit values.
    assert c.encode_varint(n) == c.encode_varlong(n)
    assert c.decode_varint(c.encode_varint(n))[0] == n


# --- CRCs ---------------------------------------------------------------------------


def test_crc32c_golden_vectors():
    assert c.crc32c(b"123456789") == 0xE3069283
    assert c.crc32c(b"") == 0
    assert c.crc32c(b"\x00" * 32) == 0x8A9136AA
    assert c.crc32c(b"\xff" * 32) == 0x62A8AB43


def test_crc32c_uses_the_packages_kernel_directly():
    assert c.CRC32C_DIRECT


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
def test_crc32c_matches_crc32c_package(data, start):
    assert c.crc32c(data, start) == crc32c_pkg.crc32c(data, start)


def test_crc32c_of_big_buffer_and_mmap():
    data = bytes(range(256)) * 4096
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            assert c.crc32c(m) == crc32c_pkg.crc32c(data)
    assert c.crc32c(memoryview(data)[5:]) == crc32c_pkg.crc32c(data[5:])


def test_crc32_is_zlib_crc32():
    assert c.crc32(b"123456789") == 0xCBF43926 == zlib.crc32(b"123456789")


# --- Reader / Writer ----------------------------------------------------------------


def _write_everything(w):
    w.int8(-5)
    w.int16(-2)
    w.int32(-70000)
    w.int64(-(2**40))
    w.uint16(65535)
    w.uint32(2**32 - 1)
    w.float64(3.5)
    w.boolean(True)
    w.uuid(bytes(range(16)))
    w.uvarint(300)
    w.varint(-3)
    w.varlong(2**40)
    w.string("héllo")
    w.nullable_string(None)
    w.compact_string("x")
    w.compact_nullable_string(None)
    w.bytes_(b"abc")
    w.nullable_bytes(None)
    w.compact_bytes(bytearray(b"de"))
    w.compact_nullable_bytes(None)
    w.array_len(2)
    w.compact_array_len(-1)
    w.tagged_fields(None)
    w.tagged_fields({5: b"five", 1: b""})


def test_every_primitive_round_trips():
    w = c.Writer()
    _write_everything(w)
    r = c.Reader(w.getvalue())
    assert r.int8() == -5
    assert r.int16() == -2
    assert r.int32() == -70000
    assert r.int64() == -(2**40)
    assert r.uint16() == 65535
    assert r.uint32() == 2**32 - 1
    assert r.float64() == 3.5
    assert r.boolean() is True
    assert r.uuid() == bytes(range(16))
    assert r.uvarint() == 300
    assert r.varint() == -3
    assert r.varlong() == 2**40
    assert r.string() == "héllo"
    assert r.nullable_string() is None
    assert r.compact_string() == "x"
    assert r.compact_nullable_string() is None
    assert r.bytes_() == b"abc"
    assert r.nullable_bytes() is None
    assert r.compact_bytes() == b"de"
    assert r.compact_nullable_bytes() is None
    assert r.array_len() == 2 - 2 + 2  # count 2 fits: 2 <= bytes left
    assert r.compact_array_len() == -1
    assert r.tagged_fields() == {}
    assert r.tagged_fields() == {1: b"", 5: b"five"}
    assert r.remaining == 0


def test_writer_layout_matches_struct():
    w = c.Writer()
    w.int16(1)
    w.int32(-1)
    w.int64(7)
    w.string("ab")
    w.bytes_(b"z")
    assert w.getvalue() == struct.pack(">hiqh2si1s", 1, -1, 7, 2, b"ab", 1, b"z")
    assert len(w) == len(w.getvalue())


def test_truncation_anywhere_raises_truncated():
    w = c.Writer()
    _write_everything(w)
    full = w.getvalue()
    reads = [
        "int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "boolean", "uuid",
        "uvarint", "varint", "varlong", "string", "nullable_string", "compact_string",
        "compact_nullable_string", "bytes_", "nullable_bytes", "compact_bytes",
        "compact_nullable_bytes", "array_len", "compact_array_len", "tagged_fields",
        "tagged_fields",
    ]
    for cut in range(len(full)):
        r = c.Reader(full[:cut])
        with pytest.raises(c.TruncatedError):
            for name in reads:
                getattr(r, name)()


def test_reader_respects_pos_and_end_of_a_larger_buffer():
    data = b"\x00\x00\x00\x07\x00\x00\x00\x08"
    r = c.Reader(data, 4, 6)
    with pytest.raises(c.TruncatedError) as info:
        r.int32()
    assert info.value.position == 4
    r.pos = 4
    assert r.int16() == 0
    assert r.remaining == 0


def test_huge_array_count_over_small_buffer_raises_without_allocating():
    r = c.Reader(b"\x7f\xff\xff\xff" + b"\x00" * 8)
    with pytest.raises(c.TruncatedError):
        r.array_len()
    r = c.Reader(c.encode_uvarint(2**32 - 1) + b"\x00" * 4)
    with pytest.raises(c.TruncatedError):
        r.compact_array_len()
    r = c.Reader(c.encode_uvarint(2**31) + b"\x00")
    with pytest.raises(c.TruncatedError):
        r.tagged_fields()


def test_null_where_non_null_is_required_raises_codec_error():
    with pytest.raises(c.CodecError):
        c.Reader(b"\xff\xff").string()
    with pytest.raises(c.CodecError):
        c.Reader(b"\x00").compact_string()
    with pytest.raises(c.CodecError):
        c.Reader(b"\xff\xff\xff\xff").bytes_()
    with pytest.raises(c.CodecError):
        c.Reader(b"\xff\xff\xff\xfe").nullable_bytes()
    with pytest.raises(c.CodecError):
        c.Reader(b"\x00\x02\xff\xfe").string()  # not UTF-8


def test_bytes_view_is_zero_copy_slice():
    data = bytearray(b"\x00\x00\x00\x03abcrest")
    r = c.Reader(data)
    view = r.bytes_view()
    assert isinstance(view, memoryview) and bytes(view) == b"abc"
    del r
    data_view = view
    assert data_view.obj is data or bytes(data_view) == b"abc"
    r = c.Reader(b"\xff\xff\xff\xff\x04xyz")
    assert r.nullable_bytes_view() is None
    assert bytes(r.compact_nullable_bytes_view()) == b"xyz"


def test_writer_external_parts_and_patch():
    region_data = b"REGION-BYTES"
    with tempfile.TemporaryFile() as f:
        f.write(b"xx" + region_data)
        f.flush()
        region = c.FileRegion(f, 2, len(region_data))
        w = c.Writer()
        w.int32(0)
        w.int16(9)
        w.external(region, region.length)
        w.external(memoryview(b"MV"), 2)
        w.int32(5)
        w.patch_int32(0, len(w) - 4)
        parts = w.getparts()
        assert parts[1] is region and bytes(parts[2]) == b"MV"
        assert parts[0] == struct.pack(">ih", 2 + len(region_data) + 2 + 4, 9)
        assert len(w) == 4 + 2 + len(region_data) + 2 + 4
        assert w.getvalue() == parts[0] + region_data + b"MV" + struct.pack(">i", 5)
        w.patch_int32(len(w) - 4, 6)
        assert w.getvalue().endswith(struct.pack(">i", 6))
        with pytest.raises(ValueError):
            w.patch_int32(7, 1)  # inside the file region


def test_file_region_attributes_and_read():
    with tempfile.TemporaryFile() as f:
        f.write(b"0123456789")
        f.flush()
        region = c.FileRegion(f, 3, 4)
        assert (region.file, region.position, region.length) == (f, 3, 4)
        assert region.read() == b"3456"
        with pytest.raises(c.TruncatedError):
            c.FileRegion(f, 8, 4).read()


READ_METHODS = [
    "int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "boolean", "uuid",
    "uvarint", "varint", "varlong", "string", "nullable_string", "compact_string",
    "compact_nullable_string", "bytes_", "nullable_bytes", "compact_bytes",
    "compact_nullable_bytes", "bytes_view", "nullable_bytes_view",
    "compact_nullable_bytes_view", "array_len", "compact_array_len", "tagged_fields",
]


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64), st.lists(st.sampled_from(READ_METHODS), max_size=12))
def test_random_bytes_never_crash_the_reader(data, methods):
    r = c.Reader(data)
    try:
        for name in methods:
            getattr(r, name)()
            assert 0 <= r.pos <= len(data)
    except c.CodecError:
        pass
