# fastlog/server/request_metrics.py — RequestMetrics: requests per API and version, and
# each API's request time (Kafka's kafka.network:type=RequestMetrics), plus Kafka's
# request log (the `kafka.request.logger` logger).
#
# Owns: per (API key, version) a count and a histogram of the total time in ms — from
# the moment the socket server hands the frame to the handler to the moment the handler
# returns the response parts for the socket server to write (Kafka's TotalTimeMs without
# its ResponseSendTimeMs: the write happens after, in fastlog._net). Kafka's other parts
# of a request's time are not measured here: RequestQueueTimeMs (inline mode has no
# queue; threaded mode's hand-off is not timed by the socket server), Local/RemoteTimeMs
# (a handler's own work is not told apart from its waits for followers or new data) and
# ResponseSendTimeMs.
# Hot path: `instrument(handle)` wraps the socket server's handler in compiled code
# (fastlog/server/_request_timer.pyx): two clock reads, a table lookup and a few integer
# increments per request; the request log costs one level check unless enabled. API keys
# and versions come from the frame's first four bytes, unchecked by then: only known keys
# and versions up to MAX_VERSION get their own entry, anything else counts under (-1, -1),
# so a hostile client cannot grow the table.
# Request log: at DEBUG on `kafka.request.logger` (off unless that logger is enabled,
# `fastlog-server --request-log`), one line per request: API, version, correlation id,
# client id, principal, listener, request and response bytes, time in ms.
# Called from: the broker's asyncio API loop (the handler); the scrape thread copies the
# table with dict(...) and reads the counts and bucket lists (ints: no torn reads).
"""Request counts, request times and the request log."""

from __future__ import annotations

import logging

from fastlog.protocol import ApiKey, decode_request_header
from fastlog.server._request_timer import TimedHandler

request_log = logging.getLogger("kafka.request.logger")

# Upper bounds (ms) of the request-time histogram's buckets (the last one is +Inf).
TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
                   1000.0, 2500.0, 5000.0, 10000.0, 30000.0)
MAX_VERSION = 31
_KNOWN_KEYS = frozenset(int(k) for k in ApiKey)
OTHER = (-1, -1)


def request_name(api_key: int) -> str:
    """Kafka's name of an API (ApiKeys.name: "Produce", "ListOffsets", ...)."""
    try:
        return "".join(w.capitalize() for w in ApiKey(api_key).name.split("_"))
    except ValueError:
        return "Unknown"


class RequestStats:
    """One (API, version): requests seen, time summed (ms) and per-bucket counts."""

    __slots__ = ("count", "time_ms", "buckets")

    def __init__(self):
        self.count = 0
        self.time_ms = 0.0
        self.buckets = [0] * (len(TIME_BUCKETS_MS) + 1)


class RequestMetrics:
    """See the module comment."""

    def __init__(self):
        self.by_request: dict[tuple[int, int], RequestStats] = {}

    def stats(self, key: tuple[int, int]) -> RequestStats:
        s = self.by_request.get(key)
        if s is None:
            if key[0] not in _KNOWN_KEYS or not 0 <= key[1] <= MAX_VERSION:
                key = OTHER
                s = self.by_request.get(key)
            if s is None:
                s = self.by_request[key] = RequestStats()
        return s

    def instrument(self, handle, listener: str | None = None):
        """The socket server handler `handle` (conn, frame) -> response parts, timed
        (compiled: fastlog/server/_request_timer.pyx); with `listener`, each connection's
        state first gets it as "listener" (the listener it arrived on)."""
        return TimedHandler(handle, self, TIME_BUCKETS_MS, request_log.isEnabledFor,
                            _log_request, listener)


def response_size(parts) -> int:
    """Bytes of a handler's response parts (bytes-like objects and file regions)."""
    if parts is None:
        return 0
    if not isinstance(parts, list):
        parts = [parts]
    total = 0
    for p in parts:
        length = getattr(p, "length", None)
        total += length if length is not None else len(p)
    return total


def _log_request(conn, frame, result, ms: float) -> None:
    try:
        header, _ = decode_request_header(frame)
        api, version = request_name(header.api_key), header.api_version
        correlation_id, client_id = header.correlation_id, header.client_id
    except Exception:  # noqa: BLE001 - a malformed header is logged as such
        api, version, correlation_id, client_id = "Unknown", -1, -1, None
    state = getattr(conn, "state", None) or {}
    try:
        size = response_size(result)
    except TypeError:
        size = -1
    request_log.debug(
        "Completed request: api=%s version=%d correlation_id=%d client_id=%r principal=%s "
        "listener=%s from=%s request_bytes=%d response_bytes=%d total_time_ms=%.3f",
        api, version, correlation_id, client_id, state.get("principal"),
        state.get("listener"), state.get("host"), len(frame), size, ms)
