"""fastlog/server/_exposition.pyx (GaugeRows) and the text metrics.GaugeLines makes of it:
the lines prometheus_client itself writes for the same gauge samples, in the Prometheus
text format and in OpenMetrics, but for the value's spelling (the library writes every
value as a float, 42.0 and 9.223372036854776e+18; we write integers exactly, as the
formats allow), and what the library's parsers read back; and
metrics.ProcessCPUCollector's families against the library's ProcessCollector; the
compiled gathers (add_log_rows over real logs, add_offset_rows and the order of its
rows, add_offset_figure_rows against it); metric_text.FamilyText's text of every small
family a broker writes against the library's text of the same families; the counters and
the request-time histogram the collector writes itself (CounterLines, _request_series)
against the library's; hand_over, the sleep of the scrape's breaks, the scrape's profile
hook and polite_epoll_wait, the HTTP thread's wait, which rest as the breaks do; and
send_polite, the HTTP thread's writes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import select
import socket
import sys
import threading
import time

import pytest
from fastlog.server._exposition import (
    OFFLINE,
    GaugeRows,
    HostedWatermarks,
    add_log_rows,
    add_offset_figure_rows,
    add_offset_rows,
    hand_over,
    offline_partitions,
    polite_epoll_wait,
    replica_counts,
    scrape_rests,
    send_polite,
    set_scrape_loop,
)
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse
from prometheus_client.samples import Sample

from fastlog.metadata import PartitionState
from fastlog.server.group.group import GroupMetadata
from fastlog.server.group.schemas import OffsetAndMetadata
from fastlog.server.lag import RemoteHighWatermarks
from fastlog.server.metrics import (
    BrokerCollector,
    CounterLines,
    GaugeLines,
    LabelHeads,
    ProcessCPUCollector,
    label_value,
)
from fastlog.server.partition import Partition
from fastlog.server.producer_state import LATE_TRANSACTION_BUFFER_MS, ProducerStateEntry
from fastlog.server.request_metrics import TIME_BUCKETS_MS, RequestMetrics, request_name
from tests.server.log.conftest import append_n, open_log

EXTREMES = (0, 1, -1, 9, 10, 2**31, -(2**31), 2**63 - 1, -(2**63))


class _Registry:
    def __init__(self, family):
        self.family = family

    def collect(self):
        return (self.family,)


def library_text(name: str, doc: str, samples, openmetrics: bool) -> bytes:
    """What prometheus_client writes for one gauge family of `samples` ((labels, value))."""
    family = GaugeMetricFamily(name, doc, labels=list(samples[0][0]) if samples else None)
    for labels, v in samples:
        family.add_metric(list(labels.values()), v)
    text = (om_latest if openmetrics else generate_latest)(_Registry(family))
    return text[:-len(b"# EOF\n")] if openmetrics else text


def assert_same_family(ours: bytes, theirs: bytes, samples, openmetrics: bool) -> None:
    """`ours` has the HELP and TYPE lines of the library's text `theirs` and the same
    samples as read back by the library's parser (which are `samples`, (labels, value)),
    with integers written exactly. (The library writes labels sorted by name and every
    value as a float: 9.223372036854776e+18; the formats allow either.)"""
    mine, lib = ours.decode().splitlines(), theirs.decode().splitlines()
    assert [a for a in mine if a.startswith("#")] == [b for b in lib if b.startswith("#")]
    assert len(mine) == len(lib)
    for line, (_, v) in zip((a for a in mine if not a.startswith("#")), samples, strict=True):
        assert line.rsplit(" ", 1)[1] == str(v)
    parse = om_parse if openmetrics else text_parse
    eof = "# EOF\n" if openmetrics else ""

    def read(text):
        return [(f.name, f.documentation, f.type, s.name, s.labels, float(s.value))
                for f in parse(text.decode() + eof) for s in f.samples]

    assert read(ours) == read(theirs)
    assert [(s[4], s[5]) for s in read(ours)] == [(labels, float(v)) for labels, v in samples]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_partitioned_rows_are_the_librarys_lines(openmetrics):
    topics = ["orders", 'we"ird\\topic', "new\nline", "ü"]
    heads = LabelHeads()
    rows = GaugeRows(2)
    samples = ([], [])
    for i in range(300):   # past the first allocation (256 rows)
        topic = topics[i % len(topics)]
        h = heads.index.get(topic)
        if h is None:
            h = heads.add(topic, f'topic="{label_value(topic)}",')
        a, b = EXTREMES[i % len(EXTREMES)], i * 1000
        rows.add(h, i, a, b)
        samples[0].append(({"topic": topic, "partition": str(i)}, a))
        samples[1].append(({"topic": topic, "partition": str(i)}, b))
    assert len(rows) == 300
    doc = 'Bytes "of" a \\ partition\nand more.'
    for column in (0, 1):
        head, body = GaugeLines("kafka_log_log_size", doc, rows, column,
                                heads.texts).chunks(openmetrics)
        assert_same_family(head + body, library_text("kafka_log_log_size", doc, samples[column],
                                                     openmetrics), samples[column], openmetrics)


@pytest.mark.parametrize("openmetrics", [False, True])
def test_unpartitioned_rows_and_empty_families(openmetrics):
    heads = LabelHeads()
    rows = GaugeRows(1, partitioned=False)
    rows.add(heads.add("g", 'consumergroup="g",topic="t"'), -1, 42)
    head, body = GaugeLines("kafka_consumergroup_lag_sum", "Summed.", rows, 0,
                            heads.texts).chunks(openmetrics)
    sums = [({"consumergroup": "g", "topic": "t"}, 42)]
    assert_same_family(head + body, library_text("kafka_consumergroup_lag_sum", "Summed.", sums,
                                                 openmetrics), sums, openmetrics)
    head, body = GaugeLines("kafka_consumergroup_members", "None.", GaugeRows(1), 0,
                            []).chunks(openmetrics)
    assert body == b""
    assert head == library_text("kafka_consumergroup_members", "None.", [], openmetrics)


def test_bad_rows_and_heads_are_refused():
    with pytest.raises(ValueError):
        GaugeRows(0)
    with pytest.raises(ValueError):
        GaugeRows(5)
    rows = GaugeRows(1)
    with pytest.raises(ValueError):
        rows.add(-1, 0, 1)
    with pytest.raises(OverflowError):
        rows.add(0, 0, 2**63)
    rows.add(1, 0, 1)
    with pytest.raises(IndexError):
        rows.text(0, b"m", [b'topic="a",'])     # head 1 of 1
    with pytest.raises(TypeError):
        rows.text(0, b"m", [b'topic="a",', 'topic="b",'])
    with pytest.raises(IndexError):
        rows.text(1, b"m", [b"", b""])
    assert rows.text(0, b"m", [b"", b'topic="b",']) == b'm{topic="b",partition="0"} 1\n'


def test_process_figures_are_the_librarys_families_and_count_descriptors():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    ProcessCPUCollector(registry=ours)
    ProcessCollector(registry=theirs)

    def families(registry):
        return {f.name: (f.type, f.documentation, [s.name for s in f.samples])
                for f in registry.collect()}

    assert families(ours) == families(theirs)

    def open_fds():
        return next(s.value for f in ours.collect() for s in f.samples
                    if s.name == "process_open_fds")

    before = open_fds()
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(50)]
    try:
        assert open_fds() == before + 50
    finally:
        for fd in fds:
            os.close(fd)


def test_log_rows_carry_each_logs_figures_and_pause_every_n(tmp_path):
    """add_log_rows over real logs (several segments for some): size, log end offset, log
    start offset and segment count per log, a head per topic, and the pause cadence."""
    logs = []
    for topic, count in (("a", 3), ('b"q', 2)):
        for p in range(count):
            lg = open_log(tmp_path / f"{topic}-{p}", segment_bytes=200)
            append_n(lg, 2 + 3 * p, records=2, value_size=20)
            logs.append(lg)
    try:
        rows, heads, pauses = GaugeRows(4), LabelHeads(), []
        made = add_log_rows(rows, heads.index, heads.maker(
            lambda t: f'topic="{label_value(t)}",'), logs, lambda: pauses.append(1), 2)
        assert made == len(rows) == 5 and len(pauses) == 3
        assert heads.texts == [b'topic="a",', b'topic="b\\"q",']
        text = b"".join(rows.text(c, b"m%d" % c, heads.texts) for c in range(4)).decode()
        got = {(s.name, s.labels["topic"], int(s.labels["partition"])): s.value
               for f in text_parse(text) for s in f.samples}
        for lg in logs:
            key = (lg.topic, lg.partition)
            assert got[("m0", *key)] == sum(s.size for s in lg.segments) > 0
            assert got[("m1", *key)] == lg.log_end_offset > 0
            assert got[("m2", *key)] == lg.log_start_offset == 0
            assert got[("m3", *key)] == len(lg.segments)
        assert max(got[("m3", lg.topic, lg.partition)] for lg in logs) > 1
    finally:
        for lg in logs:
            lg.close()


def test_offset_rows_lag_from_remote_high_watermarks_and_unknown_ones():
    """add_offset_rows for partitions this broker does not host: the lag from the remote
    high watermarks where one is known (never below 0), none where not, and the sums."""
    remote = RemoteHighWatermarks(broker=None)
    remote._values = {("t", 0): 10, ("t", 1): 3, ("u", 0): 7}
    offsets = [(("t", 0), OffsetAndMetadata(4)), (("t", 1), OffsetAndMetadata(5)),
               (("t", 2), OffsetAndMetadata(1)), (("u", 0), OffsetAndMetadata(0))]
    current, lag, heads, sums = GaugeRows(1), GaugeRows(1), LabelHeads(), {}
    add_offset_rows(current, lag, heads.index, heads.maker(lambda t: f'topic="{t}",'),
                    offsets, HostedWatermarks(), remote, sums, lambda: None, 32)
    assert current.text(0, b"c", heads.texts) == (
        b'c{topic="t",partition="0"} 4\nc{topic="t",partition="1"} 5\n'
        b'c{topic="t",partition="2"} 1\nc{topic="u",partition="0"} 0\n')
    assert lag.text(0, b"l", heads.texts) == (
        b'l{topic="t",partition="0"} 6\nl{topic="t",partition="1"} 0\n'
        b'l{topic="u",partition="0"} 7\n')
    assert sums == {"t": 6, "u": 7}
    no_remote = GaugeRows(1)
    add_offset_rows(GaugeRows(1), no_remote, {}, heads.maker(lambda t: ""), offsets,
                    HostedWatermarks(), None, {}, lambda: None, 32)
    assert len(no_remote) == 0


def test_offset_rows_are_ordered_by_topic_and_partition_whatever_the_order_given():
    """Offsets handed over in any order come out as sorted() orders their keys (topics
    by code point, then partitions), lag rows too; a second group's rows in the same
    GaugeRows are ordered among themselves and the first group's stay as they were."""
    remote = RemoteHighWatermarks(broker=None)
    topics = ["b", "a", "\u00fc", 'we"ird', "B", "a0"]
    keys = [(t, p) for t in topics for p in (0, 1, 2, 9, 10, 100, 2**31 - 1)]
    remote._values = {k: 50 for k in keys[::2]}
    current, lag = GaugeRows(1), GaugeRows(1)
    shared: list[bytes] = []
    expected_current, expected_lag = [], []
    for group, seed in (("g1", 1), ("g0", 2)):
        offsets = [(k, OffsetAndMetadata(i)) for i, k in enumerate(keys)]
        random.Random(seed).shuffle(offsets)
        heads, sums = LabelHeads(shared), {}
        add_offset_rows(current, lag, heads.index, heads.maker(
            lambda t, g=group: f'consumergroup="{g}",topic="{label_value(t)}",'),
            offsets, HostedWatermarks(), remote, sums, lambda: None, 4)
        for (t, p), committed in sorted(offsets):
            label = f'consumergroup="{group}",topic="{label_value(t)}",partition="{p}"'
            expected_current.append(f"c{{{label}}} {committed.offset}\n")
            if (t, p) in remote._values:
                expected_lag.append(f"l{{{label}}} {max(0, 50 - committed.offset)}\n")
        assert sums == {t: sum(max(0, 50 - c.offset) for (tt, _), c in offsets
                               if tt == t and (tt, _) in remote._values) for t in topics}
    assert current.text(0, b"c", shared).decode() == "".join(expected_current)
    assert lag.text(0, b"l", shared).decode() == "".join(expected_lag)


