# fastlog/perf/produce.py: `fastlog perf produce`, Kafka's producer-perf-test for fastlog.
#
# Owns: the produce load loops, one per client: our asyncio Producer (one per
# --connections, records spread round-robin) and librdkafka via confluent-kafka. Both
# are bounded by --num-records and --duration, optionally paced by --rate, and record the
# latency from send() to acknowledgement for every --sample-every'th record (every
# record under --rate unless told otherwise). Runs on the caller's thread.
"""Produce load test."""

from __future__ import annotations

import time
from functools import partial

from fastlog.client.errors import FastlogError
from fastlog.perf.histogram import LatencyHistogram
from fastlog.perf.ratelimit import RateLimiter
from fastlog.perf.report import Progress, summarize
from fastlog.perf.workload import Workload, ensure_topic


def sample_every(opts) -> int:
    if opts.sample_every:
        return max(1, opts.sample_every)
    return 1 if opts.rate else 100


def run(opts) -> tuple[dict, LatencyHistogram, Progress]:
    wl = Workload(opts.record_size, opts.key_distribution, opts.key_count)
    ensure_topic(opts.client, opts.bootstrap_server, opts.topic, opts.partitions)
    if opts.client == "confluent":
        return _run_confluent(opts, wl)
    from fastlog.cli.main import run_async
    return run_async(_run_fastlog(opts, wl))


def confluent_producer_config(opts) -> dict:
    conf = {"bootstrap.servers": opts.bootstrap_server, "acks": str(opts.acks),
            "linger.ms": opts.linger_ms, "compression.type": opts.compression or "none",
            "queue.buffering.max.messages": 1_000_000}
    if opts.batch_size:
        conf["batch.size"] = opts.batch_size
    conf.update(opts.extra_config)
    return conf


def _run_confluent(opts, wl: Workload):
    from confluent_kafka import KafkaException, Producer

    hist = LatencyHistogram()
    every = sample_every(opts)
    failed = [0]
    producers = [Producer(confluent_producer_config(opts)) for _ in range(opts.connections)]
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
    return summarize("produce", opts, acked, acked * size, elapsed, hist,
                     errors=failed[0] + remaining, sent=sent), hist, progress


async def _run_fastlog(opts, wl: Workload):
    from fastlog.client import Producer

    hist = LatencyHistogram()
    every = sample_every(opts)
    failed = [0]
    kwargs = dict(acks=opts.acks, compression=opts.compression, linger_ms=opts.linger_ms)
    if opts.batch_size:
        kwargs["batch_size"] = opts.batch_size
    kwargs.update(opts.extra_config)
    producers = [Producer(opts.bootstrap_server, **kwargs) for _ in range(opts.connections)]
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
