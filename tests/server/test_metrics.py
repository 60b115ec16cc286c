"""The broker's HTTP endpoint (fastlog/server/http.py) and metrics
(fastlog/server/metrics.py, topic_stats.py, request_metrics.py) against a real broker:
counters checked exactly against the requests a test sent, committed lag, the health
paths, bad paths and bad HTTP clients, and a real Prometheus server scraping the broker."""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fastlog import _codec
from fastlog.protocol import ApiKey, Errors
from fastlog.server.metrics import (
    GIL_BREAKS_IN_A_ROW,
    GIL_LEAST_HOLD_S,
    ROWS_PER_PAUSE,
    GilBreaks,
)
from fastlog.testing import BrokerProcess, _free_port, wait_until
from tests.server.scrape import get, http_overrides, scrape, value
from tests.server.wire import (
    Wire,
    batch,
    create_topic,
    fetch_body,
    healthy,
    init_pid,
    produce,
    topic_id,
)
from tests.tmpfs_fixture import read_only, small_tmpfs

BTM = "kafka_server_brokertopicmetrics_"


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    """One broker with the HTTP endpoint (its port as .http_port)."""
    props, port = http_overrides()
    b = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data",
                      {**props, "group.initial.rebalance.delay.ms": "0"})
    b.start()
    b.http_port = port
    yield b
    if b.alive():
        assert b.stop() == 0, b.log_tail()


def topic_with_records(broker, topic: str, count: int) -> None:
    """A one-partition topic holding `count` records (one batch)."""
    create_topic(broker, topic)
    w = Wire(broker)
    try:
        assert produce(w, topic, bytes(batch([b"r"] * count))).error_code == Errors.NONE
    finally:
        w.close()


def test_produce_and_fetch_counters_match_the_requests(mbroker):
    create_topic(mbroker, "counted")
    batches = [batch([b"v%d" % i for i in range(n)]) for n in (10, 20, 30)]
    w = Wire(mbroker)
    try:
        for b in batches:
            assert produce(w, "counted", bytes(b)).error_code == Errors.NONE
        resp = w.call(ApiKey.FETCH, 11, fetch_body("counted", 0, max_wait_ms=0))
    finally:
        w.close()
    sent = sum(len(b) for b in batches)
    got = resp.responses[0].partitions[0].records
    assert len(got) == sent
    m = scrape(mbroker.http_port)
    assert value(m, BTM + "messagesin_total", topic="counted") == 60
    assert value(m, BTM + "bytesin_total", topic="counted") == sent
    assert value(m, BTM + "totalproducerequests_total", topic="counted") == 3
    assert value(m, BTM + "failedproducerequests_total", topic="counted") == 0
    assert value(m, BTM + "bytesout_total", topic="counted") == sent
    assert value(m, BTM + "totalfetchrequests_total", topic="counted") == 1
    assert value(m, BTM + "failedfetchrequests_total", topic="counted") == 0
    # the broker-wide series (no label) include them
    assert value(m, BTM + "messagesin_total") >= 60
    assert value(m, BTM + "bytesin_total") >= sent
    # the bytes on disk are the bytes produced
    assert value(m, "kafka_log_log_size", topic="counted", partition=0) == sent
    assert value(m, "kafka_log_log_logendoffset", topic="counted", partition=0) == 60
    assert value(m, "kafka_log_log_logstartoffset", topic="counted", partition=0) == 0
    assert value(m, "kafka_log_log_numlogsegments", topic="counted", partition=0) == 1


