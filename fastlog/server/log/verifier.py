# fastlog/server/log/verifier.py — LogVerifier: re-checks the CRC-32C of every batch in
# sealed segments, in the background, so that a bit flipped on disk after the batch was
# written (never looked at again by recovery, which only checks the tail) is found and
# never served as if good.
#
# Reads the `.log` files only (Kafka's v2 batches, see segment.py), with pread into one
# reused buffer of CHUNK bytes (never mmap: a segment truncated meanwhile must not fault),
# and validates each chunk with _codec.scan_batches (one call per chunk; the CRC runs in C,
# without the GIL for large batches). What it finds goes to LogSegment.corrupt, a tuple of
# (start, end) byte ranges that Log.read refuses to serve (KafkaStorageError), and to the
# counters in `stats` (the metrics issue can export them):
#   passes            complete passes over every log
#   segments          segments verified
#   bytes             bytes verified
#   corrupt_batches   corrupt ranges found (each range counted once, when first found)
#   cpu_seconds       thread CPU time spent verifying
#
# Threads: one daemon thread of its own ("fastlog-log-verifier"), started by start(), which
# sleeps `interval_ms` between passes and paces its reads to `bytes_per_sec`. It reads the
# logs' immutable segment snapshots and only ever assigns a segment's `corrupt` tuple (one
# atomic store); the loop thread reads it. shutdown() stops and joins the thread; the
# LogManager calls it before closing the logs.
"""Background CRC verification of sealed log segments."""

from __future__ import annotations

import logging
import threading
import time

from fastlog._codec import TruncatedError, scan_batches
from fastlog.logs import report_limited

logger = logging.getLogger(__name__)

# Defaults of fastlog.log.verification.interval.ms / .bytes.per.sec (broker config).
DEFAULT_VERIFICATION_INTERVAL_MS = 3_600_000
DEFAULT_VERIFICATION_BYTES_PER_SEC = 10 * 1024 * 1024
# Bytes read (and verified) per pread; also the pacing step.
CHUNK = 1 << 20
# Largest batch the verifier reads whole when it exceeds a chunk (larger: corrupt length).
MAX_BATCH = 1 << 30


