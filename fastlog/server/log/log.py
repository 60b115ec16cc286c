# fastlog/server/log/log.py — Log: one partition's sequence of segments.
#
# Owns the partition directory `<log dir>/<topic>-<partition>/`: its segments
# (`<base offset>.log|.index|.timeindex`), its `leader-epoch-checkpoint`, and the offsets
# that describe it (log start, log end, recovery point, high watermark). Loading follows
# Kafka's LogLoader: drop leftovers, finish an interrupted compaction swap (`.swap`),
# rebuild missing/corrupt indexes, and after an unclean shutdown check every batch from
# the recovery point on, truncating at the first bad one.
#
# Threads: append, read, truncate, roll, retention, compaction swaps (replace_segments)
# and config changes come from ONE thread (the broker's event-loop thread). flush() may
# run on the LogManager's I/O worker at the same time: it fsyncs a snapshot of segments
# and then advances the recovery point unless a truncation happened meanwhile. Readers
# take the segment list as an immutable tuple (copy-on-write), so a segment removed by
# retention or compaction stays readable for reads already in progress; its files are
# renamed `.deleted` and unlinked after file.delete.delay.ms.
# Write-behind: an append given a write_executor (the broker does so for batches of at
# least 512 KiB) is stamped, checked and given its segment and byte position on the loop,
# but its pwrite runs on the executor (the GIL released meanwhile), with the reservation
# of its index space and the page faults of the index stores to come (file system calls
# that can wait for the journal behind the data being written), and it stays
# unpublished: the log end offset, the segment's size and index entries, the high
# watermark and the recovery point do not move, so no read, fetch, flush or checkpoint
# sees the range being written. There is at most one such append per log (`settle()`
# publishes it once the write is done): every other change to the log (the next append,
# roll, truncation, close, deletion) settles it first, waiting for the write if need be,
# so appends stay in offset order and nothing overtakes an unwritten range.
# Compiled append: the everyday leader append (offsets assigned, written inline, no roll, no
# new leader epoch) is one call into LeaderAppend (_append.pyx), which holds the active
# segment's descriptor, size and roll settings and the log end offset in C fields and
# writes the same bytes and index entries as the path below; that path takes every other
# append and arms it again, and _publish, update_config and close disarm it.
# Figures: while its LogManager lists it, the log holds a slot of the manager's LogFigures
# (_figures.pyx) and writes its size, log end and start offsets, segment count and high
# watermark there (note_figures) after every change of them on its own paths; the compiled
# append writes its share through a pointer. The metrics scrape reads those slots.
# An I/O error from a write (append, roll, flush, truncation, retention, a compaction swap)
# is reported to the log dir's failure channel (dir_failure.py) before it propagates: the
# LogManager then takes the whole dir offline, as Kafka does.
"""A partition's log: append, read, recovery, truncation, retention."""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future

from fastlog._codec import FileRegion, stamp_batches
from fastlog._index import CorruptIndexError, summarize_batches
from fastlog.fileio import fsync_dir

from ._append import LeaderAppend
from .checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from .config import LogConfig
from .errors import (
    CorruptSegmentError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from .scheduler import InlineScheduler
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    file_name,
    offset_from_file_name,
)
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn

logger = logging.getLogger(__name__)

# ListOffsets special timestamps (Kafka's).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


@dataclasses.dataclass(slots=True)
class LogAppendInfo:
    """What an append did. flush_future is set when flush.messages asked for an fsync:
    it completes once the appended data is on disk (await it before acking to keep
    the flush.messages guarantee without blocking the event loop)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    num_messages: int
    valid_bytes: int
    log_start_offset: int
    flush_future: Future | None = None
    # A write-behind append (see the module comment): what it still waits for.
    pending: PendingAppend | None = None


class PendingAppend:
    """A write-behind append between Log.append and Log.settle: `written` completes when
    its bytes are in the file. After settle(), `error` is what failed (the append was not
    published) or None, and `info.flush_future` is set if flush.messages asked for one.
    `on_written(info)`, set by the caller right after append() returns, runs on the loop
    thread when the append is published."""

    __slots__ = ("log", "info", "segment", "batches", "physical", "length", "written",
                 "on_written", "error")

    def __init__(self, log, info, segment, batches, physical, length):
        self.log = log
        self.info = info
        self.segment = segment
        self.batches = batches
        self.physical = physical
        self.length = length
        self.written: Future | None = None
        self.on_written = None
        self.error: BaseException | None = None


@dataclasses.dataclass(slots=True)
class LoadReport:
    """What loading a log recovered (Log.load_report; LogManager sums them up per dir):
    segments whose batches were checked (recovery), whose indexes were rebuilt, and the
    data removed (bytes, whole batches and records, segments dropped after a bad batch,
    the lowest offset removed or -1)."""

    recovered_segments: int = 0
    rebuilt_segments: int = 0
    lost_bytes: int = 0
    lost_batches: int = 0
    lost_records: int = 0
    deleted_segments: int = 0
    truncated_at: int = -1
    recovered_bases: set = dataclasses.field(default_factory=set)   # (their base offsets)

    @property
    def recovered(self) -> bool:
        return bool(self.recovered_segments or self.rebuilt_segments)

    @property
    def lost_data(self) -> bool:
        return bool(self.lost_bytes)


@dataclasses.dataclass
class FetchDataInfo:
    """A read: file regions ready for sendfile, their total size, and the base offset of
    the first batch they start with (-1 when empty). first_entry_incomplete means the
    only batch returned is cut short by max_bytes (min_one_batch=False).
    upper_bound_offset: no record returned is at or above it (the end of the segment read
    or the read's bound; Kafka's fetchUpperBoundOffset, for the aborted transactions)."""

    start_offset: int
    regions: list
    size: int
    first_batch_offset: int = -1
    first_entry_incomplete: bool = False
    upper_bound_offset: int = -1


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """`<topic>-<partition>` (optionally with a `.<uuid>-delete` or `.<uuid>-future`
    suffix) → (topic, partition)."""
    name = os.path.basename(os.path.normpath(dir_name))
    if (name.endswith("-delete") or name.endswith("-future")) and "." in name:
        name = name[: name.rindex(".")]
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> log directory")
    return topic, int(part)


def _reports_failure(method):
    """A Log method whose OSError is reported to the log dir's failure channel (which
    takes the dir offline unless the disk is only full), then raised as before."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            self.report_failure(method.__name__, e)
            raise
    return wrapper


