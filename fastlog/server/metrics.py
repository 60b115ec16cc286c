# fastlog/server/metrics.py — BrokerMetrics: the broker's Prometheus registry, and
# `readiness`, the answer of /health/ready.
#
# Owns: one prometheus_client CollectorRegistry per broker with the library's process,
# platform and GC collectors (the first and last as ProcessCPUCollector and
# GCStatsCollector) and BrokerCollector, which reads broker state at scrape
# time and names every series as the Prometheus JMX exporter's common Kafka rules
# (Strimzi's) would name Kafka's MBean (kafka_server_brokertopicmetrics_messagesin_total,
# kafka_log_log_size{topic,partition}, ...), consumer lag as kafka-exporter does
# (kafka_consumergroup_lag), and what only fastlog counts as fastlog_*. docs/metrics.md
# is the table of every series; keep it in step with this file.
# Nothing here runs on the request path: the hot paths bump plain integers
# (topic_stats.BrokerTopicStats, request_metrics.RequestMetrics, ReplicaManager.metrics,
# the log verifier's stats), and this module turns them into samples when scraped.
# Rendering: the families of a few samples each are written to text by
# metric_text.FamilyText from the collectors' write() calls (the same calls make the
# library's families for the registry's collect()); the platform's, which never change,
# by the library's encoder once per format; the per-topic counters and the requests per
# API are rows of integers written as the log rows are (CounterLines), the request-time
# histogram's lines are written here (the library's encoder spent about 5 us per sample
# holding the interpreter lock); the families of one sample per partition or per committed offset
# (kafka_log_log_*, kafka_consumergroup_*) are gathered as rows of integers in compiled
# code (fastlog/server/_exposition.pyx: add_figure_rows copies the log rows from the
# figures each log keeps in its slot of the log manager's LogFigures, contiguous C arrays
# written where the figures change (fastlog/server/log/_figures.pyx), with each topic's
# label head made once for good; add_offset_figure_rows fills a GaugeRows from the copy of
# a group's committed offsets it keeps in C memory (fastlog/server/group/
# _offset_figures.pyx), with the interpreter lock released but for a label head per group
# and topic, or add_offset_rows in one pass over a group's dict) and written to
# exposition text there with the interpreter lock released (GaugeLines: the samples the
# library would write, integers spelled exactly). perf/bench_metrics.py, 10,000
# partitions: 482 ms of CPU with the library's per-sample formatting, 69 with Python
# f-strings, about 30 now (before the log figures were kept). The replica
# manager's gauges are not walked per scrape: it keeps them as partitions change role,
# ISR or log dir (partition.PartitionCounts; under-min-ISR from its led partitions by
# ISR size per topic, against min.insync.replicas as configured at the scrape), and the
# late transactions are looked for among the producer states with one open
# (producer_state.WITH_OPEN_TXNS); every CHECK_COUNTS_EVERY scrapes the kept counts are
# checked against the compiled walk (_exposition.replica_counts) and, if a change missed
# its recount, reported and rebuilt on the loop; so are the log figures against a walk
# over the logs (_check_figures, figure_mismatches), and each group's kept offsets
# against its dict (_check_offset_figures, OffsetFigures.mismatches). The log rows note
# each hosted partition's high watermark (HostedWatermarks) for the lag rows, from the
# same slots; which slots are hosted is kept between scrapes (hosted_slots: a dict lookup
# per slot), made anew when the slots or the hosted partitions change, so a scrape's log
# rows are a pass over C arrays without a Python object per row.
# The controller's counts over every partition are a compiled walk (offline_partitions:
# no Python call per partition), made again only when the metadata's map of topics (a new
# map on every change, MetadataStore.topics) or the live brokers differ from the last.
# The scrape runs on the HTTP thread but needs the interpreter lock, which the request
# loop then waits for when it wakes (up to the 5 ms switch interval): GilBreaks hands
# the lock over as soon as the loop's thread has run (its CPU clock moved: it woke and
# waits for the lock), and every GIL_HOLD_S of the scrape's work in any case, and sleeps
# on while the loop goes on running, so the loop waits about the time between two calls
# of the breaks rather than the switch interval (a break comes at the first call too: a
# loop waiting since before the scrape began does not move its clock). No step between
# two breaks may be long: a group's committed offsets are copied and ordered in compiled
# code without the lock (add_offset_figure_rows), not by sorted(). The compiled steps'
# stretches without the lock end as a break does when the loop ran during them
# (_exposition.set_scrape_loop): a thread asking for the lock while the loop holds it
# mid-request would win it at the loop's next release (a pwrite, a CRC, a send) and keep
# the loop waiting. Between two breaks, the scrape's Python rests the same way
# (watch_request_loop installs a profile hook on the scrape's thread, for its whole life
# on the HTTP thread, that looks at the loop's clock every few microseconds): the
# stretches between breaks were tens of microseconds, which a loop that woke meanwhile
# waited for, at the switch interval and again at each of its releases.
# Called from: `BrokerMetrics(broker)` on the broker's asyncio loop at startup (it notes
# that thread for the idle figures); `collect` / `render` / `readiness` on the HTTP
# server's thread (fastlog/server/http.py). Broker state is read without locks: the
# metadata store's snapshots are immutable, and every dict or list the loop mutates is
# copied first with list(...)/dict(...) (one step under the interpreter lock), so a
# scrape sees each container as of one moment, never half-changed.
"""Prometheus metrics of the broker, collected at scrape time."""

from __future__ import annotations

import asyncio
import gc
import logging
import operator
import os
import resource
import threading
import time
from itertools import accumulate

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from fastlog.logs import report_limited
from fastlog.security.quota import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from fastlog.server._exposition import (
    GaugeRows,
    HostedWatermarks,
    add_figure_rows,
    add_log_rows,
    add_offset_figure_rows,
    add_offset_rows,
    figure_mismatches,
    hand_over,
    hosted_slots,
    offline_partitions,
    replica_counts,
    scrape_loop_watched,
    set_scrape_loop,
)
from fastlog.server.lag import RemoteHighWatermarks
from fastlog.server.metric_text import FamilyText, WrittenFamilies, family_head, label_value
from fastlog.server.producer_state import WITH_OPEN_TXNS
from fastlog.server.request_metrics import TIME_BUCKETS_MS, request_name
from fastlog.server.topic_stats import BROKER_COUNTERS, TOPIC_COUNTERS
from fastlog.server.txn.schemas import TxnState

