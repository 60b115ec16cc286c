# fastlog/perf/ratelimit.py: pacing for fixed-rate (latency) runs.
#
# Owns: RateLimiter, a schedule where record i is due at start + i/rate. The caller asks
# how many records are due now and sends them as a burst, then sleeps until the next one
# is due; a caller that fell behind catches up without ever exceeding the schedule, so the
# long-run rate is exact whatever the sleep granularity. Used from one thread or one loop.
"""Fixed-rate schedule for load loops."""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """rate records/s (None or <= 0: unlimited)."""

    def __init__(self, rate: float | None):
        self.rate = rate if rate and rate > 0 else None
        self.start = time.perf_counter()

    def reset(self) -> None:
        self.start = time.perf_counter()

    def due(self, sent: int, now: float | None = None) -> int:
        """How many more records may be sent now, given `sent` so far (0: none is due)."""
        if self.rate is None:
            return 1 << 30
        now = time.perf_counter() if now is None else now
        allowed = int((now - self.start) * self.rate) + 1
        return max(0, allowed - sent)

    def delay(self, sent: int) -> float:
        """Seconds until record number `sent` is due (0 when it already is)."""
        if self.rate is None:
            return 0.0
        return max(0.0, self.start + sent / self.rate - time.perf_counter())

    def wait(self, sent: int) -> int:
        """Block until at least one record is due; return how many are due."""
        while True:
            n = self.due(sent)
            if n:
                return n
            time.sleep(self.delay(sent))

    async def wait_async(self, sent: int) -> int:
        while True:
            n = self.due(sent)
            if n:
                return n
            await asyncio.sleep(self.delay(sent))
