"""Log's write-behind appends (a large batch written on another thread): nothing reads,
flushes or appends past a range that is still being written, appends stay in offset order,
a failed write is never published, and what was published survives a crash."""

import concurrent.futures
import errno
import threading
import time

import pytest

from fastlog._codec import scan_batches
from fastlog.server.log import Log, LogConfig
from tests.server.log.conftest import make_batch, open_log, read_all, record_set
from tests.tmpfs_fixture import small_tmpfs


class GatedExecutor:
    """A real thread pool whose tasks start only once the test opens the gate."""

    def __init__(self):
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="test-write")
        self.gate = threading.Event()

    def submit(self, fn, *args):
        def gated():
            if not self.gate.wait(10):
                raise TimeoutError("the test never opened the gate")
            return fn(*args)
        return self.pool.submit(gated)

    def close(self):
        self.gate.set()
        self.pool.shutdown(wait=True)


@pytest.fixture
def gated():
    ex = GatedExecutor()
    yield ex
    ex.close()


def large_record_set(records=64, value_size=8 << 10, timestamp=1000):
    return record_set(make_batch(records, timestamp=timestamp, value_size=value_size))


def small_record_set(timestamp=2000):
    return record_set(make_batch(3, timestamp=timestamp))


def wait_written(pending, timeout=10):
    concurrent.futures.wait([pending.written], timeout)
    assert pending.written.done()


def test_large_append_is_invisible_until_settled(tmp_path, gated):
    log = open_log(tmp_path / "t-0", flush_messages=1 << 40)
    buf0, hs0 = small_record_set()
    log.append(buf0, hs0, leader_epoch=0)
    before = read_all(log)
    end, size = log.log_end_offset, log.active_segment.size
    buf, hs = large_record_set()
    info = log.append(buf, hs, leader_epoch=0, write_executor=gated)
    pending = info.pending
    assert pending is not None and log.pending_append is pending
    assert info.first_offset == end  # offsets are the loop's, stamped at once
    # Unpublished: offsets, sizes, reads, ListOffsets and flushes stay where they were.
    assert (log.log_end_offset, log.high_watermark) == (end, end)
    assert log.active_segment.size == size
    assert log.latest_offset() == (end, -1)
    assert log.read(end, 1 << 20).regions == []
    assert read_all(log) == before
    log.flush()
    assert log.recovery_point == end
    gated.gate.set()
    wait_written(pending)
    assert log.log_end_offset == end  # written, still unpublished until settle()
    log.settle()
    assert pending.error is None and log.pending_append is None
    assert log.log_end_offset == log.high_watermark == info.last_offset + 1
    got = read_all(log)
    assert [b for b, _ in got] == [0, end]
    assert got[1][1] == bytes(buf)  # the bytes written are the stamped request bytes
    log.close()


def test_append_behind_a_large_one_waits_and_follows_it(tmp_path, gated):
    log = open_log(tmp_path / "t-0", max_message_bytes=16 << 20)
    published = []
    big, big_hs = large_record_set()
    info = log.append(big, big_hs, leader_epoch=0, write_executor=gated)
    info.pending.on_written = lambda i: published.append(("large", i.first_offset))
    # The write finishes later, on its thread; the next append (on this thread) settles the
    # large one first, waiting for its write.
    threading.Timer(0.2, gated.gate.set).start()
    small, small_hs = small_record_set()
    small_info = log.append(small, small_hs, leader_epoch=0)
    assert info.pending.written.done() and info.pending.error is None
    assert published == [("large", 0)]
    assert small_info.first_offset == info.last_offset + 1
    assert log.log_end_offset == small_info.last_offset + 1
    assert [b for b, _ in read_all(log)] == [0, small_info.first_offset]
    log.close()


