"""Client quotas enforced by a real fastlog-server, Kafka's way (KIP-219): a request over
its quota is served (a produce is appended) and answered with throttle_time_ms, and its
connection is muted for that time while every other connection is served. Clients:
raw wire requests, confluent-kafka producers and consumers. Rate checks are enforcement
checks with generous bounds (the quota is what holds a client back), never speed
assertions; every loop is bounded in count and time."""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Consumer, Producer

from fastlog import protocol
from fastlog.client.sync import SyncAdmin
from fastlog.protocol import ApiKey, Errors
from fastlog.security.quota import DEFAULT
from tests.server.scrape import http_overrides, scrape
from tests.server.wire import Wire, batch, create_topic, produce

QUOTA = 200_000          # bytes per second
RUN_S = 6.0
PROBE_LIMIT_S = 5.0      # a liveness probe answered later than this means a stall
# Two 1-second samples: the rate is judged over the last one to two seconds, so a run of
# a few seconds shows the steady state (Kafka's default 11 samples would let a client
# spend ten seconds of quota at once first).
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1", "num.partitions": "1"}


def set_quota(b, entity, **values):
    with SyncAdmin(b.bootstrap) as admin:
        admin.alter_client_quotas([(entity, values)])


def probe(b) -> float:
    """Seconds a fresh connection waits for a Metadata answer."""
    start = time.monotonic()
    w = Wire(b)
    try:
        resp = w.call(ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_cluster_authorized_operations": False,
                                           "include_topic_authorized_operations": False})
        assert resp.brokers
    finally:
        w.close()
    return time.monotonic() - start


def test_produce_over_quota_is_appended_answered_with_throttle_and_muted(broker_factory):
    http, http_port = http_overrides()
    b = broker_factory({**WINDOWS, **http})
    create_topic(b, "raw-quota")
    set_quota(b, (None, "wire-test"), producer_byte_rate=1000)
    w = Wire(b)
    try:
        first = produce(w, "raw-quota", batch([b"x" * 20_000]), version=8)
        assert first.error_code == Errors.NONE
        # the answer names the throttle (bounded by the measured window, 2 s here)
        w.send(ApiKey.PRODUCE, 8, {
            "transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": "raw-quota", "partition_data": [
                {"index": 0, "records": batch([b"y" * 20_000])}]}]})
        frame = w.recv_frame()
        _, resp = protocol.decode_response(ApiKey.PRODUCE, 8, frame)
        assert resp.responses[0].partition_responses[0].error_code == Errors.NONE
        throttle_ms = resp.throttle_time_ms
        assert 0 < throttle_ms <= 2000
        # muted: the next request on this connection waits out the throttle ...
        sent = time.monotonic()
        w.send(ApiKey.API_VERSIONS, 0, {})
        # ... while another connection is answered meanwhile
        assert probe(b) < PROBE_LIMIT_S
        assert w.recv_frame() is not None
        waited = time.monotonic() - sent
        assert waited >= throttle_ms / 1000.0 * 0.5, (waited, throttle_ms)
        # both batches were appended
        fetched = w.call(ApiKey.LIST_OFFSETS, 5, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": "raw-quota",
            "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                            "timestamp": -1}]}]})
        assert fetched.topics[0].partitions[0].offset == 2
    finally:
        w.close()
    # the throttle time is counted per client (Kafka's Produce throttle-time)
    samples = scrape(http_port)
    labels = frozenset({"user": "ANONYMOUS", "client_id": "wire-test"}.items())
    assert samples[("kafka_server_produce_throttle_time_ms_total", labels)] >= throttle_ms


def _metadata_throttle(w) -> int:
    return w.call(ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False,
                                       "include_cluster_authorized_operations": False,
                                       "include_topic_authorized_operations": False}
                  ).throttle_time_ms


def test_the_most_specific_quota_wins_and_request_percentage_throttles(broker_factory):
    b = broker_factory(WINDOWS)
    create_topic(b, "precedence")
    # a tight default for every client id, a generous one for this client id: the client
    # id's own quota applies (KIP-55), so 40 kB in a second is within it
    with SyncAdmin(b.bootstrap) as admin:
        admin.alter_client_quotas([((None, DEFAULT), {"producer_byte_rate": 1000}),
                                   ((None, "wire-test"), {"producer_byte_rate": 10**9}),
                                   (("ANONYMOUS", None), {"request_percentage": 0.01})])
    w = Wire(b)
    try:
        # request_percentage 0.01: 0.1 ms of handler time per second, which a few
        # Metadata requests exceed: answered, with the throttle time
        throttles = []
        for _ in range(20):
            throttles.append(_metadata_throttle(w))
            if throttles[-1]:
                break
        assert throttles[-1] > 0, throttles
    finally:
        w.close()
    with SyncAdmin(b.bootstrap) as admin:
        admin.alter_client_quotas([(("ANONYMOUS", None), {"request_percentage": None})])
    w = Wire(b)
    try:
        for _ in range(2):
            resp = w.call(ApiKey.PRODUCE, 8, {
                "transactional_id": None, "acks": 1, "timeout_ms": 5000,
                "topic_data": [{"name": "precedence", "partition_data": [
                    {"index": 0, "records": batch([b"p" * 20_000])}]}]})
            assert resp.throttle_time_ms == 0
        assert _metadata_throttle(w) == 0   # no request quota any more
    finally:
        w.close()


