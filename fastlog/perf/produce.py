# fastlog/perf/produce.py: `fastlog perf produce`, Kafka's producer-perf-test for fastlog.
#
# Owns: the produce load loops, one per client: our asyncio Producer (one per
# --connections, records spread round-robin) and librdkafka via confluent-kafka. Both
# are bounded by --num-records and --duration, optionally paced by --rate, and record the
# latency from send() to acknowledgement for every --sample-every'th record (every
# record under --rate unless told otherwise). With librdkafka it also reports how many
# Produce requests the client sent (its own statistics counter), since a broker's CPU per
# record depends on how many records each request carries. Runs on the caller's thread.
"""Produce load test."""

from __future__ import annotations

import json
import time
from functools import partial

from fastlog.client.errors import FastlogError
from fastlog.perf.histogram import LatencyHistogram
from fastlog.perf.ratelimit import RateLimiter
from fastlog.perf.report import Progress, summarize
from fastlog.perf.workload import Workload, confluent_client, ensure_topic


def sample_every(opts) -> int:
    if opts.sample_every is not None:
        return opts.sample_every
    return 1 if opts.rate else 100


def run(opts) -> tuple[dict, LatencyHistogram, Progress]:
    wl = Workload(opts.record_size, opts.key_distribution, opts.key_count)
    ensure_topic(opts.client, opts.bootstrap_server, opts.topic, opts.partitions,
                 security=opts.security)
    if opts.client == "confluent":
        return _run_confluent(opts, wl)
    from fastlog.client.sync import run_async
    return run_async(_run_fastlog(opts, wl))


# librdkafka's statistics every this many ms: cheap (one JSON string per producer), and
# frequent enough that waiting for the first report after flush() adds little to a run.
STATS_INTERVAL_MS = 100


def confluent_producer_config(opts) -> dict:
    conf = {"bootstrap.servers": opts.bootstrap_server, "acks": str(opts.acks),
            "linger.ms": opts.linger_ms, "compression.type": opts.compression or "none",
            "queue.buffering.max.messages": 1_000_000,
            "statistics.interval.ms": STATS_INTERVAL_MS, **opts.security}
    if opts.batch_size:
        conf["batch.size"] = opts.batch_size
    conf.update(opts.extra_config)
    return conf


def _run_confluent(opts, wl: Workload):
    from confluent_kafka import KafkaException, Producer

    hist = LatencyHistogram()
    every = sample_every(opts)
    failed = [0]
    conf = confluent_producer_config(opts)
    counted = str(conf["statistics.interval.ms"]) not in ("0", "")
    stats = [[] for _ in range(opts.connections)]  # (arrival, JSON) per producer
    producers = [confluent_client(Producer, {**conf, "stats_cb": partial(_keep_stats, box)})
                 for box in stats]
    limiter = RateLimiter(opts.rate)
    progress = Progress("produce", opts.num_records, not opts.json)
    n, size = opts.num_records, opts.record_size
    topic, conns = opts.topic, len(producers)
    clock = time.perf_counter

    record = hist.record

    def delivered(t, err, msg):
        if err is not None:
            failed[0] += 1
        else:
            record(clock() - t)

    start = clock()
    deadline = start + opts.duration
    limiter.reset()
    sent = 0
    try:
        while sent < n:
            burst = min(limiter.wait(sent), n - sent, 1000)
            for _ in range(burst):
                p = producers[sent % conns]
                key, value = wl.key(sent), wl.value(sent)
                cb = partial(delivered, clock()) if sent % every == 0 else None
                while True:
                    try:
                        p.produce(topic, value, key, on_delivery=cb)
                        break
                    except BufferError:
                        p.poll(0.001)
                sent += 1
            for p in producers:
                p.poll(0)
            progress.tick(sent, sent * size)
            if clock() > deadline:
                break
        remaining = 0
        for p in producers:
            remaining += p.flush(max(0.0, deadline + 30 - clock()))
    except KafkaException as exc:
        raise FastlogError(f"produce failed: {exc}") from None
    elapsed = clock() - start
    acked = sent - remaining
    progress.done(acked, acked * size)
    extra = {}
    requests = _produce_requests(producers, stats, clock()) if counted else None
    if requests:
        extra = {"produce_requests": requests,
                 "records_per_request": round(acked / requests, 1)}
    return summarize("produce", opts, acked, acked * size, elapsed, hist,
                     errors=failed[0] + remaining, sent=sent, **extra), hist, progress


def _keep_stats(box: list, report: str) -> None:
    box[:] = [(time.perf_counter(), report)]  # only the newest report is read


def _produce_requests(producers, stats, flushed: float, wait_s: float = 1.0) -> int | None:
    """Produce requests the producers sent, from librdkafka's per-broker counters, read
    from a report made after everything was acknowledged (the second one to arrive after
    `flushed`: the first may have been made before flush() returned). None when a
    producer gave no such report within wait_s."""
    deadline = time.perf_counter() + wait_s
    seen = [0] * len(producers)
    last = [None] * len(producers)
    while min(seen) < 2 and time.perf_counter() < deadline:
        for i, p in enumerate(producers):
            p.poll(0.02)
            if stats[i] and stats[i][0][0] > flushed and stats[i][0] is not last[i]:
                last[i] = stats[i][0]
                seen[i] += 1
    if min(seen) < 2:
        return None
    total = 0
    for _, report in last:
        for b in json.loads(report).get("brokers", {}).values():
            total += b.get("req", {}).get("Produce", 0)
    return total


async def _run_fastlog(opts, wl: Workload):
    from fastlog.client import Producer

    hist = LatencyHistogram()
    every = sample_every(opts)
    failed = [0]
    kwargs = dict(acks=opts.acks, compression=opts.compression, linger_ms=opts.linger_ms)
    if opts.batch_size:
        kwargs["batch_size"] = opts.batch_size
    kwargs.update(opts.extra_config)
    producers = [Producer(opts.bootstrap_server, security=opts.security, **kwargs) for _ in range(opts.connections)]
    for p in producers:
        await p.start()
    limiter = RateLimiter(opts.rate)
    progress = Progress("produce", opts.num_records, not opts.json)
    n, size, topic, conns = opts.num_records, opts.record_size, opts.topic, len(producers)
    clock = time.perf_counter
    last_batch = [None] * conns

    def batch_done(fut):
        if fut.cancelled() or fut.exception() is not None:
            failed[0] += 1

    start = clock()
    deadline = start + opts.duration
    limiter.reset()
    sent = 0
    try:
        while sent < n:
            burst = min(await limiter.wait_async(sent), n - sent, 1000)
            for _ in range(burst):
                c = sent % conns
                handle = await producers[c].send(topic, wl.value(sent), wl.key(sent))
                # one error check per batch, not per record
                fut = handle.batch_future
                if fut is not last_batch[c]:
                    last_batch[c] = fut
                    fut.add_done_callback(batch_done)
                if sent % every == 0:
                    t = clock()
                    fut.add_done_callback(lambda f, t=t: f.cancelled() or f.exception()
                                          or hist.record(clock() - t))
                sent += 1
            progress.tick(sent, sent * size)
            if clock() > deadline:
                break
        for p in producers:
            await p.flush(max(0.1, deadline + 30 - clock()))
    finally:
        for p in producers:
            await p.close(5)
    elapsed = clock() - start
    progress.done(sent, sent * size)
    return summarize("produce", opts, sent, sent * size, elapsed, hist,
                     errors=failed[0], sent=sent), hist, progress
