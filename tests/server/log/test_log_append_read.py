"""Log: append (leader and replica), read (ranges, max bytes, high watermark), offsets by
timestamp, truncation, log start offset, reopen, flush policy, leader epochs."""

import os

import pytest

from fastlog._codec import scan_batches, stamp_batches
from fastlog.server.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    IoWorker,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from tests.server.log.conftest import append_n, make_batch, open_log, read_all, record_set


def test_append_assigns_offsets_and_reports(tmp_path):
    log = open_log(tmp_path / "t-0")
    buf, hs = record_set(make_batch(3, timestamp=50), make_batch(2, timestamp=70))
    info = log.append(buf, hs, leader_epoch=4)
    assert (info.first_offset, info.last_offset, info.num_messages) == (0, 4, 5)
    assert (info.max_timestamp, info.offset_of_max_timestamp) == (71, 4)
    assert info.valid_bytes == len(buf) and info.log_append_time == -1
    assert log.log_end_offset == 5 == log.high_watermark
    assert [h.base_offset for h in hs] == [0, 3]
    assert all(h.partition_leader_epoch == 4 for h in hs)
    assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == bytes(buf)
    assert (log.topic, log.partition) == ("t", 0)


def test_read_bounds_and_out_of_range(tmp_path):
    log = open_log(tmp_path / "t-1")
    append_n(log, 10)
    assert log.read(20, 100).regions == []  # at the log end: nothing, no error
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)
    log.delete_records_before(6)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)
    info = log.read(6, 100)
    assert info.first_batch_offset == 6


def test_read_min_one_batch_and_max_bytes(tmp_path):
    log = open_log(tmp_path / "t-0")
    append_n(log, 10, value_size=100)
    one = log.read(0, 1)
    assert one.size == one.regions[0].length > 1 and not one.first_entry_incomplete
    cut = log.read(0, 10, min_one_batch=False)
    assert cut.size == 10 and cut.first_entry_incomplete
    three = log.read(0, one.size * 3)
    assert three.size == one.size * 3


def test_read_stops_at_high_watermark(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1000)
    log.hw_follows_leo = False
    append_n(log, 30)
    log.update_high_watermark(14)
    got = []
    offset = 0
    while True:
        info = log.read(offset, 1 << 20, max_position=log.high_watermark)
        if not info.regions:
            break
        hs = scan_batches(info.regions[0].read()).batches
        got += [h.base_offset for h in hs]
        offset = hs[-1].next_offset
    assert got == list(range(0, 14, 2))


def test_replicated_append_keeps_offsets_and_checks_order(tmp_path):
    leader = open_log(tmp_path / "t-0")
    append_n(leader, 5, epoch=3)
    follower = open_log(tmp_path / "f-0")
    data = b"".join(raw for _, raw in read_all(leader))
    buf, hs = record_set(data)
    info = follower.append(buf, hs, leader_epoch=9, assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (0, 9)
    assert read_all(follower) == read_all(leader)
    assert follower.leader_epoch_cache.entries() == [(3, 0)]
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append(*record_set(data), leader_epoch=3, assign_offsets=False)
    bad, bad_hs = record_set(make_batch(2), make_batch(2))
    stamp_batches(bad, bad_hs[:1], 20, 3)
    stamp_batches(bad, bad_hs[1:], 20, 3)
    with pytest.raises(OffsetsOutOfOrderError):
        follower.append(bad, bad_hs, leader_epoch=3, assign_offsets=False)


def test_batch_over_max_message_bytes_is_refused(tmp_path):
    log = open_log(tmp_path / "t-0", max_message_bytes=200)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(*record_set(make_batch(5, value_size=100)), leader_epoch=0)
    assert log.log_end_offset == 0


def test_fetch_offset_by_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600, index_interval_bytes=100)
    append_n(log, 30, ts=lambda i: 1000 + 100 * i)  # records at 1000+100i and +1
    assert log.num_segments > 3
    assert log.fetch_offset_by_timestamp(0) == (0, 1000)
    assert log.fetch_offset_by_timestamp(1001) == (1, 1001)
    assert log.fetch_offset_by_timestamp(1002) == (2, 1100)
    assert log.fetch_offset_by_timestamp(3901) == (59, 3901)
    assert log.fetch_offset_by_timestamp(3902) is None
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)[0] == 0
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP)[0] == 60
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (59, 3901)