def test_offset_figure_rows_are_the_offset_rows_of_the_same_offsets():
    """add_offset_figure_rows over a group's OffsetFigures writes what add_offset_rows
    writes over its dict: two groups in the same GaugeRows, offsets committed in any order
    and some dropped, of hosted partitions (one offline), partitions led elsewhere (with
    and without a remote high watermark) and partitions no broker has; rows, lag, sums."""
    marks = HostedWatermarks()
    for p in range(0, 40, 2):
        marks.add("a", p, 30 + p, offline=p == 6)
    marks.add("\u00fc", 1, 5)
    remote = RemoteHighWatermarks(broker=None)
    remote._values = {("a", p): 45 for p in range(1, 40, 4)}
    remote._values.update({("b", p): 20 for p in range(0, 9, 2)})
    texts = {}
    for use_figures in (False, True):
        current, lag, shared, by_group = GaugeRows(1), GaugeRows(1), [], {}
        for group, seed in (("g1", 3), ("g0", 4)):
            keys = ([("a", p) for p in range(40)] + [("b", p) for p in range(9)]
                    + [("\u00fc", 1), ('we"ird', 2**31 - 1)])
            random.Random(seed).shuffle(keys)
            g = GroupMetadata(group)
            for i, (t, p) in enumerate(keys):
                g.commit_offset(t, p, OffsetAndMetadata((i * 7) % 50))
            for t, p in keys[::5]:
                g.remove_offset(t, p)
            heads, sums = LabelHeads(shared), {}
            new_head = heads.maker(
                lambda t, g=group: f'consumergroup="{g}",topic="{label_value(t)}",')
            if use_figures:
                n = add_offset_figure_rows(current, lag, heads.index, new_head,
                                           g.offset_figures, marks, remote, sums,
                                           lambda: None, 4)
                assert n == len(g.offsets)
            else:
                add_offset_rows(current, lag, heads.index, new_head,
                                g.offsets.copy().items(), marks, remote, sums, lambda: None,
                                4)
            by_group[group] = sums
        texts[use_figures] = (current.text(0, b"c", shared), lag.text(0, b"l", shared),
                              by_group)
    assert texts[True] == texts[False]
    assert texts[True][0].count(b"\n") == 2 * 40 and texts[True][1].count(b"\n") > 10


