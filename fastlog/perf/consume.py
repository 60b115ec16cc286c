# fastlog/perf/consume.py: `fastlog perf consume`, Kafka's consumer-perf-test for fastlog.
#
# Owns: the consume load loops: our asyncio Consumer and librdkafka via confluent-kafka,
# both reading every partition of the topic from the beginning with assign() (no group
# rebalance in the measurement). A run ends at --num-records, at --duration, or once
# no record arrived for --idle-ms after the first one. Runs on the caller's thread.
"""Consume load test."""

from __future__ import annotations

import time

from fastlog.client.errors import FastlogError
from fastlog.perf.report import Progress, summarize
from fastlog.perf.workload import confluent_client

# librdkafka's default fetch.queue.backoff.ms (1000) stalls its fetcher for a second each
# time its pre-fetch queue fills: a client artefact, not a broker property.
CONFLUENT_CONSUMER_DEFAULTS = {"fetch.queue.backoff.ms": 10}


def run(opts) -> tuple[dict, None, Progress]:
    if opts.client == "confluent":
        return _run_confluent(opts)
    from fastlog.client.sync import run_async
    return run_async(_run_fastlog(opts))


def _run_confluent(opts):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    conf = {"bootstrap.servers": opts.bootstrap_server, "group.id": "fastlog-perf",
            "enable.auto.commit": False, **CONFLUENT_CONSUMER_DEFAULTS, **opts.security,
            **opts.extra_config}
    c = confluent_client(Consumer, conf)
    clock = time.perf_counter
    progress = Progress("consume", opts.num_records, not opts.json)
    n = opts.num_records
    got = nbytes = errors = 0
    try:
        md = c.list_topics(opts.topic, timeout=30)
        t = md.topics.get(opts.topic)
        if t is None or t.error is not None or not t.partitions:
            raise FastlogError(f"topic '{opts.topic}' does not exist")
        c.assign([TopicPartition(opts.topic, p, OFFSET_BEGINNING) for p in t.partitions])
        start = clock()
        deadline = start + opts.duration
        last = None
        idle = opts.idle_ms / 1000.0
        while got < n:
            msgs = c.consume(num_messages=min(10000, n - got), timeout=0.1)
            now = clock()
            if msgs:
                last = now
                for m in msgs:
                    if m.error() is not None:
                        errors += 1
                        continue
                    got += 1
                    nbytes += len(m)
                progress.tick(got, nbytes)
            elif last is not None and now - last > idle:
                break
            if now > deadline:
                break
        end = last if (got < n and last is not None) else clock()
    except KafkaException as exc:
        raise FastlogError(f"consume failed: {exc}") from None
    finally:
        c.close()
    progress.done(got, nbytes)
    return summarize("consume", opts, got, nbytes, end - start, None, errors=errors), None, progress


async def _run_fastlog(opts):
    from fastlog.client import Consumer

    clock = time.perf_counter
    progress = Progress("consume", opts.num_records, not opts.json)
    n = opts.num_records
    got = nbytes = 0
    kwargs = dict(fetch_max_bytes=52428800, max_partition_fetch_bytes=8 << 20)
    kwargs.update(opts.extra_config)
    async with Consumer(opts.bootstrap_server, security=opts.security, **kwargs) as c:
        await c.assign_topic(opts.topic)
        await c.seek_to_beginning()
        start = clock()
        deadline = start + opts.duration
        last = None
        idle = opts.idle_ms / 1000.0
        while got < n:
            batches = await c.getmany(timeout_ms=100, max_records=n - got)
            now = clock()
            if batches:
                last = now
                for records in batches.values():
                    got += len(records)
                    for r in records:
                        v = r.value
                        if v is not None:
                            nbytes += len(v)
                progress.tick(got, nbytes)
            elif last is not None and now - last > idle:
                break
            if now > deadline:
                break
        end = last if (got < n and last is not None) else clock()
    progress.done(got, nbytes)
    return summarize("consume", opts, got, nbytes, end - start, None), None, progress