def test_truncate_to_and_continue(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    append_n(log, 30, epoch=1)
    append_n(log, 10, epoch=2)
    segments_before = log.num_segments
    assert log.truncate_to(31)  # inside the batch 30..31: the whole batch goes
    assert log.log_end_offset == 30 and log.num_segments < segments_before
    assert log.leader_epoch_cache.entries() == [(1, 0)]
    assert [b for b, _ in read_all(log)] == list(range(0, 30, 2))
    append_n(log, 1, epoch=3)
    assert log.log_end_offset == 32
    assert not log.truncate_to(100)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (0, 0, 1)


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    append_n(log, 20)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert [s.base_offset for s in log.segments] == [500]
    append_n(log, 1)
    assert read_all(log)[0][0] == 500
    # the new segment's offset and time indexes get their files with a first entry, or at
    # close; its .txnindex with a first aborted transaction (none here)
    assert sorted(os.listdir(tmp_path / "t-0")) == [
        "00000000000000000500.log", "leader-epoch-checkpoint"]
    log.close()
    assert sorted(os.listdir(tmp_path / "t-0")) == [
        "00000000000000000500.index", "00000000000000000500.log",
        "00000000000000000500.timeindex", "leader-epoch-checkpoint"]


def test_delete_records_before_moves_start_offset(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600, retention_ms=-1)
    append_n(log, 20)
    assert log.delete_records_before(13) == 13
    assert log.delete_records_before(5) == 13  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(41)
    assert log.read(13, 10).first_batch_offset == 12  # the batch holding 13
    deleted = log.delete_old_segments()
    assert deleted == 1 and log.segments[0].base_offset <= 13 < log.segments[1].base_offset


def test_reopen_after_clean_close_keeps_everything(tmp_path):
    cfg = dict(segment_bytes=700, index_interval_bytes=150)
    log = open_log(tmp_path / "t-0", **cfg)
    append_n(log, 40, ts=lambda i: 5000 + i)
    before = read_all(log)
    entries = [s.offset_index.entries for s in log.segments]
    log.close()
    again = Log.open(str(tmp_path / "t-0"), LogConfig(**cfg), recovery_point=0)
    assert read_all(again) == before
    assert [s.offset_index.entries for s in again.segments] == entries
    append_n(again, 3)
    assert again.log_end_offset == 86


def test_flush_messages_flushes_in_the_background(tmp_path):
    worker = IoWorker()
    try:
        log = Log.open(str(tmp_path / "t-0"), LogConfig(flush_messages=4), scheduler=worker)
        buf, hs = record_set(make_batch(2))
        assert log.append(buf, hs, 0).flush_future is None
        buf, hs = record_set(make_batch(2))
        info = log.append(buf, hs, 0)
        assert info.flush_future is not None
        info.flush_future.result(timeout=10)
        assert log.recovery_point == 4
        assert log.unflushed_messages == 0
    finally:
        worker.shutdown()


def test_default_policy_leaves_flushing_to_roll(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    append_n(log, 3)
    assert log.recovery_point == 0
    append_n(log, 30)
    assert log.recovery_point == log.active_segment.base_offset > 0


def test_roll_on_time_uses_record_timestamps(tmp_path):
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    append_n(log, 3, ts=lambda i: 10_000 + 400 * i)
    assert log.num_segments == 1
    append_n(log, 1, ts=20_000)
    assert log.num_segments == 2 and log.active_segment.base_offset == 6


def test_roll_when_index_is_full(tmp_path):
    log = open_log(tmp_path / "t-0", segment_index_bytes=32, index_interval_bytes=1)
    append_n(log, 12)
    assert log.num_segments > 2
    assert [b for b, _ in read_all(log)] == list(range(0, 24, 2))


def test_background_flushes_race_appends_and_truncation(tmp_path):
    worker = IoWorker()
    try:
        log = Log.open(str(tmp_path / "t-0"), LogConfig(flush_messages=1, segment_bytes=2000),
                       scheduler=worker)
        futures = []
        for _round in range(5):
            for _ in range(40):
                buf, hs = record_set(make_batch(2, value_size=30))
                info = log.append(buf, hs, 0)
                futures.append(info.flush_future)
                assert log.recovery_point <= log.log_end_offset
            # Truncate while flushes may still be queued or running.
            log.truncate_to(log.log_end_offset - 20)
            assert log.recovery_point <= log.log_end_offset
        for f in futures:
            f.result(timeout=30)
        assert worker.drain(30)
        assert log.recovery_point <= log.log_end_offset == 5 * 60
        log.flush()
        assert log.recovery_point == log.log_end_offset
        assert [b for b, _ in read_all(log)] == list(range(0, 300, 2))
    finally:
        worker.shutdown()