def test_readers_never_see_the_range_being_written(tmp_path):
    # A real write of a few MiB on a pool thread while this thread keeps reading.
    log = open_log(tmp_path / "t-0", max_message_bytes=16 << 20)
    buf0, hs0 = small_record_set()
    log.append(buf0, hs0, leader_epoch=0)
    end = log.log_end_offset
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        for round_ in range(5):
            buf, hs = large_record_set(records=256, timestamp=3000 + round_)
            info = log.append(buf, hs, leader_epoch=0, write_executor=pool)
            reads = 0
            deadline = time.monotonic() + 10
            while not info.pending.written.done() and time.monotonic() < deadline:
                r = log.read(0, 64 << 20)
                reads += 1
                assert r.size == log.active_segment.size or log.num_segments > 1
                assert log.read(end, 1 << 20).regions == []
            log.settle()
            assert info.pending.error is None
            end = log.log_end_offset
            assert end == info.last_offset + 1
    # Everything published reads back as whole, valid batches in offset order.
    batches = [b for b, _ in read_all(log)]
    assert batches == sorted(batches) and len(batches) == 6
    seg = log.active_segment
    data = bytearray(seg.size)
    seg.file.pread_into(data, 0)
    r = scan_batches(data, 0, len(data), True)
    assert r.error is None and len(r.batches) == 6
    log.close()


def test_truncation_roll_and_close_settle_first(tmp_path, gated):
    log = open_log(tmp_path / "t-0", max_message_bytes=16 << 20)
    buf, hs = large_record_set()
    info = log.append(buf, hs, leader_epoch=0, write_executor=gated)
    threading.Timer(0.1, gated.gate.set).start()
    assert log.truncate_to(info.last_offset + 1) is False  # settled, nothing to remove
    assert log.log_end_offset == info.last_offset + 1
    gated.gate.clear()
    buf, hs = large_record_set(timestamp=5000)
    info2 = log.append(buf, hs, leader_epoch=0, write_executor=gated)
    threading.Timer(0.1, gated.gate.set).start()
    log.roll()
    assert log.active_segment.base_offset == info2.last_offset + 1
    gated.gate.clear()
    buf, hs = large_record_set(timestamp=6000)
    info3 = log.append(buf, hs, leader_epoch=0, write_executor=gated)
    threading.Timer(0.1, gated.gate.set).start()
    assert log.close()
    assert info3.pending.error is None
    reopened = Log.open(str(tmp_path / "t-0"), LogConfig())
    assert reopened.log_end_offset == info3.last_offset + 1
    reopened.close()


def test_a_settled_append_survives_an_unclean_restart(tmp_path):
    log = open_log(tmp_path / "t-0", flush_messages=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        buf, hs = large_record_set()
        info = log.append(buf, hs, leader_epoch=0, write_executor=pool)
        wait_written(info.pending)
        log.settle()
    # flush.messages=1: publishing asked for the fsync, as an inline append does.
    assert info.flush_future is not None
    info.flush_future.result(10)
    expected = read_all(log)
    # No close(): the process "crashed"; the next load recovers from the recovery point.
    reopened = Log.open(str(tmp_path / "t-0"), LogConfig(), recovery_point=0,
                        clean_shutdown=False)
    assert reopened.load_report.lost_bytes == 0
    assert read_all(reopened) == expected
    reopened.close()


def test_a_failed_write_is_not_published(tmp_path):
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        log = open_log(disk / "t-0", max_message_bytes=16 << 20)
        buf0, hs0 = small_record_set()
        log.append(buf0, hs0, leader_epoch=0)
        end, size = log.log_end_offset, log.active_segment.size
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            buf, hs = large_record_set(records=256)  # 2 MiB: more than the disk holds
            info = log.append(buf, hs, leader_epoch=0, write_executor=pool)
            wait_written(info.pending)
            log.settle()
        assert isinstance(info.pending.error, OSError)
        assert info.pending.error.errno == errno.ENOSPC
        assert log.log_end_offset == end and log.active_segment.size == size
        assert (disk / "t-0" / "00000000000000000000.log").stat().st_size == size
        # The log goes on: the next append lands right after the last published one.
        buf, hs = small_record_set(timestamp=3000)
        assert log.append(buf, hs, leader_epoch=0).first_offset == end
        log.close()
