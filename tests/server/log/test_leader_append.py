"""The compiled leader append (fastlog/server/log/_append.pyx) against Log's own path:
the same offsets and LogAppendInfo, byte-identical `.log`, `.index` and `.timeindex`
files for the same appends (index entries every index.interval.bytes, rolls by size, by
time and by a full index, truncation then append, a new leader epoch, a reopened log),
max.message.bytes, flush.messages, LogAppendTime, a replicated high watermark, a full
disk (ENOSPC, nothing left behind) and recovery after SIGKILL."""

import errno
import gc
import os
import random
import signal
import subprocess
import sys
import textwrap
import weakref

import pytest

from fastlog.server.log import Log, LogConfig, RecordBatchTooLargeError
from tests.server.log.conftest import Clock, make_batch, open_log, read_all, record_set
from tests.tmpfs_fixture import small_tmpfs

NOW = 1_700_000_000_000


def twin_logs(tmp_path, **cfg):
    """(compiled, own path): the same settings in two directories; the second never arms
    the compiled append."""
    fast = open_log(tmp_path / "fast" / "t-0", **cfg)
    slow = open_log(tmp_path / "slow" / "t-0", **cfg)
    slow._fast.enabled = False
    return fast, slow


def append_both(logs, batches, epoch=0, now_ms=NOW):
    """The same record set appended to each log; their LogAppendInfo must agree."""
    infos = []
    for log in logs:
        buf, hs = record_set(*batches)
        infos.append(log.append(buf, hs, leader_epoch=epoch, now_ms=now_ms))
    first = infos[0]
    for other in infos[1:]:
        assert (first.first_offset, first.last_offset, first.max_timestamp,
                first.offset_of_max_timestamp, first.log_append_time, first.num_messages,
                first.valid_bytes, first.log_start_offset) == (
            other.first_offset, other.last_offset, other.max_timestamp,
            other.offset_of_max_timestamp, other.log_append_time, other.num_messages,
            other.valid_bytes, other.log_start_offset)
        assert (first.flush_future is None) == (other.flush_future is None)
    return first


def files(log):
    return {name: (open(os.path.join(log.dir, name), "rb").read())
            for name in sorted(os.listdir(log.dir))}


def assert_same(fast, slow):
    assert (fast.log_end_offset, fast.high_watermark, fast.log_start_offset,
            fast.recovery_point) == (slow.log_end_offset, slow.high_watermark,
                                     slow.log_start_offset, slow.recovery_point)
    assert [s.base_offset for s in fast.segments] == [s.base_offset for s in slow.segments]
    assert [s.size for s in fast.segments] == [s.size for s in slow.segments]
    a, b = files(fast), files(slow)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], name


def random_batches(rnd, ts):
    """One to three batches of 1-5 records with values of 10-300 bytes; timestamps that
    mostly rise and sometimes go back."""
    out = []
    for _ in range(rnd.randint(1, 3)):
        ts[0] += rnd.randint(-30, 60)
        out.append(make_batch(rnd.randint(1, 5), timestamp=ts[0], value_size=rnd.randint(10, 300),
                              ts_step=rnd.randint(0, 3)))
    return out


def run_twins(fast, slow, appends, seed=1, ts_start=10_000, now_ms=NOW, one_batch=False):
    rnd = random.Random(seed)
    ts = [ts_start]
    for _ in range(appends):
        batches = random_batches(rnd, ts)
        append_both((fast, slow), batches[:1] if one_batch else batches, now_ms=now_ms)
    assert_same(fast, slow)


def test_offsets_and_files_match_the_python_path(tmp_path):
    fast, slow = twin_logs(tmp_path, segment_bytes=64 << 10, index_interval_bytes=700)
    run_twins(fast, slow, 600)
    assert fast.num_segments > 3                         # rolled by size on the way
    assert fast._fast.appends > 500 and slow._fast.appends == 0
    assert fast.active_segment.offset_index.entries > 10
    assert read_all(fast) == read_all(slow)
    fast.close()
    slow.close()
    assert_same(fast, slow)                              # trimmed indexes, final time entry


def test_roll_by_full_index_and_by_time(tmp_path):
    # 8 offset entries, 5 time entries per segment: a full index rolls.
    fast, slow = twin_logs(tmp_path / "idx", segment_index_bytes=64, index_interval_bytes=100)
    run_twins(fast, slow, 150, one_batch=True)
    assert fast.num_segments > 5 and fast._fast.appends > 100
    # Several batches an append, each of which may add an entry: the segment rolls while
    # the index has not room for one per batch (it used to fill up after the write).
    fast, slow = twin_logs(tmp_path / "idx3", segment_index_bytes=64, index_interval_bytes=100)
    run_twins(fast, slow, 150)
    assert fast.num_segments > 5 and fast._fast.appends > 50
    # segment.ms by record time: timestamps rise by up to 60 ms an append.
    fast, slow = twin_logs(tmp_path / "time", segment_ms=2_000, index_interval_bytes=300)
    run_twins(fast, slow, 300)
    assert fast.num_segments > 3 and fast._fast.appends > 250
    fast.close()
    slow.close()
    assert_same(fast, slow)


