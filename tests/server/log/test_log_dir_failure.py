"""LogDirFailureChannel and LogManager's handling of a failed log dir, on real files: one
dir on a tmpfs made read-only (writes fail with EROFS), the other a plain directory."""

import errno
import logging
import os

import pytest

from fastlog.server.log import CLEAN_SHUTDOWN_FILE, KafkaStorageError, LogConfig, LogManager
from fastlog.server.log.dir_failure import LogDirFailureChannel
from tests.server.log.conftest import make_batch, record_set
from tests.tmpfs_fixture import read_only, small_tmpfs


def append(log, value=b"v"):
    buf, hs = record_set(make_batch(1, value_size=len(value)))
    return log.append(buf, hs, leader_epoch=0)


def test_channel_takes_a_dir_offline_once_and_not_for_a_full_disk(caplog):
    ch = LogDirFailureChannel()
    told = []
    ch.add_listener(told.append)
    with caplog.at_level(logging.ERROR):
        assert not ch.report("/d", "t-0: append", OSError(errno.ENOSPC, "No space left"))
        assert not ch.is_offline("/d") and told == []
        for _ in range(3):
            assert ch.report("/d", "t-0: append", OSError(errno.EIO, "Input/output error"))
    assert ch.offline == {"/d"} and told == ["/d"]
    failed = [r for r in caplog.records if "log dir failed" in r.getMessage()]
    assert len(failed) == 1 and "/d" in failed[0].getMessage()


@pytest.fixture
def dirs(tmp_path):
    plain = tmp_path / "plain"
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        yield str(plain), str(disk)


def test_failed_dir_is_forgotten_and_the_other_goes_on(dirs, caplog):
    plain, disk = dirs
    lm = LogManager([plain, disk], LogConfig(segment_bytes=100), cleaner_enable=False)
    try:
        good, bad = lm.get_or_create_log("t", 0), lm.get_or_create_log("t", 1)
        assert lm.log_dir_of("t", 0) == plain and lm.log_dir_of("t", 1) == disk
        append(good), append(bad)
        told = []
        lm.dir_failure_channel.add_listener(told.append)
        with read_only(disk), caplog.at_level(logging.ERROR):
            with pytest.raises(OSError) as e:
                append(bad)  # a roll: a new segment file in the dir
            assert e.value.errno == errno.EROFS
            assert told == [disk] and lm.online_dirs == [plain]
            assert lm.all_logs() == [good]  # (the verifier and retention see this)
            assert lm.handle_log_dir_failure(disk) == [("t", 1)]
            assert bad.closed and lm.get_log("t", 1) is None
            assert lm.offline_dir_of("t", 1) == disk
            with pytest.raises(KafkaStorageError):
                lm.get_or_create_log("t", 1)
            assert lm.get_or_create_log("t", 2).dir.startswith(plain + os.sep)
            append(good)
            assert lm.checkpoint_recovery_points(sync=True)
            lm.shutdown()
            assert os.path.exists(os.path.join(plain, CLEAN_SHUTDOWN_FILE))
            assert not os.path.exists(os.path.join(disk, CLEAN_SHUTDOWN_FILE))
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        lm.shutdown()
    # Readable again: both dirs load, the failed one's log as it was before the failure.
    lm = LogManager([plain, disk], LogConfig(segment_bytes=100), cleaner_enable=False)
    try:
        assert lm.get_log("t", 1).log_end_offset == 1
        assert lm.get_log("t", 0).log_end_offset == 2
        append(lm.get_log("t", 1))
    finally:
        lm.shutdown()


def test_checkpoint_write_failure_takes_the_dir_offline(dirs):
    plain, disk = dirs
    lm = LogManager([plain, disk], LogConfig(), cleaner_enable=False)
    try:
        lm.get_or_create_log("t", 0), lm.get_or_create_log("t", 1)
        with read_only(disk):
            # the other dir's checkpoint is written; the failed one's is left out
            assert lm.checkpoint_log_start_offsets(sync=True)
            assert lm.online_dirs == [plain]
            assert [lg.partition for lg in lm.all_logs()] == [0]
    finally:
        lm.shutdown()


def test_a_flush_queued_before_a_deletion_fails_no_dir(tmp_path):
    """A flush job that runs after its log was deleted (queued by a roll or an append,
    run by the I/O worker after file.delete.delay.ms) finds the files gone: it has
    nothing to flush, and the dir stays online (an ENOENT reported there would take
    every partition of the dir offline)."""
    d = str(tmp_path / "d")
    lm = LogManager([d], LogConfig(segment_bytes=100, file_delete_delay_ms=0),
                    cleaner_enable=False)
    try:
        log = lm.get_or_create_log("t", 0)
        for _ in range(3):
            append(log)   # rolls at 100 bytes
        assert log.unflushed_messages > 0
        assert lm.delete_log("t", 0)
        lm.scheduler.drain(timeout=30)   # the deletion ran: the files are gone
        assert not os.path.exists(log.dir)
        log.flush()   # the job queued before, running late
        assert lm.online_dirs == [d] and not lm.dir_failure_channel.is_offline(d)
    finally:
        lm.shutdown()