class Log:
    """One partition's log (see the module comment for the threading model)."""

    def __init__(self, dir_path: str, config: LogConfig, scheduler=None, time_fn=time.time,
                 failure_channel=None):
        self.dir = os.path.abspath(dir_path)
        # The log dir's LogDirFailureChannel (LogManager's), None for standalone logs.
        self.failure_channel = failure_channel
        self.topic, self.partition = parse_topic_partition(self.dir)
        self.config = config
        self.scheduler = scheduler or InlineScheduler()
        self.time_fn = time_fn
        # (segments, their base offsets), replaced whole by _publish
        self._view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        # The compiled everyday leader append (_append.pyx); armed by append(), disarmed
        # by every change of the segment list, the settings or the log's life.
        self._fast = LeaderAppend(LogAppendInfo)
        # Bytes of every segment but the active one (_publish), for the figures.
        self._sealed_bytes = 0
        # The LogManager's LogFigures and this log's slot there while it lists the log
        # (attach_figures); None / -1 otherwise.
        self._figures = None
        self._figure_slot = -1
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self.high_watermark = 0
        # Single-replica partitions: the high watermark follows every append. The replica
        # manager turns this off for replicated partitions and drives it itself.
        self.hw_follows_leo = True
        self.last_flush_ms = self._now_ms()
        self.leader_epoch_cache = LeaderEpochFileCache(None)
        self._state_lock = threading.Lock()  # recovery point vs. truncation (I/O worker)
        self._flush_lock = threading.Lock()  # one flush at a time
        self._truncations = 0
        self._flush_target = 0
        self._flush_job: Future | None = None
        # The write-behind append not settled yet, if any (Log sets it; others read it,
        # a plain attribute because every produce request does)
        self.pending_append: PendingAppend | None = None
        self.closed = False
        # Made by create() in a new directory (not loaded from one found on disk).
        self.is_new = False
        self.load_report = LoadReport()
        # Called with the log after each update_config (its LogManager's flush schedule).
        self.config_listener = None

    def _now_ms(self) -> int:
        return int(self.time_fn() * 1000)

    # ------------------------------------------------------------------ loading

    @classmethod
    def open(cls, dir_path: str, config: LogConfig, recovery_point: int = 0,
             log_start_offset: int | None = None, clean_shutdown: bool = True,
             time_fn=time.time, scheduler=None, failure_channel=None) -> Log:
        """Open (creating if needed) the partition directory and load its segments."""
        os.makedirs(dir_path, exist_ok=True)
        log = cls(dir_path, config, scheduler, time_fn, failure_channel)
        log._load(recovery_point, log_start_offset, clean_shutdown)
        return log

    @classmethod
    def create(cls, dir_path: str, config: LogConfig, leader_epoch: int = -1,
               time_fn=time.time, scheduler=None, failure_channel=None) -> Log:
        """A new partition's log in a directory made here: one empty segment at offset 0,
        and (leader_epoch >= 0) the epoch starting at 0 in its epoch cache, as a new
        leader records it (Kafka's makeLeader). Nothing is read back and nothing fsynced:
        the `.log` file, the epoch cache's file (not written here; LeaderEpochFileCache
        .content()) and the directory are the caller's to make durable (LogManager's
        create_logs does it for many partitions at once). A directory that is already
        there is loaded as open() does (no epoch is recorded then). Any thread, as long
        as the log is not yet shared."""
        try:
            os.makedirs(dir_path)  # (a missing log dir is made again, as open() does)
        except FileExistsError:
            return cls.open(dir_path, config, time_fn=time_fn, scheduler=scheduler,
                            failure_channel=failure_channel)
        log = cls(dir_path, config, scheduler, time_fn, failure_channel)
        log.leader_epoch_cache = LeaderEpochFileCache(
            os.path.join(log.dir, LEADER_EPOCH_CHECKPOINT), read=False)
        try:
            seg = LogSegment.open(log.dir, 0, config, log._now_ms())
        except BaseException:
            shutil.rmtree(log.dir, ignore_errors=True)
            raise
        seg.resize_indexes(config.segment_index_bytes)
        log._publish([seg])
        log.leader_epoch_cache.assign(leader_epoch, 0, write=False)
        log.is_new = True
        return log

    def _load(self, recovery_point: int, log_start_offset: int | None,
              clean_shutdown: bool) -> None:
        now = self._now_ms()
        self._remove_temp_files()
        self.leader_epoch_cache = LeaderEpochFileCache(
            os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT))
        self.load_report.recovered_bases.clear()
        segments = []
        for name in sorted(os.listdir(self.dir)):
            if not name.endswith(LOG_SUFFIX):
                continue
            try:
                base = offset_from_file_name(name)
            except ValueError:
                continue
            missing = [sfx for sfx in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                       if not os.path.exists(file_name(self.dir, base, sfx))]
            seg = LogSegment.open(self.dir, base, self.config, now, file_already_exists=True)
            try:
                if missing and seg.size > 0:
                    raise CorruptIndexError(f"{', '.join(missing)} file missing")
                seg.sanity_check()
            except CorruptIndexError as exc:
                # (after a crash: the active segment's index is still at its full size)
                logger.debug("%s: rebuilding indexes of segment %d: %s", self.dir, base, exc)
                self.load_report.rebuilt_segments += 1
                seg.recover(None, self.config.max_message_bytes)
                self.load_report.recovered_bases.add(base)
                self._note_loss(seg)
            segments.append(seg)
        segments.sort(key=lambda s: s.base_offset)
        if clean_shutdown and segments:
            # A clean shutdown marker does not prove the tail whole (a file cut or
            # overwritten while the broker was down): check the last batches every time.
            problem = segments[-1].check_tail()
            if problem is not None:
                logger.debug("%s: the tail of segment %d is bad: %s", self.dir,
                             segments[-1].base_offset, problem)
                segments = self._recover_segments(segments, segments[-1].base_offset)
        elif segments:
            segments = self._recover_segments(segments, recovery_point)
        if not segments:
            start = log_start_offset or 0
            segments = [LogSegment.open(self.dir, start, self.config, now)]
        self._check_txn_indexes(segments)
        for seg in segments:
            seg.init_bytes_since_last_index_entry()
            seg.release_read_map()
        for seg in segments[:-1]:
            # Rebuilt indexes come back at full size: trim them and record the final time
            # entry, as a roll would have (a no-op for indexes loaded intact).
            seg.on_become_inactive_segment()
        for seg in segments:
            if seg.base_offset not in self.load_report.recovered_bases:
                # Intact on disk: opened again when read or written (a rebuilt one keeps
                # its descriptors for the flush that makes it durable).
                seg.unload_indexes()
        active = segments[-1]
        active.resize_indexes(self.config.segment_index_bytes)
        self._publish(segments)
        self.log_end_offset = active.next_offset
        active.release_read_map()  # (a mapping holds a descriptor of its own)
        first = segments[0].base_offset
        self.log_start_offset = max(first, log_start_offset or 0)
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.high_watermark = self.log_end_offset if self.hw_follows_leo else min(
            self.high_watermark, self.log_end_offset)
        self.note_figures()
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset, loading=True)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    def _remove_temp_files(self) -> None:
        """Kafka's first loading step: files of unfinished deletions/compactions go, as do
        indexes without a data file."""
        names = set(os.listdir(self.dir))
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                # A .cleaned file is a compaction that had not reached its swap (the
                # originals are intact); a .tmp is a checkpoint write a crash interrupted.
                os.unlink(path)
        self._complete_swaps()
        names = set(os.listdir(self.dir))
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith(SWAP_SUFFIX):
                os.unlink(path)  # an index .swap whose .log was lost: rebuilt at load
            elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                stem = name.rsplit(".", 1)[0]
                if stem + LOG_SUFFIX not in names:
                    os.unlink(path)

    def _complete_swaps(self) -> None:
        """Finish a compaction swap that a crash interrupted (Kafka's order: cleaned
        segments were renamed `.swap` only once all were written and fsynced, so each
        `.swap` segment is complete): it replaces every original segment whose base offset
        lies within its offset range, then loses its suffix."""
        swaps = sorted(n for n in os.listdir(self.dir) if n.endswith(LOG_SUFFIX + SWAP_SUFFIX))
        for name in swaps:
            try:
                base = offset_from_file_name(name)
            except ValueError:
                continue
            seg = LogSegment.open(self.dir, base, self.config, self._now_ms(),
                                  file_already_exists=True, suffix=SWAP_SUFFIX)
            try:
                seg.recover(None, self.config.max_message_bytes)
                end = seg.next_offset
            finally:
                seg.close()
            for other in os.listdir(self.dir):
                if not other.endswith(LOG_SUFFIX) or other == name:
                    continue
                try:
                    obase = offset_from_file_name(other)
                except ValueError:
                    continue
                if base < obase < end:
                    logger.info("%s: segment %d replaced by the interrupted compaction swap",
                                self.dir, obase)
                    for sfx in SEGMENT_SUFFIXES:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(file_name(self.dir, obase, sfx))
            for sfx in SEGMENT_SUFFIXES:
                src = file_name(self.dir, base, sfx + SWAP_SUFFIX)
                if os.path.exists(src):
                    os.replace(src, file_name(self.dir, base, sfx))
                elif sfx != LOG_SUFFIX:
                    # Never pair the swapped data with the replaced segment's index.
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(file_name(self.dir, base, sfx))
            logger.info("%s: completed the compaction swap of segment %d", self.dir, base)
        if swaps:
            fsync_dir(self.dir)

    def _recover_segments(self, segments: list[LogSegment], recovery_point: int):
        """Check every batch from the segment holding recovery_point on; at the first
        bad batch truncate there and delete every later segment."""
        bases = [s.base_offset for s in segments]
        first = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        for i in range(first, len(segments)):
            seg = segments[i]
            truncated = seg.recover(self.leader_epoch_cache, self.config.max_message_bytes)
            self.load_report.recovered_bases.add(seg.base_offset)
            self.load_report.recovered_segments += 1
            if truncated:
                self._note_loss(seg)
                for later in segments[i + 1:]:
                    logger.warning("%s: deleting segment %d (%d bytes) after the corruption",
                                   self.dir, later.base_offset, later.size)
                    self.load_report.deleted_segments += 1
                    self.load_report.lost_bytes += later.size
                    later.delete_files()
                    later.close()
                segments = segments[: i + 1]
                break
        # An empty segment that is not the first and follows a truncation is useless.
        while len(segments) > 1 and segments[-1].size == 0 and (
                segments[-1].base_offset != segments[-2].next_offset):
            segments[-1].delete_files()
            segments[-1].close()
            segments.pop()
        return segments

    def _check_txn_indexes(self, segments: list[LogSegment]) -> None:
        """Load step after the segments: a `.txnindex` that is damaged, has entries past
        its segment's end, or (for a segment just recovered) lacks an ABORT marker's
        entry, is rebuilt from the log with every later one (one WARNING). A missing one
        is no problem here (the file comes with the first entry); the producer-state
        snapshot's list of segments that need one is checked by check_txn_indexes."""
        bad = []
        for seg in segments:
            ti = seg.txn_index
            problem = ti.problem
            if problem is None and ti.entries and ti.entries[-1].last_offset >= seg.next_offset:
                problem = (f"an entry for offset {ti.entries[-1].last_offset}, past the "
                           f"segment's end {seg.next_offset}")
            if problem is None and seg.base_offset in self.load_report.recovered_bases \
                    and self._unindexed_abort(seg):
                problem = "an aborted transaction of the recovered segment is missing"
            if problem is not None:
                bad.append((seg, problem))
        self._rebuild_bad_txn_indexes(segments, bad)

    @_reports_failure
    def check_txn_indexes(self, bases) -> None:
        """The segments at these base offsets held aborted transactions (the producer-state
        snapshot's list, Log.txn_index_bases when it was taken): one of them still in the
        log whose `.txnindex` is gone is rebuilt from the log with every later one."""
        segs, known = self._view
        bad = []
        for base in sorted(set(bases)):
            i = bisect.bisect_left(known, base)
            if i < len(known) and known[i] == base and not segs[i].txn_index.exists:
                bad.append((segs[i], "missing"))
        self._rebuild_bad_txn_indexes(list(segs), bad)

    def txn_index_bases(self) -> list[int]:
        """Base offsets of the segments whose `.txnindex` holds entries (for the
        producer-state snapshot; check_txn_indexes takes the list back)."""
        return [s.base_offset for s in self._view[0] if s.txn_index.entries]

    def _rebuild_bad_txn_indexes(self, segments: list[LogSegment], bad) -> None:
        if not bad:
            return
        first, why = bad[0]
        logger.warning("%s: rebuilding the transaction index of %d segment(s) from %d "
                       "on from the log: %s: %s", self.dir, len(bad), first.base_offset,
                       os.path.basename(first.txn_index.path), why)
        self.load_report.rebuilt_segments += len(bad)
        self._rebuild_txn_indexes(segments, first.base_offset)

    def _unindexed_abort(self, seg: LogSegment) -> bool:
        return any(commit is False and not seg.txn_index.has(h.base_offset)
                   for h, commit in seg.txn_batches())

    def _rebuild_txn_indexes(self, segments: list[LogSegment], from_offset: int) -> None:
        """Replay the transactions of the whole log (batch headers and markers only) and
        rewrite the `.txnindex` of every segment from from_offset on. A transaction
        begun before the log start (deleted data) is not known: its abort is not listed."""
        open_txns: dict[int, int] = {}   # producer id -> first offset
        for seg in segments:
            found = []
            for h, commit in seg.txn_batches():
                pid = h.producer_id
                if commit is None:
                    open_txns.setdefault(pid, h.base_offset)
                    continue
                first = open_txns.pop(pid, None)
                if first is not None and not commit:
                    lso = min(open_txns.values()) if open_txns else h.base_offset + 1
                    found.append(AbortedTxn(pid, first, h.base_offset, lso))
            if seg.base_offset >= from_offset:
                seg.txn_index.reset(found)
            seg.release_read_map()

    def _note_loss(self, seg: LogSegment) -> None:
        loss = seg.last_loss
        if loss is None:
            return
        # Data was removed: always worth a WARNING of its own (LogManager summarizes the
        # partitions whose indexes were only rebuilt).
        logger.warning("%s: recovery removed from segment %d %s", self.dir,
                       seg.base_offset, loss.describe())
        r = self.load_report
        r.lost_bytes += loss.bytes
        r.lost_batches += loss.batches
        r.lost_records += loss.records
        r.truncated_at = loss.from_offset if r.truncated_at < 0 else min(
            r.truncated_at, loss.from_offset)

    # ------------------------------------------------------------------ segment list

    def _publish(self, segments) -> None:
        # Readers pick up (segments, bases) as one tuple: never half of an update.
        self._fast.disarm()
        segs = tuple(segments)
        self._view = (segs, tuple(s.base_offset for s in segs))
        self._sealed_bytes = sum(s.size for s in segs[:-1])
        self.note_figures()

    # ------------------------------------------------------------------ figures

    def attach_figures(self, figures) -> None:
        """Listed by a LogManager: take a slot of its LogFigures and note the figures."""
        self.detach_figures()
        self._fast.disarm()  # (armed before without a slot: it takes the slot when armed)
        self._figure_slot = figures.take(self.topic, self.partition)
        self._figures = figures if self._figure_slot >= 0 else None
        self.note_figures()

    def detach_figures(self) -> None:
        """No longer listed: the slot goes back (and the compiled append forgets it)."""
        figures, self._figures = self._figures, None
        if figures is not None:
            self._fast.disarm()
            figures.release(self._figure_slot)
        self._figure_slot = -1

    def note_figures(self) -> None:
        """Writes the figures into the log's slot (after any change of its size, offsets,
        segments or high watermark on a path other than the compiled append's)."""
        figures = self._figures
        if figures is not None:
            segs = self._view[0]
            figures.put(self._figure_slot, self._sealed_bytes + segs[-1].size if segs else 0,
                        self.log_end_offset, self.log_start_offset, len(segs),
                        self.high_watermark)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """Immutable snapshot of the segments, oldest first."""
        return self._view[0]

    @property
    def active_segment(self) -> LogSegment:
        return self._view[0][-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view[0])

    @property
    def num_segments(self) -> int:
        return len(self._view[0])

    @property
    def corrupt_ranges(self) -> list[tuple[int, int, int]]:
        """(segment base offset, start byte, end byte) of every range the verifier found
        corrupt in this log's current segments (reads of them are refused)."""
        return [(s.base_offset, lo, hi) for s in self._view[0] for lo, hi in s.corrupt]

    # ------------------------------------------------------------------ append

    def append(self, records, batches, leader_epoch: int, assign_offsets: bool = True,
               now_ms: int | None = None, write_executor=None) -> LogAppendInfo:
        """Append validated batches (headers found in `records` by the codec).

        assign_offsets=True (leader): stamp offsets from the log end offset and the leader
        epoch into the bytes in place; False (replication): keep the batches' offsets,
        which must increase and start at or after the log end offset. Returns LogAppendInfo.
        write_executor: write the bytes there instead (write-behind, see the module
        comment): the returned info's `pending` then says when they are written; the
        caller keeps `records` unchanged until then, and calls settle().
        The common leader append (inline, no roll, no new epoch) is taken in one compiled
        call (LeaderAppend); every other one here, which then arms it for the next."""
        if assign_offsets and write_executor is None:
            info = self._fast.append(self, records, batches, leader_epoch, now_ms)
            if info is not None:
                return info
        self._fast.disarm()
        if self.pending_append is not None:
            self.settle()
        if self.closed:
            raise ValueError(f"log {self.dir} is closed")
        now = self._now_ms() if now_ms is None else now_ms
        if not batches:
            return LogAppendInfo(-1, -1, -1, -1, -1, 0, 0, self.log_start_offset)
        if assign_offsets:
            stamp_batches(records, batches, self.log_end_offset, leader_epoch)
        count, max_ts, off_max, epochs, bad, reason = summarize_batches(
            batches, self.config.max_message_bytes, self.log_end_offset, not assign_offsets,
            self.leader_epoch_cache.latest_epoch)
        if bad >= 0:
            h = batches[bad]
            if reason == "too_large":
                raise RecordBatchTooLargeError(
                    f"batch at offset {h.base_offset} is {h.size} bytes, over max.message.bytes "
                    f"{self.config.max_message_bytes} of {self.topic}-{self.partition}")
            if bad == 0 and h.base_offset < self.log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"append at offset {h.base_offset} below the log end offset "
                    f"{self.log_end_offset} of {self.topic}-{self.partition}")
            raise OffsetsOutOfOrderError(
                f"batch offsets {h.base_offset}..{h.last_offset} out of order in "
                f"{self.topic}-{self.partition}")
        for epoch, offset in epochs:
            self.leader_epoch_cache.assign(epoch, offset)
        first, last = batches[0], batches[-1]
        valid_bytes = last.end - first.position
        segment = self._view[0][-1]
        try:
            if segment.should_roll(valid_bytes, max_ts, last.last_offset, now, self.config,
                                   len(batches)):
                segment = self._roll(first.base_offset)
            placed = segment.append(records, batches, write_executor is not None)
        except OSError as e:
            self.report_failure("append", e)
            raise
        info = LogAppendInfo(
            first_offset=first.base_offset, last_offset=last.last_offset,
            max_timestamp=max_ts, offset_of_max_timestamp=off_max,
            log_append_time=now if self.config.log_append_time else -1,
            num_messages=count, valid_bytes=valid_bytes,
            log_start_offset=self.log_start_offset)
        if placed is None:
            self._published(info)
            if assign_offsets:
                self._fast.arm(self, segment, self.config)
            return info
        view, physical = placed
        pending = info.pending = PendingAppend(self, info, segment, batches, physical, len(view))
        upto = batches[-1].position - batches[0].position
        try:
            pending.written = write_executor.submit(segment.write_at, view, physical,
                                                    len(batches), upto)
        except RuntimeError:  # the executor is shut down: write here
            pending.written = Future()
            try:
                segment.write_at(view, physical, len(batches), upto)
                pending.written.set_result(None)
            except OSError as e:
                pending.written.set_exception(e)
        self.pending_append = pending
        return info

    def _published(self, info: LogAppendInfo) -> None:
        """The appended batches are in the segment: move the log end offset (and the high
        watermark with it on a single replica), and ask for the fsync flush.messages wants."""
        self.log_end_offset = info.last_offset + 1
        if self.hw_follows_leo:
            self.high_watermark = self.log_end_offset
        self.note_figures()
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            info.flush_future = self._request_flush(self.log_end_offset)

    def settle(self) -> None:
        """Loop thread: publish the write-behind append, if any, waiting for its write
        first if it is still running (at once when the caller awaited `written`). Publishing
        adds its index entries and moves the log end offset, the high watermark and
        flush.messages' fsync as an inline append would; then the caller's on_written runs.
        A failed write (or a log closed meanwhile by a log dir failure) is not published:
        its `error` says why, and an I/O error goes to the failure channel."""
        pending = self.pending_append
        if pending is None:
            return
        self.pending_append = None
        try:
            pending.written.result()
            if self.closed:
                raise KafkaStorageError(f"log {self.dir} was closed while a batch was written")
            pending.segment.end_append(pending.batches, pending.physical, pending.length)
        except Exception as e:  # (the write's future may also have been cancelled)
            pending.error = e
            if isinstance(e, OSError):
                self.report_failure("append", e)
            return
        self._published(pending.info)
        if pending.on_written is not None:
            try:
                pending.on_written(pending.info)
            except Exception:
                logger.exception("%s: after the append at offset %d", self.dir,
                                 pending.info.first_offset)

    # ------------------------------------------------------------------ transactions

    @_reports_failure
    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction in the `.txnindex` of the segment holding its
        marker (txn.last_offset, just appended: the active segment as a rule)."""
        segs, bases = self._view
        i = bisect.bisect_right(bases, txn.last_offset) - 1
        if i >= 0:
            segs[i].txn_index.append(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTxns: the aborted transactions overlapping
        [fetch_offset, upper_bound), from the txn indexes of the segment holding
        fetch_offset and those after it, as far as they can hold one."""
        segs, bases = self._view
        out: list[AbortedTxn] = []
        for seg in segs[max(0, bisect.bisect_right(bases, fetch_offset) - 1):]:
            if seg.txn_index.collect(fetch_offset, upper_bound, out):
                break
        return out

    def report_failure(self, what: str, exc: BaseException) -> bool:
        """Tell the log dir's failure channel that `what` failed with `exc`; True when
        that takes the dir offline (an I/O error, not a full disk). Any thread."""
        if self.failure_channel is None:
            return False
        return self.failure_channel.report(os.path.dirname(self.dir),
                                           f"{self.topic}-{self.partition}: {what}", exc)

    @_reports_failure
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset); the
        old one is trimmed and flushed in the background (which moves the recovery point)."""
        self.settle()
        return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        segments = list(self.segments)
        active = segments[-1]
        if active.base_offset == new_base and active.size == 0:
            return active  # already an empty segment there
        now = self._now_ms()
        for suffix in SEGMENT_SUFFIXES:
            stale = file_name(self.dir, new_base, suffix)
            if os.path.exists(stale):
                logger.warning("%s: removing stale file %s before roll", self.dir, stale)
                os.unlink(stale)
        active.on_become_inactive_segment()
        seg = LogSegment.open(self.dir, new_base, self.config, now)
        segments.append(seg)
        self._publish(segments)
        self._request_flush(new_base)
        return seg

    # ------------------------------------------------------------------ read

    def read(self, start_offset: int, max_bytes: int, max_position: int | None = None,
             min_one_batch: bool = True) -> FetchDataInfo:
        """Read from the batch holding start_offset: up to max_bytes (but at least one whole
        batch if min_one_batch), never past offset `max_position` (an exclusive offset
        bound such as the high watermark; None = log end). Regions come from one segment,
        as Kafka's reads do. Raises OffsetOutOfRangeError outside [start, end]."""
        segs, bases = self._view
        end = self.log_end_offset
        if start_offset == end:
            return FetchDataInfo(start_offset, [], 0)
        if start_offset > end or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self.log_start_offset}, {end}] of "
                f"{self.topic}-{self.partition}")
        max_offset = end if max_position is None else min(max_position, end)
        if start_offset >= max_offset:
            return FetchDataInfo(start_offset, [], 0)
        i = bisect.bisect_right(bases, start_offset) - 1
        if i < 0:
            i = 0
        while i < len(segs):
            seg = segs[i]
            limit_pos = None
            if max_offset < end:
                if i + 1 < len(segs) and bases[i + 1] <= max_offset:
                    limit_pos = None
                elif max_offset <= seg.base_offset:
                    return FetchDataInfo(start_offset, [], 0)
                else:
                    h = seg.translate_offset(max_offset)
                    limit_pos = seg.size if h is None else h.position
            r = seg.read(start_offset, max_bytes, limit_pos, min_one_batch)
            if r is not None and seg.corrupt:
                r = _without_corrupt(seg, r, start_offset)
            if r is not None:
                if r.length == 0:
                    return FetchDataInfo(start_offset, [], 0, r.first_batch_offset,
                                         r.first_entry_incomplete)
                upper = min(max_offset, bases[i + 1] if i + 1 < len(segs) else end)
                return FetchDataInfo(start_offset, [FileRegion(r.file, r.position, r.length)],
                                     r.length, r.first_batch_offset, r.first_entry_incomplete,
                                     upper)
            i += 1
        return FetchDataInfo(start_offset, [], 0)

    # ------------------------------------------------------------------ offsets by time

    def fetch_offset_by_timestamp(self, timestamp: int):
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None.
        Special values: -2 earliest, -1 latest, -3 the record with the largest timestamp."""
        if timestamp == EARLIEST_TIMESTAMP:
            return self.earliest_offset()
        if timestamp == LATEST_TIMESTAMP:
            return self.latest_offset()
        segs = self.segments
        if timestamp == MAX_TIMESTAMP:
            best = None
            for seg in segs:
                ts = seg.max_timestamp_so_far
                if ts >= 0 and (best is None or ts > best[1]):
                    best = (seg.offset_of_max_timestamp_so_far, ts)
            return best
        for seg in segs:
            if seg.size == 0 or seg.largest_timestamp < timestamp and seg is not segs[-1]:
                continue
            found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    def earliest_offset(self):
        return self.log_start_offset, -1

    def latest_offset(self):
        return self.log_end_offset, -1

    # ------------------------------------------------------------------ high watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, kept within [log_start_offset, log_end_offset]."""
        hw = self.high_watermark = max(self.log_start_offset, min(offset, self.log_end_offset))
        figures = self._figures
        if figures is not None:
            figures.put_high_watermark(self._figure_slot, hw)
        return hw

    # ------------------------------------------------------------------ truncation

    @_reports_failure
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or after `offset` (follower truncation); True if any."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic}-{self.partition} to {offset}")
        self.settle()
        if offset >= self.log_end_offset:
            return False
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        with self._state_lock:
            self._truncations += 1
            segs = list(self.segments)
            keep = [s for s in segs if s.base_offset < offset] or segs[:1]
            removed = [s for s in segs if s not in keep]
            active = keep[-1]
            active.truncate_to(offset)
            active.resize_indexes(self.config.segment_index_bytes)
            self._publish(keep)
            self.log_end_offset = active.next_offset
            # A target inside the batch that straddles the log start removes that whole
            # batch: the start then moves back to the new end (as Kafka's min() does).
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.note_figures()
        self._delete_segments_async(removed)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        return True

    @_reports_failure
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at `offset`."""
        self.settle()
        with self._state_lock:
            self._truncations += 1
            removed = list(self.segments)
            for seg in removed:
                seg.change_suffix("", DELETED_SUFFIX)
            seg = LogSegment.open(self.dir, offset, self.config, self._now_ms())
            self._publish([seg])
            self.log_end_offset = offset
            self.log_start_offset = offset
            self.recovery_point = offset
            self.high_watermark = offset
        self.note_figures()
        self._schedule_file_deletion(removed)
        self.leader_epoch_cache.clear()

    @_reports_failure
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset to `offset` (at most the high
        watermark); whole segments below it go at the next retention pass."""
        if offset > self.high_watermark or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: high watermark is "
                f"{self.high_watermark} for {self.topic}-{self.partition}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.note_figures()
            self.leader_epoch_cache.truncate_from_start(offset)
        return self.log_start_offset

    # ------------------------------------------------------------------ retention

    @_reports_failure
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention pass: segments wholly below the log start offset, then (with
        cleanup.policy=delete) those older than retention.ms by their largest timestamp
        and the oldest beyond retention.bytes. Never the active segment, never data at or
        above the high watermark. Returns the number of segments deleted."""
        now = self._now_ms() if now_ms is None else now_ms
        cfg = self.config
        segs = list(self.segments)[:-1]  # the active segment is never deleted
        nxt = list(self.segments)[1:]
        deletable = []
        size_excess = (self.size_in_bytes - cfg.retention_bytes
                       if cfg.delete_enabled and cfg.retention_bytes >= 0 else -1)
        for seg, following in zip(segs, nxt, strict=True):
            if following.base_offset > self.high_watermark:
                break
            reason = None
            if following.base_offset <= self.log_start_offset:
                reason = "log start offset"
            elif cfg.delete_enabled and cfg.retention_ms >= 0 and (
                    now - seg.largest_timestamp > cfg.retention_ms):
                reason = "retention.ms"
            elif size_excess >= 0 and size_excess - seg.size >= 0:
                reason = "retention.bytes"
            if reason is None:
                break
            size_excess -= seg.size
            logger.info("%s: deleting segment %d (%s)", self.dir, seg.base_offset, reason)
            deletable.append(seg)
        if not deletable:
            return 0
        remaining = segs[len(deletable):] + [self.active_segment]
        self._publish(remaining)
        self.log_start_offset = max(self.log_start_offset, remaining[0].base_offset)
        self.note_figures()
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._delete_segments_async(deletable)
        return len(deletable)

    @_reports_failure
    def replace_segments(self, new_segments, old_segments) -> bool:
        """Compaction's swap (loop thread): `new_segments` (complete, fsynced, files named
        `.cleaned`) take the place of the contiguous `old_segments`. Files move as Kafka's
        do so that a crash at any step recovers at load (see _complete_swaps): cleaned ->
        .swap, originals -> .deleted, .swap -> final names. Readers holding the old list
        keep reading the old files until the delayed deletion. False (nothing changed)
        when the old segments are no longer all in the log, e.g. after a truncation."""
        segs = list(self.segments)
        if self.closed or not old_segments:
            return False
        try:
            first = segs.index(old_segments[0])
        except ValueError:
            return False
        if segs[first:first + len(old_segments)] != list(old_segments) or (
                first + len(old_segments) >= len(segs)):
            return False  # never the active segment
        for seg in new_segments:
            seg.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        self._publish(segs[:first] + list(new_segments) + segs[first + len(old_segments):])
        self._delete_segments_async(old_segments)
        for seg in new_segments:
            seg.change_suffix(SWAP_SUFFIX, "")
        self.scheduler.submit(fsync_dir, self.dir)
        return True

    def _delete_segments_async(self, segments) -> None:
        for seg in segments:
            seg.change_suffix("", DELETED_SUFFIX)
        self._schedule_file_deletion(segments)

    def _schedule_file_deletion(self, segments) -> None:
        if segments:
            delay = self.config.file_delete_delay_ms / 1000.0
            self.scheduler.schedule(delay, _delete_segment_files, tuple(segments))

    # ------------------------------------------------------------------ flush

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    @_reports_failure
    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below `up_to` (default: the log end) and
        move the recovery point there. Safe on the I/O worker thread. A flush that runs
        after the log was closed or deleted (a job queued before) has nothing to do: its
        files are released or gone, and an fsync of them must not fail the log dir."""
        with self._flush_lock:
            if self.closed:
                return
            with self._state_lock:
                target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
                if target <= self.recovery_point:
                    return
                generation = self._truncations
                start = self.recovery_point
                segs = self.segments
            bases = [s.base_offset for s in segs]
            first = max(0, bisect.bisect_right(bases, start) - 1)
            for seg in segs[first:]:
                if seg.base_offset >= target:
                    break
                if not seg.deleted and not seg.file.closed:
                    seg.flush()
            fsync_dir(self.dir)  # new segment files must survive a crash too
            with self._state_lock:
                if generation == self._truncations and target > self.recovery_point:
                    self.recovery_point = target
                self.last_flush_ms = self._now_ms()

    def _request_flush(self, up_to: int) -> Future:
        """Ask the I/O worker to flush up to `up_to`; joins a queued flush if any."""
        with self._state_lock:
            self._flush_target = max(self._flush_target, up_to)
            if self._flush_job is not None:   # (queued, not started: it takes the new target)
                return self._flush_job
            fut: Future = Future()
            self._flush_job = fut
        inner = self.scheduler.submit(self._run_flush_job)
        inner.add_done_callback(lambda f: _chain(f, fut))
        return fut

    def _run_flush_job(self) -> None:
        with self._state_lock:
            self._flush_job = None   # (started: a later request queues another)
            target = self._flush_target
        self.flush(target)

    def flush_async(self, up_to: int | None = None) -> Future:
        return self._request_flush(self.log_end_offset if up_to is None else up_to)

    # ------------------------------------------------------------------ config / lifecycle

    def update_config(self, config: LogConfig) -> None:
        """New topic settings; index sizes apply from the next segment on."""
        self._fast.disarm()
        self.config = config
        if self.config_listener is not None:
            self.config_listener(self)

    @_reports_failure
    def rename_dir(self, new_dir: str) -> None:
        """Move the partition directory (deletion marks it `<dir>.<uuid>-delete`)."""
        self.settle()
        self._fast.disarm()
        # Under the flush lock: a flush on the I/O worker must never fsync the old path
        # after the rename (ENOENT there would take the whole log dir offline).
        with self._flush_lock:
            os.rename(self.dir, new_dir)
            self.dir = os.path.abspath(new_dir)
            for seg in self.segments:
                seg.dir = self.dir
                seg.file.path = os.path.join(self.dir, os.path.basename(seg.file.path))
                seg.offset_index.update_parent_dir(self.dir)
                seg.time_index.update_parent_dir(self.dir)
                seg.txn_index.path = os.path.join(self.dir,
                                                  os.path.basename(seg.txn_index.path))
            if self.leader_epoch_cache.path:
                self.leader_epoch_cache.path = os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT)

    def close(self) -> bool:
        """Record the active segment's final time entry, trim indexes, release files.
        False when the final entry could not be written (a full disk): the files are
        released all the same, and the indexes are rebuilt by the next start's recovery."""
        if self.closed:
            return True
        self.settle()
        self.closed = True
        self._fast.disarm()
        ok = True
        with self._flush_lock:
            active = self.active_segment
            try:
                active.on_become_inactive_segment()
            except OSError as e:
                logger.error("%s: cannot finish the active segment's indexes: %s", self.dir, e)
                ok = False
            for seg in self.segments:
                try:
                    seg.close()
                except OSError as e:
                    logger.error("%s: closing segment %d: %s", self.dir, seg.base_offset, e)
                    ok = False
        return ok

    def close_for_failure(self) -> None:
        """Its log dir failed: stop using the log and write nothing more. The index
        mappings and descriptors go now; each segment's data descriptor is closed after
        file.delete.delay.ms (a fetch may still be sending from it), or earlier when the
        last holder lets go."""
        self.closed = True
        self._fast.disarm()
        segments = self.segments
        for seg in segments:
            seg.release_read_map()
            for index in (seg.offset_index, seg.time_index):
                with contextlib.suppress(OSError):
                    index.close_handler()
        delay = self.config.file_delete_delay_ms / 1000.0
        with contextlib.suppress(RuntimeError):  # the I/O worker is already shut down
            self.scheduler.schedule(delay, _close_segment_files, segments)

    def delete(self) -> None:
        """Remove the partition: every segment and the directory itself."""
        self.closed = True
        with self._flush_lock:
            for seg in self.segments:
                seg.delete_files()
                seg.close()
            self._publish([])
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self):
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")


def _without_corrupt(seg: LogSegment, r, start_offset: int):
    """The read cut short before the first corrupt range it reaches; CorruptSegmentError
    when it starts in one."""
    end = r.position + r.length
    for lo, hi in seg.corrupt:
        if lo <= r.position < hi:
            raise CorruptSegmentError(
                f"offset {start_offset} lies in bytes {lo}..{hi} of {seg.log_path}, which "
                f"failed verification (CRC-32C or structure)")
        if r.position < lo < end:
            end = lo
    r.length = end - r.position
    return r


def _close_segment_files(segments) -> None:
    for seg in segments:
        with contextlib.suppress(OSError):
            seg.file.close()


def _delete_segment_files(segments) -> None:
    for seg in segments:
        seg.delete_files()


def _chain(src: Future, dst: Future) -> None:
    if dst.done():
        return
    if src.cancelled():
        dst.cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())
