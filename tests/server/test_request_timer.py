"""The compiled request timer (fastlog/server/_request_timer.pyx, made by
RequestMetrics.instrument) driving real handler coroutines as the socket server does:
each request counted under its API key and version (unknown keys, versions past 31 and
frames too short for a header under (-1, -1), where RequestMetrics.stats puts them), its
time in the histogram's bucket, a failing handler counted and its error passed on, a
handler that waits timed to the end of its wait, the listener noted on a connection's
state once, and the request log's line at DEBUG only."""

from __future__ import annotations

import asyncio
import logging

import pytest

from fastlog.protocol import ApiKey
from fastlog.server.request_metrics import OTHER, TIME_BUCKETS_MS, RequestMetrics


class _Conn:
    def __init__(self):
        self.state = {}
        self.peer = ("127.0.0.1", 1)


def _frame(api: int, version: int) -> memoryview:
    return memoryview(bytearray(api.to_bytes(2, "big") + version.to_bytes(2, "big")
                                + b"\0\0\0\1\0\0"))


def _run(handler, conn, frame):
    """One request as the socket server's inline mode runs it (to its end)."""
    return asyncio.run(_drive(handler, conn, frame))


async def _drive(handler, conn, frame):
    return await handler(conn, frame)


def test_counts_by_api_and_version_and_the_others_under_one_key():
    rm = RequestMetrics()

    async def handle(conn, frame):
        return [b"answer"]

    timed = rm.instrument(handle)
    conn = _Conn()
    for api, version, n in ((ApiKey.PRODUCE, 9, 3), (ApiKey.FETCH, 12, 2),
                            (ApiKey.PRODUCE, 10, 1), (999, 1, 2), (ApiKey.FETCH, 40, 1),
                            (127, 31, 1)):
        for _ in range(n):
            assert _run(timed, conn, _frame(api, version)) == [b"answer"]
    assert _run(timed, conn, memoryview(b"\0\1")) == [b"answer"]   # no header
    counts = {k: s.count for k, s in rm.by_request.items()}
    assert counts == {(0, 9): 3, (1, 12): 2, (0, 10): 1, OTHER: 5}
    for s in rm.by_request.values():
        assert sum(s.buckets) == s.count
        assert len(s.buckets) == len(TIME_BUCKETS_MS) + 1
        assert s.time_ms >= 0
    assert "listener" not in conn.state   # none given


def test_a_failing_handler_is_counted_and_its_error_passes_on():
    rm = RequestMetrics()

    async def handle(conn, frame):
        raise RuntimeError("handler failed")

    timed = rm.instrument(handle)
    with pytest.raises(RuntimeError, match="handler failed"):
        _run(timed, _Conn(), _frame(ApiKey.METADATA, 12))
    assert rm.by_request[(3, 12)].count == 1


def test_a_waiting_handler_is_timed_to_the_end_of_its_wait():
    rm = RequestMetrics()

    async def handle(conn, frame):
        await asyncio.sleep(0.03)   # a parked request
        return [b"late"]

    timed = rm.instrument(handle)
    assert _run(timed, _Conn(), _frame(ApiKey.FETCH, 12)) == [b"late"]
    s = rm.by_request[(1, 12)]
    assert s.count == 1 and s.time_ms >= 30     # the wait is in it
    assert s.buckets.index(1) == next(i for i, b in enumerate(TIME_BUCKETS_MS) if b >= s.time_ms)


def test_the_listener_is_noted_once_on_a_connection():
    rm = RequestMetrics()
    seen = []

    async def handle(conn, frame):
        seen.append(conn.state.get("listener"))
        return None

    timed = rm.instrument(handle, "INTERNAL")
    conn, other = _Conn(), _Conn()
    other.state["listener"] = "PLAINTEXT"
    assert _run(timed, conn, _frame(ApiKey.METADATA, 12)) is None
    assert _run(timed, other, _frame(ApiKey.METADATA, 12)) is None
    assert seen == ["INTERNAL", "PLAINTEXT"]
    assert rm.by_request[(3, 12)].count == 2


def test_the_request_log_writes_a_line_at_debug_only(caplog):
    rm = RequestMetrics()

    async def handle(conn, frame):
        return [b"12345"]

    timed = rm.instrument(handle)
    with caplog.at_level(logging.INFO, logger="kafka.request.logger"):
        _run(timed, _Conn(), _frame(ApiKey.METADATA, 12))
    assert not [r for r in caplog.records if r.name == "kafka.request.logger"]
    with caplog.at_level(logging.DEBUG, logger="kafka.request.logger"):
        _run(timed, _Conn(), _frame(ApiKey.METADATA, 12))
    lines = [r.getMessage() for r in caplog.records if r.name == "kafka.request.logger"]
    assert len(lines) == 1 and "response_bytes=5" in lines[0], lines
