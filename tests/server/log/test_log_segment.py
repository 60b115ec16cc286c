"""LogSegment: append writes bytes unchanged, index entries every index.interval.bytes,
reads and offset translation, recovery rebuilds identical indexes, roll rules."""

from fastlog._codec import scan_batches, stamp_batches
from fastlog.server.log import LogConfig
from fastlog.server.log.segment import LogSegment
from tests.server.log.conftest import make_batch, record_set


def _segment(tmp_path, base=100, **cfg):
    return LogSegment.open(str(tmp_path), base, LogConfig(**cfg), now_ms=0)


def _append(seg, n, start=None, value_size=30, ts0=1000):
    offset = seg.next_offset if start is None else start
    raw = []
    for i in range(n):
        buf, hs = record_set(make_batch(3, timestamp=ts0 + 10 * i, value_size=value_size))
        offset = stamp_batches(buf, hs, offset, 7)
        seg.append(buf, hs)
        raw.append(bytes(buf))
    return raw


def test_append_writes_the_stamped_bytes_unchanged(tmp_path):
    seg = _segment(tmp_path)
    raw = _append(seg, 5)
    data = (tmp_path / "00000000000000000100.log").read_bytes()
    assert data == b"".join(raw)
    assert seg.size == len(data) and seg.next_offset == 115


def test_index_entries_every_interval_point_at_batch_starts(tmp_path):
    seg = _segment(tmp_path, index_interval_bytes=250)
    _append(seg, 40)
    data = (tmp_path / "00000000000000000100.log").read_bytes()
    batches = {h.position: h for h in scan_batches(data).batches}
    assert seg.offset_index.entries > 5
    last_pos = 0
    for n in range(seg.offset_index.entries):
        offset, pos = seg.offset_index.entry(n)
        assert batches[pos].last_offset == offset
        assert pos - last_pos > 250
        last_pos = pos
    assert seg.time_index.entries == seg.offset_index.entries


def test_read_translates_offsets_inside_batches(tmp_path):
    seg = _segment(tmp_path, index_interval_bytes=100)
    _append(seg, 20)
    for target in (100, 101, 102, 103, 131, 159):
        r = seg.read(target, 10)
        h = scan_batches((tmp_path / "00000000000000000100.log").read_bytes()[r.position:]).batches[0]
        assert h.base_offset <= target <= h.last_offset
        assert r.first_batch_offset == h.base_offset
        assert r.length == h.size  # min one message beats max_size=10
        assert not r.first_entry_incomplete
    assert seg.read(160, 100) is None
    r = seg.read(100, 10, min_one_message=False)
    assert r.length == 10 and r.first_entry_incomplete


def test_read_stops_at_max_position(tmp_path):
    seg = _segment(tmp_path)
    _append(seg, 10)
    first = seg.read(100, 10)
    r = seg.read(100, 10_000, max_position=first.length * 2)
    assert r.length == first.length * 2


def test_recover_rebuilds_the_same_indexes(tmp_path):
    seg = _segment(tmp_path, index_interval_bytes=200)
    _append(seg, 60)
    clean_offsets = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    clean_times = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    assert seg.recover() == 0
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == clean_offsets
    assert [seg.time_index.entry(i) for i in range(seg.time_index.entries)] == clean_times
    assert seg.next_offset == 280


def test_truncate_to_removes_whole_batches(tmp_path):
    seg = _segment(tmp_path, index_interval_bytes=100)
    raw = _append(seg, 10)
    removed = seg.truncate_to(113)  # inside the batch 112..114
    assert seg.next_offset == 112
    assert removed == sum(len(b) for b in raw[4:])
    assert seg.offset_index.last_offset < 112
    _append(seg, 2)
    assert seg.next_offset == 118


def test_find_offset_by_timestamp_returns_the_exact_record(tmp_path):
    seg = _segment(tmp_path, index_interval_bytes=100)
    _append(seg, 10, ts0=1000)  # batch i: records at 1000+10i, +1, +2
    assert seg.find_offset_by_timestamp(1031, 0) == (100 + 3 * 3 + 1, 1031)
    assert seg.find_offset_by_timestamp(0, 0) == (100, 1000)
    assert seg.find_offset_by_timestamp(5000, 0) is None
    assert seg.find_offset_by_timestamp(0, 105) == (105, 1012)


def test_roll_rules(tmp_path):
    cfg = LogConfig(segment_bytes=1000, segment_ms=60_000, segment_index_bytes=24)
    seg = LogSegment.open(str(tmp_path), 0, cfg, now_ms=0)
    assert not seg.should_roll(100, 1000, 5, 0, cfg)
    _append(seg, 1, start=0)
    assert seg.should_roll(1000, 1000, 5, 0, cfg)  # size
    assert seg.should_roll(10, 1002 + 60_001, 5, 0, cfg)  # age by record timestamps
    assert not seg.should_roll(10, 1002 + 59_000, 5, 0, cfg)
    assert seg.should_roll(10, 1000, 2**31 + 5, 0, cfg)  # relative offset overflow
    seg.time_index.maybe_append(2000, 0)  # 2 slots, the last one kept for the roll
    assert seg.time_index.is_full and seg.should_roll(10, 1000, 5, 0, cfg)  # index full
