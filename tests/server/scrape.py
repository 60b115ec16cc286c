"""Reading a broker's HTTP endpoint in tests: /metrics parsed into samples, and plain
GETs. Every call is bounded by TIMEOUT."""

from __future__ import annotations

import http.client

from prometheus_client.parser import text_string_to_metric_families

from fastlog.testing import _free_port

TIMEOUT = 10.0


def http_overrides() -> tuple[dict[str, str], int]:
    """Broker overrides that open the HTTP endpoint on a free 127.0.0.1 port, and the port."""
    port = _free_port()
    return {"http.listener": f"127.0.0.1:{port}"}, port


def get(port: int, path: str, method: str = "GET", headers=None) -> tuple[int, str, str]:
    """(status, content type, body) of one request to the endpoint."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read().decode()
    finally:
        conn.close()


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics: (sample name, frozenset of label items) -> value."""
    status, _, body = get(port, "/metrics")
    assert status == 200, body
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))
