"""OffsetIndex: Kafka's file format, lookups (warm and cold sections), truncation, resize,
sanity checks on damaged files."""

import bisect
import os
import random
import struct

import pytest
from fastlog._index import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    OffsetIndex,
)
from hypothesis import given, settings
from hypothesis import strategies as st

BASE = 1000


def _filled(tmp_path, n, base=BASE, step=3, name="a.index", max_size=None):
    idx = OffsetIndex(tmp_path / name, base, max_index_size=max_size or (n + 1) * 8)
    for i in range(n):
        idx.append(base + step * i + 1, 100 * i + 7)
    return idx


def test_new_file_is_preallocated_and_entries_are_big_endian_relative(tmp_path):
    path = tmp_path / "00000000000000001000.index"
    idx = OffsetIndex(path, BASE, max_index_size=4096 + 5)
    # no file until the first entry (as Kafka's LazyIndex)
    assert not path.exists() and not idx.has_file and not idx.closed
    assert idx.length == 4096  # rounded down to whole entries
    assert idx.max_entries == 512 and idx.entries == 0
    assert idx.lookup(BASE + 9) == (BASE, 0)
    idx.append(BASE + 5, 0)
    assert os.path.getsize(path) == 4096 and idx.has_file
    idx.append(BASE + 70000, 123456)
    idx.close()  # trims to the valid entries
    data = path.read_bytes()
    assert data == struct.pack(">ii", 5, 0) + struct.pack(">ii", 70000, 123456)


def test_reopen_existing_file_sees_its_entries(tmp_path):
    idx = _filled(tmp_path, 50)
    idx.close()
    again = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=4096)
    assert again.entries == 50
    assert again.entry(49) == (BASE + 3 * 49 + 1, 4907)
    again.sanity_check()
    assert again.resize(4096) and again.entries == 50 and not again.is_full


def test_existing_file_is_opened_only_when_used(tmp_path):
    idx = _filled(tmp_path, 50)
    idx.close()
    again = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=4096)
    # entries come from the file's size; no descriptor or mapping until a lookup
    assert again.entries == 50 and not again.is_open and not again.closed
    assert again.lookup(BASE + 3 * 10 + 1) == (BASE + 31, 1007)
    assert again.is_open
    assert again.unload() and not again.is_open
    assert again.last_offset == BASE + 3 * 49 + 1 and again.is_open
    assert again.unload()
    again.close()
    assert again.closed and (tmp_path / "a.index").stat().st_size == 50 * 8


def test_empty_existing_file_is_never_opened_by_resizes(tmp_path):
    idx = OffsetIndex(tmp_path / "e.index", BASE, max_index_size=4096)
    idx.close()
    assert (tmp_path / "e.index").stat().st_size == 0
    again = OffsetIndex(tmp_path / "e.index", BASE, max_index_size=4096)
    again.sanity_check()
    assert again.resize(4096) and again.max_entries == 512 and not again.is_open
    assert again.lookup(BASE + 5) == (BASE, 0)
    again.append(BASE + 5, 0)  # the first entry makes the file at its full size
    assert again.is_open and (tmp_path / "e.index").stat().st_size == 4096
    again.close()
    assert (tmp_path / "e.index").stat().st_size == 8
    # an index without entries closes to an empty file without being mapped
    third = OffsetIndex(tmp_path / "f.index", BASE, max_index_size=4096)
    third.close()
    assert (tmp_path / "f.index").stat().st_size == 0 and not third.is_open


def test_lookup_before_first_entry_returns_base(tmp_path):
    idx = _filled(tmp_path, 10)
    assert idx.lookup(BASE) == (BASE, 0)
    assert idx.lookup(0) == (BASE, 0)
    empty = OffsetIndex(tmp_path / "b.index", BASE)
    assert empty.lookup(BASE + 99) == (BASE, 0)


def test_lookup_exact_between_and_past_end(tmp_path):
    idx = _filled(tmp_path, 10)
    assert idx.lookup(BASE + 1) == (BASE + 1, 7)
    assert idx.lookup(BASE + 5) == (BASE + 4, 107)
    assert idx.lookup(BASE + 10**9) == (BASE + 28, 907)


def test_lookups_match_a_sorted_list_across_warm_and_cold_sections(tmp_path):
    # 5000 entries: the warm tail is the last 1024, so both search paths run.
    n = 5000
    idx = _filled(tmp_path, n, step=2)
    keys = [BASE + 2 * i + 1 for i in range(n)]
    for target in list(range(BASE - 2, BASE + 2 * n + 4, 7)) + [keys[n - 1025], keys[n - 1024]]:
        slot = bisect.bisect_right(keys, target) - 1
        want = (BASE, 0) if slot < 0 else (keys[slot], 100 * slot + 7)
        assert idx.lookup(target) == want


def test_lookup_many_agrees_with_lookup(tmp_path):
    from array import array

    idx = _filled(tmp_path, 3000)
    targets = array("q", range(BASE - 5, BASE + 9100, 13))
    offs = array("q", bytes(8 * len(targets)))
    poss = array("q", bytes(8 * len(targets)))
    assert idx.lookup_many(targets, offs, poss) == len(targets)
    for t, o, p in zip(targets, offs, poss, strict=True):
        assert idx.lookup(t) == (o, p)
    with pytest.raises(ValueError):
        idx.lookup_many(targets, offs[:3], poss)


def test_append_rejects_non_increasing_overflowing_and_full(tmp_path):
    idx = OffsetIndex(tmp_path / "c.index", BASE, max_index_size=16)
    idx.append(BASE + 10, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 10, 50)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE + 2**31, 50)
    idx.append(BASE + 11, 50)
    assert idx.is_full
    with pytest.raises(IndexFullError):
        idx.append(BASE + 12, 60)


