# fastlog/perf/e2e.py: `fastlog perf e2e`, end-to-end latency from send() to receipt.
#
# Owns: a producer and a consumer of the same topic in one process, so one clock serves
# both: each value's first 8 bytes carry its send time (perf_counter_ns); the consumer
# records now - stamp. The consumer reads from the beginning and skips (and counts) any
# record this run did not send: shorter than a stamp, or stamped outside [start, now]
# (an earlier run's, another tool's), so a reused topic is fine. -X settings go to the
# producer, with either client. Our client: producer and consumer
# share one asyncio loop; confluent: the consumer polls on a second thread (librdkafka
# releases the GIL while it waits). Bounded by --num-records, --duration and --idle-ms.
"""End-to-end latency test."""

from __future__ import annotations

import threading
import time

from fastlog.client.errors import FastlogError
from fastlog.perf.consume import CONFLUENT_CONSUMER_DEFAULTS
from fastlog.perf.histogram import LatencyHistogram
from fastlog.perf.produce import confluent_producer_config
from fastlog.perf.ratelimit import RateLimiter
from fastlog.perf.report import Progress, summarize
from fastlog.perf.workload import Workload, confluent_client, ensure_topic


def run(opts):
    if opts.record_size < 8:
        raise FastlogError("e2e needs --record-size of at least 8 bytes (the send time)")
    wl = Workload(opts.record_size, opts.key_distribution, opts.key_count)
    ensure_topic(opts.client, opts.bootstrap_server, opts.topic, opts.partitions,
                 security=opts.security)
    if opts.client == "confluent":
        return _run_confluent(opts, wl)
    from fastlog.client.sync import run_async
    return run_async(_run_fastlog(opts, wl))


class _Receiver:
    """Counts this run's records and records their end-to-end latency; skips the rest."""

    def __init__(self, n: int, size: int, progress: Progress):
        self.hist = LatencyHistogram()
        self.n, self.size, self.progress = n, size, progress
        self.got = self.foreign = 0
        self.start_ns = time.perf_counter_ns()
        # last: any record arrived (the consumer may still be catching up); last_own: the
        # last of ours, where the measured interval ends.
        self.last = self.last_own = time.perf_counter()

    def values(self, values) -> None:
        now = time.perf_counter_ns()
        got = self.got
        for v in values:
            stamp = Workload.stamp_of(v)
            if stamp is None or not self.start_ns <= stamp <= now:
                self.foreign += 1
                continue
            self.hist.record_us((now - stamp) // 1000)
            self.got += 1
        self.last = time.perf_counter()
        if self.got > got:
            self.last_own = self.last
        self.progress.tick(self.got, self.got * self.size)


def _run_confluent(opts, wl: Workload):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    progress = Progress("e2e", opts.num_records, not opts.json)
    rx = _Receiver(opts.num_records, opts.record_size, progress)
    p = confluent_client(Producer, confluent_producer_config(opts))  # -X is checked here
    c = confluent_client(Consumer, {
        "bootstrap.servers": opts.bootstrap_server, "group.id": "fastlog-perf-e2e",
        "enable.auto.commit": False, **CONFLUENT_CONSUMER_DEFAULTS, **opts.security})
    md = c.list_topics(opts.topic, timeout=30)
    parts = md.topics[opts.topic].partitions
    c.assign([TopicPartition(opts.topic, p, OFFSET_BEGINNING) for p in parts])
    start = time.perf_counter()
    deadline = start + opts.duration
    stop = threading.Event()

    def consume():
        while rx.got < rx.n and not stop.is_set() and time.perf_counter() < deadline + 5:
            msgs = c.consume(num_messages=10000, timeout=0.05)
            vals = [m.value() for m in msgs if m.error() is None]
            if vals:
                rx.values(vals)

    t = threading.Thread(target=consume, name="perf-e2e-consumer", daemon=True)
    t.start()
    limiter = RateLimiter(opts.rate)
    sent = 0
    try:
        while sent < opts.num_records and time.perf_counter() < deadline:
            burst = min(limiter.wait(sent), opts.num_records - sent, 1000)
            for _ in range(burst):
                while True:
                    try:
                        p.produce(opts.topic, wl.stamped_value(sent), wl.key(sent))
                        break
                    except BufferError:
                        p.poll(0.001)
                sent += 1
            p.poll(0)
        p.flush(max(0.0, deadline + 5 - time.perf_counter()))
        idle = opts.idle_ms / 1000.0
        while t.is_alive() and time.perf_counter() - rx.last < idle:
            t.join(0.05)
    finally:
        stop.set()
        t.join(10)
        c.close()
    return _summary(opts, rx, start, sent, progress)


async def _run_fastlog(opts, wl: Workload):
    import asyncio

    from fastlog.client import Consumer, Producer

    progress = Progress("e2e", opts.num_records, not opts.json)
    rx = _Receiver(opts.num_records, opts.record_size, progress)
    kwargs = dict(acks=opts.acks, compression=opts.compression, linger_ms=opts.linger_ms)
    if opts.batch_size:
        kwargs["batch_size"] = opts.batch_size
    kwargs.update(opts.extra_config)
    start = time.perf_counter()
    deadline = start + opts.duration
    async with Consumer(opts.bootstrap_server, fetch_max_wait_ms=100,
                        security=opts.security) as c, \
            Producer(opts.bootstrap_server, security=opts.security, **kwargs) as p:
        await c.assign_topic(opts.topic)
        await c.seek_to_beginning()

        async def consume():
            while rx.got < rx.n and time.perf_counter() < deadline + 5:
                batches = await c.getmany(timeout_ms=50)
                for records in batches.values():
                    rx.values([r.value for r in records])

        task = asyncio.get_running_loop().create_task(consume())
        limiter = RateLimiter(opts.rate)
        sent = 0
        try:
            while sent < opts.num_records and time.perf_counter() < deadline:
                burst = min(await limiter.wait_async(sent), opts.num_records - sent, 1000)
                for _ in range(burst):
                    await p.send(opts.topic, wl.stamped_value(sent), wl.key(sent))
                    sent += 1
                if burst >= 1000:
                    await asyncio.sleep(0)  # let the consumer task run under full load
            await p.flush(max(0.1, deadline + 5 - time.perf_counter()))
            idle = opts.idle_ms / 1000.0
            while not task.done() and time.perf_counter() - rx.last < idle:
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
    return _summary(opts, rx, start, sent, progress)


def _summary(opts, rx: _Receiver, start: float, sent: int, progress: Progress):
    progress.done(rx.got, rx.got * opts.record_size)
    return summarize("e2e", opts, rx.got, rx.got * opts.record_size, rx.last_own - start,
                     rx.hist, sent=sent, foreign_records=rx.foreign), rx.hist, progress
