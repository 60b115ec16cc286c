"""The compiled per-batch helpers: SegmentIndexer (index entries every interval bytes, as
Kafka's LogSegment.append does; the index files come with the first entry an append may
add) and summarize_batches (what Log.append reports)."""

from fastlog._index import OffsetIndex, SegmentIndexer, TimeIndex, summarize_batches

from fastlog._codec import build_batch, stamp_batches, validate_record_set


def _batches(n, size=200, ts0=1000):
    raw = b"".join(build_batch([(ts0 + i, b"k", b"v" * size)]) for i in range(n))
    buf = bytearray(raw)
    hs = validate_record_set(buf)
    stamp_batches(buf, hs, 50, 3)
    return buf, hs


def test_entries_every_interval_like_kafka(tmp_path):
    buf, hs = _batches(10)
    oi = OffsetIndex(tmp_path / "a.index", 50, 4096)
    ti = TimeIndex(tmp_path / "a.timeindex", 50, 4096)
    ix = SegmentIndexer(oi, ti, 500)
    assert ix.add(hs, 0) == 10
    # An entry goes before the first batch that follows more than 500 bytes since the last.
    expected, since = [], 0
    for h in hs:
        if since > 500:
            expected.append((h.last_offset, h.position))
            since = 0
        since += h.size
    assert [oi.entry(i) for i in range(oi.entries)] == expected
    assert ti.entries == oi.entries
    assert (ix.max_timestamp, ix.offset_of_max_timestamp) == (1009, 59)
    assert ix.bytes_since == since


def test_offset_checks_stop_at_the_first_out_of_order_batch(tmp_path):
    buf, hs = _batches(6)
    stamp_batches(buf, hs[3:4], 40, 3)  # batch 3 goes back in offsets
    ix = SegmentIndexer(OffsetIndex(tmp_path / "a.index", 50, 4096),
                        TimeIndex(tmp_path / "a.timeindex", 50, 4096), 100,
                        prev_last_offset=49)
    epochs = []
    assert ix.add(hs, 0, True, epochs) == 3
    assert ix.prev_last_offset == 52 and epochs == [(3, 50)]


def test_summarize_batches():
    buf, hs = _batches(4)
    count, max_ts, off_max, epochs, bad, reason = summarize_batches(hs, 10_000, 50, True, -1)
    assert (count, max_ts, off_max, epochs, bad, reason) == (4, 1003, 53, [(3, 50)], -1, None)
    assert summarize_batches(hs, 100, 50, False, 3)[4:] == (0, "too_large")
    assert summarize_batches(hs, 10_000, 52, True, 3)[4:] == (0, "order")
    assert summarize_batches(hs, 10_000, 50, True, 3)[3] == []


def test_index_files_come_with_the_first_entry(tmp_path):
    # A new segment's indexes have no files while appends cannot add an entry (Kafka's
    # LazyIndex); the reservation before an append that may add one creates them.
    buf, hs = _batches(3)
    oi = OffsetIndex(tmp_path / "a.index", 50, 4096)
    ti = TimeIndex(tmp_path / "a.timeindex", 50, 4096)
    ix = SegmentIndexer(oi, ti, 500)
    ix.reserve(1, 0)
    assert ix.add(hs[:1], 0) == 1 and oi.entries == 0
    ix.reserve(1, 0)  # one batch of ~270 bytes follows: still within 500 since the start
    assert ix.add(hs[1:2], 0) == 1
    assert not (tmp_path / "a.index").exists() and not (tmp_path / "a.timeindex").exists()
    assert not oi.has_file and not ti.has_file and oi.length == 4096
    assert ix.bytes_since > 500  # the next batch gets an entry: reserve makes the files first
    ix.reserve(1, 0)
    assert oi.has_file and (tmp_path / "a.index").stat().st_size == 4096
    assert ix.add(hs[2:], 0) == 1 and oi.entries == 1 and ti.entries == 1
    oi.close()
    ti.close()
    assert (tmp_path / "a.index").stat().st_size == 8


def test_a_multi_batch_append_that_may_add_an_entry_reserves_first(tmp_path):
    buf, hs = _batches(3)
    oi = OffsetIndex(tmp_path / "a.index", 50, 4096)
    ti = TimeIndex(tmp_path / "a.timeindex", 50, 4096)
    ix = SegmentIndexer(oi, ti, 500)
    ix.reserve(3, hs[2].position - hs[0].position)  # ~540 bytes before the last batch
    assert oi.has_file and ti.has_file
    assert ix.add(hs, 0) == 3 and oi.entries == 1


def test_reserve_with_touch_zeroes_only_the_space_past_the_entries(tmp_path):
    # (the write thread of a write-behind append faults the next entries' pages in)
    buf, hs = _batches(10)
    oi = OffsetIndex(tmp_path / "a.index", 50, 4096)
    ti = TimeIndex(tmp_path / "a.timeindex", 50, 4096)
    ix = SegmentIndexer(oi, ti, 100)
    ix.add(hs, 0)
    entries = [oi.entry(i) for i in range(oi.entries)]
    oi.truncate_to(entries[2][0])  # leaves stale bytes behind the entries
    ti.truncate_to(entries[2][0])
    kept = oi.entries
    ix.reserve(3, touch=True)
    assert [oi.entry(i) for i in range(oi.entries)] == entries[:kept]
    with open(oi.path, "rb") as f:
        f.seek(kept * 8)
        assert f.read(3 * 8) == bytes(3 * 8)
    ix.bytes_since = 101
    assert ix.add(hs[-1:], 0) == 1  # the next store lands in the touched space
    assert oi.entry(kept) == (hs[-1].last_offset, hs[-1].position)
