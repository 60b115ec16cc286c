"""TimeIndex: Kafka's 12-byte format, maybe_append rules, lookups, truncation, damage."""

import random
import struct

import pytest
from fastlog._index import (
    NO_TIMESTAMP,
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    TimeIndex,
)

BASE = 500


def test_format_is_big_endian_timestamp_then_relative_offset(tmp_path):
    path = tmp_path / "00000000000000000500.timeindex"
    idx = TimeIndex(path, BASE, max_index_size=120)
    assert idx.maybe_append(1_700_000_000_000, BASE + 3)
    idx.close()
    assert path.read_bytes() == struct.pack(">qi", 1_700_000_000_000, 3)


def test_maybe_append_only_when_timestamp_grows(tmp_path):
    idx = TimeIndex(tmp_path / "t", BASE, max_index_size=120)
    assert idx.last_entry == (NO_TIMESTAMP, BASE)
    assert idx.maybe_append(100, BASE + 1)
    assert not idx.maybe_append(100, BASE + 2)  # same timestamp: no new entry
    assert idx.entries == 1
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(200, BASE)  # offset goes back
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(50, BASE + 9)  # timestamp goes back
    assert idx.maybe_append(200, BASE + 9)
    assert idx.last_entry == (200, BASE + 9)


def test_last_slot_is_reserved_for_the_roll_entry(tmp_path):
    idx = TimeIndex(tmp_path / "t", BASE, max_index_size=36)  # 3 slots
    idx.maybe_append(1, BASE + 1)
    idx.maybe_append(2, BASE + 2)
    assert idx.is_full
    with pytest.raises(IndexFullError):
        idx.maybe_append(3, BASE + 3)
    assert idx.maybe_append(3, BASE + 3, skip_full_check=True)
    assert idx.entries == 3


def test_lookup_largest_timestamp_not_after_target(tmp_path):
    idx = TimeIndex(tmp_path / "t", BASE, max_index_size=12 * 3000)
    for i in range(2000):  # spans warm and cold sections
        idx.maybe_append(1000 + 10 * i, BASE + 2 * i)
    assert idx.lookup(999) == (NO_TIMESTAMP, BASE)
    assert idx.lookup(1000) == (1000, BASE)
    assert idx.lookup(1015) == (1010, BASE + 2)
    assert idx.lookup(10**12) == (1000 + 10 * 1999, BASE + 3998)
    for i in range(0, 2000, 37):
        assert idx.lookup(1000 + 10 * i + 5) == (1000 + 10 * i, BASE + 2 * i)


def test_truncate_to_offset(tmp_path):
    idx = TimeIndex(tmp_path / "t", BASE, max_index_size=1200)
    for i in range(10):
        idx.maybe_append(10 * i + 10, BASE + 5 * i)
    idx.truncate_to(BASE + 20)
    assert idx.entries == 4 and idx.last_entry == (40, BASE + 15)
    idx.truncate_to(BASE + 16)
    assert idx.entries == 4
    idx.truncate_to(BASE)
    assert idx.entries == 0


@pytest.mark.parametrize("damage", ["zero_tail", "garbage", "odd_size"])
def test_sanity_check_rejects_damaged_files(tmp_path, damage):
    path = tmp_path / "t.timeindex"
    idx = TimeIndex(path, BASE, max_index_size=1200)
    for i in range(20):
        idx.maybe_append(1000 + i, BASE + i)
    idx.close()
    data = bytearray(path.read_bytes())
    if damage == "zero_tail":
        data += bytes(36)
    elif damage == "garbage":
        data[60:120] = random.Random(2).randbytes(60)
    else:
        data += b"\x00"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, BASE).sanity_check()


def test_sanity_check_rejects_offsets_beyond_the_segment(tmp_path):
    idx = TimeIndex(tmp_path / "t", BASE, max_index_size=120)
    idx.maybe_append(5, BASE + 7)
    idx.sanity_check(next_offset=BASE + 8)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(next_offset=BASE + 7)