# Kafka's BrokerState values (kafka.server:type=KafkaServer,name=BrokerState).
BROKER_STATE_STARTING = 1
BROKER_STATE_RUNNING = 3
BROKER_STATE_SHUTTING_DOWN = 7
# Kafka's GroupState names, as its GroupMetadataManager gauges spell them.
_GROUP_STATE_GAUGES = (
    ("PreparingRebalance", "numgroupspreparingrebalance"),
    ("CompletingRebalance", "numgroupscompletingrebalance"),
    ("Stable", "numgroupsstable"),
    ("Dead", "numgroupsdead"),
    ("Empty", "numgroupsempty"),
)
# The library's GC collector's families: name, the key of gc.get_stats(), help.
_GC_FAMILIES = (
    ("python_gc_objects_collected", "collected", "Objects collected during gc"),
    ("python_gc_objects_uncollectable", "uncollectable", "Uncollectable objects found during GC"),
    ("python_gc_collections", "collections", "Number of times this generation was collected"),
)
# Client quota -> the requests it throttles, as Kafka names its throttle-time sensors.
QUOTA_FAMILIES = ((PRODUCER_BYTE_RATE, "produce"), (CONSUMER_BYTE_RATE, "fetch"),
                  (REQUEST_PERCENTAGE, "request"))
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# A scrape holds the interpreter lock for at most about this long before handing it
# over (perf/bench_metrics.py, perf/metrics_scrape.py: the request loop's wait for it).
GIL_HOLD_S = 0.00025
# How long the scrape thread sleeps to hand the lock over: long enough for a thread
# woken by its release to take it (a futex wake and a reschedule).
GIL_BREAK_S = 0.00005
GIL_BREAK_NS = int(GIL_BREAK_S * 1e9)
# The least a scrape holds the interpreter lock between breaks (GilBreaks).
GIL_LEAST_HOLD_S = 0.00002
# A break's sleep that gets the lock back this late found the loop busy throughout; the
# next break then comes after GIL_BUSY_HOLD_S of the scrape's work (GilBreaks).
GIL_BUSY_LOOP_S = 0.001
GIL_BUSY_HOLD_S = 0.001
# The most sleeps of one break while the request loop keeps running (GilBreaks).
GIL_BREAKS_IN_A_ROW = 4
# Rows of a loop over partitions between two calls of its pause (a GilBreaks).
ROWS_PER_PAUSE = 16
# The same for the log rows' copy from the log figures: no Python object per row, about
# 10 ns a row.
FIGURE_ROWS_PER_PAUSE = 512
_OPENMETRICS_EOF = b"# EOF\n"
# Every this many scrapes, the replica manager's kept counts and the log manager's kept
# figures are checked against walks over its partitions and logs (BrokerCollector.
# _check_counts, _check_figures): what missed a change is reported and rebuilt on the
# loop, never left wrong for longer. (That scrape holds the lock as long as before.)
CHECK_COUNTS_EVERY = 32

log = logging.getLogger(__name__)


class GilBreaks:
    """Called often by a long computation on a thread other than the request loop: once
    `hold` seconds have passed since the last break, sleeps `pause` seconds, releasing the
    interpreter lock, so a thread waiting for it (the request loop woken by a request)
    takes it then rather than after the interpreter's switch interval (5 ms).
    With `loop_clock` (the request loop thread's CPU clock, time.pthread_getcpuclockid):
    a break comes as soon as the loop has run since the last one (it woke, for a request
    or a timer, and wants the lock: it waits for the next call rather than for the hold to
    pass), once GIL_LEAST_HOLD_S has passed; and while the loop runs during the sleep, it
    is serving a request whose next steps need the lock again (each of its callbacks
    takes it anew, and it releases it around its syscalls and CRCs), so the break goes
    on, `pause` at a time, at most GIL_BREAKS_IN_A_ROW sleeps, without taking the lock
    back between them (_exposition.hand_over: a thread that took it back at the end of
    each sleep won it at the loop's next release, and the loop waited for the following
    break). A break that gets the lock back only GIL_BUSY_LOOP_S or more after its
    sleeps means a loop busy throughout, which hands the lock over only at the switch
    interval: then the next break comes after GIL_BUSY_HOLD_S (`long_waits` counts those
    breaks), as a break costs the scrape a switch interval while the loop is that busy."""

    __slots__ = ("hold", "least", "pause", "last", "breaks", "long_waits", "loop_clock",
                 "loop_ran", "busy")

    def __init__(self, hold: float = GIL_HOLD_S, pause: float = GIL_BREAK_S,
                 loop_clock: int | None = None):
        self.hold = hold
        self.least = min(hold, GIL_LEAST_HOLD_S)
        self.pause = pause
        self.last = time.perf_counter()
        self.breaks = 0
        self.long_waits = 0
        self.loop_clock = loop_clock
        # (the first call breaks: a loop that woke before the scrape began and has waited
        # for the lock since does not move its clock while it waits)
        self.loop_ran = None if loop_clock is None else -1
        self.busy = False

    def _loop_time(self) -> int | None:
        """The loop thread's CPU time (ns); None without its clock."""
        if self.loop_clock is None:
            return None
        try:
            return time.clock_gettime_ns(self.loop_clock)
        except OSError:  # the loop's thread has ended
            self.loop_clock = None
            return None

    def __call__(self) -> None:
        held = time.perf_counter() - self.last
        if held < self.least:
            return
        if self.busy:
            if held < max(self.hold, GIL_BUSY_HOLD_S):
                return
        elif self._loop_time() == self.loop_ran and held < self.hold:
            return
        self.busy = False
        slept = time.perf_counter()
        if self.loop_clock is None:
            time.sleep(self.pause)
            sleeps, asleep = 1, self.pause
        else:
            # sleeps while the loop runs, the lock released throughout (hand_over)
            sleeps, asleep_ns = hand_over(self.loop_clock, int(self.pause * 1e9),
                                          GIL_BREAKS_IN_A_ROW)
            if sleeps < 0:  # the loop's thread has ended
                self.loop_clock, sleeps = None, 1
            asleep = asleep_ns / 1e9
        self.breaks += sleeps
        # the wait for the lock once the sleeps were over: a loop busy throughout
        if time.perf_counter() - slept - asleep >= GIL_BUSY_LOOP_S:
            self.long_waits += 1
            self.busy = True
        self.loop_ran = self._loop_time()
        self.last = time.perf_counter()