def _python_replica_counts(parts, min_isr, now_ms, max_timeout_ms):
    """The replica manager's gauges as the collector computed them in Python."""
    leaders = under = under_min = offline = late = 0
    for p in parts:
        if p.offline:
            offline += 1
            continue
        if not p.is_leader:
            continue
        leaders += 1
        if p.producer_state.has_late_transaction(now_ms, max_timeout_ms):
            late += 1
        isr = len(p.isr)
        under += isr < len(p.replicas)
        under_min += isr < min_isr[p.topic]
    return leaders, under, under_min, offline, late


def test_replica_counts_are_the_python_walks_over_real_partitions():
    """replica_counts over real Partition objects of every kind (single node, cluster
    leaders with a full or shrunk ISR, followers, offline ones, open transactions late
    and not): the Python walk's figures, min.insync.replicas asked once per topic, and
    the pause cadence."""
    now, max_timeout = 10**12, 60_000
    parts = [Partition("solo", i, None, 0, [0]) for i in range(3)]
    for i in range(12):
        p = Partition("replicated", i, None, 1, [1, 2, 3], local_id=1)
        if i % 3:
            p.leader_id = 1
            p.isr = [1, 2, 3][:i % 4 or 1]
        else:
            p.leader_id = 2  # a follower here
        parts.append(p)
    parts[5].offline = parts[6].offline = True
    for p, last in ((parts[4], now - max_timeout - LATE_TRANSACTION_BUFFER_MS - 1),
                    (parts[7], now - 1), (parts[1], 1)):
        entry = ProducerStateEntry(7, 0)
        entry.last_timestamp = last
        p.producer_state.producers[7] = entry
        p.producer_state.ongoing[0] = 7
    min_isr = {"solo": 1, "replicated": 2}
    asked, pauses = [], []

    def min_isr_of(topic):
        asked.append(topic)
        return min_isr[topic]

    want = _python_replica_counts(parts, min_isr, now, max_timeout)
    got = replica_counts(parts, {}, min_isr_of, now, max_timeout, lambda: pauses.append(1), 4)
    assert got == want
    leaders, under, under_min, offline, late = got
    assert leaders and under and under_min and offline == 2 and late == 2  # every kind met
    assert sorted(asked) == ["replicated", "solo"] and len(pauses) == 4
    with pytest.raises(ValueError):
        replica_counts(parts, {}, min_isr_of, now, max_timeout, lambda: None, 0)