def test_compiled_fetches_are_counted_and_librdkafka_takes_that_path(mbroker):
    """fastlog_fetch_compiled_requests_total counts the fetches answered in compiled code
    (fastlog/protocol/_fetch.pyx): a sessionless one-partition Fetch v11 or v12 with data,
    not the same request with a forgotten topic (generic path); librdkafka's consumer,
    which sends Fetch v12, has its fetches with data answered there."""
    compiled = "fastlog_fetch_compiled_requests_total"
    topic_with_records(mbroker, "compiled", 10)
    w = Wire(mbroker)
    try:
        tid = topic_id(w, "compiled")
        for version, forgotten, counted in (
                (12, [], 1), (12, [{"topic": "x", "partitions": [0]}], 0), (11, [], 1),
                (13, [], 1), (16, [], 1), (17, [], 1),
                (16, [{"topic_id": tid, "partitions": [0]}], 0),
                (16, [], 0)):   # (an id no topic has: the generic path's UNKNOWN_TOPIC_ID)
            before = value(scrape(mbroker.http_port), compiled)
            body = fetch_body("compiled", 0, max_wait_ms=0)
            body["forgotten_topics_data"] = forgotten
            body["topics"][0]["topic_id"] = tid if counted or forgotten else bytes(range(16))
            part = w.call(ApiKey.FETCH, version, body).responses[0].partitions[0]
            if version >= 13 and not (counted or forgotten):
                assert part.error_code == Errors.UNKNOWN_TOPIC_ID
            else:
                assert part.error_code == Errors.NONE and len(part.records) > 0
            assert value(scrape(mbroker.http_port), compiled) - before == counted, version
    finally:
        w.close()
    # librdkafka: 20 batches, read a few at a time
    p = Producer({"bootstrap.servers": mbroker.bootstrap, "linger.ms": 0})
    for _ in range(20):
        p.produce("compiled", b"r" * 500, partition=0)
        p.flush(10)
    assert p.flush(20) == 0
    m = scrape(mbroker.http_port)
    before = value(m, compiled)
    fetches_before = fetch_requests(m)
    c = Consumer({"bootstrap.servers": mbroker.bootstrap, "group.id": "compiled-reader",
                  "enable.auto.commit": False, "max.partition.fetch.bytes": 1500})
    try:
        c.assign([TopicPartition("compiled", 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 30 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 30
    finally:
        c.close()
    m = scrape(mbroker.http_port)
    fetches = fetch_requests(m) - fetches_before
    answered = value(m, compiled) - before
    # several fetches carried the 20 batches, each answered in compiled code (the
    # fetches that waited for more at the end took the generic path), whichever Fetch
    # version librdkafka chose (v16 with librdkafka 2.x against Fetch 4-17)
    assert 2 <= answered <= fetches, (answered, fetches)


def fetch_requests(samples) -> float:
    """The Fetch requests counted in `samples`, of every version."""
    return sum(v for (name, labels), v in samples.items()
               if name == "kafka_network_requestmetrics_requests_total"
               and ("request", "Fetch") in labels)


def test_too_large_records_count_as_rejected_bytes(mbroker):
    create_topic(mbroker, "small", configs={"max.message.bytes": "1024"})
    big = batch([b"x" * 3000])
    w = Wire(mbroker)
    try:
        assert produce(w, "small", bytes(big)).error_code == Errors.MESSAGE_TOO_LARGE
    finally:
        w.close()
    m = scrape(mbroker.http_port)
    assert value(m, BTM + "bytesrejected_total", topic="small") == len(big)
    assert value(m, BTM + "messagesin_total", topic="small") == 0
    assert value(m, BTM + "totalproducerequests_total", topic="small") == 1
    # Kafka does not count a record set too large as a failed produce
    assert value(m, BTM + "failedproducerequests_total", topic="small") == 0


def test_unknown_topics_count_for_the_broker_only(mbroker):
    before = scrape(mbroker.http_port)
    w = Wire(mbroker)
    try:
        for i in range(5):
            r = produce(w, "counted", bytes(batch([b"a"])), partition=7 + i)
            assert r.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        w.close()
    m = scrape(mbroker.http_port)
    name = BTM + "totalproducerequests_total"
    assert value(m, name) - value(before, name) == 5
    assert value(m, name, topic="counted") == value(before, name, topic="counted")


def test_request_counts_and_times_per_api(mbroker):
    w = Wire(mbroker)
    try:
        before = scrape(mbroker.http_port)
        for _ in range(7):
            assert w.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
    finally:
        w.close()
    m = scrape(mbroker.http_port)
    req = "kafka_network_requestmetrics_requests_total"
    assert (value(m, req, request="ApiVersions", version=2)
            - (value(before, req, request="ApiVersions", version=2) or 0)) == 7
    # the histogram counts every request of the API, whatever its version
    produce_total = sum(v for (name, labels), v in m.items()
                        if name == req and ("request", "Produce") in labels)
    hist = "kafka_network_requestmetrics_totaltimems"
    assert value(m, hist + "_count", request="Produce") == produce_total >= 3
    assert value(m, hist + "_bucket", request="Produce", le="+Inf") == produce_total
    assert value(m, hist + "_sum", request="Produce") > 0


def test_committed_offsets_and_lag(mbroker):
    topic_with_records(mbroker, "lagging", 40)
    c = Consumer({"bootstrap.servers": mbroker.bootstrap, "group.id": "lag-group",
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("lagging", 0, 15)], asynchronous=False)
    finally:
        c.close()
    m = scrape(mbroker.http_port)
    labels = {"consumergroup": "lag-group", "topic": "lagging", "partition": 0}
    assert value(m, "kafka_consumergroup_current_offset", **labels) == 15
    assert value(m, "kafka_consumergroup_lag", **labels) == 25
    assert value(m, "kafka_consumergroup_lag_sum", consumergroup="lag-group",
                 topic="lagging") == 25
    assert value(m, "kafka_coordinator_group_groupmetadatamanager_numoffsets") >= 1


def test_both_formats_carry_the_same_series_with_escaped_label_values(mbroker):
    """The per-partition and per-offset families are written as text by the broker
    itself (metrics.GaugeLines): a group id with a quote, a backslash and a newline comes
    back intact through the parsers of both formats, and each family is declared once."""
    topic_with_records(mbroker, "escaped", 7)
    group = 'odd "group" \\ with\na newline'
    w = Wire(mbroker)
    try:
        assert w.call(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0}).error_code == 0
        r = w.call(ApiKey.OFFSET_COMMIT, 2, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1, "topics": [{"name": "escaped", "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""}]}]})
        assert r.topics[0].partitions[0].error_code == Errors.NONE
    finally:
        w.close()
    _, _, text = get(mbroker.http_port, "/metrics")
    _, _, om = get(mbroker.http_port, "/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as text_parse

    def samples(families):
        return {(s.name, frozenset(s.labels.items())): s.value
                for f in families for s in f.samples
                if f.name.startswith(("kafka_log_log_", "kafka_consumergroup_"))}

    in_text, in_om = samples(text_parse(text)), samples(om_parse(om))
    assert in_text == in_om
    labels = {"consumergroup": group, "topic": "escaped", "partition": 0}
    assert value(in_text, "kafka_consumergroup_current_offset", **labels) == 3
    assert value(in_text, "kafka_consumergroup_lag", **labels) == 4
    assert value(in_text, "kafka_consumergroup_members", consumergroup=group) == 0
    assert value(in_text, "kafka_log_log_logendoffset", topic="escaped", partition=0) == 7
    for body in (text, om):
        helps = [line.split()[2] for line in body.splitlines() if line.startswith("# HELP")]
        assert len(helps) == len(set(helps))
        assert "kafka_log_log_size" in helps


def test_every_partitions_series_match_its_log_and_committed_offset(mbroker):
    """The per-partition and per-offset lines (written in compiled code, metrics.GaugeLines
    over _exposition.GaugeRows) of a topic with more partitions than a scrape writes
    between two interpreter-lock breaks: each partition's figures, in both formats."""
    n = 3 * ROWS_PER_PAUSE + 5
    create_topic(mbroker, "wide", partitions=n)
    sizes, committed = {}, {}
    w = Wire(mbroker)
    try:
        for i in range(n):
            records = bytes(batch([b"w%d" % i] * (i % 5 + 1)))
            assert produce(w, "wide", records, partition=i).error_code == Errors.NONE
            sizes[i], committed[i] = len(records), i % 3
        assert w.call(ApiKey.FIND_COORDINATOR, 1, {"key": "wide-group",
                                                   "key_type": 0}).error_code == 0
        r = w.call(ApiKey.OFFSET_COMMIT, 2, {
            "group_id": "wide-group", "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1, "topics": [{"name": "wide", "partitions": [
                {"partition_index": i, "committed_offset": committed[i],
                 "committed_metadata": ""} for i in range(n)]}]})
        assert all(p.error_code == Errors.NONE for p in r.topics[0].partitions)
    finally:
        w.close()
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as text_parse
    _, _, text = get(mbroker.http_port, "/metrics")
    _, _, om = get(mbroker.http_port, "/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    for parse, body in ((text_parse, text), (om_parse, om)):
        m = {(s.name, frozenset(s.labels.items())): s.value
             for f in parse(body) for s in f.samples}
        for i in range(n):
            end = i % 5 + 1
            assert value(m, "kafka_log_log_size", topic="wide", partition=i) == sizes[i]
            assert value(m, "kafka_log_log_logendoffset", topic="wide", partition=i) == end
            assert value(m, "kafka_log_log_logstartoffset", topic="wide", partition=i) == 0
            assert value(m, "kafka_log_log_numlogsegments", topic="wide", partition=i) == 1
            labels = {"consumergroup": "wide-group", "topic": "wide", "partition": i}
            assert value(m, "kafka_consumergroup_current_offset", **labels) == committed[i]
            # (an offset committed past the log end is no lag)
            assert value(m, "kafka_consumergroup_lag", **labels) == max(0, end - committed[i])
        assert value(m, "kafka_consumergroup_lag_sum", consumergroup="wide-group",
                     topic="wide") == sum(max(0, i % 5 + 1 - committed[i]) for i in range(n))
        assert value(m, "kafka_consumergroup_members", consumergroup="wide-group") == 0


def test_gil_breaks_sleep_once_the_hold_has_passed():
    breaks = GilBreaks(hold=3600.0)
    for _ in range(1000):
        breaks()
    assert breaks.breaks == 0
    breaks = GilBreaks(hold=0.0, pause=0.0)
    for _ in range(10):
        breaks()
    # (a sleep that got the lock back 1 ms late, the process descheduled on a loaded
    # machine, rightly spaces the next breaks by GIL_BUSY_HOLD_S: fewer then)
    assert breaks.breaks == 10 or (breaks.long_waits and breaks.breaks >= 1)


def test_gil_breaks_come_early_while_the_loops_thread_wakes():
    """With the loop thread's CPU clock: while that thread sleeps, one sleep per break
    once the hold has passed, none before but the first call's (a loop waiting for the
    lock since before the breaks were made does not move its clock); while it keeps
    waking (here every 0.2 ms, as a loop woken by requests), breaks come at calls long
    before the hold has passed, of at most GIL_BREAKS_IN_A_ROW sleeps each."""
    stop = threading.Event()

    def woken():
        while not stop.is_set():
            time.sleep(0.0002)

    idle = threading.Thread(target=stop.wait)
    waking = threading.Thread(target=woken)
    idle.start()
    waking.start()
    try:
        calm = GilBreaks(hold=0.0, loop_clock=time.pthread_getcpuclockid(idle.ident))
        for _ in range(20):
            busy, before = calm.busy, calm.breaks
            calm()
            # One sleep per call while the loop's thread sleeps; after a sleep that came
            # back late (a loaded machine) the busy rule spaces the breaks out instead.
            if not busy:
                assert calm.breaks == before + 1
        assert calm.breaks >= 1
        calm = GilBreaks(hold=3600.0, loop_clock=time.pthread_getcpuclockid(idle.ident))
        served = GilBreaks(hold=3600.0, loop_clock=time.pthread_getcpuclockid(waking.ident))
        for _ in range(20):
            time.sleep(0.002)
            calm()
            served()
        assert calm.breaks == 1  # (the first call's)
        assert 0 < served.breaks <= 20 * GIL_BREAKS_IN_A_ROW
    finally:
        stop.set()
        idle.join(10)
        waking.join(10)


def test_gil_breaks_thin_out_while_the_loops_thread_is_busy_throughout():
    """A loop thread running Python throughout gives the lock back only at the switch
    interval, so each break costs the scrape that long: once a sleep waited so, the next
    break comes after GIL_BUSY_HOLD_S of the scrape's work, not at every call (the busy
    thread's clock moves all the time)."""
    stop = threading.Event()

    def spin():
        n = 0
        while not stop.is_set():
            n += 1

    busy = threading.Thread(target=spin)
    busy.start()
    try:
        breaks = GilBreaks(loop_clock=time.pthread_getcpuclockid(busy.ident))
        end, calls = time.thread_time() + 0.02, 0  # 20 ms of this thread's own work
        while time.thread_time() < end and calls < 10_000_000:
            breaks()
            calls += 1
        assert breaks.long_waits > 0
        # (about 0.02 / GIL_BUSY_HOLD_S; a break at every call after GIL_LEAST_HOLD_S
        # would make 0.02 / GIL_LEAST_HOLD_S, each waiting for the switch interval)
        assert breaks.breaks <= 0.02 / GIL_LEAST_HOLD_S / 4
    finally:
        stop.set()
        busy.join(10)

def test_broker_figures_on_one_node(mbroker):
    m = scrape(mbroker.http_port)
    assert value(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(m, "kafka_controller_kafkacontroller_globaltopiccount") >= 1
    rm = "kafka_server_replicamanager_"
    assert value(m, rm + "partitioncount") == value(m, rm + "leadercount") >= 1
    assert value(m, rm + "underreplicatedpartitions") == 0
    assert value(m, rm + "underminisrpartitioncount") == 0
    assert value(m, rm + "isrshrinks_total") == 0
    assert value(m, "kafka_server_socketservermetrics_connection_count",
                 listener="PLAINTEXT") >= 0
    for name in ("kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
                 "kafka_network_socketserver_networkprocessoravgidlepercent"):
        assert 0.0 <= value(m, name) <= 1.0
    assert value(m, "kafka_server_kafkaserver_brokerstate") == 3
    assert value(m, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    assert value(m, "fastlog_log_verification_corrupt_batches_total") == 0
    # the library's process and GC collectors
    assert value(m, "process_resident_memory_bytes") > 0
    assert value(m, "process_open_fds") > 0
    assert any(name == "python_gc_collections_total" for name, _ in m)


def test_health_paths_and_bad_requests(mbroker):
    port = mbroker.http_port
    assert get(port, "/health/live")[0] == 200
    assert get(port, "/health/ready")[:1] == (200,)
    assert get(port, "/nope")[0] == 404
    assert get(port, "/metrics/extra")[0] == 404
    assert get(port, "/metrics", method="POST")[0] == 405
    status, ctype, body = get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    status, ctype, body = get(port, "/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n")
    # malformed HTTP: answered 400 (or the connection closed), and everything still serves
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"\x00\x01 not http at all\r\n\r\n")
        reply = s.recv(100)
        assert reply == b"" or reply[:12] in (b"HTTP/1.0 400", b"HTTP/1.1 400")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n")
        reply = s.recv(100)
        assert reply == b"" or reply[:10] in (b"HTTP/1.0 4", b"HTTP/1.1 4")
    assert get(port, "/health/live")[0] == 200
    assert healthy(mbroker)


def test_trickling_http_clients_do_not_block_kafka_clients(mbroker):
    """Liveness: while HTTP clients send a request one byte at a time, Kafka requests and
    other HTTP requests are answered well within a few seconds each."""
    port = mbroker.http_port
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
    try:
        w = Wire(mbroker)
        try:
            for i in range(len(request)):
                for s in slow:
                    s.sendall(request[i:i + 1])
                t0 = time.monotonic()
                assert produce(w, "counted", bytes(batch([b"t"]))).error_code == Errors.NONE
                assert w.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
                if i % 8 == 0:
                    assert get(port, "/health/live")[0] == 200
                assert time.monotonic() - t0 < 5.0, "the broker stalled"
                time.sleep(0.02)
        finally:
            w.close()
    finally:
        for s in slow:
            s.close()


PROMETHEUS = shutil.which("prometheus")


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed "
                    "(Debian's prometheus package; scripts/install-system-deps.sh)")
def test_a_prometheus_server_scrapes_the_broker(mbroker, tmp_path):
    topic_with_records(mbroker, "scraped", 12)
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: fastlog\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{mbroker.http_port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)

    def query(expr):
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)["data"]["result"]
        except OSError:
            return None

    try:
        def scraped():
            got = query(f'{BTM}messagesin_total{{topic="scraped"}}')
            return bool(got) and got[0]["value"][1] == "12"
        wait_until(scraped, 30, interval=0.5, what="Prometheus holding the broker's series")
        up = query('up{job="fastlog"}')
        assert up and up[0]["value"][1] == "1"
        got = query('kafka_log_log_logendoffset{topic="scraped",partition="0"}')
        assert got and got[0]["value"][1] == "12"
        got = query("kafka_controller_kafkacontroller_activecontrollercount")
        assert got and got[0]["value"][1] == "1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def test_transaction_coordinator_figures(broker_factory):
    """Transactional ids by state, KIP-890's refusals, and how long loading the
    coordinators' partitions took after a restart (NaN before any load, as Kafka)."""
    props, port = http_overrides()
    b = broker_factory({**props, "transaction.state.log.num.partitions": "2",
                        "offsets.topic.num.partitions": "2"})
    create_topic(b, "mtxn")
    before = scrape(port)
    assert math.isnan(value(before, "kafka_server_transaction_coordinator_metrics_"
                                    "partition_load_time_max"))
    assert value(before, "kafka_server_addpartitionstotxnmanager_verificationfailurerate_total"
                 ) == 0
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "m-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("mtxn", b"v", partition=0)
    p.commit_transaction(30)
    w = Wire(b)
    try:   # a write to a partition the transaction never added: refused, counted
        r = w.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                "transaction_timeout_ms": 60000})
        refused = produce(w, "mtxn", batch([b"x"], producer_id=r.producer_id,
                                           epoch=r.producer_epoch, seq=0,
                                           is_transactional=True), transactional_id="m-txn")
        assert refused.error_code == Errors.INVALID_PRODUCER_ID_MAPPING
    finally:
        w.close()
    ids = "fastlog_transaction_coordinator_transactional_ids"
    wait_until(lambda: value(scrape(port), ids, state="CompleteCommit") == 1, 10,
               what="the committed transaction counted")
    after = scrape(port)
    assert value(after, ids, state="Ongoing") == 0
    assert value(after, "kafka_server_addpartitionstotxnmanager_verificationfailurerate_total"
                 ) == 1
    b.restart()
    wait_until(lambda: not math.isnan(value(
        scrape(port), "kafka_server_transaction_coordinator_metrics_partition_load_time_max")),
        10, what="a transaction coordinator load timed")
    loaded = scrape(port)
    for kind in ("transaction", "group"):
        most = value(loaded, f"kafka_server_{kind}_coordinator_metrics_partition_load_time_max")
        avg = value(loaded, f"kafka_server_{kind}_coordinator_metrics_partition_load_time_avg")
        assert 0 <= avg <= most < 60_000
    assert value(loaded, ids, state="CompleteCommit") == 1


def test_partitions_with_late_transactions(broker_factory):
    """KIP-664's gauge: a transaction written without its coordinator (the check off), its
    producer's last write an hour old, is late past transaction.max.timeout.ms + 5 min."""
    props, port = http_overrides()
    b = broker_factory({**props, "transaction.partition.verification.enable": "false",
                        "transaction.max.timeout.ms": "1000"})
    create_topic(b, "late")
    create_topic(b, "recent")
    name = "kafka_server_replicamanager_partitionswithlatetransactionscount"
    assert value(scrape(port), name) == 0
    w = Wire(b)
    try:
        pid, epoch = init_pid(w)
        now = int(time.time() * 1000)
        for topic, ts in (("late", now - 3_600_000), ("recent", now)):
            hanging = _codec.build_batch([(ts, None, b"h")], producer_id=pid,
                                         producer_epoch=epoch, base_sequence=0,
                                         is_transactional=True)
            assert produce(w, topic, hanging, transactional_id="raw").error_code == 0
    finally:
        w.close()
    assert value(scrape(port), name) == 1


def test_no_http_listener_by_default(broker_factory):
    port = _free_port()
    b = broker_factory()
    assert healthy(b)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_http_listener_in_use_stops_the_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = BrokerProcess(tmp_path / "data", {"http.listener": f"127.0.0.1:{port}"},
                          startup_timeout=10)
        proc = subprocess.run(b.command(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} (http.listener)" in proc.stderr


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian's "
                    "prometheus package; scripts/install-system-deps.sh)")
def test_example_scrape_config_and_alert_rules_are_valid():
    config = Path(__file__).resolve().parents[2] / "examples" / "prometheus" / "prometheus.yml"
    proc = subprocess.run([PROMTOOL, "check", "config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 rules found" in proc.stdout


class _RequestLoggingBroker(BrokerProcess):
    def command(self) -> list[str]:
        return [*super().command(), "--request-log"]


def test_request_log_has_one_line_per_request(tmp_path):
    with _RequestLoggingBroker(tmp_path / "data") as b:
        w = Wire(b)
        try:
            for _ in range(3):
                assert w.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
        finally:
            w.close()
        wait_until(lambda: b.log_tail(200).count("api=ApiVersions version=2") >= 3, 10,
                   what="three request log lines")
        line = next(x for x in b.log_tail(200).splitlines() if "api=ApiVersions version=2" in x)
    assert "kafka.request.logger" in line
    assert "client_id='wire-test'" in line and "principal=User:ANONYMOUS" in line
    assert "listener=PLAINTEXT" in line and "total_time_ms=" in line


def test_no_request_log_by_default(mbroker):
    w = Wire(mbroker)
    try:
        assert w.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
    finally:
        w.close()
    assert "kafka.request.logger" not in mbroker.log_tail(400)


def test_http_connections_over_the_limit_are_closed_and_others_served(mbroker):
    """The HTTP endpoint holds at most MAX_CONNECTIONS connections (its file handles are
    the broker's): one more is closed at once, and once some close a new one is served."""
    from fastlog.server.http import MAX_CONNECTIONS
    port = mbroker.http_port
    held = []
    try:
        for _ in range(MAX_CONNECTIONS):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            held[-1].sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        for s in held:  # each is open and answered (keep-alive)
            assert s.recv(100).startswith(b"HTTP/1.1 200")
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            extra.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = extra.recv(100)
        except OSError:  # reset by the server
            reply = b""
        finally:
            extra.close()
        assert reply == b"", "a connection over the limit was served"
        assert healthy(mbroker)  # Kafka clients are served meanwhile
    finally:
        for s in held[:8]:
            s.close()
        held = held[8:]

    def live() -> bool:
        try:
            return get(port, "/health/live")[0] == 200
        except OSError:  # refused while the server has not yet seen the closes
            return False

    try:
        wait_until(live, 10, what="an HTTP request answered once connections closed")
    finally:
        for s in held:
            s.close()


def test_partitions_of_a_failed_log_dir_in_the_compiled_walks(tmp_path):
    """A real broker with two log dirs, one failed while it runs (a tmpfs made read-only):
    the replica walk counts the failed dir's partitions offline and leads the others; the
    log rows list only the other dir's logs; a group's committed offsets keep their rows,
    and the lag rows (the high watermarks the replica walk noted) are there for the
    partitions still served, none for the offline ones (not the remote figure)."""
    props, port = http_overrides()
    n = 8
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        good = tmp_path / "data"
        b = BrokerProcess(good, {**props, "offsets.topic.num.partitions": "1",
                                 "log.dirs": f"{good},{disk}"})
        with b:
            # (each batch after the first starts a segment: a file made in the dir)
            create_topic(b, "split", partitions=n, configs={"segment.bytes": "100"})
            on_disk = {p for p in range(n) if (disk / f"split-{p}").is_dir()}
            assert 0 < len(on_disk) < n, on_disk
            w = Wire(b)
            try:
                for p in range(n):
                    records = batch([b"s%d" % p] * (p % 3 + 2))
                    assert produce(w, "split", records, partition=p).error_code == Errors.NONE
                assert w.call(ApiKey.FIND_COORDINATOR, 1, {"key": "split-group",
                                                           "key_type": 0}).error_code == 0
                r = w.call(ApiKey.OFFSET_COMMIT, 2, {
                    "group_id": "split-group", "generation_id_or_member_epoch": -1,
                    "member_id": "", "retention_time_ms": -1, "topics": [{
                        "name": "split", "partitions": [
                            {"partition_index": p, "committed_offset": 1,
                             "committed_metadata": ""} for p in range(n)]}]})
                assert all(p.error_code == Errors.NONE for p in r.topics[0].partitions)
                with read_only(disk):
                    r = produce(w, "split", batch([b"lost"]), partition=min(on_disk))
                    assert r.error_code == Errors.KAFKA_STORAGE_ERROR
                    m = scrape(port)
            finally:
                w.close()
    offline = len(on_disk) + (1 if (disk / "__consumer_offsets-0").exists() else 0)
    rm = "kafka_server_replicamanager_"
    assert value(m, rm + "offlinereplicacount") == offline
    assert value(m, rm + "partitioncount") == n + 1
    assert value(m, rm + "leadercount") == n + 1 - offline
    group = {"consumergroup": "split-group", "topic": "split"}
    for p in range(n):
        served = p not in on_disk
        size = value(m, "kafka_log_log_size", topic="split", partition=p)
        assert (size is not None and size > 0) if served else size is None
        assert value(m, "kafka_consumergroup_current_offset", **group, partition=p) == 1
        lag = value(m, "kafka_consumergroup_lag", **group, partition=p)
        assert lag == (p % 3 + 1 if served else None), (p, served, lag)
    assert value(m, "kafka_consumergroup_lag_sum", **group) == sum(
        p % 3 + 1 for p in range(n) if p not in on_disk)