class GaugeLines:
    """A gauge family of integer samples with labels, written straight to exposition
    text: its samples are column `column` of `rows` (a compiled GaugeRows), a row's labels
    being heads[its head index] (escaped and formatted, `topic="t",` before the
    partition label) and, when the rows are partitioned, its partition. The samples
    (names, labels, values) are those prometheus_client writes for a GaugeMetricFamily in
    both the Prometheus text format and OpenMetrics; the labels stay in the order given
    and integers are written exactly (the library sorts labels and writes floats)."""

    __slots__ = ("name", "doc", "rows", "column", "heads")

    def __init__(self, name: str, doc: str, rows: GaugeRows, column: int, heads: list[bytes]):
        self.name = name
        self.doc = doc
        self.rows = rows
        self.column = column
        self.heads = heads

    def chunks(self, openmetrics: bool) -> tuple[bytes, bytes]:
        """The family's HELP and TYPE lines, and its samples' lines."""
        head = family_head(self.name, self.doc, "gauge", openmetrics).encode()
        return head, self.rows.text(self.column, self.name.encode(), self.heads)


class CounterLines(GaugeLines):
    """A counter family written as GaugeLines writes a gauge's: `total` (if not None) its
    sample without labels, first, as the broker's figure beside the topics'; the names and
    TYPE those prometheus_client writes for a CounterMetricFamily (`NAME_total` samples;
    HELP and TYPE under `NAME_total` in the Prometheus text format, under `NAME` in
    OpenMetrics)."""

    __slots__ = ("total",)

    def __init__(self, name: str, doc: str, rows: GaugeRows, column: int, heads: list[bytes],
                 total: int | None = None):
        super().__init__(name, doc, rows, column, heads)
        self.total = total

    def chunks(self, openmetrics: bool) -> tuple[bytes, bytes]:
        sample = self.name + "_total"
        head = family_head(self.name, self.doc, "counter", openmetrics)
        if self.total is not None:
            head += f"{sample} {int(self.total)}\n"
        return head.encode(), self.rows.text(self.column, sample.encode(), self.heads)


class HistogramLines:
    """A histogram family whose samples were written by the collector (`body`: per label
    set its NAME_bucket lines, `le` last, then NAME_count and NAME_sum, as
    prometheus_client orders a HistogramMetricFamily's samples); chunks() adds the HELP
    and TYPE lines."""

    __slots__ = ("name", "doc", "body")

    def __init__(self, name: str, doc: str, body: bytes):
        self.name = name
        self.doc = doc
        self.body = body

    def chunks(self, openmetrics: bool) -> tuple[bytes, bytes]:
        return family_head(self.name, self.doc, "histogram", openmetrics).encode(), self.body


class LabelHeads:
    """The label texts of one scrape's rows (the heads of GaugeRows.text), `texts[i]`
    (a list several LabelHeads may share), and in `index` the i of each key's text;
    `add(key, text)` appends a key's text, and `maker(text_of)` is the `new_head` of
    _exposition.add_log_rows and add_offset_rows: it adds text_of(key) under key."""

    __slots__ = ("texts", "index")

    def __init__(self, texts: list[bytes] | None = None):
        self.texts: list[bytes] = [] if texts is None else texts
        self.index: dict = {}

    def add(self, key, text: str) -> int:
        i = self.index[key] = len(self.texts)
        self.texts.append(text.encode())
        return i

    def maker(self, text_of):
        def new_head(key) -> int:
            return self.add(key, text_of(key))
        return new_head