def test_offline_partitions_counts_leaderless_and_dead_leaders():
    """offline_partitions: every partition counted; offline those without a leader (-1)
    or whose leader is not live; the pause before every `every`-th partition."""
    states = [[PartitionState(replicas=[0, 1], leader=leader) for leader in (0, 1, -1)],
              [], [PartitionState(replicas=[2], leader=2)] * 4]
    pauses = []
    assert offline_partitions(states, {0, 2}, lambda: pauses.append(1), 3) == (7, 2)
    assert len(pauses) == 3
    assert offline_partitions(iter(states), frozenset(), lambda: None, 1) == (7, 7)


def test_offset_rows_take_hosted_watermarks_from_the_replica_walk(tmp_path):
    """replica_counts notes each hosted partition's high watermark (its real log's) and
    the offline ones; add_offset_rows then reads the lag as the Python rule did from the
    Partitions: a hosted partition's log (never the remote figure), none for an offline
    one, the remote figure only for a partition not hosted here (any number a client may
    commit, negative or beyond every hosted one)."""
    parts = []
    for i in range(3):
        lg = open_log(tmp_path / f"t-{i}")
        append_n(lg, i + 2, records=2)
        parts.append(Partition("t", i, lg, 0, [0]))
    parts[2].offline = True
    marks = HostedWatermarks()
    replica_counts(parts, {}, lambda t: 1, 0, 0, lambda: None, 16, marks)
    try:
        assert [marks.get("t", i) for i in range(4)] == [4, 6, OFFLINE, None]
        assert marks.get("u", 0) is None and marks.get("t", -1) is None
        remote = RemoteHighWatermarks(broker=None)
        remote._values = {("t", 0): 100, ("t", 2): 100, ("t", 7): 9, ("t", -1): 3,
                          ("t", 2**31 - 1): 8, ("u", 0): 5}
        offsets = [(k, OffsetAndMetadata(1)) for k in remote._values]
        current, lag, heads, sums = GaugeRows(1), GaugeRows(1), LabelHeads(), {}
        add_offset_rows(current, lag, heads.index, heads.maker(lambda t: f'topic="{t}",'),
                        offsets, marks, remote, sums, lambda: None, 2)
        assert len(current) == 6
        assert lag.text(0, b"l", heads.texts) == (
            b'l{topic="t",partition="-1"} 2\nl{topic="t",partition="0"} 3\n'
            b'l{topic="t",partition="7"} 8\nl{topic="t",partition="2147483647"} 7\n'
            b'l{topic="u",partition="0"} 4\n')
        assert sums == {"t": 20, "u": 4}
    finally:
        for p in parts:
            p.log.close()


