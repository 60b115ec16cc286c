# fastlog/perf/histogram.py: latency recording for the perf harness.
#
# Owns: LatencyHistogram, a thin wrapper over HdrHistogram (the `hdrhistogram` PyPI
# package: log-bucketed, 3 significant digits, constant memory) recording microseconds,
# and the percentile summary the reports print (milliseconds). record() only appends to
# an array (HdrHistogram's pure-Python record_value costs ~5 us, too much inside a load
# loop); samples are folded into the histogram, one call per distinct value, when read
# or when 64k are pending. Single-threaded: the
# caller records from its own loop or from librdkafka delivery callbacks, which run
# inside poll() on the caller's thread.
"""Latency histogram (microsecond resolution, 3 significant digits)."""

from __future__ import annotations

from array import array
from collections import Counter

from hdrh.histogram import HdrHistogram

PERCENTILES = (50.0, 95.0, 99.0, 99.9)
_HIGHEST_US = 3_600 * 1_000_000  # one hour: anything longer is clamped, never an error
_PENDING_MAX = 65536


class LatencyHistogram:
    """Records latencies in seconds; reports percentiles in milliseconds."""

    def __init__(self) -> None:
        self._h = HdrHistogram(1, _HIGHEST_US, 3)
        self._pending = array("q")

    def record(self, seconds: float) -> None:
        self._pending.append(int(seconds * 1e6))
        if len(self._pending) >= _PENDING_MAX:
            self._fold()

    def record_us(self, us: int, count: int = 1) -> None:
        if count == 1:
            self._pending.append(int(us))
            if len(self._pending) >= _PENDING_MAX:
                self._fold()
        else:
            self._h.record_value(min(max(int(us), 1), _HIGHEST_US), count)

    def _fold(self) -> None:
        for us, n in Counter(self._pending).items():
            self._h.record_value(min(max(us, 1), _HIGHEST_US), n)
        self._pending = array("q")

    @property
    def count(self) -> int:
        self._fold()
        return self._h.get_total_count()

    def percentile_ms(self, p: float) -> float:
        self._fold()
        return self._h.get_value_at_percentile(p) / 1000.0

    def summary(self) -> dict:
        """{count, mean_ms, p50_ms, p95_ms, p99_ms, p99_9_ms, max_ms}; zeros when empty."""
        n = self.count
        out = {"count": n}
        if n == 0:
            out.update(mean_ms=0.0, max_ms=0.0)
            out.update({_key(p): 0.0 for p in PERCENTILES})
            return out
        self._fold()
        out["mean_ms"] = round(self._h.get_mean_value() / 1000.0, 4)
        for p in PERCENTILES:
            out[_key(p)] = round(self.percentile_ms(p), 4)
        out["max_ms"] = round(self._h.get_max_value() / 1000.0, 4)
        return out

    def distribution(self, points: int = 60) -> list[tuple[float, float]]:
        """(percentile, ms) pairs on a log scale of 1/(1-p), for a percentile plot."""
        if self.count == 0:
            return []
        pts = []
        for i in range(points + 1):
            # 0 .. 99.999 spaced evenly in log10(1/(1-p))
            p = 100.0 * (1.0 - 10.0 ** (-5.0 * i / points))
            pts.append((p, self.percentile_ms(p)))
        self._fold()
        pts.append((100.0, self._h.get_max_value() / 1000.0))
        return pts


def _key(p: float) -> str:
    return "p" + (f"{p:g}".replace(".", "_")) + "_ms"