def test_time_roll_of_batches_without_timestamps_counts_from_creation(tmp_path):
    clock = Clock()
    logs = [Log.open(str(tmp_path / name / "t-0"), LogConfig(segment_ms=1_000), time_fn=clock)
            for name in ("fast", "slow")]
    logs[1]._fast.enabled = False
    for _ in range(30):
        append_both(logs, [make_batch(2, timestamp=-1, ts_step=0)], now_ms=None)
        clock.advance_ms(100)
    assert logs[0].num_segments == logs[1].num_segments >= 3
    assert logs[0]._fast.appends > 20
    assert_same(*logs)


def test_truncation_then_append(tmp_path):
    fast, slow = twin_logs(tmp_path, segment_bytes=32 << 10, index_interval_bytes=500)
    run_twins(fast, slow, 300)
    for target in (fast.log_end_offset - 7, fast.log_end_offset // 2, 3):
        assert fast.truncate_to(target) == slow.truncate_to(target)
        assert not fast._fast.armed
        run_twins(fast, slow, 40, seed=target, ts_start=50_000)
        assert fast._fast.armed
    assert read_all(fast) == read_all(slow)


def test_new_leader_epoch_and_reopen(tmp_path):
    fast, slow = twin_logs(tmp_path, index_interval_bytes=400)
    rnd, ts = random.Random(3), [1_000]
    for epoch in (0, 0, 0, 2, 2, 2, 5, 5):
        for _ in range(10):
            append_both((fast, slow), random_batches(rnd, ts), epoch=epoch)
    assert fast.leader_epoch_cache.entries() == slow.leader_epoch_cache.entries()
    assert [e for e, _ in fast.leader_epoch_cache.entries()] == [0, 2, 5]
    assert_same(fast, slow)
    fast.close()
    slow.close()
    fast = Log.open(fast.dir, fast.config)
    slow = Log.open(slow.dir, slow.config)
    slow._fast.enabled = False
    for _ in range(50):
        append_both((fast, slow), random_batches(rnd, ts), epoch=5)
    assert fast._fast.appends > 40
    assert_same(fast, slow)


def test_refused_batch_leaves_the_log_unchanged(tmp_path):
    log = open_log(tmp_path / "t-0", max_message_bytes=2_000)
    buf, hs = record_set(make_batch(2))
    log.append(buf, hs, leader_epoch=0)
    buf, hs = record_set(make_batch(2, timestamp=1_100))
    log.append(buf, hs, leader_epoch=0)
    assert log._fast.armed and log._fast.appends == 1
    end, size = log.log_end_offset, log.active_segment.size
    big, hs = record_set(make_batch(3, value_size=1_000))
    with pytest.raises(RecordBatchTooLargeError):
        log.append(big, hs, leader_epoch=0)
    assert (log.log_end_offset, log.active_segment.size) == (end, size)
    assert os.path.getsize(log.active_segment.log_path) == size


def test_flush_messages_log_append_time_and_replicated_high_watermark(tmp_path):
    fast, slow = twin_logs(tmp_path / "flush", flush_messages=5)
    rnd, ts = random.Random(5), [1_000]
    flushes = 0
    for _ in range(40):
        info = append_both((fast, slow), random_batches(rnd, ts))
        flushes += info.flush_future is not None
        assert fast.recovery_point == slow.recovery_point   # (the inline I/O scheduler)
    assert flushes > 10 and fast._fast.appends > 30

    clock = Clock()
    log = Log.open(str(tmp_path / "lat" / "t-0"), LogConfig(
        message_timestamp_type="LogAppendTime"), time_fn=clock)
    for i in range(5):
        buf, hs = record_set(make_batch(1))
        assert log.append(buf, hs, leader_epoch=0, now_ms=NOW + i).log_append_time == NOW + i
        buf, hs = record_set(make_batch(1))
        assert log.append(buf, hs, leader_epoch=0).log_append_time == int(clock.now * 1000)
    assert log._fast.appends >= 8

    log = open_log(tmp_path / "hw" / "t-0")
    log.hw_follows_leo = False
    for _ in range(5):
        buf, hs = record_set(make_batch(2))
        log.append(buf, hs, leader_epoch=0)
    assert log._fast.appends == 4
    assert log.log_end_offset == 10 and log.high_watermark == 0


def test_full_disk_fails_the_append_and_leaves_nothing_behind(tmp_path):
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        log = open_log(disk / "t-0", index_interval_bytes=1_000)
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (700 << 10))
        error = None
        for i in range(2_000):
            end, size = log.log_end_offset, log.active_segment.size
            armed = log._fast.armed
            buf, hs = record_set(make_batch(4, timestamp=1_000 + i, value_size=500))
            try:
                log.append(buf, hs, leader_epoch=0)
            except OSError as e:
                error = e
                break
        assert error is not None and error.errno == errno.ENOSPC
        assert armed and log._fast.appends > 10          # the compiled path refused it
        assert (log.log_end_offset, log.active_segment.size) == (end, size)
        assert os.path.getsize(log.active_segment.log_path) == size
        filler.unlink()
        buf, hs = record_set(make_batch(4, timestamp=9_000, value_size=500))
        assert log.append(buf, hs, leader_epoch=0).first_offset == end
        assert len(read_all(log)) == end // 4 + 1
        log.close()


