# fastlog/logs.py — log lines that cannot flood the log: a failure or refusal that may
# repeat (bad frames, refused connections, failed logins, denied requests, a full disk, a
# corrupt batch read again and again) is written at most once per interval per kind, and
# the next line says how many were left out since.
#
# RateLimitedLog is one kind of event (an object kept by its owner); report_limited keys
# the kinds by any hashable value (a file, a partition) in one bounded registry. Any
# thread: RateLimitedLog's counters are updated under a lock. Imports nothing from
# fastlog, so every layer may use it.
"""Rate-limited log lines with counts of what was left out."""

from __future__ import annotations

import threading
import time

# report_limited's interval: a repeating storage or request failure is logged at most
# once per key in this many seconds.
REPORT_INTERVAL_S = 60.0
# Keys report_limited remembers before it starts afresh (keys name files and partitions:
# never an unbounded dict).
MAX_KEYS = 4096


class RateLimitedLog:
    """At most one line per ``interval`` seconds for one kind of event, each line saying
    how many of the same kind were not logged since the previous one."""

    def __init__(self, logger, interval: float = 10.0):
        self.logger = logger
        self.interval = interval
        self.last: float | None = None
        self.suppressed = 0
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args) -> bool:
        """Log ``msg % args`` unless a line of this kind went out within the interval;
        True when it logged."""
        now = time.monotonic()
        with self._lock:
            if self.last is not None and now - self.last < self.interval:
                self.suppressed += 1
                return False
            n, self.suppressed, self.last = self.suppressed, 0, now
        if n:
            msg += " (%d more like this in the last %.0f s, not logged)"
            args = (*args, n, self.interval)
        self.logger.log(level, msg, *args)
        return True


_registry: dict = {}
_registry_lock = threading.Lock()


def report_limited(logger, level: int, key, msg: str, *args) -> bool:
    """Log ``msg % args`` unless the same ``key`` was logged in the last
    REPORT_INTERVAL_S; the next line says how many were left out. True if logged."""
    with _registry_lock:
        limiter = _registry.get(key)
        if limiter is None or limiter.logger is not logger:
            if len(_registry) >= MAX_KEYS:
                _registry.clear()
            limiter = _registry[key] = RateLimitedLog(logger, REPORT_INTERVAL_S)
    return limiter.log(level, msg, *args)
