"""LogManager: several log dirs, placement, checkpoints in Kafka's format, clean and
unclean restarts, partition deletion, periodic retention and flush."""

import os

from fastlog._codec import scan_batches
from fastlog.server.log import CLEAN_SHUTDOWN_FILE, LogConfig, LogManager
from fastlog.server.log.checkpoint import (
    LeaderEpochFileCache,
    OffsetCheckpointFile,
    read_meta_properties,
)
from tests.server.log.conftest import append_n, read_all

CFG = LogConfig(segment_bytes=700, index_interval_bytes=150, file_delete_delay_ms=0)


def _manager(dirs, clock=None, **kw):
    if clock is not None:
        kw["time_fn"] = clock
    return LogManager([str(d) for d in dirs], CFG, **kw)


def test_new_partitions_go_to_the_dir_with_fewest(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    mgr = _manager(dirs, node_id=3, cluster_id="abc")
    try:
        placed = [os.path.dirname(mgr.get_or_create_log("t", p).dir) for p in range(6)]
        assert placed == [str(d) for d in dirs] * 2
        assert mgr.get_or_create_log("t", 0) is mgr.get_log("t", 0)
        assert read_meta_properties(str(dirs[1])) == {
            "version": "0", "broker.id": "3", "cluster.id": "abc"}
    finally:
        mgr.shutdown()


def test_clean_shutdown_writes_marker_and_kafka_format_checkpoints(tmp_path):
    mgr = _manager([tmp_path / "a"])
    log = mgr.get_or_create_log("orders", 2)
    append_n(log, 30)
    log.delete_records_before(7)
    mgr.shutdown()
    d = tmp_path / "a"
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 2 60\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\norders 2 7\n"
    again = _manager([d])
    try:
        assert again.had_clean_shutdown[str(d)]
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
        log = again.get_log("orders", 2)
        assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (7, 60, 60)
    finally:
        again.shutdown()


def test_unclean_restart_recovers_after_the_recovery_point(tmp_path):
    d = tmp_path / "a"
    mgr = _manager([d])
    log = mgr.get_or_create_log("t", 0)
    append_n(log, 30)
    before = read_all(log)
    # Each roll flushes the closed segment on the manager's I/O thread; wait for those
    # flushes, or the recovery point may still be 0 (or move after the checkpoint).
    assert mgr.scheduler.drain(timeout=30)
    mgr.checkpoint_recovery_points(sync=True)
    rp = log.recovery_point
    active = log.active_segment.file.path
    assert 0 < rp < 60
    # Crash: no shutdown; the tail of the active segment is garbage.
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x99garbage" * 10)
    mgr.scheduler.shutdown()
    again = _manager([d])
    try:
        assert not again.had_clean_shutdown[str(d)]
        log2 = again.get_log("t", 0)
        assert log2.log_end_offset == 60
        assert read_all(log2) == before
    finally:
        again.shutdown()


def test_torn_checkpoint_temp_files_are_harmless(tmp_path):
    d = tmp_path / "a"
    mgr = _manager([d])
    append_n(mgr.get_or_create_log("t", 0), 10)
    mgr.shutdown()
    good = (d / "recovery-point-offset-checkpoint").read_text()
    (d / "recovery-point-offset-checkpoint.tmp").write_text(good[: len(good) // 2])
    (d / CLEAN_SHUTDOWN_FILE).unlink()
    again = _manager([d])
    try:
        assert again.get_log("t", 0).recovery_point == 20
        assert again.get_log("t", 0).log_end_offset == 20
        again.checkpoint_recovery_points(sync=True)
        assert not (d / "recovery-point-offset-checkpoint.tmp").exists()
        assert OffsetCheckpointFile(str(d / "recovery-point-offset-checkpoint")).read() == {
            ("t", 0): 20}
    finally:
        again.shutdown()


def test_corrupt_checkpoint_means_full_recovery(tmp_path):
    d = tmp_path / "a"
    mgr = _manager([d])
    append_n(mgr.get_or_create_log("t", 0), 10)
    mgr.shutdown()
    (d / "recovery-point-offset-checkpoint").write_text("0\n7\nnot a checkpoint\n")
    (d / CLEAN_SHUTDOWN_FILE).unlink()
    again = _manager([d])
    try:
        log = again.get_log("t", 0)
        assert (log.recovery_point, log.log_end_offset) == (0, 20)
    finally:
        again.shutdown()


def test_delete_log_renames_then_removes(tmp_path):
    d = tmp_path / "a"
    mgr = _manager([d])
    log = mgr.get_or_create_log("t", 0)
    append_n(log, 5)
    info = log.read(0, 1000)
    assert mgr.delete_log("t", 0)
    assert mgr.get_log("t", 0) is None and not (d / "t-0").exists()
    assert mgr.scheduler.drain(10)
    assert not [n for n in os.listdir(d) if n.startswith("t-0")]
    assert not mgr.delete_log("t", 0)
    del info
    # A `-delete` dir left by a crash is removed at the next startup.
    os.makedirs(d / "u-1.0123abcd-delete")
    mgr.shutdown()
    again = _manager([d])
    assert again.scheduler.drain(10)
    assert not (d / "u-1.0123abcd-delete").exists()
    again.shutdown()


def test_logs_in_several_dirs_reload(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = _manager(dirs)
    for p in range(4):
        append_n(mgr.get_or_create_log("t", p), p + 1)
    mgr.shutdown()
    again = _manager(dirs)
    try:
        assert sorted((lg.topic, lg.partition, lg.log_end_offset) for lg in again.all_logs()) == [
            ("t", p, 2 * (p + 1)) for p in range(4)]
        assert {again.log_dir_of("t", p) for p in range(4)} == {str(x) for x in dirs}
    finally:
        again.shutdown()


def test_periodic_retention_and_flush(tmp_path, clock):
    mgr = LogManager([str(tmp_path / "a")],
                     LogConfig(segment_bytes=600, retention_ms=1000, flush_ms=5000,
                               file_delete_delay_ms=0), time_fn=clock)
    try:
        log = mgr.get_or_create_log("t", 0)
        now = int(clock() * 1000)
        append_n(log, 20, ts=now)
        assert mgr.cleanup_logs() == 0
        clock.advance_ms(2000)
        old = len(log.segments) - 1
        assert old > 0 and mgr.cleanup_logs() == old
        assert len(log.segments) == 1
        assert mgr.flush_dirty_logs() == []  # the last flush (at a roll) is under 5 s old
        clock.advance_ms(5000)
        futures = mgr.flush_dirty_logs()
        assert futures
        for f in futures:
            f.result(timeout=10)
        assert log.recovery_point == log.log_end_offset
    finally:
        mgr.shutdown()


def test_the_flusher_looks_only_at_logs_whose_topic_sets_flush_ms(tmp_path, clock):
    """Kafka's default flush.ms is never: a broker of thousands of such partitions has
    nothing to check each flusher tick; a topic given flush.ms later joins it."""
    from dataclasses import replace

    mgr = _manager([tmp_path / "a"], clock=clock)
    try:
        plain = [mgr.get_or_create_log("plain", p) for p in range(50)]
        timed = mgr.get_or_create_log("timed", 0, replace(CFG, flush_ms=1000))
        for log in plain + [timed]:
            append_n(log, 1)
        assert list(mgr._timed_flush.values()) == [timed]
        clock.advance_ms(2000)
        for f in mgr.flush_dirty_logs():
            f.result(timeout=10)
        assert timed.recovery_point == timed.log_end_offset
        assert all(lg.recovery_point == 0 for lg in plain)
        plain[3].update_config(replace(CFG, flush_ms=1000))  # a config change joins it
        timed.update_config(CFG)  # and leaves it
        assert list(mgr._timed_flush.values()) == [plain[3]]
        clock.advance_ms(2000)
        for f in mgr.flush_dirty_logs():
            f.result(timeout=10)
        assert plain[3].recovery_point == plain[3].log_end_offset
        mgr.delete_log("plain", 3)
        assert not mgr._timed_flush
    finally:
        mgr.shutdown()


def test_directories_that_are_not_logs_are_left_alone(tmp_path):
    # Named like partitions, but holding a user's files: never opened, never removed.
    d = tmp_path / "a"
    d.mkdir()
    for name in ("photos-2024", "old-1.0123abcd-delete", "backup-3"):
        (d / name).mkdir()
        (d / name / "a.jpg").write_bytes(b"\xff\xd8 keep me")
    (d / "backup-3" / "00000000000000000000.log").write_bytes(b"")
    mgr = _manager([d])
    try:
        assert mgr.all_logs() == []
        assert mgr.scheduler.drain(10)
        for name in ("photos-2024", "old-1.0123abcd-delete", "backup-3"):
            assert (d / name / "a.jpg").read_bytes() == b"\xff\xd8 keep me"
    finally:
        mgr.shutdown()


def test_mark_stray_keeps_the_files_and_stops_serving(tmp_path):
    d = tmp_path / "a"
    mgr = _manager([d])
    log = mgr.get_or_create_log("t", 0)
    append_n(log, 5)
    kept = mgr.mark_stray("t", 0)
    assert mgr.get_log("t", 0) is None and not (d / "t-0").exists()
    assert kept.startswith(str(d / "t-0.")) and kept.endswith("-stray")
    assert mgr.scheduler.drain(10)
    assert any(n.endswith(".log") and os.path.getsize(os.path.join(kept, n)) > 0
               for n in os.listdir(kept))
    mgr.shutdown()
    again = _manager([d])  # a stray dir is neither served nor removed at the next start
    try:
        assert again.all_logs() == [] and os.path.isdir(kept)
    finally:
        again.shutdown()


def test_unclean_restart_of_many_partitions_is_one_warning(tmp_path, caplog):
    """Fifty partitions recovered without loss: one WARNING line for the dir (details at
    DEBUG); a partition that lost data still gets a WARNING of its own."""
    d = tmp_path / "a"
    mgr = _manager([d])
    for p in range(50):
        append_n(mgr.get_or_create_log("many", p), 3)
    torn = mgr.get_log("many", 7).active_segment.file.path
    assert mgr.scheduler.drain(timeout=30)
    mgr.scheduler.shutdown()  # a crash: no checkpoints, no clean-shutdown marker
    with open(torn, "r+b") as f:
        f.truncate(os.path.getsize(torn) - 5)
    caplog.set_level("DEBUG", logger="fastlog.server.log")
    again = _manager([d])
    try:
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 2, warnings
        assert "many-7" in warnings[0] and "recovery removed" in warnings[0]
        assert "from offset 4" in warnings[0]
        assert "recovered after an unclean shutdown: 50 partition(s)" in warnings[1]
        assert "1 partition(s) lost data" in warnings[1]
        debug = [r for r in caplog.records if r.levelname == "DEBUG"
                 and "recovered:" in r.getMessage()]
        assert len(debug) == 50
        assert again.get_log("many", 7).log_end_offset == 4
        assert again.get_log("many", 8).log_end_offset == 6
    finally:
        again.shutdown()


def test_future_log_swap_and_what_a_crash_leaves(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    mgr = _manager([a, b])
    try:
        log = mgr.get_or_create_log("mv", 0)
        assert os.path.dirname(log.dir) == str(a)
        append_n(log, 20)
        future = mgr.create_future_log("mv", 0, str(b))
        assert mgr.create_future_log("mv", 0, str(b)) is future  # the same move
        assert os.path.basename(future.dir).endswith("-future")
        while future.log_end_offset < log.log_end_offset:  # what the replica manager does
            data = b"".join(r.read() for r in log.read(future.log_end_offset, 1 << 20).regions)
            future.append(data, scan_batches(data).batches, 0, assign_offsets=False)
        future.flush()
        before = read_all(log)
        new = mgr.promote_future_log("mv", 0)
        assert mgr.get_log("mv", 0) is new and mgr.log_dir_of("mv", 0) == str(b)
        assert new.dir == str(b / "mv-0") and not (a / "mv-0").exists()
        assert read_all(new) == before
        # An unfinished move (the current log still there), part way: kept over a
        # restart, loaded again with what it had copied, for the replica manager to go on.
        back = mgr.create_future_log("mv", 0, str(a))
        data = b"".join(r.read() for r in new.read(0, 1 << 20).regions)
        back.append(data, scan_batches(data).batches[:1], 0, assign_offsets=False)
        copied = back.log_end_offset
        assert 0 < copied < new.log_end_offset
    finally:
        mgr.shutdown()
    again = _manager([a, b])
    try:
        assert again.log_dir_of("mv", 0) == str(b)
        resumed, dest = again.future_log("mv", 0)
        assert dest == str(a) and resumed.log_end_offset == copied
        assert os.path.dirname(resumed.dir) == str(a)
        assert read_all(resumed) == read_all(again.get_log("mv", 0))[:len(read_all(resumed))]
        # Stopped (the client asks for the dir it is in): its files go.
        again.abort_future_log("mv", 0)
        again.scheduler.drain(timeout=10)
        assert [n for n in os.listdir(a) if n.startswith("mv-0")] == []
        # A crash inside the swap, after the current log went: the future log completes it.
        log = again.get_log("mv", 0)
        again.shutdown()
        os.rename(log.dir, str(a / "mv-0.0123abcd-future"))
    finally:
        again.shutdown()
    third = _manager([a, b])
    try:
        assert third.log_dir_of("mv", 0) == str(a)
        assert third.get_log("mv", 0).log_end_offset == 40
    finally:
        third.shutdown()


def _open_files(under):
    """This process's descriptors on files below `under` (from /proc/self/fd)."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(under)):
            names.append(target)
    return names


def _mapped_index_files(under):
    """Index files below `under` this process has mapped (from /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        paths = {line.split(None, 5)[-1].strip() for line in f if str(under) in line}
    return sorted(p for p in paths if p.endswith((".index", ".timeindex")))


def test_a_restart_maps_no_index_until_a_partition_is_read(tmp_path):
    d = tmp_path / "a"
    mgr = _manager([d])
    expected = {}
    for p in range(20):
        log = mgr.get_or_create_log("lazy", p)
        append_n(log, 12)  # several segments, each with index entries
        expected[p] = read_all(log)
        assert log.num_segments > 2
    mgr.shutdown()
    assert not _mapped_index_files(d)
    again = _manager([d])
    try:
        # (a clean start: each partition holds its .log descriptors only)
        assert not _mapped_index_files(d)
        log = again.get_log("lazy", 7)
        assert read_all(log) == expected[7]
        opened = _mapped_index_files(d)
        assert opened and all("/lazy-7/" in path for path in opened)
        for p in range(20):
            assert read_all(again.get_log("lazy", p)) == expected[p]
        append_n(again.get_log("lazy", 3), 3)  # the active segment's indexes work as before
        # indexes hold mappings, never descriptors: one open file per segment
        assert not [f for f in _open_files(d) if f.endswith((".index", ".timeindex"))]
    finally:
        again.shutdown()
    assert not _mapped_index_files(d)


def test_parallel_recovery_of_two_dirs_matches_the_data(tmp_path):
    """num.recovery.threads.per.data.dir: every dir's logs are loaded on its own threads
    after a crash; each partition comes back with its own data, torn tails cut, and the
    same threads flush every log at shutdown."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = _manager(dirs)
    expected = {}
    for p in range(24):
        log = mgr.get_or_create_log("par", p)
        append_n(log, 4 + p % 5, value_size=10 + p)
        expected[p] = read_all(log)
    assert mgr.scheduler.drain(timeout=30)
    mgr.checkpoint_recovery_points(sync=True)
    for p in range(0, 24, 3):  # crash mid-write: a torn batch at the end of some tails
        with open(mgr.get_log("par", p).active_segment.file.path, "ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x01\x00torn")
    mgr.scheduler.shutdown()
    again = _manager(dirs, recovery_threads_per_data_dir=3)
    try:
        assert not any(again.had_clean_shutdown.values())
        for p in range(24):
            log = again.get_log("par", p)
            assert read_all(log) == expected[p]
            assert log.log_end_offset == mgr.get_log("par", p).log_end_offset
            assert again.log_dir_of("par", p) == os.path.dirname(log.dir)
        append_n(again.get_log("par", 5), 2)
        after = {p: read_all(again.get_log("par", p)) for p in range(24)}
    finally:
        again.shutdown()
    third = _manager(dirs, recovery_threads_per_data_dir=2)
    try:
        assert all(third.had_clean_shutdown.values())
        assert {p: read_all(third.get_log("par", p)) for p in range(24)} == after
        assert all(lg.recovery_point == lg.log_end_offset for lg in third.all_logs())
    finally:
        third.shutdown()


def test_read_mappings_are_bounded_by_the_read_map_cache(tmp_path, monkeypatch):
    """Each read mapping of a .log holds a descriptor: reading many partitions keeps at
    most READ_MAP_LIMIT of them, so open files stay near one per segment."""
    from fastlog.server.log import segment

    monkeypatch.setattr(segment, "READ_MAPS", segment.ReadMaps(limit=4))
    d = tmp_path / "a"
    mgr = _manager([d])
    try:
        logs = [mgr.get_or_create_log("maps", p) for p in range(12)]
        for log in logs:
            append_n(log, 2)
        before = len(_open_files(d))
        first = [read_all(log) for log in logs]
        assert len(segment.READ_MAPS) == 4
        assert len(_open_files(d)) <= before + 4
        assert [read_all(log) for log in logs] == first  # evicted ones map again
    finally:
        mgr.shutdown()
    assert not _open_files(d)


def _fsynced(monkeypatch) -> list[str]:
    """The paths os.fsync is called on from now on (the calls themselves go through)."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_create_logs_makes_every_partition_durable_before_it_is_served(tmp_path, monkeypatch):
    """A topic's new partitions are made together off the caller's thread: each dir with
    its first segment and a leader-epoch-checkpoint starting its epoch at 0, every
    checkpoint and new dir fsynced and each log dir once, before the logs are handed
    over. (An empty first segment lost in a crash is made again by loading.)"""
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = _manager(dirs)
    try:
        mgr.get_or_create_log("t", 9)  # a partition already there is left as it is
        assert mgr.scheduler.drain(10)
        synced = _fsynced(monkeypatch)
        fut = mgr.create_logs("t", {p: 0 for p in (0, 1, 2, 9)})
        made = fut.result(30)
        assert mgr.get_log("t", 0) is None  # not served before take_created
        logs = mgr.take_created("t", fut)
        assert sorted(logs) == [0, 1, 2] and sorted(p for p, _, _ in made) == [0, 1, 2]
        assert all(mgr.get_log("t", p) is logs[p] for p in logs)
        # placed with the fewest first: b holds none yet, a holds t-9
        assert [mgr.log_dir_of("t", p) for p in (0, 1, 2)] == [str(dirs[1]), str(dirs[0]),
                                                              str(dirs[1])]
        for lg in logs.values():
            assert sorted(os.listdir(lg.dir)) == ["00000000000000000000.log",
                                                   "leader-epoch-checkpoint"]
            with open(os.path.join(lg.dir, "leader-epoch-checkpoint")) as f:
                assert f.read() == "0\n1\n0 0\n"
            assert lg.leader_epoch_cache.entries() == [(0, 0)]
            for path in (lg.dir, os.path.join(lg.dir, "leader-epoch-checkpoint.tmp")):
                assert path in synced, path
        for d in dirs:
            assert synced.count(str(d)) == 1
        monkeypatch.undo()
        append_n(logs[1], 2)
        assert logs[1].leader_epoch_cache.entries() == [(0, 0)]
    finally:
        mgr.shutdown()
    # the one file not fsynced: an empty first segment a crash lost is made again
    os.unlink(os.path.join(logs[2].dir, "00000000000000000000.log"))
    again = _manager(dirs)
    try:
        assert sorted(lg.partition for lg in again.all_logs()) == [0, 1, 2, 9]
        assert os.path.exists(os.path.join(logs[2].dir, "00000000000000000000.log"))
        assert again.get_log("t", 1).log_end_offset == 4
        assert again.get_log("t", 1).leader_epoch_cache.entries() == [(0, 0)]
        # An empty log's epoch is forgotten at load (Kafka's truncation to the log end; a
        # leader records it again), its file not rewritten: a restart writes no file.
        empty = again.get_log("t", 2)
        assert empty.leader_epoch_cache.entries() == []
        with open(os.path.join(empty.dir, "leader-epoch-checkpoint")) as f:
            assert f.read() == "0\n1\n0 0\n"
        append_n(empty, 1, epoch=2)
        assert LeaderEpochFileCache(os.path.join(empty.dir, "leader-epoch-checkpoint")
                                    ).entries() == [(2, 0)]
        assert again.get_log("t", 9).leader_epoch_cache.entries() == []
    finally:
        again.shutdown()


def test_create_logs_that_fail_leave_nothing_behind(tmp_path):
    """One partition that cannot be made (a file where its dir goes) fails the whole
    creation with a storage error: the dirs made before it are removed again."""
    from fastlog.server.log import KafkaStorageError

    d = tmp_path / "a"
    mgr = _manager([d])
    try:
        (d / "t-2").write_bytes(b"not a dir")
        fut = mgr.create_logs("t", {p: 0 for p in range(4)})
        try:
            mgr.take_created("t", fut)
        except KafkaStorageError as e:
            assert "4 new partitions of t" in str(e)
        else:
            raise AssertionError("creation did not fail")
        assert not [n for n in os.listdir(d) if n in ("t-0", "t-1", "t-3")]
        assert mgr.get_log("t", 0) is None and not mgr._creating
    finally:
        mgr.shutdown()
