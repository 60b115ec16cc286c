# fastlog/server/log/log_manager.py — LogManager: every partition log of this broker.
#
# Owns the log dirs (`log.dirs`): per dir `meta.properties`, the clean-shutdown marker
# `.kafka_cleanshutdown`, `recovery-point-offset-checkpoint` and
# `log-start-offset-checkpoint` (Kafka's formats, see checkpoint.py), and one
# `<topic>-<partition>` directory per hosted partition (renamed `<name>.<uuid>-delete`
# when the partition is deleted, removed later as Kafka does; `<name>.<uuid>-stray` when
# no topic claims it, kept; `<name>.<uuid>-future` while it moves to another dir,
# AlterReplicaLogDirs). Directories holding anything but a log's files are never opened
# or removed.
#
# A full disk must stay recoverable through Kafka's API: each dir also holds
# `.fastlog-space-reserve`, SPACE_RESERVE_BYTES allocated with posix_fallocate at startup.
# Appends can never use that space; when a write that frees space or keeps the broker
# consistent (the metadata of DeleteTopics or a config change, a checkpoint) fails with
# ENOSPC, the reserve is given up and the write retried (release_space_reserve), and the
# reserve is allocated again by a later retention pass once the disk has room.
#
# A dir whose writes fail with an I/O error (not ENOSPC) is taken offline, as Kafka's JBOD
# handling does (dir_failure.py): handle_log_dir_failure forgets its logs (remembering
# which partitions were there, so none is created again elsewhere), releases their files,
# and from then on retention, flushes, checkpoints, the cleaner and the verifier keep away
# from it; the other dirs go on. Nothing is written to an offline dir, not even at
# shutdown; a restart with the dir readable loads it again.
#
# Threading model (the one storage-wide rule):
#   * Every append, read, truncation, roll, retention decision, log creation/deletion and
#     config change comes from ONE thread: the broker's asyncio event-loop thread.
#   * Slow system calls never run there: fsyncs (flush policy, flushes after a roll,
#     checkpoint writes) and file deletions run on this manager's IoWorker thread; the
#     loop thread only enqueues them and may await the returned futures. A topic's new
#     partitions (create_logs) are made on a creation thread and its fsync threads: the
#     logs are nobody else's until the loop takes them (take_created) once on disk.
#   * Readers use immutable snapshots of each log's segment list; a segment deleted by
#     retention is renamed `.deleted` at once and unlinked after file.delete.delay.ms, and
#     its descriptor lives as long as any FileRegion of it, so an in-flight fetch never
#     breaks.
# startup (constructor) and shutdown() are the exceptions: they run before the loop serves
# requests / after it stopped, and do their I/O inline, as Kafka does on
# `num.recovery.threads.per.data.dir` threads per log dir (every dir at once): loading
# (and recovering) the logs at startup, flushing them at shutdown. Each log is handled by
# one of those threads only, and nothing else runs meanwhile; CRC checks and system calls
# release the GIL, so recovery after a crash uses the cores.
"""The set of partition logs in this broker's log dirs: load, create, delete, retention,
flush scheduling, checkpoints and clean shutdown."""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

from fastlog.fileio import atomic_write_many, fsync_dir, sync_new
from fastlog.logs import report_limited

from ._figures import LogFigures
from .checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
    read_meta_properties,
    write_meta_properties,
)
from .cleaner import DEFAULT_DEDUPE_BUFFER_SIZE, LogCleaner
from .config import LONG_MAX, LogConfig
from .dir_failure import LogDirFailureChannel, is_dir_failure
from .errors import KafkaStorageError
from .log import Log, parse_topic_partition
from .scheduler import IoWorker
from .verifier import DEFAULT_VERIFICATION_BYTES_PER_SEC, LogVerifier

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
SPACE_RESERVE_FILE = ".fastlog-space-reserve"
SPACE_RESERVE_BYTES = 1 << 20
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
FUTURE_DIR_SUFFIX = "-future"
# `<topic>-<partition>.<hex id>-delete|-stray`: what delete_log and mark_stray name a dir;
# `-future`: a partition's copy while it moves to another log dir (create_future_log).
# fsyncs of a creation pass (create_logs) that wait at once: they cost no more CPU than
# one after another, and the disk flushes its cache once for all that wait together.
CREATE_SYNC_THREADS = 8
_RETIRED_DIR = re.compile(r"^.+-\d+\.[0-9a-f]+-(delete|stray|future)$")
# Every file a partition dir may hold: segments, indexes and producer snapshots (with the
# suffixes of deletion, compaction and swaps), the epoch checkpoint, their temp files.
_PARTITION_FILE = re.compile(
    r"^(\d{20}\.(log|index|timeindex|snapshot|txnindex)(\.(deleted|cleaned|swap))?"
    r"|leader-epoch-checkpoint|partition\.metadata)(\.tmp)?$")


def _call(fn, *args):
    return fn(*args)