@contextlib.contextmanager
def loop_threads():
    """Two threads whose CPU clocks stand for a request loop's: `idle` waits (its clock
    still) and is started; `running` keeps its clock moving once the test starts it
    (hashing a large block releases the lock: it runs whoever holds it). Both end on
    exit."""
    stop, block = threading.Event(), bytes(1 << 20)

    def run():
        while not stop.is_set():
            hashlib.sha256(block).digest()

    idle = threading.Thread(target=stop.wait)
    running = threading.Thread(target=run)
    idle.start()
    # (until its clock stands still: a thread just started still runs its start-up,
    # which a test reading its clock would take for a loop at work)
    clock = time.pthread_getcpuclockid(idle.ident)
    deadline = time.monotonic() + 10
    before = time.clock_gettime_ns(clock)
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = time.clock_gettime_ns(clock)
        if now == before:
            break
        before = now
    try:
        yield idle, running
    finally:
        stop.set()
        idle.join(10)
        if running.is_alive():
            running.join(10)


def test_hand_over_sleeps_while_the_loops_thread_runs_and_stops_once_it_rests():
    """hand_over sleeps with the interpreter lock released: once when the loop's thread
    rests (its clock does not move over the sleep), `most` times while it keeps running,
    and answers -1 for a thread that has ended."""
    with loop_threads() as (idle, running):
        running.start()
        for _ in range(5):
            sleeps, slept_ns = hand_over(time.pthread_getcpuclockid(idle.ident), 100_000, 4)
            assert sleeps == 1 and slept_ns >= 100_000
        # (on a loaded machine the running thread may miss a whole sleep now and then)
        for _ in range(20):
            sleeps, slept_ns = hand_over(time.pthread_getcpuclockid(running.ident),
                                         1_000_000, 4)
            assert 1 <= sleeps <= 4 and slept_ns >= sleeps * 1_000_000
            if sleeps == 4:
                break
        assert sleeps == 4
    release = threading.Event()
    ended = threading.Thread(target=release.wait)
    ended.start()
    clock = time.pthread_getcpuclockid(ended.ident)
    release.set()
    ended.join(10)
    for _ in range(100):  # (the kernel lets the thread go a moment after it returns)
        if hand_over(clock, 1000, 4)[0] == -1:
            break
        time.sleep(0.01)
    assert hand_over(clock, 1000, 4)[0] == -1