class LogVerifier:
    """Verifies the sealed segments of the logs that `logs_fn()` returns (a list of Log)."""

    def __init__(self, logs_fn, interval_ms: int, bytes_per_sec: int):
        self._logs_fn = logs_fn
        self.interval_ms = interval_ms
        self.bytes_per_sec = max(1, bytes_per_sec)
        self.stats = {"passes": 0, "segments": 0, "bytes": 0, "corrupt_batches": 0,
                      "cpu_seconds": 0.0}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._buf = bytearray(CHUNK)
        self._next_read = 0.0

    @property
    def enabled(self) -> bool:
        return self.interval_ms > 0

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="fastlog-log-verifier",
                                        daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000.0):
            try:
                self.run_pass()
            except Exception:  # noqa: BLE001 - the next pass tries again
                logger.exception("log verification pass failed")

    # ------------------------------------------------------------------ passes

    def run_pass(self) -> int:
        """Verify every sealed segment of every log once; returns the corrupt ranges
        found (new and known). Runs on the verifier thread (or a test's)."""
        cpu0 = time.thread_time()
        found = 0
        self._next_read = time.monotonic()
        for log in self._logs_fn():
            segs = log.segments
            # Sealed segments only: the active one is checked at load (LogSegment.check_tail).
            for seg, following in zip(segs[:-1], segs[1:], strict=True):
                if self._stop.is_set():
                    return found
                if log.closed or seg.deleted:
                    continue
                try:
                    found += self._verify(log, seg, following.base_offset)
                except OSError as e:
                    # a read error: the log dir's failure channel takes the dir offline
                    if not log.report_failure("verifying", e):
                        raise
                    break
        self.stats["passes"] += 1
        self.stats["cpu_seconds"] += time.thread_time() - cpu0
        return found

    def _verify(self, log, seg, next_base: int) -> int:
        ranges = self.scan_segment(seg, next_base)
        if ranges is None:
            return 0  # closed or deleted meanwhile
        self.stats["segments"] += 1
        old = seg.corrupt
        new = [r for r in ranges if r not in old]
        seg.corrupt = tuple(ranges)
        self.stats["corrupt_batches"] += len(new)
        for start, end in new:
            report_limited(logger, logging.ERROR, ("corrupt", log.dir),
                           "%s: segment %d is corrupt at bytes %d..%d (CRC-32C or structure "
                           "check failed): fetches of it answer KAFKA_STORAGE_ERROR",
                           log.dir, seg.base_offset, start, end)
        return len(ranges)

    def _pace(self, n: int) -> None:
        # Never more than bytes_per_sec on average; an idle spell earns no burst.
        now = time.monotonic()
        self._next_read = max(self._next_read, now) + n / self.bytes_per_sec
        wait = self._next_read - now
        if wait > 0:
            self._stop.wait(wait)

    def scan_segment(self, seg, next_base: int) -> list[tuple[int, int]] | None:
        """The corrupt (start, end) byte ranges of the segment's file. A batch that fails
        its CRC or structure checks, or whose offsets do not follow the previous batch's
        and end below `next_base` (the next segment's base offset; the base offset lies
        outside the CRC), is one range when its declared size is plausible, and the scan
        goes on after it; otherwise the rest of the file is one range. None if the file
        went away."""
        f, size = seg.file, seg.size
        ranges: list[tuple[int, int]] = []
        pos = 0
        prev_last = seg.base_offset - 1
        buf = self._buf
        while pos < size and not self._stop.is_set():
            start = pos
            n = f.pread_into(memoryview(buf)[:min(CHUNK, size - start)], start)
            if n is None:
                return None
            if n == 0:
                break  # truncated meanwhile: what was there is verified
            self._pace(n)
            r = scan_batches(buf, 0, n, True)
            good = r.valid_end
            for h in r.batches:
                if h.base_offset <= prev_last or h.last_offset >= next_base:
                    good = h.position
                    r = None
                    break
                prev_last = h.last_offset
            pos = start + good
            if r is not None and r.error is None:
                continue
            length = 0
            if r is not None and isinstance(r.error, TruncatedError) and start + n < size:
                if good > 0:
                    continue  # the chunk cut a batch: read on from its start
                length = self._declared_length(f, pos, size)
                if length is None:
                    return None
                if length and length > CHUNK:
                    big = self._read_big_batch(f, pos, length)
                    if big is None:
                        return None
                    if big.error is None and prev_last < big.batches[0].base_offset \
                            and big.batches[0].last_offset < next_base:
                        prev_last = big.batches[0].last_offset
                        pos += length
                        continue
            else:
                length = self._declared_length(f, pos, size)
                if length is None:
                    return None
            if length:
                ranges.append((pos, pos + length))
                pos += length
                continue
            ranges.append((pos, size))
            break
        self.stats["bytes"] += max(pos, ranges[-1][1]) if ranges else pos
        return ranges

    @staticmethod
    def _declared_length(f, pos: int, size: int) -> int | None:
        """The size the batch at pos declares if plausible (a v2 header fits, the file
        holds it), else 0; None if the file went away."""
        head = bytearray(12)
        n = f.pread_into(memoryview(head), pos)
        if n is None:
            return None
        if n < 12:
            return 0
        length = 12 + int.from_bytes(head[8:12], "big", signed=True)
        return length if 61 <= length <= min(MAX_BATCH, size - pos) else 0

    def _read_big_batch(self, f, pos: int, length: int):
        """scan_batches of the one batch at pos, larger than a chunk, read whole."""
        whole = bytearray(length)
        got = f.pread_into(memoryview(whole), pos)
        if got is None:
            return None
        self._pace(got)
        return scan_batches(whole, 0, got, True)