def foreign_entry(path: str) -> str | None:
    """The first entry of directory `path` that no partition log holds, else None. A log
    dir may share its parent with other folders (a mistyped log.dirs, `lost+found`): a
    directory is opened, and ever removed, only if it holds nothing but a log's files."""
    with os.scandir(path) as entries:
        for e in entries:
            if not _PARTITION_FILE.match(e.name) or not e.is_file(follow_symlinks=False):
                return e.name
    return None


class LogManager:
    """All partition logs of one broker (see the module comment for threads)."""

    def __init__(self, log_dirs: list[str], default_config: LogConfig, *,
                 node_id: int | None = None, cluster_id: str | None = None,
                 topic_config=None, time_fn=time.time, scheduler=None,
                 cleaner_enable: bool = True,
                 dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE, cleaner_worker=None,
                 verification_interval_ms: int = 0,
                 verification_bytes_per_sec: int = DEFAULT_VERIFICATION_BYTES_PER_SEC,
                 recovery_threads_per_data_dir: int = 1):
        """Open every log dir and load every partition in it.

        topic_config: optional callable topic -> LogConfig for partitions found on disk
        (default: default_config). scheduler: an IoWorker (one is created and owned by
        this manager when None). cleaner_enable (log.cleaner.enable) and dedupe_buffer_size
        (log.cleaner.dedupe.buffer.size) set up compaction; cleaner_worker: where its
        segment I/O runs (its own IoWorker thread, started on first use, when None).
        verification_interval_ms / _bytes_per_sec: the background CRC verifier of sealed
        segments (verifier.py; its thread starts here, off when the interval is <= 0);
        its counters are `verification_stats`. recovery_threads_per_data_dir
        (num.recovery.threads.per.data.dir): threads per log dir that load the logs at
        startup and flush them at shutdown."""
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.time_fn = time_fn
        self._topic_config = topic_config
        self.recovery_threads_per_data_dir = max(1, recovery_threads_per_data_dir)
        self._owns_scheduler = scheduler is None
        self.scheduler = scheduler or IoWorker()
        self._logs: dict[tuple[str, int], Log] = {}
        # the figures of every log in _logs, a slot each (_figures.pyx: the metrics scrape
        # reads them there): taken in _add_log, released where a log leaves _logs
        self.figures = LogFigures()
        self._dir_of: dict[tuple[str, int], str] = {}
        # the logs whose topic sets flush.ms: the only ones the flusher looks at (loop)
        self._timed_flush: dict[tuple[str, int], Log] = {}
        self.dir_failure_channel = LogDirFailureChannel()
        # partitions whose log dir went offline -> that dir (loop thread)
        self._offline_logs: dict[tuple[str, int], str] = {}
        self.had_clean_shutdown: dict[str, bool] = {}
        self._shut_down = False
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            self._check_meta_properties(d, node_id, cluster_id)
        # partitions moving to another log dir: (log, destination dir) (loop thread)
        self._future_logs: dict[tuple[str, int], tuple[Log, str]] = {}
        # partitions create_logs is making -> their log dir (loop thread), and its thread
        self._creating: dict[tuple[str, int], str] = {}
        self._create_pool: ThreadPoolExecutor | None = None
        self._futures_found: list[str] = []
        self._load_dirs()
        for d in self.log_dirs:
            self._allocate_space_reserve(d)
        self._settle_futures_found()
        self.cleaner = LogCleaner(
            lambda: [(k, self._dir_of[k], lg) for k, lg in self._logs.items()
                     if not self.dir_failure_channel.is_offline(self._dir_of[k])],
            self.log_dirs, dedupe_buffer_size=dedupe_buffer_size, worker=cleaner_worker,
            time_fn=time_fn) if cleaner_enable else None
        self.verifier = LogVerifier(self.all_logs, verification_interval_ms,
                                    verification_bytes_per_sec)
        self.verifier.start()

    # ------------------------------------------------------------------ startup

    @staticmethod
    def _check_meta_properties(log_dir: str, node_id, cluster_id) -> None:
        props = read_meta_properties(log_dir)
        if props is None:
            if node_id is not None or cluster_id is not None:
                new = {"version": 0}
                if node_id is not None:
                    new["broker.id"] = node_id
                if cluster_id is not None:
                    new["cluster.id"] = cluster_id
                write_meta_properties(log_dir, new)
            return
        if node_id is not None and "broker.id" in props and int(props["broker.id"]) != node_id:
            raise KafkaStorageError(
                f"{log_dir} belongs to broker {props['broker.id']}, not {node_id}")
        if cluster_id is not None and props.get("cluster.id", cluster_id) != cluster_id:
            raise KafkaStorageError(
                f"{log_dir} belongs to cluster {props['cluster.id']}, not {cluster_id}")

    def _read_checkpoint(self, log_dir: str, name: str) -> dict:
        try:
            return OffsetCheckpointFile(os.path.join(log_dir, name)).read()
        except (CorruptCheckpointError, OSError) as exc:
            # Without a trustworthy recovery point every segment gets checked: slow but safe.
            logger.warning("%s: ignoring unreadable checkpoint: %s", log_dir, exc)
            return {}

    def _per_dir(self, work: dict[str, list], fn) -> dict[str, list]:
        """fn(item) for every item of every dir, on recovery_threads_per_data_dir threads
        per dir, all dirs at once (Kafka's recovery pools); the results per dir in the
        items' order. The first exception, if any, is raised once all have run."""
        threads = self.recovery_threads_per_data_dir
        if threads == 1 and len(work) <= 1:
            return {d: [fn(item) for item in items] for d, items in work.items()}
        pools = {d: ThreadPoolExecutor(max_workers=threads,
                                       thread_name_prefix=f"log-recovery-{i}")
                 for i, d in enumerate(work)}
        try:
            futures = {d: [pools[d].submit(fn, item) for item in items]
                       for d, items in work.items()}
            results, error = {}, None
            for d, fs in futures.items():
                results[d] = []
                for f in fs:
                    try:
                        results[d].append(f.result())
                    except BaseException as e:  # noqa: B036 (raised below, after the rest)
                        error = error or e
                        results[d].append(None)
            if error is not None:
                raise error
            return results
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True)

    def _load_dirs(self) -> None:
        """Load every dir's logs (see _per_dir), then settle each dir."""
        plans = {d: self._scan_dir(d) for d in self.log_dirs}
        opened = self._per_dir({d: plan[1] for d, plan in plans.items()}, self._open_found)
        for d, (clean, found) in plans.items():
            recovered: list[Log] = []
            for (key, _, _, _), log in zip(found, opened[d], strict=True):
                self._add_log(key, log, d)
                if log.load_report.recovered:
                    recovered.append(log)
            self._report_recovery(d, clean, recovered)
            if clean:
                # From now on a crash must look unclean: the marker only lives between a
                # clean shutdown and the next startup.
                os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))
                fsync_dir(d)

    def _open_found(self, item) -> Log:
        key, path, clean, (recovery_point, log_start_offset) = item
        return Log.open(path, self._config_for(key[0]), recovery_point=recovery_point,
                        log_start_offset=log_start_offset, clean_shutdown=clean,
                        time_fn=self.time_fn, scheduler=self.scheduler,
                        failure_channel=self.dir_failure_channel)

    def _scan_dir(self, log_dir: str) -> tuple[bool, list]:
        """The dir's partition logs to open: (clean shutdown, [(key, path, clean,
        (recovery point, log start offset))]); retired dirs are dealt with here."""
        clean = os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
        self.had_clean_shutdown[log_dir] = clean
        recovery_points = self._read_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT)
        found: list = []
        futures: list[str] = []
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue
            retired = _RETIRED_DIR.match(name)
            if retired is None:
                try:
                    key = parse_topic_partition(name)
                except ValueError:
                    continue
            foreign = foreign_entry(path)
            if foreign is not None:
                logger.warning("%s: not a partition log (it holds %r); left alone", path, foreign)
                continue
            if retired is not None:
                if retired.group(1) == "delete":
                    self.scheduler.submit(shutil.rmtree, path, True)
                elif retired.group(1) == "future":
                    futures.append(path)
                else:
                    logger.warning("%s: stray log kept for the operator to remove", path)
                continue
            if key in self._dir_of:
                raise KafkaStorageError(
                    f"partition {key[0]}-{key[1]} is in both {self._dir_of[key]} and {log_dir}")
            self._dir_of[key] = log_dir
            found.append((key, path, clean,
                          (recovery_points.get(key, 0), start_offsets.get(key))))
        self._futures_found.extend(futures)
        return clean, found

    @staticmethod
    def _report_recovery(log_dir: str, clean: bool, recovered: list[Log]) -> None:
        """One WARNING line for the dir (partitions recovered, what was removed); each
        partition's detail at DEBUG, except that Log already warned of each removal."""
        if not recovered:
            return
        for lg in recovered:
            r = lg.load_report
            logger.debug("%s-%d: recovered: %d segment(s) checked, %d index rebuild(s), %d "
                         "bytes removed", lg.topic, lg.partition, r.recovered_segments,
                         r.rebuilt_segments, r.lost_bytes)
        lost = [lg for lg in recovered if lg.load_report.lost_data]
        why = "a clean shutdown (files damaged since)" if clean else "an unclean shutdown"
        logger.warning(
            "%s: recovered after %s: %d partition(s), %d segment(s) checked, %d index "
            "rebuild(s); %d partition(s) lost data: %d bytes, %d whole batch(es), %d "
            "record(s), %d segment(s) deleted%s", log_dir, why, len(recovered),
            sum(lg.load_report.recovered_segments for lg in recovered),
            sum(lg.load_report.rebuilt_segments for lg in recovered), len(lost),
            sum(lg.load_report.lost_bytes for lg in lost),
            sum(lg.load_report.lost_batches for lg in lost),
            sum(lg.load_report.lost_records for lg in lost),
            sum(lg.load_report.deleted_segments for lg in lost),
            "" if not lost else " (" + ", ".join(
                f"{lg.topic}-{lg.partition} from offset {lg.load_report.truncated_at}"
                for lg in lost[:10]) + (", ..." if len(lost) > 10 else "") + ")")

    # ------------------------------------------------------------------ space reserve

    @staticmethod
    def _allocate_space_reserve(log_dir: str) -> bool:
        """Allocate the dir's space reserve unless present; False when the disk has no
        room for it now (retried by later retention passes)."""
        path = os.path.join(log_dir, SPACE_RESERVE_FILE)
        try:
            if os.path.getsize(path) >= SPACE_RESERVE_BYTES:
                return True
        except OSError:
            pass
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.posix_fallocate(fd, 0, SPACE_RESERVE_BYTES)
            finally:
                os.close(fd)
            return True
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                report_limited(logger, logging.WARNING, ("reserve", log_dir),
                               "%s: cannot allocate the %d-byte space reserve: %s",
                               log_dir, SPACE_RESERVE_BYTES, e)
            try:
                os.unlink(path)  # never a half reserve that looks whole
            except OSError:
                pass
            return False

    def release_space_reserve(self) -> bool:
        """Give up every dir's space reserve (a write that must not fail on a full disk
        just did); True if any space was freed. Any thread."""
        freed = False
        for d in self.online_dirs:
            try:
                os.unlink(os.path.join(d, SPACE_RESERVE_FILE))
                freed = True
            except OSError:
                continue
            logger.warning("%s: disk full: released the %d-byte space reserve for a write "
                           "that frees or records state", d, SPACE_RESERVE_BYTES)
        return freed

    def _restore_space_reserves(self) -> None:
        for d in self.online_dirs:
            path = os.path.join(d, SPACE_RESERVE_FILE)
            if os.path.exists(path):
                continue
            try:
                st = os.statvfs(d)
            except OSError:
                continue
            if st.f_bavail * st.f_frsize >= 4 * SPACE_RESERVE_BYTES:
                self.scheduler.submit(self._allocate_space_reserve, d)

    def with_space_reserve(self, fn, *args):
        """fn(*args); on ENOSPC, once more after releasing the space reserve."""
        try:
            return fn(*args)
        except OSError as e:
            if e.errno != errno.ENOSPC or not self.release_space_reserve():
                raise
        return fn(*args)

    def _config_for(self, topic: str) -> LogConfig:
        if self._topic_config is not None:
            cfg = self._topic_config(topic)
            if cfg is not None:
                return cfg
        return self.default_config

    # ------------------------------------------------------------------ logs

    def _add_log(self, key: tuple[str, int], log: Log, log_dir: str) -> None:
        self._logs[key] = log
        self._dir_of[key] = log_dir
        log.attach_figures(self.figures)
        log.config_listener = self._flush_policy_changed
        self._flush_policy_changed(log)

    def note_all_figures(self) -> None:
        """(loop thread) Every listed log's figures written anew into its slot (a slot
        taken where one is missing): the metrics scrape found a slot that missed a change."""
        for log in list(self._logs.values()):
            if log._figures is not self.figures:
                log.attach_figures(self.figures)
            else:
                log.note_figures()

    def _flush_policy_changed(self, log: Log) -> None:
        """(Log.update_config) The flusher keeps to the logs with a flush.ms."""
        key = (log.topic, log.partition)
        if log.config.flush_ms < LONG_MAX and self._logs.get(key) is log:
            self._timed_flush[key] = log
        elif self._timed_flush.get(key) is log:
            del self._timed_flush[key]

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        """The logs in online dirs. Any thread (the verifier reads it)."""
        offline = self.dir_failure_channel.offline
        if not offline:
            return list(self._logs.values())
        return [lg for lg in list(self._logs.values()) if os.path.dirname(lg.dir) not in offline]

    @property
    def online_dirs(self) -> list[str]:
        offline = self.dir_failure_channel.offline
        return [d for d in self.log_dirs if d not in offline]

    def disk_space(self, log_dir: str) -> tuple[int, int]:
        """(total, usable) bytes of the file system holding log_dir (DescribeLogDirs v4);
        (-1, -1) when it cannot be read. One statvfs call: any thread."""
        try:
            st = os.statvfs(log_dir)
        except OSError:
            return -1, -1
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize

    # ------------------------------------------------------------------ moving between dirs
    # AlterReplicaLogDirs (Kafka's future logs): the partition's copy grows in the
    # destination dir as `<topic>-<partition>.<uuid>-future` while the current log serves;
    # promote_future_log swaps them once the copy has caught up. A move goes on across a
    # restart, as Kafka's: the future log is loaded again (see _settle_futures_found) and
    # the replica manager resumes copying once it hosts the partition.

    def _settle_futures_found(self) -> None:
        """Startup: a future log whose current log is gone (a crash inside the swap, after
        the current one was renamed for deletion) becomes the log; one beside a current
        log in another dir is an unfinished move, loaded (recovered from its start: its
        recovery point is not checkpointed) to go on; any other is removed."""
        for path in self._futures_found:
            key = parse_topic_partition(path)
            log_dir = os.path.dirname(path)
            if key in self._logs and self._dir_of[key] != log_dir and \
                    key not in self._future_logs and \
                    not self.dir_failure_channel.is_offline(log_dir):
                try:
                    future = Log.open(path, self._config_for(key[0]), time_fn=self.time_fn,
                                      scheduler=self.scheduler, clean_shutdown=False,
                                      failure_channel=self.dir_failure_channel)
                except (OSError, KafkaStorageError) as e:
                    logger.warning("%s: unfinished move to another log dir cannot be "
                                   "loaded (%s), removed", path, e)
                else:
                    self._future_logs[key] = (future, log_dir)
                    logger.info("%s: unfinished move to this log dir, at offset %d; it goes "
                                "on", path, future.log_end_offset)
                    continue
            if key in self._logs or self.dir_failure_channel.is_offline(log_dir):
                logger.warning("%s: unfinished move to another log dir, removed", path)
                self.scheduler.submit(shutil.rmtree, path, True)
                continue
            final = os.path.join(log_dir, f"{key[0]}-{key[1]}")
            os.rename(path, final)
            fsync_dir(log_dir)
            self._add_log(key, Log.open(final, self._config_for(key[0]), time_fn=self.time_fn,
                                        scheduler=self.scheduler,
                                        failure_channel=self.dir_failure_channel), log_dir)
            logger.warning("%s: a move to this log dir was interrupted after the swap; "
                           "completed", final)
        self._futures_found = []

    def future_log(self, topic: str, partition: int) -> tuple[Log, str] | None:
        """(future log, destination dir) of a partition moving between dirs, or None."""
        return self._future_logs.get((topic, partition))

    def future_logs(self) -> list[tuple[Log, str]]:
        return list(self._future_logs.values())

    def create_future_log(self, topic: str, partition: int, log_dir: str) -> Log:
        """An empty future log of the partition in `log_dir` (one of the online log dirs,
        not the partition's own); an existing one for another dir is removed first."""
        key = (topic, partition)
        current = self._future_logs.get(key)
        if current is not None:
            if current[1] == log_dir:
                return current[0]
            self.abort_future_log(topic, partition)
        path = os.path.join(log_dir, f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        log = Log.open(path, self._config_for(topic), time_fn=self.time_fn,
                       scheduler=self.scheduler, failure_channel=self.dir_failure_channel)
        self._future_logs[key] = (log, log_dir)
        self.scheduler.submit(fsync_dir, log_dir)
        return log

    def abort_future_log(self, topic: str, partition: int) -> None:
        """Stop a move: the future log's files go (on the I/O worker), unless its dir
        failed (then they stay until a start with the dir readable drops them)."""
        entry = self._future_logs.pop((topic, partition), None)
        if entry is None:
            return
        if self.dir_failure_channel.is_offline(entry[1]):
            entry[0].close_for_failure()  # nothing is written to a failed dir
        else:
            entry[0].closed = True
            self.scheduler.submit(entry[0].delete)

    def promote_future_log(self, topic: str, partition: int) -> Log:
        """The swap, once the future log holds everything the current one does and is
        flushed: the current log is renamed for deletion (in-flight reads keep their
        files until file.delete.delay.ms), then the future one takes the partition's name
        in its dir and serves from now on. Loop thread."""
        key = (topic, partition)
        future, log_dir = self._future_logs.pop(key)
        source = self._dir_of.get(key)
        self.delete_log(topic, partition)
        # Each rename reaches the disk before the next (two directory fsyncs, on the loop:
        # produce to the partition waits for them, as Kafka's swap holds its lock): a
        # crash between them leaves a future log without a current one, which the next
        # start completes; never two current logs.
        if source is not None:
            fsync_dir(source)
        future.rename_dir(os.path.join(log_dir, f"{topic}-{partition}"))
        fsync_dir(log_dir)
        self._add_log(key, future, log_dir)
        return future

    def offline_dir_of(self, topic: str, partition: int) -> str | None:
        """The offline log dir holding the partition, or None."""
        return self._offline_logs.get((topic, partition))

    def handle_log_dir_failure(self, log_dir: str) -> list[tuple[str, int]]:
        """Take `log_dir` offline (loop thread; Kafka's LogManager.handleLogDirFailure):
        forget its logs and release their files, writing nothing. Returns the partitions
        that were in it."""
        if log_dir not in self.log_dirs:
            return []
        if not self.dir_failure_channel.is_offline(log_dir):
            self.dir_failure_channel.report(log_dir, "taken offline", OSError(errno.EIO, "failed"))
        keys = [k for k, d in self._dir_of.items() if d == log_dir]
        for key in keys:
            log = self._logs.pop(key)
            log.detach_figures()
            del self._dir_of[key]
            self._timed_flush.pop(key, None)
            self._offline_logs[key] = log_dir
            if self.cleaner is not None:
                self.cleaner.forget(key)
            log.close_for_failure()
        # Moves into the dir or out of it stop (the dir is written no more).
        for key, (_, dest) in list(self._future_logs.items()):
            if dest == log_dir or key in keys:
                self.abort_future_log(*key)
        logger.warning("%s: offline: %d partition(s) no longer served (%s)", log_dir, len(keys),
                       ", ".join(f"{t}-{p}" for t, p in keys[:10]) + (", ..." if len(keys) > 10
                                                                      else ""))
        return keys

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int,
                          config: LogConfig | None = None) -> Log:
        """The partition's log, created (in the log dir with the fewest partitions) if
        absent. An existing log gets `config` if one is given."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            if config is not None:
                log.update_config(config)
            return log
        if key in self._creating:  # (its files are being made: never two Logs of one dir)
            raise KafkaStorageError(f"{topic}-{partition} is being created")
        log_dir = self._place([partition], topic)[0]
        try:
            log = Log.create(os.path.join(log_dir, f"{topic}-{partition}"),
                             config or self._config_for(topic), time_fn=self.time_fn,
                             scheduler=self.scheduler, failure_channel=self.dir_failure_channel)
        except OSError as e:
            raise self._create_failed(log_dir, f"{topic}-{partition}", e) from None
        self._add_log(key, log, log_dir)
        self.scheduler.submit(fsync_dir, log_dir)  # the new partition dir must survive a crash
        return log

    def _place(self, partitions, topic: str) -> list[str]:
        """The log dir of each new partition of `topic`: the online dir with the fewest
        partitions (those being created included) at its turn."""
        if not topic or "/" in topic or topic in (".", ".."):
            raise ValueError(f"invalid topic name {topic!r}")
        for p in partitions:
            if (topic, p) in self._offline_logs:
                raise KafkaStorageError(f"{topic}-{p} is in the offline log dir "
                                        f"{self._offline_logs[(topic, p)]}")
        online = self.online_dirs
        if not online:
            raise KafkaStorageError("every log dir is offline")
        counts = {d: 0 for d in online}
        for d in (*self._dir_of.values(), *self._creating.values()):
            if d in counts:
                counts[d] += 1
        placed = []
        for _ in partitions:
            log_dir = min(online, key=lambda d: (counts[d], self.log_dirs.index(d)))
            counts[log_dir] += 1
            placed.append(log_dir)
        return placed

    def _create_failed(self, log_dir: str, what: str, e: OSError) -> Exception:
        """What creating `what` in `log_dir` raises after `e`: KafkaStorageError when the
        dir failed (it is reported and goes offline), else `e` (a full disk)."""
        if self.dir_failure_channel.report(log_dir, f"{what}: create", e):
            return KafkaStorageError(f"cannot create {what} in {log_dir}: {e.strerror or e}")
        return e

    # Creating many partitions (CreateTopics, CreatePartitions). Kafka makes each new log's
    # directory and first `.log`, and writes its leader-epoch-checkpoint (fsynced) when the
    # partition gets its first leader; the indexes come with their first entry. Here the
    # same files are made for all of a topic's new partitions on a creation thread, off
    # the request loop, and made durable in one pass before the request is answered: the
    # epoch checkpoints written and fsynced together (fileio.atomic_write_many), then every
    # new partition dir and then each log dir fsynced once (not one wait per partition and
    # file, and several fsyncs waiting at once: each is a flush of the device's cache, most
    # of the wall time of a creation and of its CPU where inode allocation is cheap).

    def create_logs(self, topic: str, leader_epochs: dict[int, int],
                    config: LogConfig | None = None) -> Future:
        """Loop thread: start making the logs of the partitions of `topic` that
        `leader_epochs` names (those new to this manager), each led from its epoch (if
        >= 0) at offset 0. Once the future is
        done (every file on disk, or the logs made removed again after an error), the loop
        hands it to take_created."""
        config = config or self._config_for(topic)
        partitions = [p for p in leader_epochs
                      if (topic, p) not in self._logs and (topic, p) not in self._creating]
        plan = list(zip(partitions, self._place(partitions, topic), strict=True))
        if self._create_pool is None:
            self._create_pool = ThreadPoolExecutor(max_workers=1,
                                                   thread_name_prefix="log-create")
        fut = self._create_pool.submit(self._create_durably, topic, plan, config,
                                       leader_epochs)
        fut.partitions = partitions
        for p, d in plan:
            self._creating[(topic, p)] = d
        return fut

    def _create_durably(self, topic: str, plan, config: LogConfig,
                        leader_epochs: dict[int, int]) -> list[tuple[int, Log, str]]:
        """(creation thread) create_logs' work, one log dir after the other."""
        by_dir: dict[str, list[int]] = {}
        for p, d in plan:
            by_dir.setdefault(d, []).append(p)
        made: list[tuple[int, Log, str]] = []
        try:
            for d, parts in by_dir.items():
                try:
                    logs = []
                    for p in parts:
                        lg = Log.create(os.path.join(d, f"{topic}-{p}"), config,
                                        leader_epochs[p],
                                        time_fn=self.time_fn, scheduler=self.scheduler,
                                        failure_channel=self.dir_failure_channel)
                        made.append((p, lg, d))
                        logs.append(lg)
                    logs = [lg for lg in logs if lg.is_new]
                    epochs = [lg for lg in logs if lg.leader_epoch_cache.latest_epoch >= 0]
                    # (this fsyncs each checkpoint's directory, the partition's own)
                    atomic_write_many(((lg.leader_epoch_cache.path,
                                        lg.leader_epoch_cache.content()) for lg in epochs),
                                      threads=CREATE_SYNC_THREADS)
                    # (an empty `.log` needs no fsync of its own: one lost in a crash is
                    # made again by loading, as for any partition dir without a segment)
                    sync_new((), [lg.dir for lg in logs
                                  if lg.leader_epoch_cache.latest_epoch < 0],
                             CREATE_SYNC_THREADS)
                    fsync_dir(d)
                except OSError as e:
                    raise self._create_failed(d, f"{len(parts)} new partitions of {topic}",
                                              e) from None
        except BaseException:
            for _, lg, _ in made:
                if lg.is_new:
                    lg.delete()
                else:
                    lg.close()
            raise
        return made

    def take_created(self, topic: str, fut: Future) -> dict[int, Log]:
        """Loop thread, once create_logs' future is done: its logs become this manager's
        ({partition: Log}); raises what making them raised."""
        for p in fut.partitions:
            self._creating.pop((topic, p), None)
        made = fut.result()
        for p, lg, d in made:
            self._add_log((topic, p), lg, d)
        return {p: lg for p, lg, _ in made}

    def delete_log(self, topic: str, partition: int) -> bool:
        """Forget the partition; its dir is renamed `<name>.<uuid>-delete` at once and
        removed after file.delete.delay.ms (in-flight reads keep working meanwhile)."""
        log = self._retire(topic, partition, DELETE_DIR_SUFFIX)
        if log is None:
            return False
        self.scheduler.schedule(log.config.file_delete_delay_ms / 1000.0, log.delete)
        return True

    def mark_stray(self, topic: str, partition: int) -> str | None:
        """Stop serving a log that no topic claims and keep its files, renamed
        `<name>.<uuid>-stray` (as Kafka keeps stray logs): a metadata file restored from
        an older copy must never cost the data. Returns the new path."""
        log = self._retire(topic, partition, STRAY_DIR_SUFFIX)
        if log is None:
            return None
        log.close()
        return log.dir

    def _retire(self, topic: str, partition: int, suffix: str) -> Log | None:
        """Forget the partition and rename its dir `<name>.<uuid><suffix>`."""
        key = (topic, partition)
        log = self._logs.pop(key, None)
        if log is not None:
            log.detach_figures()
        self._dir_of.pop(key, None)
        self._timed_flush.pop(key, None)
        # (a partition of an offline dir is only forgotten: its files stay where they are,
        # and a start with the dir readable keeps them aside as a stray log)
        self._offline_logs.pop(key, None)
        if log is None:
            return None
        if self.cleaner is not None:
            self.cleaner.forget(key)
        log.rename_dir(f"{log.dir}.{uuid.uuid4().hex}{suffix}")
        return log

    # ------------------------------------------------------------------ periodic tasks

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Retention pass over every log (loop thread); deletions happen in the
        background. Returns the number of segments deleted."""
        now = int(self.time_fn() * 1000) if now_ms is None else now_ms
        total = 0
        for log in self.all_logs():
            try:
                total += log.delete_old_segments(now)
            except OSError as e:
                report_limited(logger, logging.ERROR, ("retention", log.dir),
                               "retention failed for %s: %s", log, e)
        if not self._shut_down:
            self._restore_space_reserves()
        return total

    def clean_logs(self, now_ms: int | None = None):
        """Compaction tick (loop thread, every log.cleaner.backoff.ms): finish a completed
        cleaning pass or start one on the dirtiest compacted log (see cleaner.py)."""
        if self.cleaner is None or self._shut_down:
            return None
        return self.cleaner.maybe_clean(now_ms)

    def flush_dirty_logs(self, now_ms: int | None = None) -> list[Future]:
        """Queue a flush of every log whose unflushed data is older than its flush.ms.
        Only the logs whose topic sets one are looked at (thousands of partitions with
        Kafka's default, never, cost this tick nothing)."""
        now = int(self.time_fn() * 1000) if now_ms is None else now_ms
        futures = []
        offline = self.dir_failure_channel.offline
        for log in list(self._timed_flush.values()):
            if offline and os.path.dirname(log.dir) in offline:
                continue
            if log.unflushed_messages > 0 and now - log.last_flush_ms >= log.config.flush_ms:
                futures.append(log.flush_async())
        return futures

    def checkpoint_recovery_points(self, sync: bool = False):
        """Write every dir's recovery-point checkpoint (on the I/O worker unless sync;
        a future of, or with sync the, success: a failure is logged, never raised)."""
        snapshot = {k: lg.recovery_point for k, lg in self._logs.items()}
        return self._checkpoint(RECOVERY_POINT_CHECKPOINT, snapshot, sync)

    def checkpoint_log_start_offsets(self, sync: bool = False):
        """Write every dir's log-start-offset checkpoint (on the I/O worker unless sync)."""
        snapshot = {k: lg.log_start_offset for k, lg in self._logs.items()}
        return self._checkpoint(LOG_START_OFFSET_CHECKPOINT, snapshot, sync)

    def _checkpoint(self, name: str, snapshot: dict, sync: bool):
        dirs = dict(self._dir_of)

        def write() -> bool:
            by_dir: dict[str, dict] = {d: {} for d in self.online_dirs}
            for key, offset in snapshot.items():
                if dirs.get(key) in by_dir:
                    by_dir[dirs[key]][key] = offset
            ok = True
            for d, offsets in by_dir.items():
                # Only the last checkpoints (shutdown, sync) may use the space reserve: a
                # periodic one that fails leaves the previous one, which is good enough.
                run = self.with_space_reserve if sync else _call
                try:
                    run(OffsetCheckpointFile(os.path.join(d, name)).write, offsets)
                except OSError as e:
                    # The previous checkpoint stays (the write is atomic): recovery then
                    # starts from an older point, which is slower, never wrong.
                    if not self.dir_failure_channel.report(d, f"writing {name}", e):
                        report_limited(logger, logging.ERROR, ("checkpoint", d, name),
                                       "%s: cannot write %s: %s", d, name, e)
                        ok = False  # (a failed dir is offline: it gets no marker anyway)
            return ok

        if sync:
            return write()
        return self.scheduler.submit(write)

    @property
    def verification_stats(self) -> dict:
        """The verifier's counters (passes, segments, bytes, corrupt_batches,
        cpu_seconds; see verifier.py), for metrics."""
        return self.verifier.stats

    # ------------------------------------------------------------------ shutdown

    @staticmethod
    def _flush_at_shutdown(log: Log) -> bool:
        try:
            log.flush()
        except OSError as e:
            if not is_dir_failure(e):  # (a failed dir was reported, and is left out)
                logger.error("%s: cannot flush at shutdown: %s", log.dir, e)
                return False
        return True

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown
        marker in each dir (the next startup then skips recovery)."""
        if self._shut_down:
            return
        self._shut_down = True
        self.verifier.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        if self._create_pool is not None:
            self._create_pool.shutdown(wait=True)
        self.scheduler.drain(timeout=30)
        clean = True
        for log in self.all_logs():
            try:
                log.settle()  # a batch still being written is flushed with the rest
            except OSError as e:
                if not is_dir_failure(e):
                    logger.error("%s: cannot finish a write at shutdown: %s", log.dir, e)
                    clean = False
        by_dir: dict[str, list[Log]] = {d: [] for d in self.online_dirs}
        for key, log in self._logs.items():
            if self._dir_of[key] in by_dir:
                by_dir[self._dir_of[key]].append(log)
        flushed = self._per_dir(by_dir, self._flush_at_shutdown)
        clean &= all(all(oks) for oks in flushed.values())
        clean &= self.checkpoint_recovery_points(sync=True)
        clean &= self.checkpoint_log_start_offsets(sync=True)
        for log in list(self._logs.values()):
            if self.dir_failure_channel.is_offline(os.path.dirname(log.dir)):
                log.close_for_failure()
            else:
                clean &= log.close()
        for log, _ in self._future_logs.values():  # unfinished moves: the next start resumes them
            log.close()
        if self._owns_scheduler:
            self.scheduler.shutdown()
        for d in self.online_dirs:
            if not clean:
                logger.error("%s: no clean-shutdown marker written (a write failed above): "
                             "the next start recovers the logs", d)
                continue
            try:
                with open(os.path.join(d, CLEAN_SHUTDOWN_FILE), "wb") as f:
                    os.fsync(f.fileno())
                fsync_dir(d)
            except OSError as e:
                logger.error("%s: cannot write the clean-shutdown marker (%s): the next start "
                             "recovers the logs", d, e)