def test_recovery_after_sigkill(tmp_path):
    """A broker-like process appends through the compiled path and is killed without any
    flush or close: a reopen recovers every batch, with the indexes the own path builds."""
    script = textwrap.dedent(f"""
        import os, random, signal, sys
        sys.path[:0] = {sys.path!r}
        from tests.server.log.test_leader_append import random_batches
        from tests.server.log.conftest import open_log, record_set
        log = open_log({str(tmp_path / "fast" / "t-0")!r}, segment_bytes=48 << 10,
                       index_interval_bytes=600)
        rnd, ts = random.Random(9), [10_000]
        for _ in range(400):
            buf, hs = record_set(*random_batches(rnd, ts))
            log.append(buf, hs, leader_epoch=0, now_ms={NOW})
        print(log.log_end_offset, log._fast.appends, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, cwd=os.getcwd())
    assert r.returncode == -signal.SIGKILL, r.stderr
    end, compiled = map(int, r.stdout.split())
    assert compiled > 350
    fast = Log.open(str(tmp_path / "fast" / "t-0"), LogConfig(
        segment_bytes=48 << 10, index_interval_bytes=600), clean_shutdown=False)
    slow = open_log(tmp_path / "slow" / "t-0", segment_bytes=48 << 10, index_interval_bytes=600)
    slow._fast.enabled = False
    rnd, ts = random.Random(9), [10_000]
    for _ in range(400):
        buf, hs = record_set(*random_batches(rnd, ts))
        slow.append(buf, hs, leader_epoch=0, now_ms=NOW)
    assert fast.log_end_offset == slow.log_end_offset == end
    assert fast.load_report.lost_bytes == 0
    assert read_all(fast) == read_all(slow)
    fast.close()
    slow.close()
    assert files(fast) == files(slow)


def test_reopened_segment_rolls_by_its_first_batch_timestamp(tmp_path):
    """segment.ms counts from the first batch's timestamp in a reopened segment too (its
    header alone is read back), not from the time the log was loaded."""
    log = open_log(tmp_path / "t-0", segment_ms=10_000)
    buf, hs = record_set(make_batch(1, timestamp=1_000))
    log.append(buf, hs, leader_epoch=0)
    log.close()
    log = Log.open(log.dir, log.config)
    for ts, segments in ((5_000, 1), (9_000, 1), (11_500, 2), (12_000, 2)):
        buf, hs = record_set(make_batch(1, timestamp=ts))
        log.append(buf, hs, leader_epoch=0)
        assert log.num_segments == segments, ts
    assert log._fast.appends == 2           # the second and the last


def test_an_armed_log_is_freed_without_the_cycle_collector(tmp_path):
    """The compiled append holds no reference back to its log: a dropped log (and the
    descriptors its segments hold) goes at once, not at the next collection."""
    log = open_log(tmp_path / "t-0")
    for i in range(3):
        buf, hs = record_set(make_batch(1, timestamp=1_000 + i))
        log.append(buf, hs, leader_epoch=0)
    assert log._fast.armed
    ref = weakref.ref(log)
    gc.disable()
    try:
        del log
        assert ref() is None
    finally:
        gc.enable()


def test_a_log_keeps_at_most_30_instance_attributes(tmp_path):
    """CPython keeps up to 30 instance attributes of a class in one key table its instances
    share; a 31st gives every Log a dict of its own, and each attribute the produce path
    reads of a log (a dozen per request) becomes a probe into a cold table of its own.
    Counted after a log's life: appends on both paths, rolls, flush.messages' flushes,
    truncation, a new epoch, and a reopen that recovers its tail."""
    fast, slow = twin_logs(tmp_path, segment_bytes=4096, flush_messages=7)
    run_twins(fast, slow, 60, seed=3)
    fast.truncate_to(fast.log_end_offset - 3)
    buf, hs = record_set(make_batch(2))
    fast.append(buf, hs, leader_epoch=1, now_ms=NOW)
    for log in (fast, slow):
        assert len(vars(log)) <= 30, sorted(vars(log))
    path = fast.dir
    fast.close()
    again = Log.open(path, LogConfig(segment_bytes=4096), recovery_point=0,
                     clean_shutdown=False)
    assert again.load_report.recovered_segments > 0
    assert len(vars(again)) <= 30, sorted(vars(again))
    again.close()
    slow.close()