def thread_cpu_seconds(native_id: int) -> float | None:
    """CPU time (user + system) of one thread of this process, from /proc; None when
    the thread is gone or /proc cannot say."""
    try:
        stat = _read_proc(f"/proc/self/task/{native_id}/stat")
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class IdleMeter:
    """The share of wall time a set of threads spent off the CPU since the previous
    reading (the first reading: since the meter was made), averaged over the threads:
    the nearest honest equivalent of Kafka's idle percentages for an event loop, which
    waits in epoll when it has nothing to do."""

    def __init__(self):
        self._last: dict[int, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def read(self, native_ids: list[int], cpu_of=thread_cpu_seconds) -> float | None:
        """The share for the threads `native_ids`, whose CPU seconds cpu_of(id) gives."""
        now = time.monotonic()
        shares = []
        with self._lock:
            for tid in native_ids:
                cpu = cpu_of(tid)
                if cpu is None:
                    continue
                last = self._last.get(tid)
                self._last[tid] = (now, cpu)
                if last is None or now - last[0] < 1e-3:
                    continue
                busy = (cpu - last[1]) / (now - last[0])
                shares.append(min(1.0, max(0.0, 1.0 - busy)))
        return sum(shares) / len(shares) if shares else None


def readiness(broker) -> str | None:
    """None when the broker is ready to serve (every partition it hosts is open and, in
    cluster mode, it is registered), else the reason in one line."""
    if broker.stopping:
        return "the broker is shutting down"
    if broker.log_manager is None:
        return "the broker is starting: loading its logs"
    if not broker._started:
        return "the broker is starting"
    if broker.cluster is not None:
        if not broker._registered:
            return "the broker is not registered in ZooKeeper"
        if broker.session_expired:
            return "the broker's ZooKeeper session has expired"
    rm = broker.replica_manager
    open_parts = dict(rm.partitions)
    md = broker.metadata
    node = broker.node_id
    missing = offline = 0
    for name in md.topic_names():
        state = md.topic(name)
        if state is None:
            continue
        for index, ps in list(state.partitions.items()):
            hosted = ps.leader == node if broker.cluster is None else node in ps.replicas
            if not hosted:
                continue
            p = open_parts.get((name, index))
            if p is None:
                missing += 1
            elif p.offline:
                offline += 1
    if missing:
        return f"{missing} hosted partition(s) not open yet"
    if offline:
        return f"{offline} hosted partition(s) in a failed log dir"
    return None


class BrokerCollector(WrittenFamilies):
    """A prometheus_client collector of the broker's figures (see the module comment)."""

    def __init__(self, broker, loop_thread_id: int, remote_high_watermarks=None):
        self.broker = broker
        self.loop_thread_id = loop_thread_id
        self.idle = IdleMeter()
        # the loop thread's CPU clock (BrokerMetrics sets it), read for its idle share
        # instead of its /proc stat file
        self.loop_clock: int | None = None
        # per (API key, version) its label text; per API the text before each number of
        # its request-time histogram (_request_series)
        self._request_heads: dict[tuple[int, int], tuple[str, bytes]] = {}
        self._histogram_heads: dict[str, tuple[list[str], str, str]] = {}
        # high watermarks of partitions led elsewhere (cluster mode), for consumer lag
        self.remote_high_watermarks = remote_high_watermarks
        # called in every loop over partitions (BrokerMetrics.render sets a GilBreaks)
        self.pause = _no_pause
        # the hosted partitions' high watermarks noted by this scrape's log rows
        # (series), for its lag rows; None until then
        self._watermarks: HostedWatermarks | None = None
        # the broker's loop (BrokerMetrics sets it), where kept counts found wrong are
        # rebuilt; the scrapes so far, for CHECK_COUNTS_EVERY
        self.loop: asyncio.AbstractEventLoop | None = None
        self.scrapes = 0
        # the label head of each topic id of the log manager's LogFigures (ids are never
        # reused, so these are made once per topic)
        self._topic_heads: list[bytes] = []
        # the log figures' slots whose partition is hosted here and online
        # (_exposition.hosted_slots), and what they were made from: the figures'
        # generation, the replica manager's counts and their changes (every partition
        # hosted, dropped or taken offline changes them); made anew when any differs
        self._hosted_slots: tuple | None = None
        # the controller's counts (topics, partitions, offline), with the metadata's map of
        # topics and the live brokers they were counted over: counted anew when either
        # differs
        self._controller_counts: tuple | None = None

    def describe(self):
        return []  # collected at scrape time only (the registry must not call collect)

    def write(self, out) -> None:
        """The families of a few samples each, given to `out` (metric_text.FamilyText or
        LibraryFamilies), with a pause between groups of them."""
        b = self.broker
        pause = self.pause
        self.scrapes += 1
        self._topic_metrics(out, b.topic_stats)
        self._network_metrics(out, b)
        out.gauge("kafka_server_kafkaserver_brokerstate",
                  "Kafka's BrokerState: 1 starting, 3 running, 7 shutting down.", _broker_state(b))
        pause()
        if b.replica_manager is not None:
            self._replica_metrics(out, b)
            pause()
        if b.metadata is not None:
            self._controller_metrics(out, b)
            pause()
        if b.log_manager is not None:
            self._log_metrics(out, b)
            pause()
        if b.group_coordinator is not None:
            self._group_metrics(out, b)
            self._load_time_metrics(out, "group", b.group_coordinator)
            pause()
        if getattr(b, "txn_coordinator", None) is not None:
            self._txn_metrics(out, b.txn_coordinator)
            self._load_time_metrics(out, "transaction", b.txn_coordinator)
            pause()
        self._quota_metrics(out, b.quotas)
        self._fetch_session_metrics(out, b.fetch_manager.cache)

    def series(self):
        """The families of one sample per topic, request, partition or committed offset,
        as GaugeLines and the like (see the module comment); the registry's `collect`
        yields the others."""
        b = self.broker
        yield from self._topic_series(b.topic_stats)
        yield from self._request_series(b.request_metrics)
        if b.log_manager is not None:
            yield from self._log_series(b)
        if b.group_coordinator is not None:
            yield from self._group_series(b)

    # ------------------------------------------------------------------ families
    def _topic_metrics(self, out, stats):
        every = stats.all_topics
        for attr, part, doc in BROKER_COUNTERS:
            out.counter(f"kafka_server_brokertopicmetrics_{part}", doc,
                        getattr(every, attr))
        out.counter("fastlog_fetch_compiled_requests",
                    "Fetch requests answered in compiled code (a consumer's "
                    "sessionless fetch of one partition with data at once).",
                    stats.compiled_fetch_requests)

    def _topic_series(self, stats):
        """The per-topic counters (TOPIC_COUNTERS), each with the broker's figure first
        (no label) and a row per topic, in GaugeRows of up to four counters each."""
        topics = dict(stats.topics)  # (one step under the lock)
        every = stats.all_topics
        attrs = [attr for attr, _, _ in TOPIC_COUNTERS]
        groups = [attrs[i:i + 4] for i in range(0, len(attrs), 4)]
        tables = [GaugeRows(len(group), partitioned=False) for group in groups]
        heads = []
        pause = self.pause
        for i, (topic, topic_stats) in enumerate(topics.items()):
            if i % ROWS_PER_PAUSE == 0:
                pause()
            heads.append(f'topic="{label_value(topic)}"'.encode())
            for rows, group in zip(tables, groups, strict=True):
                rows.add(i, -1, *[getattr(topic_stats, attr) for attr in group])
        for n, (attr, part, doc) in enumerate(TOPIC_COUNTERS):
            yield CounterLines(f"kafka_server_brokertopicmetrics_{part}",
                               f"{doc} Per topic (topic label) and for the broker (no label).",
                               tables[n // 4], n % 4, heads, getattr(every, attr))

    def _request_series(self, rm):
        """Requests per API and version (a counter), and the request-time histogram per
        API, its lines written here (a few per API, with a break between APIs)."""
        table = sorted(dict(rm.by_request).items())
        pause = self.pause
        counts, heads = GaugeRows(1, partitioned=False), []
        per_api: dict[str, list] = {}
        request_heads = self._request_heads
        for i, (key, s) in enumerate(table):
            if i % ROWS_PER_PAUSE == 0:
                pause()
            named = request_heads.get(key)
            if named is None:  # (keys are bounded: RequestMetrics.stats)
                name = request_name(key[0])
                named = request_heads[key] = (
                    name, f'request="{name}",version="{key[1]}"'.encode())
            name = named[0]
            heads.append(named[1])
            counts.add(i, -1, s.count)
            acc = per_api.get(name)
            if acc is None:
                per_api[name] = [s.time_ms, list(s.buckets)]
            else:
                acc[0] += s.time_ms
                acc[1] = list(map(operator.add, acc[1], s.buckets))
        yield CounterLines("kafka_network_requestmetrics_requests",
                           "Requests received, per API and version.", counts, 0, heads)
        family = "kafka_network_requestmetrics_totaltimems"
        lines = []
        for name, (total_ms, buckets) in sorted(per_api.items()):
            pause()
            made = self._histogram_heads.get(name)
            if made is None:
                labels = f'request="{name}"'
                made = self._histogram_heads[name] = (
                    [f'{family}_bucket{{{labels},le="{le}"}} ' for le in _TIME_BUCKET_LABELS],
                    f"{family}_count{{{labels}}} ", f"{family}_sum{{{labels}}} ")
            bucket_heads, count_head, sum_head = made
            cumulative = list(accumulate(buckets))
            lines.extend([f"{h}{n}\n" for h, n in zip(bucket_heads, cumulative, strict=True)])
            lines.append(f"{count_head}{cumulative[-1]}\n{sum_head}{floatToGoString(total_ms)}\n")
        yield HistogramLines(family, "Request time in ms, from the frame's hand-off to the "
                             "handler until the response is queued for writing.",
                             "".join(lines).encode())

    def _quota_metrics(self, out, quotas):
        totals = sorted(dict(quotas.throttle_ms_total).items())
        for kind, family in QUOTA_FAMILIES:
            out.labelled(
                "counter", f"kafka_server_{family}_throttle_time_ms",
                f"Time in ms {family} requests of a client were throttled by its "
                f"{kind} quota (Kafka's {family.capitalize()} throttle-time), per user and "
                "client id.", ("user", "client_id"),
                [((user, client_id), ms) for (k, user, client_id), ms in totals if k == kind])

    def _network_metrics(self, out, b):
        servers = list(b.socket_servers)
        out.labelled("gauge", "kafka_server_socketservermetrics_connection_count",
                     "Open client connections, per listener.", ("listener",),
                     [((listener,), server.connection_count)
                      for (listener, _, _), server in zip(list(b.bound), servers, strict=False)])
        loop_idle = self.idle.read([self.loop_thread_id], self._thread_cpu)
        if loop_idle is not None:
            out.gauge(
                "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
                "Share (0-1) of wall time the request loop's thread was off the CPU since the "
                "previous scrape.", loop_idle)
        network_ids = [t.native_id for t in threading.enumerate()
                       if t.name.startswith("fastlog-network-") and t.native_id is not None]
        net_idle = self.idle.read(network_ids) if network_ids else loop_idle
        if net_idle is not None:
            out.gauge(
                "kafka_network_socketserver_networkprocessoravgidlepercent",
                "Share (0-1) of wall time the network threads were off the CPU since the "
                "previous scrape (the request loop's thread when it does the socket work "
                "itself, num.network.threads=1).", net_idle)

    def _thread_cpu(self, native_id: int) -> float | None:
        """A thread's CPU seconds: the loop's from its CPU clock, others' from /proc."""
        if native_id == self.loop_thread_id and self.loop_clock is not None:
            try:
                return time.clock_gettime(self.loop_clock)
            except OSError:  # (the loop's thread has ended)
                self.loop_clock = None
        return thread_cpu_seconds(native_id)

    def _replica_metrics(self, out, b):
        rm = b.replica_manager
        counts = rm.counts

        def min_isr_of(topic: str) -> int:
            try:
                return b.log_config(topic).min_insync_replicas
            except Exception:  # noqa: BLE001 - a topic deleted meanwhile
                return 1

        if self.scrapes % CHECK_COUNTS_EVERY == 0:
            self._check_counts(rm, min_isr_of)
        hosted = len(rm.partitions)
        leaders, under = counts.leaders, counts.under_replicated
        offline = len(counts.offline_keys)
        under_min = counts.under_min_isr(min_isr_of)
        late = late_transactions(rm.partitions, int(time.time() * 1000),
                                 int(b.config["transaction.max.timeout.ms"]))
        prefix = "kafka_server_replicamanager_"
        out.gauge(prefix + "partitioncount", "Partitions hosted here.", hosted)
        out.gauge(prefix + "leadercount", "Partitions this broker leads.", leaders)
        out.gauge(prefix + "underreplicatedpartitions",
                  "Led partitions whose ISR is smaller than their replica set.", under)
        out.gauge(prefix + "underminisrpartitioncount",
                  "Led partitions whose ISR is smaller than min.insync.replicas.",
                  under_min)
        out.gauge(prefix + "offlinereplicacount",
                  "Hosted replicas in a failed log dir.", offline)
        out.gauge(prefix + "partitionswithlatetransactionscount",
                  "Led partitions with a transaction open past "
                  "transaction.max.timeout.ms plus 5 minutes (KIP-664).", late)
        m = dict(rm.metrics)
        out.counter(prefix + "isrshrinks", "ISR shrinks written by this broker.",
                    m.get("isr_shrinks", 0))
        out.counter(prefix + "isrexpands", "ISR expands written by this broker.",
                    m.get("isr_expands", 0))
        out.counter(prefix + "failedisrupdates",
                    "ISR changes ZooKeeper refused (a stale leader epoch or version).",
                    m.get("isr_update_failures", 0))
        out.counter("fastlog_replica_fenced_leaderships",
                    "Times this broker found its leadership fenced.",
                    m.get("fenced_leaderships", 0))
        out.counter("fastlog_replica_follower_truncations",
                    "Follower log truncations (to the leader's epoch end offset).",
                    m.get("follower_truncations", 0))
        out.counter("fastlog_replica_unclean_truncated_records",
                    "Records a follower removed below its high watermark (committed "
                    "data lost: only an unclean election or a lost disk does this).",
                    m.get("unclean_truncated_records", 0))

    def _check_counts(self, rm, min_isr_of) -> bool:
        """The replica manager's kept counts against a walk over its partitions (the
        walk the scrape made before they were kept); when they differ and no partition
        changed meanwhile, reports it and has the loop rebuild them. True when they agree
        (or a change meanwhile leaves it open)."""
        counts = rm.counts
        changes = counts.changes
        kept = (counts.leaders, counts.under_replicated, counts.under_min_isr(min_isr_of),
                len(counts.offline_keys))
        walked = replica_counts(list(rm.partitions.values()), {}, min_isr_of, 0, 0,
                                self.pause, ROWS_PER_PAUSE)
        if counts.changes != changes or rm.counts is not counts or kept == walked[:4]:
            return True
        report_limited(log, logging.WARNING, "replica-counts",
                       "the replica manager's kept counts (leaders, under-replicated, under "
                       "min ISR, offline) %s differ from its partitions' %s: rebuilt", kept,
                       walked[:4])
        if self.loop is not None:
            self.loop.call_soon_threadsafe(rm.rebuild_counts)
        return False

    def _check_figures(self, lm, figures) -> bool:
        """The log manager's LogFigures against its logs' own figures (the walk the log
        rows made before the figures were kept); a slot that missed a change (or a log
        without one) is reported and every slot written anew on the loop. True when all
        agree."""
        generation = figures.generation
        logs = lm.all_logs()
        wrong = figure_mismatches(figures, logs, self.pause, ROWS_PER_PAUSE)
        if figures.generation != generation:  # (logs listed or forgotten meanwhile)
            return True
        if not wrong and (figures.in_use == len(logs) or lm.dir_failure_channel.offline):
            return True
        report_limited(log, logging.WARNING, "log-figures",
                       "%d of %d logs' kept figures differ from the logs' own (%d slots in "
                       "use): written anew", wrong, len(logs), figures.in_use)
        if self.loop is not None:
            self.loop.call_soon_threadsafe(lm.note_all_figures)
        return False

    def _check_offset_figures(self, groups) -> int:
        """Each group's OffsetFigures against its dict of offsets; the groups whose
        figures missed a change (seen apart twice, a break between, with no entry added,
        moved or dropped meanwhile: a change is written to one and then the other, and a
        check may fall between the two) are reported and their figures written anew on
        the loop. Returns how many groups were found apart."""
        apart = []
        for g in groups:
            figures = getattr(g, "offset_figures", None)
            if figures is None:
                continue
            version = figures.version
            if figures.mismatches(g.offsets, self.pause, ROWS_PER_PAUSE) <= 0:
                continue
            self.pause()
            wrong = figures.mismatches(g.offsets, self.pause, ROWS_PER_PAUSE)
            if wrong > 0 and figures.version == version:
                apart.append((g, wrong))
        if apart:
            report_limited(log, logging.WARNING, "offset-figures",
                           "the kept committed offsets of %d group(s) differ from their "
                           "offsets (%s): written anew", len(apart),
                           ", ".join(f"{g.group_id}: {wrong}" for g, wrong in apart[:5]))
            if self.loop is not None:
                for g, _ in apart:
                    self.loop.call_soon_threadsafe(g.rebuild_offset_figures)
        return len(apart)

    def _fetch_session_metrics(self, out, cache):
        prefix = "kafka_server_fetchsessioncache_"
        out.gauge(prefix + "numincrementalfetchsessions",
                  "Incremental fetch sessions (KIP-227) cached.", len(cache))
        out.gauge(prefix + "numincrementalfetchpartitionscached",
                  "Partitions in all cached fetch sessions.", cache.num_partitions)
        out.counter(prefix + "incrementalfetchsessionevictions",
                    "Fetch sessions evicted to make room for new ones.",
                    cache.evictions)

    def _controller_metrics(self, out, b):
        active = b.cluster is None or b.is_controller()
        topics = partitions = offline = 0
        if active:
            md = b.metadata
            live = ({b.node_id} if b.cluster is None else set(dict(md.brokers())))
            every_topic = md.topics()  # (a map never changed once made: kept by identity)
            kept = self._controller_counts
            if kept is not None and kept[0] is every_topic and kept[1] == live:
                topics, partitions, offline = kept[2]
            else:
                states = list(every_topic.values())
                topics = len(states)
                partitions, offline = offline_partitions(
                    (list(state.partitions.values()) for state in states), live, self.pause,
                    ROWS_PER_PAUSE)
                self._controller_counts = (every_topic, live, (topics, partitions, offline))
        prefix = "kafka_controller_kafkacontroller_"
        out.gauge(prefix + "activecontrollercount",
                  "1 on the active controller, else 0 (one node: always 1).",
                  1 if active else 0)
        out.gauge(prefix + "offlinepartitionscount",
                  "Partitions without a live leader (active controller only).", offline)
        out.gauge(prefix + "globaltopiccount", "Topics (active controller only).",
                  topics)
        out.gauge(prefix + "globalpartitioncount",
                  "Partitions (active controller only).", partitions)

    def _log_metrics(self, out, b):
        lm = b.log_manager
        offline_dirs = set(lm.dir_failure_channel.offline)
        out.gauge("kafka_log_logmanager_offlinelogdirectorycount",
                  "Log dirs that failed.", len(offline_dirs))
        out.labelled("gauge", "fastlog_log_dir_offline", "1 for a failed log dir, else 0.",
                     ("log_dir",), [((d,), 1 if d in offline_dirs else 0) for d in lm.log_dirs])
        v = dict(lm.verification_stats)
        for key, doc in (("passes", "Passes of the background CRC check over sealed segments."),
                         ("segments", "Sealed segments the background check verified."),
                         ("bytes", "Bytes the background check read."),
                         ("corrupt_batches", "Corrupt batches the background check found "
                                             "(never served)."),
                         ("cpu_seconds", "CPU seconds the background check used.")):
            out.counter(f"fastlog_log_verification_{key}", doc, v.get(key, 0))

    def _log_series(self, b):
        lm, rm = b.log_manager, b.replica_manager
        rows = GaugeRows(4)
        figures = getattr(lm, "figures", None)
        if figures is not None and figures.untracked:  # (a log without a slot: walk)
            figures = None
        if figures is not None and self.scrapes % CHECK_COUNTS_EVERY == 0:
            self._check_figures(lm, figures)
        marks = hosted = offline = None
        if rm is not None:
            # the lag rows' high watermarks, noted with the log rows; `hosted` is only
            # looked up in (safe while the loop changes it), the offline keys copied (one
            # step under the interpreter lock)
            counts = rm.counts
            changes = counts.changes  # (read first: a change meanwhile is seen next time)
            hosted = rm.partitions
            hosted_count = len(hosted)
            offline = set(counts.offline_keys)
            marks = self._watermarks = HostedWatermarks()
        if figures is not None:
            mask = None
            if marks is not None:
                key = (figures.generation, counts, changes)
                kept = self._hosted_slots
                if kept is None or kept[0] != key:  # (a tuple holding the counts itself)
                    kept = self._hosted_slots = (key, hosted_slots(
                        figures, hosted, offline, self.pause, ROWS_PER_PAUSE))
                mask = kept[1]
            noted = add_figure_rows(rows, figures, self.pause, FIGURE_ROWS_PER_PAUSE, marks,
                                    mask)
            heads = self._topic_heads
            for topic in figures.topics[len(heads):]:  # (topics listed since the last)
                heads.append(f'topic="{label_value(topic)}",'.encode())
            texts = heads
        else:
            by_topic = LabelHeads()
            noted = add_log_rows(rows, by_topic.index, by_topic.maker(
                lambda t: f'topic="{label_value(t)}",'), lm.all_logs(), self.pause,
                ROWS_PER_PAUSE, marks, hosted, offline)
            texts = by_topic.texts
        if marks is not None:
            for topic, partition in offline:
                if (topic, partition) in hosted:
                    marks.add(topic, partition, 0, offline=True)
                    noted += 1
            if noted != hosted_count:  # (a hosted partition without an online log here)
                replica_counts(list(hosted.values()), {}, _one, 0, 0, self.pause,
                               ROWS_PER_PAUSE, marks)
        return (GaugeLines("kafka_log_log_size", "Bytes of the partition's segments.", rows, 0,
                           texts),
                GaugeLines("kafka_log_log_logendoffset", "The log end offset.", rows, 1, texts),
                GaugeLines("kafka_log_log_logstartoffset", "The log start offset.", rows, 2,
                           texts),
                GaugeLines("kafka_log_log_numlogsegments", "Segments of the log.", rows, 3,
                           texts))

    def _group_metrics(self, out, b):
        groups = list(b.group_coordinator.groups.values())
        by_state = dict.fromkeys((s for s, _ in _GROUP_STATE_GAUGES), 0)
        offsets_count = 0
        for g in groups:
            state = g.state.value
            if state in by_state:
                by_state[state] += 1
            offsets_count += len(g.offsets)
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        out.gauge(prefix + "numgroups", "Groups this broker coordinates.",
                  len(groups))
        for state, part in _GROUP_STATE_GAUGES:
            out.gauge(prefix + part, f"Groups in state {state}.", by_state[state])
        out.gauge(prefix + "numoffsets", "Committed offsets held.", offsets_count)

    def _group_series(self, b):
        groups = list(b.group_coordinator.groups.values())
        if self.scrapes % CHECK_COUNTS_EVERY == 0:
            self._check_offset_figures(groups)
        marks, self._watermarks = self._watermarks, None
        if marks is None:  # (series without collect: a walk of its own)
            marks = HostedWatermarks()
            if b.replica_manager is not None:
                replica_counts(list(b.replica_manager.partitions.values()), {}, _one, 0, 0,
                               self.pause, ROWS_PER_PAUSE, marks)
        remote = self.remote_high_watermarks
        pause = self.pause
        members, member_heads = GaugeRows(1, partitioned=False), LabelHeads()
        current, lag, offset_heads = GaugeRows(1), GaugeRows(1), LabelHeads()
        lag_sum, sum_heads = GaugeRows(1, partitioned=False), LabelHeads()
        for g in groups:
            pause()
            gid = label_value(g.group_id)
            members.add(member_heads.add(g.group_id, f'consumergroup="{gid}"'), -1,
                        len(g.members))
            sums: dict[str, int] = {}
            topics = LabelHeads(offset_heads.texts)
            new_head = topics.maker(
                lambda t, gid=gid: f'consumergroup="{gid}",topic="{label_value(t)}",')
            # the group's offsets kept in C memory: copied, their lag read and ordered
            # without the lock; else (or when they changed under every copy) the dict,
            # copied in one step under the lock (no tuple per offset made at once, as
            # list(items()) made, which with its collections held the lock 0.2-0.3 ms
            # for 3,000 offsets); both order the rows by topic and partition
            figures = getattr(g, "offset_figures", None)
            if figures is None or add_offset_figure_rows(
                    current, lag, topics.index, new_head, figures, marks, remote, sums,
                    pause, ROWS_PER_PAUSE) < 0:
                add_offset_rows(current, lag, topics.index, new_head,
                                g.offsets.copy().items(), marks, remote, sums, pause,
                                ROWS_PER_PAUSE)
            for topic, total in sorted(sums.items()):
                lag_sum.add(sum_heads.add((g.group_id, topic), f'consumergroup="{gid}",'
                                          f'topic="{label_value(topic)}"'), -1, total)
        return (GaugeLines("kafka_consumergroup_members", "Members of the group.", members, 0,
                           member_heads.texts),
                GaugeLines("kafka_consumergroup_current_offset", "The group's committed offset.",
                           current, 0, offset_heads.texts),
                GaugeLines("kafka_consumergroup_lag",
                           "High watermark minus the committed offset (in a cluster, from the "
                           "leader of a partition this broker does not host).", lag, 0,
                           offset_heads.texts),
                GaugeLines("kafka_consumergroup_lag_sum",
                           "The group's lag summed over a topic's partitions.", lag_sum, 0,
                           sum_heads.texts))

    def _load_time_metrics(self, out, kind: str, coordinator):
        """Kafka's partition-load-time-max/avg of the group- or transaction-coordinator-
        metrics group, as the JMX exporter names an attribute of a bean without a name
        key."""
        most, avg = coordinator.partition_load_time()
        prefix = f"kafka_server_{kind}_coordinator_metrics_partition_load_time_"
        out.gauge(prefix + "max", f"Longest load of a {kind} coordinator partition "
                  "in the last minute, ms (NaN: none).", most)
        out.gauge(prefix + "avg", f"Average load of a {kind} coordinator partition "
                  "in the last minute, ms (NaN: none).", avg)

    def _txn_metrics(self, out, tc):
        by_state: dict[str, int] = {}
        for txn in list(tc.txns.values()):
            if not txn.fresh:
                name = txn.state.kafka_name
                by_state[name] = by_state.get(name, 0) + 1
        out.labelled("gauge", "fastlog_transaction_coordinator_transactional_ids",
                     "Transactional ids this broker coordinates, by state.", ("state",),
                     [((s.kafka_name,), by_state.get(s.kafka_name, 0)) for s in TxnState])
        out.counter("kafka_server_addpartitionstotxnmanager_verificationfailurerate",
                    "Partitions of transactional writes refused because they were "
                    "not added to the transaction (KIP-890).",
                    tc.verification_failures)


def _no_pause() -> None:
    pass


def late_transactions(partitions: dict, now_ms: int, max_timeout_ms: int) -> int:
    """Led partitions of `partitions` (the replica manager's) with a late transaction
    (ProducerStateManager.has_late_transaction), over the producer states with an open
    transaction only (producer_state.WITH_OPEN_TXNS), not every partition."""
    late = 0
    for ref in list(WITH_OPEN_TXNS.data):
        state = ref()
        if state is None or not state.ongoing:
            continue
        p = partitions.get((state.topic, state.partition))
        if (p is None or p.producer_state is not state or p.offline
                or (p.local_id is not None and p.leader_id != p.local_id)):
            continue
        if state.has_late_transaction(now_ms, max_timeout_ms):
            late += 1
    return late


def _one(_topic: str) -> int:
    return 1


def _broker_state(b) -> int:
    if b.stopping:
        return BROKER_STATE_SHUTTING_DOWN
    return BROKER_STATE_RUNNING if b._started else BROKER_STATE_STARTING


# The request-time histogram's `le` labels, as the library writes bucket bounds.
_TIME_BUCKET_LABELS = tuple(repr(float(b)) for b in TIME_BUCKETS_MS) + ("+Inf",)


class ProcessCPUCollector(WrittenFamilies, ProcessCollector):
    """The library's process collector (the same families, names and help), of this
    process only, with three figures read differently: process_max_fds from getrlimit
    (the soft limit /proc/self/limits shows, without reading and parsing that file;
    +Inf for no limit); process_cpu_seconds_total from the process CPU clock
    (nanoseconds) instead of /proc's clock ticks (10 ms), so a short perf run's broker CPU
    (`fastlog perf --broker-metrics`) is measured, not rounded to zero; and
    process_open_fds from the size the kernel reports for /proc/self/fd (its descriptor
    count, Linux 6.2+) instead of listing the directory, which took 2 ms of CPU per scrape
    with 3,000 partitions' files open (and counted the listing's own descriptor). Where
    that size is 0 (older kernels) the directory is listed."""

    def write(self, out) -> None:
        """The families, given to `out` (metric_text.FamilyText or LibraryFamilies)."""
        if not self._btime:
            return
        pid = os.path.join(self._proc, str(self._pid()).strip())
        prefix = self._prefix
        try:
            # (os.open and os.read: the buffered file object cost twice the syscalls' time)
            parts = _read_proc(os.path.join(pid, "stat")).split(b")")[-1].split()
        except OSError:
            pass
        else:
            out.gauge(prefix + "virtual_memory_bytes", "Virtual memory size in bytes.",
                      float(parts[20]))
            out.gauge(prefix + "resident_memory_bytes", "Resident memory size in bytes.",
                      float(parts[21]) * self._pagesize)
            out.gauge(prefix + "start_time_seconds",
                      "Start time of the process since unix epoch in seconds.",
                      float(parts[19]) / self._ticks + self._btime)
            out.counter(prefix + "cpu_seconds", "Total user and system CPU time spent in seconds.",
                        time.process_time())
        try:
            fd_dir = os.path.join(pid, "fd")
            count = os.stat(fd_dir).st_size or len(os.listdir(fd_dir))
            # the soft limit, which /proc/PID/limits shows as "Max open files"
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except OSError:
            return
        out.gauge(prefix + "open_fds", "Number of open file descriptors.", count)
        out.gauge(prefix + "max_fds", "Maximum number of open file descriptors.",
                  float("inf") if soft == resource.RLIM_INFINITY else float(soft))


class GCStatsCollector(WrittenFamilies, GCCollector):
    """The library's GC collector (the same families, names and help) writing its
    families to a metric_text writer."""

    def write(self, out) -> None:
        stats = [(str(gen), stat) for gen, stat in enumerate(gc.get_stats())]
        for name, key, doc in _GC_FAMILIES:
            out.labelled("counter", name, doc, ("generation",),
                         [((gen,), stat[key]) for gen, stat in stats])


def watch_request_loop(loop_clock: int | None) -> None:
    """Makes this thread rest while the request loop (CPU clock `loop_clock`) runs: its
    Python, and its compiled stretches without the lock, with the scrape's breaks'
    rests (_exposition.set_scrape_loop); None: stops watching."""
    if loop_clock is None:
        set_scrape_loop()
    else:
        set_scrape_loop(loop_clock, GIL_BREAK_NS, GIL_BREAKS_IN_A_ROW)


def _read_proc(path: str) -> bytes:
    """A small /proc file's contents, in one read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


class BrokerMetrics:
    """The broker's registry (see the module comment). Make it on the broker's loop."""

    def __init__(self, broker):
        self.registry = CollectorRegistry(auto_describe=False)
        # (the registry's order of families, which a scrape writes in too)
        self.process = ProcessCPUCollector(registry=self.registry)
        self.platform = PlatformCollector(registry=self.registry)
        self.gc_stats = GCStatsCollector(registry=self.registry)
        # the platform's families (the interpreter's version: never changed) as text, by
        # format, made at the first scrape in each
        self._platform_text: dict[bool, bytes] = {}
        self.remote_high_watermarks = RemoteHighWatermarks(broker)
        self.collector = BrokerCollector(broker, threading.get_native_id(),
                                         self.remote_high_watermarks)
        self.registry.register(self.collector)
        try:
            self.collector.loop = asyncio.get_running_loop()
        except RuntimeError:  # (made off a loop: a test or a bench)
            self.collector.loop = None
        self._lock = threading.Lock()
        # the request loop's CPU clock (this runs on the loop), for the scrape's breaks
        self._loop_ident = threading.get_ident()
        clock_of = getattr(time, "pthread_getcpuclockid", None)  # (Linux, not macOS)
        self._loop_clock = clock_of(self._loop_ident) if clock_of is not None else None
        self.collector.loop_clock = self._loop_clock

    def _platform_families(self, encoder, openmetrics: bool) -> bytes:
        """The platform collector's families as the library writes them (made once)."""
        text = self._platform_text.get(openmetrics)
        if text is None:
            text = encoder(self.platform)  # (a collector is all the encoder reads)
            if openmetrics and text.endswith(_OPENMETRICS_EOF):
                text = text[:-len(_OPENMETRICS_EOF)]
            self._platform_text[openmetrics] = text
        return text

    @property
    def loop_clock(self) -> int | None:
        """The request loop thread's CPU clock (time.pthread_getcpuclockid), or None."""
        return self._loop_clock

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition (Prometheus text, or OpenMetrics when `accept` asks for it) and
        its content type (see render_chunks)."""
        chunks, content_type = self.render_chunks(accept)
        return b"".join(chunks), content_type

    def render_chunks(self, accept: str | None) -> tuple[list[bytes], str]:
        """The exposition as the pieces whose concatenation it is (sent one after another,
        not copied into one), and its content type. One scrape at a time, with GIL breaks
        (see the module comment)."""
        encoder, content_type = choose_encoder(accept or "")
        openmetrics = content_type.startswith("application/openmetrics-text")
        with self._lock:
            on_loop = threading.get_ident() == self._loop_ident  # (a test or a bench)
            loop_clock = None if on_loop else self._loop_clock
            pause = self.collector.pause = GilBreaks(loop_clock=loop_clock)
            # the compiled steps' stretches without the lock end as the breaks do: after
            # the loop has rested, when it ran meanwhile (_exposition._polite_return); the
            # HTTP thread watches the loop all its life (http.HttpServer)
            watched = scrape_loop_watched()
            if not watched:
                watch_request_loop(loop_clock)
            try:
                # the registry's order: the process's, the platform's, the GC's and the
                # broker's families
                process, rest = FamilyText(openmetrics), FamilyText(openmetrics)
                self.process.write(process)
                self.gc_stats.write(rest)
                self.collector.write(rest)
                out = [process.text() + self._platform_families(encoder, openmetrics)
                       + rest.text()]
                pause()
                for lines in self.collector.series():
                    out.extend(lines.chunks(openmetrics))
                    pause()
            finally:
                self.collector.pause = _no_pause
                if not watched:
                    watch_request_loop(None)
            if openmetrics:
                out.append(_OPENMETRICS_EOF)
            return out, content_type
