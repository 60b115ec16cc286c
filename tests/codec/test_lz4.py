"""fastlog._lz4: LZ4 frames of independent blocks decoded in C. Checked against the lz4
package's own frame decoder: the same content for every block shape clients write
(compressed, stored, several frames, with and without a declared size), None for the
shapes it leaves to the general decoder, the size cap enforced, and damaged input never
crashing nor decoding to something the reference decoder would not produce."""

import os
import random
import string

import lz4.frame
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastlog import _codec as c
from fastlog import _lz4, compression


def _frame(data, **kw):
    opts = {"block_linked": False, "block_size": lz4.frame.BLOCKSIZE_MAX64KB,
            "store_size": False}
    opts.update(kw)
    return lz4.frame.compress(data, **opts)


TEXT = (b"abcdefgh" * 40000) + bytes(range(256)) * 400


@pytest.mark.parametrize("data", [b"", b"x", TEXT, os.urandom(300_000)],
                         ids=["empty", "one-byte", "compressible", "random"])
@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("block_size", [lz4.frame.BLOCKSIZE_MAX64KB,
                                        lz4.frame.BLOCKSIZE_MAX256KB,
                                        lz4.frame.BLOCKSIZE_MAX4MB])
def test_independent_block_frames_decode_as_the_reference(data, store_size, block_size):
    frame = _frame(data, store_size=store_size, block_size=block_size)
    assert _lz4.decode_frames(frame, 1 << 23) == data
    assert compression.decompress(c.COMPRESSION_LZ4, frame, 1 << 23) == data


def test_concatenated_frames_decode_to_the_concatenation():
    parts = [TEXT, b"tail", os.urandom(70_000)]
    frames = b"".join(_frame(p) for p in parts)
    assert _lz4.decode_frames(memoryview(frames), 1 << 23) == b"".join(parts)


@pytest.mark.parametrize("kw", [{"block_linked": True}, {"content_checksum": True},
                                {"block_checksum": True}],
                         ids=["linked", "content-checksum", "block-checksum"])
def test_other_frame_shapes_are_left_to_the_general_decoder(kw):
    frame = _frame(TEXT, **kw)
    assert _lz4.decode_frames(frame, 1 << 23) is None
    assert compression.decompress(c.COMPRESSION_LZ4, frame, 1 << 23) == TEXT


def test_content_over_the_cap_raises_without_decoding_it_all():
    frame = _frame(TEXT)
    with pytest.raises(OverflowError):
        _lz4.decode_frames(frame, len(TEXT) - 1)
    with pytest.raises(OverflowError):  # declared size checked before decoding
        _lz4.decode_frames(_frame(TEXT, store_size=True), 1000)
    with pytest.raises(c.DecompressionLimitError):
        compression.decompress(c.COMPRESSION_LZ4, frame, len(TEXT) - 1)
    assert _lz4.decode_frames(frame, len(TEXT)) == TEXT
    # A cap inside a block: the block cannot be decoded into the room left, so the
    # general decoder is asked and names the limit.
    try:
        assert _lz4.decode_frames(frame, 100_000) is None
    except OverflowError:
        pass
    with pytest.raises(c.DecompressionLimitError):
        compression.decompress(c.COMPRESSION_LZ4, frame, 100_000)


def test_xxh32_matches_the_frame_descriptor_checksum():
    frame = _frame(b"hello")
    assert frame[6] == (_lz4.xxh32(frame[4:6]) >> 8) & 0xFF
    assert _lz4.xxh32(b"") == 0x02CC5D05  # xxHash32 of nothing, seed 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=3000), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10**6))
def test_damaged_frames_never_crash_nor_disagree_with_the_reference(data, edits, cut):
    frame = bytearray(_frame(data * 3))
    for pos, value in edits:
        frame[pos % len(frame)] = value
    frame = bytes(frame[:1 + cut % len(frame)])
    try:
        got = _lz4.decode_frames(frame, 1 << 20)
    except OverflowError:
        return
    if got is not None:
        assert got == lz4.frame.decompress(frame)


def test_produce_walk_over_lz4_uses_the_scratch_buffer_and_reports_damage():
    # validate_record_set(verify_records=True) walks lz4 batches in this thread's scratch
    # buffer; a batch whose content is wrong still gets the exact error.
    rnd = random.Random(7)
    values = [("".join(rnd.choice(string.ascii_uppercase) for _ in range(100))).encode()
              for _ in range(64)]
    recs = [(1_700_000_000_000 + i, None, values[i % 64]) for i in range(3000)]
    batch = c.build_batch(recs, compression=c.COMPRESSION_LZ4)
    small = c.build_batch(recs[:3], compression=c.COMPRESSION_LZ4)
    for data in (batch, small, batch + small):
        headers = c.validate_record_set(data, verify_records=True)
        assert sum(h.record_count for h in headers) == len(c.read_records(data))
    # count says 3001 while the content holds 3000 records: only the walk can tell
    bad = bytearray(batch)
    bad[57:61] = (3001).to_bytes(4, "big")
    bad[23:27] = (3000).to_bytes(4, "big")
    bad[17:21] = c.crc32c(bytes(bad[21:])).to_bytes(4, "big")
    with pytest.raises(c.InvalidRecordError, match="declares 3001 records but holds 3000"):
        c.validate_record_set(bytes(bad), verify_records=True)
    with pytest.raises(c.DecompressionLimitError):
        c.validate_record_set(batch, verify_records=True, decompress_limit=1000)
