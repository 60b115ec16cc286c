# fastlog/server/log/cleaner.py — LogCleaner: compaction of cleanup.policy=compact logs.
#
# Kafka's log cleaner. Each pass picks the dirtiest compacted log (bytes written since the
# last clean over all cleanable bytes, above min.cleanable.dirty.ratio, or any log whose
# oldest dirty segment is older than max.compaction.lag.ms), builds an offset map
# key-hash -> latest offset over its dirty section, and recopies its inactive segments
# into `<base>.log.cleaned` files (grouped so each output stays within segment.bytes and
# its index sizes), keeping the latest record per key. Offsets never change (compaction
# leaves gaps); a batch whose records all survive is copied byte for byte, one that lost
# some is rebuilt with fastlog._codec.BatchBuilder (same base offset, offsets via offset
# deltas, last offset delta, timestamps, codec, producer id/epoch/base sequence). Kept
# as they are: control batches (so a marker never goes while its transaction's data may be
# in the log), committed transactional batches (their records neither supersede nor are
# removed), records without a key. Batches of aborted transactions (found through the
# segments' transaction indexes, taken on the loop thread with the task) go, as in
# Kafka; the transaction index of a cleaned segment is its originals'. A batch of an idempotent producer that loses every record is
# kept as an empty batch (header only, last offset delta kept) when it is that producer's
# last batch in the cleaned range, so its last sequence survives a reload; so is the last
# batch of each output segment, so that the cleaned segment ends at the offset where its
# originals did (crash recovery of a .swap deletes the originals in its range). Tombstones
# (null value) go once their segment's largest timestamp is older than
# delete.retention.ms, and only when they are the key's latest record in the map.
# `cleaner-offset-checkpoint` (Kafka's offset checkpoint format) in each log dir records
# where each log's dirty section starts.
#
# Threads: maybe_clean()/finish run on the broker's event-loop thread (the one that owns
# every Log): choosing a log, snapshotting its segment list and swapping the cleaned
# segments in (Log.replace_segments, copy-on-write, so concurrent reads never break).
# Reading the source segments (pread, never mmap: a segment truncated meanwhile gives a
# short read, not SIGBUS), writing and fsyncing the cleaned ones runs on the cleaner's
# own IoWorker thread, so a long pass never delays the flushes on LogManager's worker.
"""Log compaction: offset map, segment recopy and the swap of cleaned segments."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from concurrent.futures import Future
from hashlib import blake2b as _blake2b

from fastlog._codec import (
    BatchBuilder,
    CodecError,
    iter_records,
    read_batch_header,
    record_keys,
    scan_batches,
)

from .checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from .segment import CLEANED_SUFFIX, INT32_MAX, LogSegment

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024
# What one offset-map entry costs in this process: its key as bytes (at most 81: a key
# shorter than DIGEST_BYTES as itself, a longer one as its digest), an int offset (32) and
# its dict slot with spare capacity. The map holds at most dedupe.buffer.size /
# MAP_ENTRY_BYTES keys, so its memory stays within that size.
MAP_ENTRY_BYTES = 192
# Keys shorter than this are exact map keys (no hashing: ~1 us saved per record visit);
# longer ones are stored as a BLAKE2b digest of this length, which no exact key can equal.
DIGEST_BYTES = 48
READ_WINDOW = 8 * 1024 * 1024
WRITE_CHUNK = 1024 * 1024
# Producers remembered per pass for "last batch of this producer" (bounded; a producer
# beyond it keeps its emptied batches: safe, a few bytes each).
MAX_PRODUCERS_TRACKED = 100_000
# A log whose cleaning failed (damaged batch, I/O error) is skipped this long.
FAILED_LOG_BACKOFF_MS = 10 * 60 * 1000


class CleanerError(Exception):
    """A segment the cleaner cannot read (what and where)."""


class _Aborted(Exception):
    pass


class OffsetMap:
    """key -> latest offset, holding at most `memory_bytes // MAP_ENTRY_BYTES` keys whatever
    the record data holds. A key shorter than DIGEST_BYTES is its own map key (exact, and
    no bigger than a digest); a longer one is stored as its BLAKE2b digest of
    DIGEST_BYTES (collisions far less likely than in Kafka's MD5 map), which no shorter
    key can equal."""

    def __init__(self, memory_bytes: int):
        self.slots = max(1, int(memory_bytes) // MAP_ENTRY_BYTES)
        self._map: dict[bytes, int] = {}

    @staticmethod
    def key_of(key: bytes) -> bytes:
        if len(key) < DIGEST_BYTES:
            return key
        return _blake2b(key, digest_size=DIGEST_BYTES).digest()

    def put_keys(self, keys, first_dirty: int) -> int | None:
        """Record each (offset, key, _) of a batch (_codec.record_keys) at or after
        first_dirty as its key's latest, in order (one call per batch: this loop is the
        cleaner's hottest); returns the offset of the first record that found the map
        full, or None when all went in."""
        m, slots, key_of = self._map, self.slots, self.key_of
        for offset, key, _ in keys:
            if key is None or offset < first_dirty:
                continue
            k = key if len(key) < DIGEST_BYTES else key_of(key)
            if k not in m and len(m) >= slots:
                return offset
            m[k] = offset
        return None

    def latest(self, key: bytes) -> int:
        """The latest offset recorded for record key `key`, or -1."""
        return self._map.get(key if len(key) < DIGEST_BYTES else self.key_of(key), -1)

    def __len__(self):
        return len(self._map)


@dataclasses.dataclass
class CleanTask:
    """A snapshot (taken on the loop thread) of what one pass cleans."""

    key: tuple[str, int]
    log_dir: str
    log: object
    segments: tuple  # inactive segments to recopy, oldest first
    sizes: tuple
    largest_ts: tuple  # each segment's largest timestamp (tombstone horizon)
    ends: tuple  # the offset after each segment (the next segment's base)
    first_dirty: int
    end_offset: int  # first uncleanable offset (a segment boundary)
    delete_horizon_ms: int
    generation: int  # the log's truncation count: a truncation voids the pass
    # producer id -> [(first offset, marker offset)] of the aborted transactions overlapping
    # the segments (their data batches are dropped)
    aborted: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class CleanResult:
    outputs: list
    clean_end: int  # the next pass's first dirty offset
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


def _iter_batches(seg_file, size: int):
    """(buffer, BatchHeader) for each batch of the first `size` bytes of a segment file,
    read with pread in windows; a batch larger than a window is read alone (bounded by
    the file size)."""
    pos = 0
    while pos < size:
        n = min(READ_WINDOW, size - pos)
        buf = os.pread(seg_file.fileno(), n, pos)
        if len(buf) < n:
            raise CleanerError(f"{seg_file.path}: short read at {pos} (truncated meanwhile?)")
        r = scan_batches(buf, 0, len(buf), False)
        for h in r.batches:
            yield buf, h
        if r.batches:
            pos += r.valid_end
            continue
        if r.error is None:
            raise CleanerError(f"{seg_file.path}: no batch at {pos}")
        try:
            h = read_batch_header(buf, 0)
        except CodecError as exc:
            raise CleanerError(f"{seg_file.path}: bad batch at {pos}: {exc}") from None
        if h.size <= len(buf) or h.size > size - pos:
            raise CleanerError(f"{seg_file.path}: bad batch at {pos}: {r.error}")
        buf = os.pread(seg_file.fileno(), h.size, pos)
        r = scan_batches(buf, 0, len(buf), False)
        if len(r.batches) != 1:
            raise CleanerError(f"{seg_file.path}: bad batch at {pos}: {r.error}")
        yield buf, r.batches[0]
        pos += h.size


def group_segments_by_size(segments, sizes, ends, max_size: int, max_index_size: int):
    """Consecutive runs of segments whose data (and index entries) fit one segment of
    max_size bytes and whose offsets fit 4-byte relative offsets (Kafka's rule)."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        group = [i]
        total = sizes[i]
        oix = segments[i].offset_index.entries * 8
        tix = segments[i].time_index.entries * 12
        j = i + 1
        while j < len(segments):
            seg = segments[j]
            if (total + sizes[j] > max_size
                    or oix + seg.offset_index.entries * 8 > max_index_size
                    or tix + seg.time_index.entries * 12 > max_index_size
                    or ends[j] - 1 - segments[i].base_offset > INT32_MAX):
                break
            total += sizes[j]
            oix += seg.offset_index.entries * 8
            tix += seg.time_index.entries * 12
            group.append(j)
            j += 1
        groups.append(group)
        i = j
    return groups


class LogCleaner:
    """Compacts the compacted logs of a LogManager (see the module comment)."""

    def __init__(self, logs_fn, log_dirs, *, dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
                 worker=None, time_fn=time.time):
        """logs_fn() -> iterable of ((topic, partition), log dir, Log). worker: where the
        segment I/O runs (an IoWorker is created on first use when None; tests pass an
        InlineScheduler)."""
        self._logs_fn = logs_fn
        self.log_dirs = list(log_dirs)
        self.dedupe_buffer_size = dedupe_buffer_size
        self.time_fn = time_fn
        self._worker = worker
        self._owns_worker = worker is None
        self._job: tuple[Future, CleanTask] | None = None
        self._aborting = False
        self._failed: dict[tuple[str, int], int] = {}
        self.checkpoints: dict[str, dict] = {}
        self._generations: dict[tuple[str, int], tuple[int, int]] = {}
        self.passes = 0
        for d in self.log_dirs:
            try:
                self.checkpoints[d] = OffsetCheckpointFile(
                    os.path.join(d, CLEANER_OFFSET_CHECKPOINT)).read()
            except (CorruptCheckpointError, OSError) as exc:
                logger.warning("%s: ignoring unreadable cleaner checkpoint: %s", d, exc)
                self.checkpoints[d] = {}

    # ------------------------------------------------------------------ loop thread

    def _now_ms(self) -> int:
        return int(self.time_fn() * 1000)

    @property
    def busy(self) -> bool:
        return self._job is not None

    def first_dirty_offset(self, key, log_dir, log) -> int:
        off = self.checkpoints.get(log_dir, {}).get(key, log.log_start_offset)
        gen = self._generations.get(key)
        if (off < log.log_start_offset or off > log.log_end_offset
                or (gen is not None and gen != (id(log), log._truncations))):
            # Truncated (data below the checkpoint may have been replaced) or recreated:
            # all of it counts as dirty.
            off = log.log_start_offset
        return off

    def _plan(self, key, log_dir, log, now: int):
        """(dirty ratio, must clean by max lag, CleanTask) or None if nothing cleanable."""
        cfg = log.config
        segs = log.segments
        if len(segs) < 2:
            return None
        first_dirty = self.first_dirty_offset(key, log_dir, log)
        inactive = segs[:-1]
        ends = [s.base_offset for s in segs[1:]]
        chosen, clean_bytes, dirty_bytes = [], 0, 0
        for seg, end in zip(inactive, ends, strict=True):
            if end <= log.log_start_offset:
                continue  # wholly below the log start: retention removes it
            if end > log.high_watermark:
                break
            if end > first_dirty and cfg.min_compaction_lag_ms > 0 and (
                    seg.largest_timestamp > now - cfg.min_compaction_lag_ms):
                break
            chosen.append((seg, end))
            if end <= first_dirty:
                clean_bytes += seg.size
            else:
                dirty_bytes += seg.size
        if not chosen or dirty_bytes == 0:
            return None
        end_offset = chosen[-1][1]
        if end_offset <= first_dirty:
            return None
        ratio = dirty_bytes / max(1, clean_bytes + dirty_bytes)
        due = False
        if cfg.max_compaction_lag_ms < (1 << 62):
            for seg, end in chosen:
                if end > first_dirty:
                    due = now - _first_timestamp(seg) > cfg.max_compaction_lag_ms
                    break
        task = CleanTask(
            key=key, log_dir=log_dir, log=log,
            segments=tuple(s for s, _ in chosen), sizes=tuple(s.size for s, _ in chosen),
            largest_ts=tuple(s.largest_timestamp for s, _ in chosen),
            ends=tuple(e for _, e in chosen), first_dirty=first_dirty, end_offset=end_offset,
            delete_horizon_ms=now - cfg.delete_retention_ms,
            generation=log._truncations)
        return ratio, due, task

    def grab_filthiest_log(self, now_ms: int | None = None) -> CleanTask | None:
        """The compacted log most in need of cleaning, as a CleanTask, or None."""
        now = self._now_ms() if now_ms is None else now_ms
        best = None
        for key, log_dir, log in self._logs_fn():
            if log.closed or not log.config.compact:
                continue
            if self._failed.get(key, -1) > now:
                continue
            planned = self._plan(key, log_dir, log, now)
            if planned is None:
                continue
            ratio, due, task = planned
            if not due and ratio < log.config.min_cleanable_dirty_ratio:
                continue
            rank = (due, ratio)
            if best is None or rank > best[0]:
                best = (rank, task)
        if best is None:
            return None
        task = best[1]
        for txn in task.log.collect_aborted_txns(task.segments[0].base_offset, task.end_offset):
            task.aborted.setdefault(txn.producer_id, []).append((txn.first_offset,
                                                                 txn.last_offset))
        return task

    def maybe_clean(self, now_ms: int | None = None) -> Future | None:
        """Periodic entry point (loop thread): finish a completed pass, or start one on
        the dirtiest log. Returns the pass's Future while one runs."""
        if self._aborting:
            return None
        if self._job is not None:
            if not self._job[0].done():
                return self._job[0]
            self._finish()
        task = self.grab_filthiest_log(now_ms)
        if task is None:
            return None
        if self._worker is None:
            from .scheduler import IoWorker
            self._worker = IoWorker(name="fastlog-log-cleaner")
        fut = self._worker.submit(self.clean, task)
        self._job = (fut, task)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if fut.done():
            self._finish()
        elif loop is not None:
            fut.add_done_callback(lambda _f: loop.call_soon_threadsafe(self._on_done, fut))
        return fut

    def _on_done(self, fut: Future) -> None:
        if self._job is not None and self._job[0] is fut:
            self._finish()
            self.maybe_clean()  # more work? (stops once nothing is over the ratio)

    def _finish(self) -> None:
        """Swap a completed pass's segments in (loop thread)."""
        fut, task = self._job
        self._job = None
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or isinstance(exc, _Aborted):
            return
        if exc is not None:
            task.log.report_failure("cleaning", exc)  # an I/O error takes the dir offline
            logger.error("cleaning %s-%d failed, skipping it for %d s: %s", task.key[0],
                         task.key[1], FAILED_LOG_BACKOFF_MS // 1000, exc)
            self._failed[task.key] = self._now_ms() + FAILED_LOG_BACKOFF_MS
            return
        res: CleanResult = fut.result()
        log = task.log
        current = {k: lg for k, _, lg in self._logs_fn()}
        try:
            swapped = (current.get(task.key) is log and log._truncations == task.generation
                       and log.replace_segments(res.outputs, task.segments))
        except OSError as exc:
            # A rename failed part way: what was renamed `.swap` is completed at the next
            # load (each such segment is whole); in memory the originals stay in place.
            logger.error("swapping cleaned segments into %s-%d failed: %s", *task.key, exc)
            self._failed[task.key] = self._now_ms() + FAILED_LOG_BACKOFF_MS
            return
        if not swapped:
            logger.info("%s-%d changed during cleaning; discarding the cleaned segments",
                        *task.key)
            for seg in res.outputs:
                seg.delete_files()
                seg.close()
            return
        self.passes += 1
        self.checkpoints.setdefault(task.log_dir, {})[task.key] = res.clean_end
        self._generations[task.key] = (id(log), log._truncations)
        self._write_checkpoint(task.log_dir)
        logger.info("cleaned %s-%d up to offset %d: %d of %d records kept, %d -> %d bytes",
                    task.key[0], task.key[1], res.clean_end, res.records_kept,
                    res.records_read, res.bytes_read, res.bytes_written)

    def _write_checkpoint(self, log_dir: str) -> None:
        live = {k for k, _, _ in self._logs_fn()}
        snapshot = {k: v for k, v in self.checkpoints.get(log_dir, {}).items() if k in live}
        path = os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT)
        self._worker.submit(OffsetCheckpointFile(path).write, snapshot)

    def forget(self, key) -> None:
        """A deleted partition: its dirty offset goes with it."""
        for offsets in self.checkpoints.values():
            offsets.pop(key, None)
        self._generations.pop(key, None)
        self._failed.pop(key, None)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop: an in-flight pass is abandoned (its .cleaned files are removed at the
        next load) and the worker thread ends."""
        self._aborting = True
        if self._job is not None:
            try:
                self._job[0].result(timeout)
            except Exception:  # noqa: BLE001 - aborted or failed: nothing to swap
                pass
            fut, task = self._job
            self._job = None
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                for seg in fut.result().outputs:
                    seg.delete_files()
                    seg.close()
        if self._owns_worker and self._worker is not None:
            self._worker.shutdown(timeout)

    # ------------------------------------------------------------------ worker thread

    def _check_abort(self) -> None:
        if self._aborting:
            raise _Aborted()

    def clean(self, task: CleanTask) -> CleanResult:
        """One pass over task's segments (worker thread): build the offset map over the
        dirty section, recopy into .cleaned segments, fsync them. No Log state changes."""
        omap = OffsetMap(self.dedupe_buffer_size)
        last_batch: dict[int, int] = {}
        map_end = self._build_offset_map(task, omap, last_batch)
        res = CleanResult([], map_end)
        cfg = task.log.config
        groups = group_segments_by_size(task.segments, task.sizes, task.ends,
                                        cfg.segment_bytes, cfg.segment_index_bytes)
        try:
            for group in groups:
                out = self._clean_group(task, group, omap, map_end, last_batch, res)
                if out is not None:
                    res.outputs.append(out)
        except BaseException:
            for seg in res.outputs:
                seg.delete_files()
                seg.close()
            raise
        return res

    def _build_offset_map(self, task: CleanTask, omap: OffsetMap, last_batch: dict) -> int:
        """Fill the map from the dirty section; the offset where it stopped (the end of
        the cleanable range, or the first record that found the map full)."""
        first_dirty = task.first_dirty
        for seg, size, end in zip(task.segments, task.sizes, task.ends, strict=True):
            if end <= first_dirty:
                continue
            for buf, h in _iter_batches(seg.file, size):
                self._check_abort()
                if h.last_offset < first_dirty:
                    continue
                if h.producer_id >= 0 and (h.producer_id in last_batch
                                           or len(last_batch) < MAX_PRODUCERS_TRACKED):
                    last_batch[h.producer_id] = h.base_offset
                if h.is_control or h.is_transactional:
                    continue
                full = omap.put_keys(record_keys(buf, h.position), first_dirty)
                if full is not None:
                    if full <= first_dirty:
                        raise CleanerError(
                            f"{task.key[0]}-{task.key[1]}: dedupe buffer holds no "
                            "record; raise log.cleaner.dedupe.buffer.size")
                    logger.info("%s-%d: offset map full (%d keys) at offset %d; the "
                                "rest waits for the next pass", task.key[0], task.key[1],
                                len(omap), full)
                    return full
        return task.end_offset

    def _clean_group(self, task, group, omap, map_end, last_batch, res):
        first = task.segments[group[0]]
        log = task.log
        out = LogSegment.open(log.dir, first.base_offset, log.config, int(self.time_fn() * 1000),
                              suffix=CLEANED_SUFFIX)
        pending = bytearray()
        last_src = last_kept = None
        try:
            for i in group:
                seg = task.segments[i]
                drop_tombstones = task.largest_ts[i] < task.delete_horizon_ms
                res.bytes_read += task.sizes[i]
                for buf, h in _iter_batches(seg.file, task.sizes[i]):
                    self._check_abort()
                    last_src = h
                    kept = self._filter_batch(buf, h, omap, map_end, drop_tombstones,
                                              last_batch, res, task.aborted)
                    if kept is None:
                        continue
                    last_kept = h
                    pending += kept
                    if len(pending) >= WRITE_CHUNK:
                        _append(out, pending)
                        pending = bytearray()
            if last_src is not None and last_kept is not last_src:
                # The group's last batch always stays (empty if need be): the cleaned
                # segment then ends where the originals did, which is what a crash
                # recovery of its .swap relies on to know which originals it replaces.
                pending += _empty_batch(last_src)
            _append(out, pending)
            if out.size == 0:
                out.delete_files()
                out.close()
                return None
            out.txn_index.reset([e for i in group for e in task.segments[i].txn_index.entries])
            out.on_become_inactive_segment()
            out.flush()
            res.bytes_written += out.size
            return out
        except BaseException:
            out.delete_files()
            out.close()
            raise

    @staticmethod
    def _filter_batch(buf, h, omap: OffsetMap, map_end: int, drop_tombstones: bool,
                      last_batch: dict, res: CleanResult, aborted: dict):
        """The bytes to keep of batch h (the original bytes when nothing goes), or None."""
        whole = memoryview(buf)[h.position:h.end]
        if h.is_control:
            return whole
        if h.is_transactional:
            if not any(first <= h.base_offset < last
                       for first, last in aborted.get(h.producer_id, ())):
                return whole
            res.records_read += h.record_count
            return _sequence_keeper(h, last_batch)
        # Decide from (offset, key, tombstone) alone; decode whole records only for a batch
        # that loses some and has to be rebuilt.
        keys = record_keys(buf, h.position)
        res.records_read += len(keys)
        kept = []
        latest_of = omap.latest
        for i, (offset, key, tombstone) in enumerate(keys):
            if key is not None:
                if latest_of(key) > offset:
                    continue  # a later record of this key is in the map
                if tombstone and drop_tombstones and offset < map_end:
                    continue  # an expired tombstone, the latest of its key
            kept.append(i)
        res.records_kept += len(kept)
        if len(kept) == len(keys):
            return whole
        if kept:
            records = list(iter_records(buf, h.position))
            b = BatchBuilder(h.compression, h.base_offset, h.producer_id, h.producer_epoch,
                             h.base_sequence, h.is_transactional, h.timestamp_type,
                             h.partition_leader_epoch)
            for i in kept:
                rec = records[i]
                b.append_with_offset_delta(rec.offset - h.base_offset, rec.timestamp,
                                           rec.key, rec.value, rec.headers)
            return b.build(last_offset_delta=h.last_offset_delta)
        return _sequence_keeper(h, last_batch)


def _sequence_keeper(h, last_batch: dict) -> bytes | None:
    """What stays of a batch that loses every record: its header alone when it is its
    producer's last batch (so the producer's sequence survives a reload), else nothing."""
    if h.producer_id >= 0 and last_batch.get(h.producer_id, h.base_offset) == h.base_offset:
        return _empty_batch(h)
    return None


def _empty_batch(h) -> bytes:
    """Batch h's header with no records (offsets, producer fields and timestamp kept)."""
    b = BatchBuilder(0, h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence,
                     h.is_transactional, h.timestamp_type, h.partition_leader_epoch)
    return b.build(last_offset_delta=h.last_offset_delta, empty_timestamp=h.max_timestamp)


def _append(out: LogSegment, data: bytearray) -> None:
    if data:
        out.append(data, scan_batches(data, 0, len(data), False).batches)


def _first_timestamp(seg: LogSegment) -> int:
    """The first batch's max timestamp (pread of its header), or the largest timestamp."""
    try:
        head = os.pread(seg.file.fileno(), 61, 0)
        ts = read_batch_header(head, 0).max_timestamp
        return ts if ts >= 0 else seg.largest_timestamp
    except (CodecError, OSError, ValueError):
        return seg.largest_timestamp