def _produce_for(b, client_id: str, seconds: float, stats: list | None = None) -> float:
    """Bytes per second confluent-kafka delivered in `seconds` of producing flat out."""
    # Requests of at most 64 KiB: a throttle is bounded by the measured window (2 s with
    # WINDOWS), so one request must not carry more than that window's worth of quota.
    conf = {"bootstrap.servers": b.bootstrap, "client.id": client_id, "linger.ms": 5,
            "acks": 1, "queue.buffering.max.kbytes": 4096, "batch.size": 65536}
    if stats is not None:
        conf["statistics.interval.ms"] = 500
        conf["stats_cb"] = lambda s: stats.append(json.loads(s))
    p = Producer(conf)
    delivered = [0]

    def done(err, msg):
        if err is None:
            delivered[0] += len(msg.value())

    value = b"v" * 1000
    start = time.monotonic()
    deadline = start + seconds
    sent = 0
    while time.monotonic() < deadline and sent < 10_000_000:
        try:
            p.produce("produce-quota", value, callback=done)
            sent += 1
        except BufferError:
            p.poll(0.02)
        p.poll(0)
    elapsed = time.monotonic() - start
    counted = delivered[0]
    p.poll(0.6)   # one more statistics report
    # what is still queued would drain at the quota's rate (~20 s for the 4 MB queue):
    # drop it, the rate is already counted
    p.purge(in_queue=True, in_flight=False)
    p.flush(10)
    return counted / elapsed


def test_confluent_producer_is_held_to_its_quota_and_others_are_served(broker_factory):
    b = broker_factory(WINDOWS)
    create_topic(b, "produce-quota")
    free_rate = _produce_for(b, "free-producer", 2.0)
    set_quota(b, (None, "slow-producer"), producer_byte_rate=QUOTA)
    stats: list = []
    probes: list[float] = []
    stop = threading.Event()

    def probing():
        for _ in range(50):
            if stop.wait(0.5):
                return
            probes.append(probe(b))

    t = threading.Thread(target=probing, daemon=True)
    t.start()
    try:
        slow_rate = _produce_for(b, "slow-producer", RUN_S, stats)
    finally:
        stop.set()
        t.join(10)
    print(f"producer at {slow_rate:.0f} B/s against a quota of {QUOTA}; {free_rate:.0f} B/s without")
    # enforcement: held below 1.5x its quota, while without one the same producer ran
    # several times faster (so it was the quota, not the machine, that held it)
    assert slow_rate < 1.5 * QUOTA, (slow_rate, free_rate)
    assert free_rate > 3 * QUOTA, (slow_rate, free_rate)
    assert slow_rate > 0.2 * QUOTA, (slow_rate, free_rate)
    # librdkafka saw the throttle in the responses
    throttles = [br["throttle"]["max"] for s in stats for br in s["brokers"].values()
                 if br.get("nodeid", -1) >= 0]
    assert max(throttles, default=0) > 0
    # other clients were served throughout
    assert probes and max(probes) < PROBE_LIMIT_S, probes
    with SyncAdmin(b.bootstrap) as admin:
        assert admin.describe_client_quotas() == {(None, "slow-producer"): {
            "producer_byte_rate": float(QUOTA)}}


def test_consumer_is_held_near_its_quota(broker_factory):
    b = broker_factory(WINDOWS)
    create_topic(b, "consume-quota")
    # Small batches: a fetch returns at least one whole batch, and its throttle is bounded
    # by the measured window (2 s with WINDOWS), so no batch may hold more than that.
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 16384})
    value = b"c" * 1000
    for _ in range(4000):   # 4 MB: more than the consumer may read in the run
        while True:
            try:
                p.produce("consume-quota", value)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0
    set_quota(b, (DEFAULT, DEFAULT), consumer_byte_rate=QUOTA)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "quota-group",
                  "client.id": "slow-consumer", "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 65536, "max.partition.fetch.bytes": 65536,
                  "message.max.bytes": 65536})
    c.subscribe(["consume-quota"])
    got = 0
    first = None
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            if first is None:
                first = time.monotonic()   # the group joined: the run starts
            got += len(msg.value())
            if time.monotonic() - first >= RUN_S:
                break
        elapsed = time.monotonic() - first
    finally:
        c.close()
    rate = got / elapsed
    print(f"consumer at {rate:.0f} B/s against a quota of {QUOTA}")
    assert got < 4_000_000   # it did not read everything at once
    assert rate < 1.5 * QUOTA, rate
    assert rate > 0.2 * QUOTA, rate
