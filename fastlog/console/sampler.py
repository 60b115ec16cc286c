# fastlog/console/sampler.py: the web console's samples over time, behind its charts and
# the topics' messages per second.
#
# Owns: every `interval` seconds, the log end offset summed per topic (ListOffsets to the
# leaders), each group's total lag (OffsetFetch against those end offsets), and, for each
# --metrics-url, the broker-wide counters of its /metrics (fastlog.perf.broker_metrics'
# scrape, run off the loop). Rates are deltas of consecutive samples, so they work on any
# Kafka: messages in per second per topic from end offsets, bytes only where a broker's
# /metrics says. Keeps the last `keep` samples; bounded work per round (MAX_PARTITIONS,
# MAX_GROUPS). One task on the console's event loop; a round that fails is skipped and
# remembered as one sentence, never raised.

from __future__ import annotations

import asyncio
import collections
import logging
import time

from fastlog.client import LATEST, TopicPartition
from fastlog.client.errors import FastlogError
from fastlog.logs import RateLimitedLog
from fastlog.perf.broker_metrics import SERIES, scrape

log = logging.getLogger("fastlog.console")

MAX_PARTITIONS = 5000
MAX_GROUPS = 50
STOP_ATTEMPTS = 10
# chart name -> the broker-wide series of fastlog.perf.broker_metrics (Kafka's names)
METRICS = tuple(SERIES)


def _sentence(exc: BaseException) -> str:
    if isinstance(exc, FastlogError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class Sampler:
    def __init__(self, admin, *, interval: float = 5.0, keep: int = 120,
                 metrics_urls=()):
        self.admin = admin
        self.interval = interval
        self.metrics_urls = list(metrics_urls)
        # (time, {topic: end offset sum}, {group: lag}, {url: {series: value}})
        self.samples: collections.deque = collections.deque(maxlen=keep)
        self.problem: str | None = None
        self._log = RateLimitedLog(log, 60.0)
        self._task: asyncio.Task | None = None
        self._stopping = False
        # why a --metrics-url could not be read in the last round (the round still counts)
        self._scrape_problem: str | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the task and wait for it, bounded: a cancellation can be lost inside a
        request (asyncio.wait_for's race in Python 3.11), so it is repeated, and the loop
        also ends at its next turn."""
        self._stopping = True
        task, self._task = self._task, None
        for _ in range(STOP_ATTEMPTS):
            if task is None or task.done():
                break
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved: nothing to report when stopping

    async def _run(self) -> None:
        while not self._stopping:
            started = time.monotonic()
            try:
                self.samples.append(await self.sample())
                self.problem = self._scrape_problem
            except asyncio.CancelledError:
                raise
            except FastlogError as exc:
                self.problem = str(exc)
            except Exception as exc:  # noqa: BLE001 - a broker's answer must not stop us
                self.problem = f"{type(exc).__name__}: {exc}"
                self._log.log(logging.WARNING, "console sampler: %s", self.problem)
            if not self._stopping:
                await asyncio.sleep(max(0.5, self.interval - (time.monotonic() - started)))

    async def sample(self):
        now = time.time()
        self._scrape_problem = None
        await self.admin.cluster.refresh_metadata(None)
        tps = [TopicPartition(t.name, p) for t in self.admin.cluster.topics.values()
               if not t.internal for p in t.partitions][:MAX_PARTITIONS]
        ends: dict[TopicPartition, int] = {}
        if tps:
            got = await self.admin.list_offsets(dict.fromkeys(tps, LATEST))
            ends = {tp: o.offset for tp, o in got.items()}
        topics: dict[str, int] = collections.defaultdict(int)
        for tp, end in ends.items():
            topics[tp.topic] += end
        lags: dict[str, int] = {}
        for group in (await self.admin.list_groups())[:MAX_GROUPS]:
            group_id = group.group_id
            try:
                committed = await self.admin.fetch_offsets(group_id)
            except FastlogError:
                continue
            lags[group_id] = sum(max(0, ends[tp] - off) for tp, (off, _) in committed.items()
                                 if tp in ends)
        # All URLs at once, each in a thread (a slow one costs its timeout, not the sum).
        scraped = await asyncio.gather(*(asyncio.to_thread(scrape, u)
                                         for u in self.metrics_urls), return_exceptions=True)
        metrics = {}
        for u, got in zip(self.metrics_urls, scraped, strict=True):
            if isinstance(got, BaseException):
                metrics[u] = {}
                self._scrape_problem = _sentence(got)
            else:
                metrics[u] = got
        return now, dict(topics), lags, metrics

    # -- what the pages read --------------------------------------------------------------

    def topic_rates(self) -> dict[str, float]:
        """Messages in per second per topic over the last two samples."""
        if len(self.samples) < 2:
            return {}
        (t0, a, _, _), (t1, b, _, _) = self.samples[-2], self.samples[-1]
        dt = max(t1 - t0, 1e-3)
        return {topic: max(0, b[topic] - a.get(topic, b[topic])) / dt for topic in b}

    def series(self) -> dict:
        """The charts' data: times, and per topic / group / metrics URL aligned series
        (None where a sample has no value)."""
        samples = list(self.samples)
        times = [s[0] for s in samples]
        topics = sorted({t for s in samples for t in s[1]})
        groups = sorted({g for s in samples for g in s[2]})

        def rates(values):
            out: list[float | None] = [None]
            for i in range(1, len(values)):
                a, b = values[i - 1], values[i]
                dt = times[i] - times[i - 1]
                out.append(None if a is None or b is None or dt <= 0
                           else max(0.0, (b - a) / dt))
            return out[:len(values)]

        data = {
            "t": times,
            "topics": {t: rates([s[1].get(t) for s in samples]) for t in topics},
            "groups": {g: [s[2].get(g) for s in samples] for g in groups},
            "brokers": {u: {m: rates([s[3].get(u, {}).get(SERIES[m]) for s in samples])
                            for m in METRICS} for u in self.metrics_urls},
            "interval": self.interval,
            "problem": self.problem,
        }
        return data
