"""Compression codecs of Kafka record batches: gzip, snappy, lz4 and zstd.

Owns the byte formats inside a compressed batch (or legacy wrapper message), exactly as
clients write them:

* gzip: a gzip member (zlib with a gzip header); concatenated members are accepted.
* snappy: Java, kafka-python and aiokafka write the xerial framing (``82 'SNAPPY' 00``,
  two int32 versions, then repeated [int32 length][raw snappy block]); librdkafka writes
  one raw snappy block. We read both and write xerial, like Java.
* lz4: an LZ4 frame. Every FLG combination clients use is read (content size, block
  checksums, content checksum): frames of independent blocks without checksums (what
  clients write) by fastlog._lz4 in C, the others by python-lz4's frame decoder. We
  write block-independent frames with 64 KiB blocks,
  which Java's reader requires. Magic 0 messages used a wrong header checksum; see
  ``fix_legacy_lz4_header``.
* zstd: a zstd frame (several concatenated frames are accepted).

``decompress`` never allocates more than ``max_size`` bytes of output, whatever the
payload claims: it checks declared sizes first and otherwise decompresses in bounded
steps, raising DecompressionLimitError past the cap. Thin glue over the C libraries;
called per batch (never per record) from any thread; the C libraries release the GIL.
"""

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from fastlog import _lz4
from fastlog._codec import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    DecompressionLimitError,
    InvalidRecordError,
    UnsupportedCodecError,
)

__all__ = ["compress", "decompress", "fix_legacy_lz4_header", "CODEC_NAMES"]