def test_a_scrapes_python_rests_while_the_loop_runs_and_not_while_it_idles():
    """set_scrape_loop with the loop's clock makes this thread's Python rest (its profile
    hook) whenever the loop's thread has run since the hook last looked, and never while
    that thread idles; set_scrape_loop() removes the hook, and leaves a profiler someone
    else set alone."""
    def work():  # calls: the profile hook's events
        return sum(abs(-i) for i in range(3000))

    with loop_threads() as (idle, running):
        set_scrape_loop(time.pthread_getcpuclockid(idle.ident), 100_000, 4)
        try:
            work()
            assert scrape_rests() == 0
        finally:
            set_scrape_loop()
        running.start()
        set_scrape_loop(time.pthread_getcpuclockid(running.ident), 100_000, 4)
        try:
            # (the running thread moves its clock between its hashes only once it has the
            # lock: on a loaded machine it may wait for it past one round of work)
            for _ in range(200):
                work()
                if scrape_rests():
                    break
            assert scrape_rests() > 0
        finally:
            set_scrape_loop()
    assert sys.getprofile() is None
    seen = []
    sys.setprofile(lambda frame, event, arg: seen.append(event))
    try:
        set_scrape_loop()
        work()
    finally:
        sys.setprofile(None)
    assert "call" in seen


def test_polite_epoll_wait_returns_epolls_events_and_rests_while_the_loop_runs():
    """polite_epoll_wait answers what select.epoll's poll answers (a readable and a
    writable socket, nothing within a zero timeout); with events and a thread that ran
    during the wait and keeps running, it rests (`most` sleeps at most) before it returns,
    and does not rest for a thread that did not run or without a clock."""
    a, b = socket.socketpair()
    ep = select.epoll()
    with a, b, ep, loop_threads() as (idle, running):
        ep.register(a.fileno(), select.EPOLLIN)
        assert polite_epoll_wait(ep.fileno(), 0, 8, None, 1000, 4) == []
        b.sendall(b"x")
        ep.register(b.fileno(), select.EPOLLOUT)
        expected = sorted(ep.poll(0, 8))
        assert sorted(polite_epoll_wait(ep.fileno(), 1000, 8, None, 1000, 4)) == expected
        assert expected == [(a.fileno(), select.EPOLLIN), (b.fileno(), select.EPOLLOUT)]
        # an idle thread's clock does not move: no rest (at most one sleep to see it)
        t0 = time.monotonic()
        assert sorted(polite_epoll_wait(ep.fileno(), 1000, 8,
                                        time.pthread_getcpuclockid(idle.ident),
                                        200_000_000, 4)) == expected
        assert time.monotonic() - t0 < 0.2, "rested for a thread that did not run"
        running.start()
        ep.unregister(b.fileno())
        # (on a loaded machine the running thread may miss a whole sleep now and then)
        for _ in range(20):
            a.recv(100)  # (nothing ready: the wait waits until the byte comes)
            sent = []

            def send(sent=sent):
                sent.append(time.monotonic())
                b.sendall(b"y")
            later = threading.Timer(0.01, send)
            later.start()
            assert polite_epoll_wait(ep.fileno(), 5000, 8,
                                     time.pthread_getcpuclockid(running.ident),
                                     2_000_000, 4) == [(a.fileno(), select.EPOLLIN)]
            returned = time.monotonic()
            later.join(10)
            if returned - sent[0] >= 4 * 0.002:
                break
        else:
            raise AssertionError("no rest while the thread kept running")


def _samples(text: bytes, openmetrics: bool):
    parse = om_parse if openmetrics else text_parse
    return [(f.name, f.documentation, f.type, s.name, sorted(s.labels.items()), float(s.value))
            for f in parse(text.decode() + ("# EOF\n" if openmetrics else "")) for s in f.samples]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_counter_lines_are_the_librarys_counter(openmetrics):
    """CounterLines: the broker's figure (no label) first, then a row per topic; the same
    HELP and TYPE lines as the library's CounterMetricFamily and the same samples."""
    topics = ["orders", 'we"ird\\topic', "new\nline", "ü"]
    doc = 'Records "in" \\ per\ntopic.'
    rows, heads = GaugeRows(1, partitioned=False), []
    family = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin", doc,
                                 labels=["topic"])
    family.samples.append(Sample("kafka_server_brokertopicmetrics_messagesin_total", {}, 12345,
                                 None, None))
    for i in range(40):
        topic, v = f"{topics[i % 4]}{i}", EXTREMES[i % len(EXTREMES)] & (2**63 - 1)
        heads.append(f'topic="{label_value(topic)}"'.encode())
        rows.add(i, -1, v)
        family.add_metric([topic], v)
    head, body = CounterLines("kafka_server_brokertopicmetrics_messagesin", doc, rows, 0, heads,
                              12345).chunks(openmetrics)
    theirs = (om_latest if openmetrics else generate_latest)(_Registry(family))
    if openmetrics:
        theirs = theirs[:-len(b"# EOF\n")]
    ours = head + body
    assert [a for a in ours.splitlines() if a.startswith(b"#")] == \
        [b for b in theirs.splitlines() if b.startswith(b"#")]
    assert _samples(ours, openmetrics) == _samples(theirs, openmetrics)
    # no topics yet: the broker's figure alone
    head, body = CounterLines("c", "C.", GaugeRows(1, partitioned=False), 0, [], 0) \
        .chunks(openmetrics)
    lone = CounterMetricFamily("c", "C.", value=0)
    theirs = (om_latest if openmetrics else generate_latest)(_Registry(lone))
    assert _samples(head + body, openmetrics) == _samples(
        theirs[:-len(b"# EOF\n")] if openmetrics else theirs, openmetrics)