def test_truncate_to_removes_entries_at_and_after_offset(tmp_path):
    idx = _filled(tmp_path, 10)  # offsets BASE+1, +4, +7, ...
    idx.truncate_to(BASE + 7)
    assert idx.entries == 2 and idx.last_offset == BASE + 4
    idx.truncate_to(BASE + 6)
    assert idx.entries == 2
    idx.truncate_to(BASE + 3)
    assert idx.entries == 1
    idx.truncate_to(BASE)
    assert idx.entries == 0 and idx.last_offset == BASE
    idx.append(BASE + 2, 5)  # appending after truncation works
    assert idx.lookup(BASE + 100) == (BASE + 2, 5)


def test_resize_and_trim(tmp_path):
    idx = _filled(tmp_path, 4, max_size=800)
    assert idx.length == 800
    assert idx.trim_to_valid_size()
    assert idx.length == 32 and idx.is_full
    assert os.path.getsize(idx.path) == 32
    idx.resize(64)
    assert idx.entries == 4 and not idx.is_full
    idx.resize(16)  # shrinking below the entries drops the tail
    assert idx.entries == 2
    idx.reset()
    assert idx.entries == 0 and idx.length == idx.max_index_size - idx.max_index_size % 8


def test_fetch_upper_bound_offset(tmp_path):
    idx = _filled(tmp_path, 10)  # positions 7, 107, 207, ...
    assert idx.fetch_upper_bound_offset(7, 150) == BASE + 7
    assert idx.fetch_upper_bound_offset(7, 100) == BASE + 4
    assert idx.fetch_upper_bound_offset(900, 1000) is None


@pytest.mark.parametrize("damage", ["zero_tail", "garbage", "odd_size", "out_of_segment"])
def test_sanity_check_rejects_damaged_files(tmp_path, damage):
    idx = _filled(tmp_path, 20)
    idx.close()
    path = tmp_path / "a.index"
    data = bytearray(path.read_bytes())
    segment_size = None
    if damage == "zero_tail":
        data += bytes(64)
    elif damage == "garbage":
        data[40:80] = random.Random(1).randbytes(40)
    elif damage == "odd_size":
        data += b"\x01\x02\x03"
    else:
        segment_size = 500
    path.write_bytes(bytes(data))
    idx = OffsetIndex(path, BASE)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(segment_size)


def test_closed_index_refuses_use_and_delete_removes_file(tmp_path):
    idx = _filled(tmp_path, 3)
    idx.flush()
    idx.close()
    with pytest.raises(ValueError):
        idx.lookup(BASE)
    idx2 = OffsetIndex(tmp_path / "a.index", BASE)
    idx2.rename_to(tmp_path / "a.index.deleted")
    assert (tmp_path / "a.index.deleted").exists()
    assert idx2.lookup(BASE + 4) == (BASE + 4, 107)  # mapping survives the rename
    assert idx2.delete() and not (tmp_path / "a.index.deleted").exists()
    assert not idx2.delete()


@settings(max_examples=150, deadline=None)
@given(gaps=st.lists(st.integers(1, 50), min_size=0, max_size=300),
       targets=st.lists(st.integers(-10, 20000), max_size=40),
       cut=st.integers(-5, 16000))
def test_lookup_and_truncate_match_model(tmp_path_factory, gaps, targets, cut):
    path = tmp_path_factory.mktemp("h") / "m.index"
    idx = OffsetIndex(path, 0, max_index_size=8 * 400)
    keys, positions, off = [], [], -1
    for i, g in enumerate(gaps):
        off += g
        idx.append(off, 10 * i)
        keys.append(off)
        positions.append(10 * i)

    def model(t):
        slot = bisect.bisect_right(keys, t) - 1
        return (0, 0) if slot < 0 else (keys[slot], positions[slot])

    for t in targets:
        assert idx.lookup(t) == model(t)
    idx.truncate_to(cut)
    keep = bisect.bisect_left(keys, cut)
    del keys[keep:], positions[keep:]
    assert idx.entries == len(keys)
    for t in targets:
        assert idx.lookup(t) == model(t)
    idx.sanity_check()
    idx.delete()


def test_lookup_bounds_gives_the_next_entry_position(tmp_path):
    idx = _filled(tmp_path, 5)  # offsets BASE+1, +4, ...; positions 7, 107, ...
    assert idx.lookup_bounds(BASE) == (BASE, 0, 7)
    assert idx.lookup_bounds(BASE + 5) == (BASE + 4, 107, 207)
    assert idx.lookup_bounds(BASE + 100) == (BASE + 13, 407, -1)
    assert OffsetIndex(tmp_path / "e.index", BASE).lookup_bounds(BASE + 3) == (BASE, 0, -1)


def _cached_pages(path) -> int:
    """How many pages of the file are in the page cache (mincore over a read mapping)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(pages)
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(b & 1 for b in vec.raw)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def test_first_entry_of_a_new_index_caches_its_own_page_not_the_holes_around_it(tmp_path):
    # The file is sparse at its full size: the kernel's read-around on the first store's
    # fault used to zero and cache megabytes of holes (2-4 ms per new index).
    path = tmp_path / "00000000000000001000.index"
    idx = OffsetIndex(path, BASE, max_index_size=10 * 1024 * 1024)
    idx.append(BASE + 1, 0)
    idx.append(BASE + 2, 4200)
    assert os.path.getsize(path) == 10 * 1024 * 1024
    assert _cached_pages(path) <= 16
    assert idx.lookup(BASE + 2) == (BASE + 2, 4200)
    idx.close()
