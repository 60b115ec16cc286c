"""fastlog.compression: every codec round-trips, every variant clients send is read, and
decompression bombs stop at the cap with DecompressionLimitError (declared sizes are
refused before any output is allocated)."""

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from fastlog import _codec as c
from fastlog import compression

CODECS = [c.COMPRESSION_GZIP, c.COMPRESSION_SNAPPY, c.COMPRESSION_LZ4, c.COMPRESSION_ZSTD]
DATA = b"".join(b"line %d of some compressible text\n" % i for i in range(20000))
CAP = 64 * 1024


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec):
    packed = compression.compress(codec, DATA)
    assert len(packed) < len(DATA)
    assert compression.decompress(codec, packed, len(DATA)) == DATA
    assert compression.decompress(codec, memoryview(packed), len(DATA)) == DATA


@pytest.mark.parametrize("codec", CODECS)
def test_exactly_at_the_cap_is_fine_one_over_is_not(codec):
    packed = compression.compress(codec, DATA)
    assert len(compression.decompress(codec, packed, len(DATA))) == len(DATA)
    with pytest.raises(c.DecompressionLimitError):
        compression.decompress(codec, packed, len(DATA) - 1)


ZEROS = b"\x00" * (16 * 1024 * 1024)


def _bombs():
    yield "gzip", c.COMPRESSION_GZIP, gzip.compress(ZEROS)
    yield "zlib-stream", c.COMPRESSION_GZIP, zlib.compress(ZEROS)
    yield "zstd-with-size", c.COMPRESSION_ZSTD, zstandard.ZstdCompressor().compress(ZEROS)
    stream = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    yield "zstd-no-size", c.COMPRESSION_ZSTD, stream.compress(ZEROS) + stream.flush()
    yield "lz4-no-size", c.COMPRESSION_LZ4, lz4.frame.compress(ZEROS, store_size=False)
    yield "lz4-with-size", c.COMPRESSION_LZ4, lz4.frame.compress(ZEROS, store_size=True)
    yield "snappy-raw", c.COMPRESSION_SNAPPY, bytes(cramjam.snappy.compress_raw(ZEROS))
    yield "snappy-xerial", c.COMPRESSION_SNAPPY, compression.compress(c.COMPRESSION_SNAPPY,
                                                                      ZEROS)


BOMBS = list(_bombs())


@pytest.mark.parametrize("name,codec,bomb", BOMBS, ids=[b[0] for b in BOMBS])
def test_decompression_bomb_stops_at_the_cap(name, codec, bomb):
    assert len(bomb) < len(ZEROS) // 20  # snappy's best ratio is about 21:1
    with pytest.raises(c.DecompressionLimitError):
        compression.decompress(codec, bomb, CAP)


def test_snappy_declared_length_is_refused_before_decoding():
    # A raw block whose length varint claims 4 GiB, followed by garbage.
    claim = c.encode_uvarint(2**32 - 1) + b"\x00" * 10
    with pytest.raises(c.DecompressionLimitError):
        compression.decompress(c.COMPRESSION_SNAPPY, claim, CAP)


def test_bomb_inside_a_batch_is_stopped_when_records_are_read():
    data = c.build_batch([(1, None, ZEROS[:4 << 20], None)], compression=c.COMPRESSION_ZSTD)
    with pytest.raises(c.DecompressionLimitError):
        c.read_records(data, decompress_limit=1 << 20)
    with pytest.raises(c.DecompressionLimitError):
        c.validate_record_set(data, verify_records=True, decompress_limit=1 << 20)
    c.validate_record_set(data)  # header + CRC checks alone never decompress


def test_concatenated_gzip_members_and_zstd_frames():
    assert compression.decompress(c.COMPRESSION_GZIP, gzip.compress(b"ab") + gzip.compress(
        b"cd"), 100) == b"abcd"
    z = zstandard.ZstdCompressor()
    assert compression.decompress(c.COMPRESSION_ZSTD, z.compress(b"ab") + z.compress(b"cd"),
                                  100) == b"abcd"


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_raises_codec_error(codec):
    for junk in [b"", b"\x00", b"\xff" * 40, compression.compress(codec, DATA)[:-7]]:
        try:
            compression.decompress(codec, junk, CAP)
        except c.CodecError:
            pass


def test_xerial_framing_layout():
    packed = compression.compress(c.COMPRESSION_SNAPPY, DATA)
    assert packed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    (first,) = struct.unpack(">i", packed[16:20])
    assert bytes(cramjam.snappy.decompress_raw(packed[20:20 + first])) == DATA[:32 * 1024]


def test_legacy_lz4_header_checksum_fix_round_trips():
    frame = lz4.frame.compress(b"hello" * 100)
    broken = compression.fix_legacy_lz4_header(frame, to_legacy=True)
    assert broken != frame and broken[:6] == frame[:6]
    assert compression.fix_legacy_lz4_header(broken) == frame
    assert lz4.frame.decompress(compression.fix_legacy_lz4_header(broken)) == b"hello" * 100


def test_unknown_codec():
    with pytest.raises(c.UnsupportedCodecError):
        compression.compress(7, b"x")
    with pytest.raises(c.UnsupportedCodecError):
        compression.decompress(5, b"x", 10)