@pytest.mark.parametrize("openmetrics", [False, True])
def test_request_series_are_the_librarys_counter_and_histogram(openmetrics):
    """The requests counter and the request-time histogram the collector writes itself:
    the samples the library writes for the same CounterMetricFamily and
    HistogramMetricFamily (cumulative buckets, le labels, _count, _sum)."""
    requests = RequestMetrics()
    rng = random.Random(7)
    for key in ((0, 7), (0, 9), (1, 11), (3, 12), (18, 3), (999, 1)):
        s = requests.stats(key)
        s.count = rng.randrange(1, 10**9)
        s.time_ms = rng.random() * 10**7
        s.buckets = [rng.randrange(0, 10**6) for _ in s.buckets]
    collector = BrokerCollector(None, 0)
    ours = b"".join(b"".join(lines.chunks(openmetrics))
                    for lines in collector._request_series(requests))
    counter = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                  "Requests received, per API and version.",
                                  labels=["request", "version"])
    per_api = {}
    for (key, version), s in sorted(requests.by_request.items()):
        counter.add_metric([request_name(key), str(version)], s.count)
        total, buckets = per_api.setdefault(request_name(key), [0.0, [0] * len(s.buckets)])
        per_api[request_name(key)][0] = total + s.time_ms
        for i, n in enumerate(s.buckets):
            buckets[i] += n
    hist = HistogramMetricFamily(
        "kafka_network_requestmetrics_totaltimems", "Request time in ms, from the frame's "
        "hand-off to the handler until the response is queued for writing.", labels=["request"])
    for name, (total, buckets) in sorted(per_api.items()):
        cumulative = [sum(buckets[:i + 1]) for i in range(len(buckets))]
        hist.add_metric([name], [(repr(float(b)), c) for b, c in
                                 zip(TIME_BUCKETS_MS, cumulative[:-1], strict=True)]
                        + [("+Inf", cumulative[-1])], total)
    theirs = b"".join((om_latest if openmetrics else generate_latest)(_Registry(f))
                      .removesuffix(b"# EOF\n") for f in (counter, hist))
    assert [a for a in ours.splitlines() if a.startswith(b"#")] == \
        [b for b in theirs.splitlines() if b.startswith(b"#")]
    assert _samples(ours, openmetrics) == _samples(theirs, openmetrics)
    assert len(_samples(ours, openmetrics)) == 6 + 5 * (len(TIME_BUCKETS_MS) + 3)