CODEC_NAMES = {
    COMPRESSION_NONE: "none",
    COMPRESSION_GZIP: "gzip",
    COMPRESSION_SNAPPY: "snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_STEP = 1 << 20  # output chunk of the streaming decompressors

# Default levels: fast ones. lz4 level 0 is LZ4's fast mode (aiokafka's level 9 is ~20x
# slower); zstd 3 is zstd's own default; gzip 6 is zlib's.
_DEFAULT_LEVELS = {COMPRESSION_GZIP: 6, COMPRESSION_LZ4: 0, COMPRESSION_ZSTD: 3}

_zstd_compressors = {}
_zstd_decompressor = zstandard.ZstdDecompressor()


def compress(codec, data, level=None):
    """Compress data (any buffer) with a Kafka codec id; returns bytes."""
    if codec == COMPRESSION_GZIP:
        lvl = _DEFAULT_LEVELS[codec] if level is None else level
        c = zlib.compressobj(lvl, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == COMPRESSION_SNAPPY:
        return _xerial_compress(data)
    if codec == COMPRESSION_LZ4:
        return lz4.frame.compress(
            data,
            compression_level=_DEFAULT_LEVELS[codec] if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == COMPRESSION_ZSTD:
        lvl = _DEFAULT_LEVELS[codec] if level is None else level
        cctx = _zstd_compressors.get(lvl)
        if cctx is None:
            cctx = _zstd_compressors[lvl] = zstandard.ZstdCompressor(level=lvl)
        return cctx.compress(data)
    if codec == COMPRESSION_NONE:
        return bytes(data)
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def decompress(codec, data, max_size):
    """Decompress a batch's records (any variant clients send), at most max_size bytes."""
    if codec == COMPRESSION_GZIP:
        return _gzip_decompress(data, max_size)
    if codec == COMPRESSION_SNAPPY:
        return _snappy_decompress(data, max_size)
    if codec == COMPRESSION_LZ4:
        return _lz4_decompress(data, max_size)
    if codec == COMPRESSION_ZSTD:
        return _zstd_decompress(data, max_size)
    if codec == COMPRESSION_NONE:
        if len(data) > max_size:
            _over(codec, max_size)
        return bytes(data)
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def _over(codec, max_size):
    raise DecompressionLimitError(
        f"{CODEC_NAMES.get(codec, codec)} data decompresses to more than {max_size} bytes")


def _bad(codec, exc):
    raise InvalidRecordError(f"invalid {CODEC_NAMES[codec]} data: {exc}") from None


# --- gzip ------------------------------------------------------------------------------


def _gzip_decompress(data, max_size):
    out = []
    total = 0
    rest = data
    while True:
        d = zlib.decompressobj(47)  # gzip or zlib header, detected
        try:
            chunk = d.decompress(rest, max_size + 1 - total)
        except zlib.error as exc:
            _bad(COMPRESSION_GZIP, exc)
        total += len(chunk)
        out.append(chunk)
        if total > max_size:
            _over(COMPRESSION_GZIP, max_size)
        if not d.eof:
            if d.unconsumed_tail:
                _over(COMPRESSION_GZIP, max_size)
            _bad(COMPRESSION_GZIP, "truncated stream")
        rest = d.unused_data
        if not rest:
            break
    return b"".join(out)


# --- snappy ----------------------------------------------------------------------------


def _xerial_compress(data):
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _raw_snappy(block, max_size):
    # A raw block starts with its uncompressed length as a varint: check it first.
    try:
        declared = cramjam.snappy.decompress_raw_len(block)
    except Exception as exc:  # cramjam raises its own DecompressionError
        _bad(COMPRESSION_SNAPPY, exc)
    if declared > max_size:
        _over(COMPRESSION_SNAPPY, max_size)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as exc:
        _bad(COMPRESSION_SNAPPY, exc)


def _snappy_decompress(data, max_size):
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _raw_snappy(view, max_size)
    if len(view) < 16:
        _bad(COMPRESSION_SNAPPY, "truncated xerial header")
    pos = 16
    out = []
    total = 0
    while pos < len(view):
        if pos + 4 > len(view):
            _bad(COMPRESSION_SNAPPY, "truncated xerial block length")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            _bad(COMPRESSION_SNAPPY, f"xerial block of {n} bytes overruns the data")
        chunk = _raw_snappy(view[pos:pos + n], max_size - total)
        total += len(chunk)
        out.append(chunk)
        pos += n
    return b"".join(out)


# --- lz4 -------------------------------------------------------------------------------


def _lz4_decompress(data, max_size):
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    try:
        # Frames of independent blocks without checksums (what clients write), in C.
        fast = _lz4.decode_frames(view, max_size)
    except OverflowError:
        _over(COMPRESSION_LZ4, max_size)
    if fast is not None:
        return fast
    out = []
    total = 0
    rest = view
    while len(rest):
        d = lz4.frame.LZ4FrameDecompressor()
        try:
            # The frame header may declare the content size: refuse before decoding.
            info = lz4.frame.get_frame_info(bytes(rest[:19]))
            if info.get("content_size", 0) > max_size - total:
                _over(COMPRESSION_LZ4, max_size)
            # Output in steps of about twice the input, never past the cap: python-lz4
            # allocates max_length up front, and a cap-sized buffer per call (tens of MB,
            # page-faulted and shrunk) cost ~300 us per 140 KB produce batch vs ~65 us.
            step = 2 * len(rest) + 65536
            chunk = d.decompress(rest, max_length=min(step, max_size + 1 - total))
            out.append(chunk)
            total += len(chunk)
            while total <= max_size and not d.eof and not d.needs_input:
                step = max(step, total)  # geometric growth: few calls for compressible data
                chunk = d.decompress(b"", max_length=min(step, max_size + 1 - total))
                out.append(chunk)
                total += len(chunk)
        except RuntimeError as exc:
            _bad(COMPRESSION_LZ4, exc)
        if total > max_size:
            _over(COMPRESSION_LZ4, max_size)
        if not d.eof:
            _bad(COMPRESSION_LZ4, "truncated frame")
        rest = d.unused_data or b""
    return b"".join(out)


def _lz4_descriptor_end(frame):
    flg = frame[4]
    return 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)


def fix_legacy_lz4_header(frame, to_legacy=False):
    """Rewrite the header checksum of an LZ4 frame between the standard form and the one
    Kafka's magic-0 messages used (xxh32 over the magic bytes too). Returns bytes."""
    frame = bytearray(frame)
    if len(frame) < 7 or frame[:4] != b"\x04\x22\x4d\x18":
        return bytes(frame)
    end = _lz4_descriptor_end(frame)
    if len(frame) < end:
        return bytes(frame)
    covered = frame[0:end - 1] if to_legacy else frame[4:end - 1]
    frame[end - 1] = (_lz4.xxh32(covered) >> 8) & 0xFF
    return bytes(frame)


# --- zstd ------------------------------------------------------------------------------


def _zstd_decompress(data, max_size):
    try:
        reader = _zstd_decompressor.stream_reader(data, read_across_frames=True)
        out = []
        total = 0
        while True:
            chunk = reader.read(min(_STEP, max_size + 1 - total))
            if not chunk:
                break
            out.append(chunk)
            total += len(chunk)
            if total > max_size:
                _over(COMPRESSION_ZSTD, max_size)
    except zstandard.ZstdError as exc:
        _bad(COMPRESSION_ZSTD, exc)
    return b"".join(out)
