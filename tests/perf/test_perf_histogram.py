"""LatencyHistogram: percentiles on known data, empty and out-of-range inputs; the rate
limiter's schedule; the e2e send-time stamp."""

from fastlog.perf.histogram import LatencyHistogram
from fastlog.perf.ratelimit import RateLimiter
from fastlog.perf.workload import Workload


def close(a, b, rel=0.002):
    return abs(a - b) <= rel * b


def test_percentiles_of_uniform_1_to_1000_ms():
    h = LatencyHistogram()
    for ms in range(1, 1001):
        h.record(ms / 1000.0)
    s = h.summary()
    assert s["count"] == 1000
    assert close(s["p50_ms"], 500)
    assert close(s["p95_ms"], 950)
    assert close(s["p99_ms"], 990)
    assert close(s["p99_9_ms"], 999)
    assert close(s["max_ms"], 1000)
    assert close(s["mean_ms"], 500.5)


def test_weighted_records_and_tail():
    h = LatencyHistogram()
    h.record_us(100, count=990)   # 99% at 0.1 ms
    h.record_us(50_000, count=10)  # 1% at 50 ms
    s = h.summary()
    assert close(s["p50_ms"], 0.1, rel=0.01)
    assert close(s["p99_ms"], 0.1, rel=0.01)
    assert close(s["p99_9_ms"], 50, rel=0.01)
    assert close(s["max_ms"], 50, rel=0.01)


def test_empty_summary_is_zeros():
    s = LatencyHistogram().summary()
    assert s["count"] == 0 and s["p99_ms"] == 0.0 and s["max_ms"] == 0.0


def test_out_of_range_values_are_clamped_not_errors():
    h = LatencyHistogram()
    h.record(-1.0)
    h.record(10 ** 7)
    assert h.count == 2
    assert h.summary()["max_ms"] > 3_000_000


def test_distribution_is_monotonic():
    h = LatencyHistogram()
    for us in range(1, 10_000, 7):
        h.record_us(us)
    pts = h.distribution()
    assert pts[0][0] == 0.0 and pts[-1][0] == 100.0
    assert all(a[1] <= b[1] for a, b in zip(pts, pts[1:], strict=False))


def test_rate_limiter_schedule():
    r = RateLimiter(1000)
    t0 = r.start
    assert r.due(0, t0) == 1                 # record 0 is due at once
    assert r.due(1, t0) == 0                 # record 1 only after 1 ms
    assert r.due(1, t0 + 0.0105) == 10       # 11 due by 10.5 ms, 1 already sent
    assert r.due(50, t0 + 0.0105) == 0       # ahead of schedule: nothing due
    assert RateLimiter(None).due(10 ** 6) > 10 ** 6


def test_send_time_stamp_round_trips_and_short_values_have_none():
    wl = Workload(16)
    v = wl.stamped_value(3)
    assert len(v) == 16 and v[8:] == wl.value(3)[8:]
    assert Workload.stamp_of(v) > 0
    assert Workload.stamp_of(b"1234567") is None
    assert Workload.stamp_of(b"") is None
    assert Workload.stamp_of(None) is None
