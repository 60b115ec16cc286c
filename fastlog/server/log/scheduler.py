# fastlog/server/log/scheduler.py — where storage's slow system calls run.
#
# IoWorker owns one daemon thread that runs fsyncs (Log.flush, checkpoint writes) and
# delayed file deletions for every log of a LogManager, so the broker's event-loop thread
# never waits for a disk. Tasks are (due time, callable); submit() is "now", schedule() is
# "after a delay" (Kafka's file.delete.delay.ms). Callers on any thread get a
# concurrent.futures.Future (the broker can await it with asyncio.wrap_future, e.g. to ack
# a produce only after the fsync that flush.messages asks for).
# InlineScheduler runs everything at once in the caller: standalone logs, tools, tests.
"""Background I/O for storage: one worker thread with delayed tasks."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from concurrent.futures import Future

from fastlog.logs import report_limited

log = logging.getLogger(__name__)


def _run(fut: Future, fn, args) -> None:
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn(*args))
    except OSError as exc:
        # A disk error (the log dir's failure channel has it, when the task knows its
        # dir): one line, no traceback, at most once a minute per task kind.
        report_limited(log, logging.ERROR, ("task", getattr(fn, "__qualname__", fn)),
                       "storage background task %s failed: %s",
                       getattr(fn, "__qualname__", fn), exc)
        fut.set_exception(exc)
    except BaseException as exc:  # reported through the future (and logged)
        log.exception("storage background task %r failed", fn)
        fut.set_exception(exc)


class InlineScheduler:
    """Runs every task immediately in the calling thread (delays are ignored)."""

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        _run(fut, fn, args)
        return fut

    def schedule(self, delay_s: float, fn, *args) -> Future:
        return self.submit(fn, *args)

    def drain(self, timeout: float | None = None) -> bool:
        return True

    def shutdown(self) -> None:
        pass


class IoWorker:
    """One background thread running submitted and delayed tasks in due-time order."""

    def __init__(self, name: str = "fastlog-log-io", clock=time.monotonic):
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list = []
        self._seq = itertools.count()
        self._running = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, *args) -> Future:
        return self.schedule(0.0, fn, *args)

    def schedule(self, delay_s: float, fn, *args) -> Future:
        fut: Future = Future()
        with self._cond:
            if self._stopped:
                raise RuntimeError("storage I/O worker is shut down")
            heapq.heappush(self._heap, (self._clock() + max(0.0, delay_s), next(self._seq),
                                        fut, fn, args))
            self._cond.notify()
        return fut

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped and (not self._heap or self._heap[0][0] > self._clock()):
                        return
                    if self._heap and self._heap[0][0] <= self._clock():
                        _, _, fut, fn, args = heapq.heappop(self._heap)
                        self._running += 1
                        break
                    wait = None if not self._heap else self._heap[0][0] - self._clock()
                    self._cond.wait(wait if wait is None else min(wait, 1.0))
            try:
                _run(fut, fn, args)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def drain(self, timeout: float | None = 10.0) -> bool:
        """Wait until no task is due or running; True if that happened in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._running or (self._heap and self._heap[0][0] <= self._clock()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))
        return True

    def shutdown(self, timeout: float = 30.0) -> None:
        """Run what is due now, drop delayed tasks (their `.deleted` files are removed at
        the next startup, as Kafka does) and stop the thread."""
        with self._cond:
            self._stopped = True
            due = self._clock()
            keep = [t for t in self._heap if t[0] <= due]
            for t in self._heap:
                if t[0] > due:
                    t[2].cancel()
            self._heap = keep
            heapq.heapify(self._heap)
            self._cond.notify_all()
        self._thread.join(timeout)
