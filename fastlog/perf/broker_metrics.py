# fastlog/perf/broker_metrics.py: a broker's own figures for a perf run, read from its
# Prometheus endpoint (`fastlog perf ... --broker-metrics http://HOST:PORT/metrics`).
#
# Owns: one scrape before and one after the run (urllib, bounded by a timeout), parsed
# with prometheus_client's text parser, and the difference of the broker-wide series a
# load test moves: process CPU seconds, records in, record bytes in and out, requests,
# and from them broker CPU per record. Works with any broker exporting Kafka's
# JMX-exporter names (fastlog's http.listener, or Kafka with the JMX exporter's common
# rules); a series the broker does not export is left out. Caller's thread only.
"""Broker-side figures of a perf run, from the broker's /metrics."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

from fastlog.client.errors import FastlogError

SCRAPE_TIMEOUT_S = 10.0
MAX_BODY = 64 << 20  # a scrape larger than this is not a metrics endpoint we can use

# summary key -> series (summed over its labels; the *_total counters are broker-wide)
SERIES = {
    "cpu_s": "process_cpu_seconds_total",
    "messages_in": "kafka_server_brokertopicmetrics_messagesin_total",
    "bytes_in": "kafka_server_brokertopicmetrics_bytesin_total",
    "bytes_out": "kafka_server_brokertopicmetrics_bytesout_total",
}
REQUESTS = "kafka_network_requestmetrics_requests_total"


def check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FastlogError(f"--broker-metrics must be an http:// or https:// URL, not {url!r}")
    return url


def scrape(url: str) -> dict[str, float]:
    """The series of SERIES (and requests by API) summed, from one scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as r:
            body = r.read(MAX_BODY + 1)
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise FastlogError(f"cannot read the broker's metrics at {url}: {reason}") from None
    if len(body) > MAX_BODY:
        raise FastlogError(f"the metrics at {url} are over {MAX_BODY >> 20} MiB")
    wanted = set(SERIES.values()) | {REQUESTS}
    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
            for sample in family.samples:
                if sample.name in wanted and not sample.labels.get("topic"):
                    key = sample.name
                    if sample.name == REQUESTS:
                        key = f"requests:{sample.labels.get('request', '?')}"
                    sums[key] = sums.get(key, 0.0) + sample.value
    except ValueError as e:
        raise FastlogError(f"the page at {url} is not in Prometheus' text format: {e}") from None
    return sums


def difference(before: dict[str, float], after: dict[str, float], records: int) -> dict:
    """The run's broker figures: each series' increase, requests by API, CPU per record."""
    out: dict = {}
    for key, name in SERIES.items():
        if name in after and name in before:
            out[key] = round(after[name] - before[name], 6)
    requests = {k.split(":", 1)[1]: int(v - before.get(k, 0.0))
                for k, v in after.items() if k.startswith("requests:")}
    requests = {k: v for k, v in requests.items() if v > 0}
    if requests:
        out["requests"] = requests
    if "cpu_s" in out and records > 0:
        out["cpu_us_per_record"] = round(out["cpu_s"] * 1e6 / records, 3)
    return out
