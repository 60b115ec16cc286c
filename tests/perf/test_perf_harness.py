"""`fastlog perf` end to end against a real broker: tiny runs, well-formed summaries.

No speed is asserted: only that each test runs, counts what it sent/read, and reports
the fields compare.py and users rely on. Each command runs as a subprocess through the
installed `fastlog` entry point, bounded by a timeout.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.perf.scripts import check_rate

FASTLOG = Path(sys.executable).with_name("fastlog")
LATENCY_KEYS = {"count", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "p99_9_ms", "max_ms"}


def perf(*args, timeout=120):
    return subprocess.run([str(FASTLOG), "perf", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def perf_json(*args):
    r = perf(*args, "--json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout  # --json prints one line and nothing else
    return json.loads(lines[0])


def check_summary(s, kind, records, size):
    assert s["kind"] == kind
    assert s["records"] == records
    assert s["bytes"] == records * size
    assert s["errors"] == 0
    # the rates are the counts over the elapsed time (no speed asserted), within the
    # rounding of the report: elapsed to 0.1 ms, records/s to 0.1, MB/s to 0.001
    check_rate(s["records_per_s"], records, s["elapsed_s"], 0.05)
    check_rate(s["mb_per_s"], s["bytes"] / 1e6, s["elapsed_s"], 0.0005)


@pytest.mark.parametrize("client", ["fastlog", "confluent"])
def test_produce_then_consume_counts_every_record(broker, client):
    topic = f"perf-pc-{client}"
    s = perf_json("produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--client", client, "--num-records", 2000, "--record-size", 50,
                  "--acks", "all", "--key-distribution", "random", "--partitions", 2)
    check_summary(s, "produce", 2000, 50)
    assert set(s["latency"]) == LATENCY_KEYS
    assert s["latency"]["count"] == 20  # every 100th record without --rate
    assert s["config"]["partitions"] == 2
    c = perf_json("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--client", client, "--num-records", 2000, "--duration", 60)
    check_summary(c, "consume", 2000, 50)


def test_rate_limited_produce_samples_every_record(broker):
    s = perf_json("produce", "--bootstrap-server", broker.bootstrap, "--topic", "perf-rate",
                  "--client", "confluent", "--num-records", 300, "--rate", 1000,
                  "--linger-ms", 0, "--connections", 2, "--compression", "lz4")
    check_summary(s, "produce", 300, 100)
    assert s["latency"]["count"] == 300
    assert 0 < s["latency"]["p50_ms"] <= s["latency"]["p99_ms"] <= s["latency"]["max_ms"]
    # --rate reaches the pacer; its schedule is tested without a clock in
    # test_perf_histogram.py::test_rate_limiter_schedule
    assert s["config"]["rate"] == 1000


def test_confluent_produce_counts_its_requests(broker_factory):
    """produce_requests is librdkafka's own count of the Produce requests it sent: exactly
    the Produce requests the broker counted for the run (its /metrics before and after,
    retries included on both sides), at least one per 100 records with batches capped at
    100 (a long linger fills nearly all; librdkafka sends partial ones while it learns the
    partition's leader, and how many it sends then depends on the machine's load)."""
    from tests.server.scrape import http_overrides

    props, port = http_overrides()
    b = broker_factory(props)
    s = perf_json("produce", "--bootstrap-server", b.bootstrap, "--topic", "perf-req",
                  "--client", "confluent", "--num-records", 1000, "--linger-ms", 1000,
                  "-X", "batch.num.messages=100",
                  "--broker-metrics", f"http://127.0.0.1:{port}/metrics")
    check_summary(s, "produce", 1000, 100)
    assert s["produce_requests"] == s["broker"]["requests"]["Produce"]
    assert s["produce_requests"] >= 10
    assert s["records_per_request"] == round(1000 / s["produce_requests"], 1)
    # with librdkafka's statistics turned off there is nothing to count from
    s = perf_json("produce", "--bootstrap-server", b.bootstrap, "--topic", "perf-req",
                  "--client", "confluent", "--num-records", 100,
                  "-X", "statistics.interval.ms=0")
    assert "produce_requests" not in s and "records_per_request" not in s


@pytest.mark.parametrize("client", ["fastlog", "confluent"])
def test_e2e_measures_every_record(broker, client):
    s = perf_json("e2e", "--bootstrap-server", broker.bootstrap, "--topic", f"perf-e2e-{client}",
                  "--client", client, "--num-records", 200, "--rate", 500, "--duration", 60)
    check_summary(s, "e2e", 200, 100)
    assert s["latency"]["count"] == 200


def test_text_summary_and_plot(broker, tmp_path):
    png = tmp_path / "p.png"
    r = perf("produce", "--bootstrap-server", broker.bootstrap, "--topic", "perf-plot",
             "--num-records", 500, "--plot", png)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert r.returncode != 0
        assert "matplotlib" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        return
    assert r.returncode == 0, r.stderr
    assert "records/s" in r.stdout and "p99" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args", [
    ["produce", "--num-records", "0"],
    ["produce", "--rate", "-5"],
    ["e2e", "--record-size", "4"],
    ["produce", "-X", "nonsense"],
    ["consume", "--topic", "a b"],
])
def test_bad_options_are_one_sentence(args):
    r = perf(*args, "--bootstrap-server", "127.0.0.1:1", timeout=60)
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


def assert_one_sentence(r, status, needle):
    assert r.returncode == status, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, needle", [
    (["produce", "--duration", "nan"], "--duration"),
    (["produce", "--duration", "inf"], "--duration"),
    (["e2e", "--duration", "-1"], "--duration"),
    (["produce", "--rate", "nan"], "--rate"),
    (["produce", "--rate", "inf"], "--rate"),
    (["produce", "--linger-ms", "nan"], "--linger-ms"),
    (["produce", "--linger-ms", "-1"], "--linger-ms"),
    (["produce", "--batch-size", "0"], "--batch-size"),
    (["produce", "--sample-every", "0"], "--sample-every"),
    (["e2e", "--sample-every", "-1"], "--sample-every"),
    (["consume", "--idle-ms", "-5"], "--idle-ms"),
    (["e2e", "--idle-ms", "-5"], "--idle-ms"),
    (["produce", "--connections", "100000"], "--connections"),
    (["produce", "-X", "nosuch=1"], "-X nosuch: not a setting of fastlog's Producer"),
    (["e2e", "-X", "nosuch=1"], "-X nosuch: not a setting of fastlog's Producer"),
    (["consume", "-X", "nosuch=1"], "-X nosuch: not a setting of fastlog's Consumer"),
    (["produce", "-X", "linger.ms=1"], "--client confluent"),
    (["produce", "-X", "cluster=x"], "-X cluster: not a setting"),
    (["produce", "-X", "linger_ms=abc"], "-X linger_ms=abc"),
    (["produce", "-X", "batch_size=1.5"], "-X batch_size=1.5"),
    (["produce", "-X", "enable_idempotence=maybe"], "-X enable_idempotence=maybe"),
    (["consume", "-X", "check_crcs=1"], "-X check_crcs=1"),
])
def test_bad_values_are_refused_before_connecting(args, needle):
    # 127.0.0.1:1 accepts nothing: only a check made before any connection can answer.
    r = perf(*args, "--bootstrap-server", "127.0.0.1:1", timeout=60)
    assert_one_sentence(r, 2, needle)
    assert r.stdout == ""


def test_plot_file_of_an_unknown_format_is_refused_before_connecting(tmp_path):
    r = perf("produce", "--bootstrap-server", "127.0.0.1:1", "--plot", tmp_path / "out.txt",
             timeout=60)
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # without the 'perf' extra: the missing library, said first
        assert_one_sentence(r, 1, "--plot needs matplotlib")
    else:
        assert_one_sentence(r, 2, ".png")
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("test", ["produce", "e2e"])
def test_fastlog_client_settings_reach_the_producer(broker, test):
    # An idempotent producer needs acks=all: only the Producer itself can refuse this.
    r = perf(test, "--bootstrap-server", broker.bootstrap, "--topic", f"perf-x-{test}",
             "--num-records", 10, "--acks", "1", "-X", "enable_idempotence=true")
    assert_one_sentence(r, 1, "idempotent producer needs acks=all")


@pytest.mark.parametrize("test", ["produce", "consume", "e2e"])
def test_confluent_setting_librdkafka_refuses_is_one_sentence(broker, test):
    r = perf(test, "--bootstrap-server", broker.bootstrap, "--topic", "perf-x-confluent",
             "--client", "confluent", "--num-records", 10, "-X", "nosuch=1")
    assert_one_sentence(r, 1, '"nosuch"')


@pytest.mark.parametrize("client", ["fastlog", "confluent"])
def test_e2e_skips_and_counts_records_it_did_not_send(broker, client):
    # 50 records of random letters (their first 8 bytes are no send time of this run)
    # and 5 shorter than a send time, then e2e on the same topic.
    topic = f"perf-e2e-mixed-{client}"
    perf_json("produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
              "--num-records", 50)
    perf_json("produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
              "--num-records", 5, "--record-size", 4)
    s = perf_json("e2e", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--client", client, "--num-records", 100, "--rate", 500, "--duration", 60)
    check_summary(s, "e2e", 100, 100)
    assert s["latency"]["count"] == 100
    assert s["foreign_records"] == 55
    r = perf("e2e", "--bootstrap-server", broker.bootstrap, "--topic", topic,
             "--client", client, "--num-records", 10, "--rate", 500, "--duration", 60)
    assert r.returncode == 0, r.stderr
    assert "skipped: 155 records not sent by this run" in r.stdout


def test_e2e_and_produce_default_to_different_topics(broker):
    p = perf_json("produce", "--bootstrap-server", broker.bootstrap, "--num-records", 50)
    e = perf_json("e2e", "--bootstrap-server", broker.bootstrap, "--num-records", 50,
                  "--rate", 500)
    assert p["topic"] != e["topic"]
    assert e["foreign_records"] == 0 and e["latency"]["count"] == 50


@pytest.mark.parametrize("test", ["produce", "consume", "e2e"])
def test_confluent_unreachable_broker_is_one_sentence(test):
    # librdkafka alone would retry for its whole timeout and log every attempt.
    r = perf(test, "--client", "confluent", "--bootstrap-server", "127.0.0.1:1",
             "--num-records", "10", timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "fastlog perf: cannot connect to broker 127.0.0.1:1: connection refused"]
    assert r.stdout == ""


def test_broker_metrics_report_the_broker_figures_of_the_run(broker_factory):
    """--broker-metrics: the broker's own counters for the run, read from its /metrics
    before and after: exactly the records and record bytes this run sent."""
    from tests.server.scrape import http_overrides

    props, port = http_overrides()
    b = broker_factory(props)
    url = f"http://127.0.0.1:{port}/metrics"
    s = perf_json("produce", "--bootstrap-server", b.bootstrap, "--topic", "perf-bm",
                  "--client", "confluent", "--num-records", 1500, "--record-size", 40,
                  "--broker-metrics", url)
    check_summary(s, "produce", 1500, 40)
    broker = s["broker"]
    assert broker["messages_in"] == 1500
    assert broker["bytes_in"] >= 1500 * 40  # record bytes: values plus record framing
    assert broker["requests"]["Produce"] >= 1
    assert broker["cpu_s"] > 0
    assert broker["cpu_us_per_record"] == round(broker["cpu_s"] * 1e6 / 1500, 3)
    text = perf("produce", "--bootstrap-server", b.bootstrap, "--topic", "perf-bm",
                "--num-records", 100, "--broker-metrics", url)
    assert text.returncode == 0, text.stderr
    assert "broker (its /metrics): CPU" in text.stdout
    assert "records in 100" in text.stdout


@pytest.mark.parametrize("url, sentence", [
    ("127.0.0.1:1/metrics", "must be an http:// or https:// URL"),
    ("http://127.0.0.1:1/metrics", "cannot read the broker's metrics at"),
])
def test_broker_metrics_bad_url_is_one_sentence(broker, url, sentence):
    r = perf("produce", "--bootstrap-server", broker.bootstrap, "--num-records", 10,
             "--broker-metrics", url)
    assert r.returncode != 0
    assert sentence in r.stderr
    assert "Traceback" not in r.stderr