class _Recorder:
    """Takes a collector's write() calls (gauge, counter, labelled), to give them again
    to FamilyText and LibraryFamilies (the same figures to both)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, method):
        return lambda *args: self.calls.append((method, args))

    def replay(self, out):
        for method, args in self.calls:
            getattr(out, method)(*args)
        return out


@pytest.mark.parametrize("openmetrics", [False, True])
def test_every_family_a_broker_writes_as_text_is_the_librarys_text(tmp_path, openmetrics):
    """A real broker's collectors that write their families as text (the process's, the
    GC's and the broker's own, with a topic): what FamilyText writes of their figures is
    the library encoder's text of the families LibraryFamilies makes of the same
    figures, and the registry's collect() yields those families; awkward help and label
    values too (quotes, backslashes, newlines, labels to be sorted), and integers past
    the float's exact range."""
    import asyncio

    from fastlog.server.broker import BrokerServer
    from fastlog.server.metric_text import FamilyText, LibraryFamilies
    from fastlog.server.metrics import BrokerMetrics
    from tests.replication.test_replica_manager import _config

    encoder = om_latest if openmetrics else generate_latest
    recorder = _Recorder()

    async def write():
        b = BrokerServer(_config(1, tmp_path / "d1"))
        await b.startup()
        try:
            await b.create_topic('t"1', 3, 1, {})
            m = BrokerMetrics(b)
            names = {f.name for f in m.registry.collect()}
            for collector in (m.process, m.gc_stats, m.collector):
                collector.write(recorder)
            return names
        finally:
            await b.shutdown()

    collected = asyncio.run(write())
    recorder.labelled("gauge", "fastlog_odd", 'Help "with"\\ a\nnewline.', ("b", "a"),
                      [(('q"\\\n', "x"), 1.5), (("", "y"), float("inf")),
                       (("z", "w"), 2**60), (("n", "m"), -(2**53) + 1)])
    recorder.counter("fastlog_odd_count", "Counted.", 10**6)
    recorder.gauge("fastlog_odd_nan", "Not a number.", float("nan"))
    families = recorder.replay(LibraryFamilies()).families
    assert collected <= {f.name for f in families} | {"python_info"}
    assert len(families) > 40
    theirs = b"".join(encoder(_Registry(f)).removesuffix(b"# EOF\n") for f in families)
    assert recorder.replay(FamilyText(openmetrics)).text() == theirs


def test_a_stretch_without_the_lock_rests_after_the_loop_ran_during_it():
    """While a thread scrapes (set_scrape_loop), the compiled steps' stretches without the
    interpreter lock (here GaugeRows.text) end with a rest when the loop's thread ran
    during the stretch, none when it rested throughout, and none outside a scrape."""
    rows = GaugeRows(1)
    for i in range(20_000):
        rows.add(0, i, i)
    with loop_threads() as (idle, running):
        running.start()
        set_scrape_loop(time.pthread_getcpuclockid(idle.ident), 50_000, 4)
        for _ in range(5):
            rows.text(0, b"m", [b'topic="a",'])
        assert scrape_rests() == 0
        set_scrape_loop(time.pthread_getcpuclockid(running.ident), 50_000, 4)
        # (each text is a stretch of 20,000 lines: the running thread moves its clock in
        # it, but on a loaded machine it may be off its core throughout some of them)
        for _ in range(500):
            rows.text(0, b"m", [b'topic="a",'])
            if scrape_rests():
                break
        assert scrape_rests() >= 1
        set_scrape_loop()
        rows.text(0, b"m", [b'topic="a",'])
        assert scrape_rests() == 0


def test_send_polite_writes_every_chunk_in_order_to_a_reader():
    """send_polite hands the socket every chunk, in order (more than one sendmsg's worth
    of pieces, and more bytes than its buffer holds, so it waits for the reader), and
    returns their length."""
    chunks = [bytes([i % 251]) * (1 + i * 37 % 5000) for i in range(1500)] + [b""]
    whole = b"".join(chunks)
    a, b = socket.socketpair()
    got = bytearray()

    def read():
        while len(got) < len(whole):
            data = b.recv(1 << 16)
            if not data:
                return
            got.extend(data)

    reader = threading.Thread(target=read)
    with a, b:
        a.setblocking(False)
        reader.start()
        assert send_polite(a.fileno(), chunks, 10_000, 10_000) == len(whole)
        reader.join(10)
    assert bytes(got) == whole


def test_send_polite_stops_at_a_reader_that_reads_nothing_and_at_a_closed_peer():
    """A peer that does not read gets what the socket's buffer takes (a prefix of the
    chunks) once a stall has lasted its bound, well within the whole wait's; a closed peer
    ends the write without an exception; only bytes are written."""
    chunk = bytes(range(256)) * 4096
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        started = time.monotonic()
        sent = send_polite(a.fileno(), [chunk] * 8, 60_000, 50)
        waited = time.monotonic() - started
        assert 0.05 <= waited < 30  # (one stall of 50 ms, not the minute)
        assert 0 < sent < 8 * len(chunk)
        b.setblocking(False)
        got = bytearray()
        with contextlib.suppress(BlockingIOError):
            while len(got) < sent:
                got.extend(b.recv(1 << 20))
        assert bytes(got) == (chunk * 8)[:sent]
        b.close()
        assert send_polite(a.fileno(), [chunk] * 8, 50, 50) < 8 * len(chunk)
        with pytest.raises(TypeError):
            send_polite(a.fileno(), ["text"], 50, 50)
