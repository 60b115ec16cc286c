"""Retention by time and by size with a controllable clock; the active segment survives;
reads racing deletions keep working; deleted files go after file.delete.delay.ms."""

import os

from fastlog.server.log import IoWorker, Log, LogConfig
from tests.server.log.conftest import append_n, read_all

HOUR_MS = 3_600_000


def _log(tmp_path, clock, scheduler=None, **cfg):
    cfg.setdefault("segment_bytes", 600)
    return Log.open(str(tmp_path / "t-0"), LogConfig(**cfg), time_fn=clock, scheduler=scheduler)


def test_retention_by_time_uses_the_largest_timestamp(tmp_path, clock):
    log = _log(tmp_path, clock, retention_ms=10 * HOUR_MS, file_delete_delay_ms=0)
    now = int(clock() * 1000)
    # Segments hold 5 batches each; segment i's records are 20 - 3i hours old.
    append_n(log, 30, ts=lambda i: now - 20 * HOUR_MS + (i // 5) * 3 * HOUR_MS)
    segs = log.segments
    assert len(segs) == 6
    assert log.delete_old_segments() == 4  # 20, 17, 14 and 11 hours old
    assert log.segments == segs[4:]
    assert log.log_start_offset == segs[4].base_offset
    clock.advance_ms(100 * HOUR_MS)
    assert log.delete_old_segments() == 1
    assert log.segments == segs[5:]  # the active segment is never deleted
    assert read_all(log)[0][0] == segs[5].base_offset


def test_retention_by_size(tmp_path, clock):
    log = _log(tmp_path, clock, retention_bytes=1300, retention_ms=-1, file_delete_delay_ms=0)
    append_n(log, 30)
    sizes = [s.size for s in log.segments]
    assert log.delete_old_segments() == len(sizes) - 3
    assert log.size_in_bytes <= 1300 + sizes[0]
    assert log.size_in_bytes - log.segments[0].size < 1300 or len(log.segments) == 1


def test_no_retention_when_policy_is_compact(tmp_path, clock):
    log = _log(tmp_path, clock, retention_ms=1, retention_bytes=1, cleanup_policy=("compact",))
    append_n(log, 30)
    assert log.delete_old_segments() == 0


def test_nothing_above_the_high_watermark_is_deleted(tmp_path, clock):
    log = _log(tmp_path, clock, retention_ms=1, file_delete_delay_ms=0)
    log.hw_follows_leo = False
    append_n(log, 30)
    log.update_high_watermark(log.segments[2].base_offset)
    assert log.delete_old_segments() == 2


def test_reads_racing_deletion_stay_readable(tmp_path, clock):
    worker = IoWorker()
    try:
        log = _log(tmp_path, clock, scheduler=worker, retention_ms=1, file_delete_delay_ms=50)
        append_n(log, 30)
        old = log.segments[0]
        info = log.read(0, 1 << 20)  # an in-flight fetch holding a region of segment 0
        expected = info.regions[0].read()
        n_before = len(log.segments)
        assert log.delete_old_segments() == n_before - 1
        assert old.file.path.endswith(".log.deleted") and os.path.exists(old.file.path)
        assert info.regions[0].read() == expected  # renamed: still readable
        assert worker.drain(timeout=10)
        clock.advance_ms(0)
        import time
        deadline = time.monotonic() + 10
        while os.path.exists(old.file.path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not os.path.exists(old.file.path)  # unlinked after the delay ...
        assert info.regions[0].read() == expected  # ... yet the fetch can still send it
        assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
    finally:
        worker.shutdown()


def test_leftover_deleted_files_are_removed_at_load(tmp_path, clock):
    log = _log(tmp_path, clock, retention_ms=1, file_delete_delay_ms=60_000,
               scheduler=IoWorker())
    append_n(log, 30)
    log.delete_old_segments()
    log.scheduler.shutdown()  # delayed deletions are dropped, as in a crash
    assert [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
    log.close()
    again = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=600), time_fn=clock)
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
    assert again.log_start_offset == again.segments[0].base_offset > 0
