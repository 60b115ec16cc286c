"""CPU of one /metrics collection (fastlog.server.metrics.BrokerMetrics.render) over a
synthetic broker state of --partitions partitions: one topic, every partition led here
with a one-segment log, and one group with a committed offset in each (so the lag
series are as many as the partitions). The state is plain objects shaped like the
broker's parts (what the collector reads of them, nothing else), so partition counts
beyond what this machine's open-file limit lets a real broker host can be measured;
perf/metrics_scrape.py measures a real broker. Prints one row per rep and a JSON line.

Beside each collection a thread stands in for the request loop: it sleeps 1 ms at a
time (its epoll wait) and notes how late it woke, i.e. how long it waited for the
interpreter lock the collection held; the same thread's lateness with no collection
running, over as many wake-ups, is the anchor.

--busy-loop instead makes the registry on a thread that then runs Python throughout (a
request loop that never waits), as BrokerMetrics is made on the broker's loop, and
prints the wall time of each collection beside it: a loop that busy hands the lock over
only at the interpreter's switch interval.

    .venv/bin/python perf/bench_metrics.py [--partitions 10000] [--reps 5] [--busy-loop]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace as NS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastlog.server.group._offset_figures import OffsetFigures  # noqa: E402
from fastlog.server.log._figures import LogFigures  # noqa: E402

from fastlog.metadata import PartitionState, TopicState  # noqa: E402
from fastlog.server.fetch_session import FetchSessionCache  # noqa: E402
from fastlog.server.group.group import GroupState  # noqa: E402
from fastlog.server.metrics import BrokerMetrics  # noqa: E402
from fastlog.server.partition import PartitionCounts  # noqa: E402
from fastlog.server.request_metrics import RequestMetrics  # noqa: E402
from fastlog.server.topic_stats import BrokerTopicStats  # noqa: E402
from perf.metrics_scrape import quantile  # noqa: E402

NL = b"\n"


def synthetic_broker(n: int, offset_figures: bool = True):
    """The synthetic state (see the module comment); without `offset_figures` the group
    has its dict of offsets only (its rows then come from the dict, as before the group
    kept them in C memory)."""
    topic = "many"
    parts, logs, offsets = {}, [], {}
    for i in range(n):
        log = NS(topic=topic, partition=i, segments=(NS(size=1 << 20),),
                 log_end_offset=1000 + i, log_start_offset=0, high_watermark=1000 + i)
        logs.append(log)
        parts[(topic, i)] = NS(topic=topic, partition=i, key=(topic, i), log=log,
                               offline=False, counts=None, counted=None,
                               local_id=None, leader_id=0, is_leader=True, isr=[0],
                               replicas=[0], producer_state=NS(
                                   ongoing={}, has_late_transaction=lambda now, limit: False))
        offsets[(topic, i)] = NS(offset=500)
    counts = PartitionCounts()  # (the replica manager's, kept as its partitions change)
    for p in parts.values():
        counts.host(p)
    figures = LogFigures()  # (the log manager's: each log's figures in its slot)
    for log in logs:
        slot = figures.take(log.topic, log.partition)
        log._figures, log._figure_slot = figures, slot  # (as the log keeps them)
        figures.put(slot, sum(s.size for s in log.segments), log.log_end_offset,
                    log.log_start_offset, len(log.segments), log.high_watermark)
    group = NS(group_id="g", state=GroupState.STABLE, members={}, offsets=offsets)
    if offset_figures:  # (the group's: its offsets in C memory, as GroupMetadata keeps them)
        group.offset_figures = OffsetFigures()
        group.offset_figures.rebuild(offsets)
    state = TopicState(topic, "A" * 22, {i: PartitionState(replicas=[0], leader=0, isr=[0])
                                         for i in range(n)}, {})
    stats = BrokerTopicStats()
    stats.topic_stats(topic).messages_in = 1000 * n
    requests = RequestMetrics()
    for key in ((0, 7), (1, 11), (3, 9), (18, 3)):
        requests.stats(key).count = 1000
    return NS(
        topic_stats=stats, request_metrics=requests, socket_servers=[], bound=[],
        stopping=False, _started=True, node_id=0,
        config={"transaction.max.timeout.ms": "900000"}, cluster=None, is_controller=lambda: True,
        replica_manager=NS(partitions=parts, counts=counts,
                           metrics={"isr_shrinks": 0, "isr_expands": 0}),
        log_config=lambda t: NS(min_insync_replicas=1),
        metadata=NS(topic_names=lambda: [topic], topic=lambda name: state, brokers=dict,
                    topics=lambda every={topic: state}: every),
        log_manager=NS(all_logs=lambda: list(logs), log_dirs=["/data"], figures=figures,
                       dir_failure_channel=NS(offline=set()),
                       verification_stats={"passes": 0}),
        group_coordinator=NS(groups={"g": group},
                             partition_load_time=lambda: (float("nan"), float("nan"))),
        quotas=NS(throttle_ms_total={}), fetch_manager=NS(cache=FetchSessionCache(1000)),
    )


def lateness(stop: threading.Event, out: list[float]) -> None:
    """Sleeps 1 ms at a time until `stop`, appending how late (ms) each wake-up was."""
    while not stop.is_set():
        t0 = time.perf_counter()
        time.sleep(0.001)
        out.append((time.perf_counter() - t0 - 0.001) * 1000)


def busy_loop(partitions: int, reps: int) -> int:
    """See --busy-loop in the module comment."""
    made, stop = [], threading.Event()

    def loop():
        made.append(BrokerMetrics(synthetic_broker(partitions)))
        n = 0
        while not stop.is_set():
            n += sum(range(200))

    t = threading.Thread(target=loop)
    t.start()
    try:
        for _ in range(6000):  # at most a minute for the registry
            if made:
                break
            time.sleep(0.01)
        walls = []
        for rep in range(reps):
            c0, t0 = time.thread_time(), time.perf_counter()
            body, _ = made[0].render(None)
            cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
            walls.append(wall)
            print(f"rep {rep}: beside a busy loop {wall * 1000:.0f} ms wall, "
                  f"{cpu * 1000:.0f} ms CPU, {len(body) / 1e6:.2f} MB", flush=True)
    finally:
        stop.set()
        t.join(10)
    print(json.dumps({"partitions": partitions, "busy_loop_collect_wall_ms_median":
                      round(statistics.median(walls) * 1000, 1)}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--busy-loop", action="store_true",
                    help="collect beside a loop thread that runs Python throughout")
    ap.add_argument("--no-offset-figures", action="store_true",
                    help="the group's rows from its dict of offsets (the walk before the "
                         "group kept them in C memory)")
    args = ap.parse_args()
    if args.busy_loop:
        return busy_loop(args.partitions, args.reps)
    metrics = BrokerMetrics(synthetic_broker(args.partitions,
                                             offset_figures=not args.no_offset_figures))
    rows, busy, quiet = [], [], []
    for rep in range(args.reps):
        stop, late = threading.Event(), []
        waker = threading.Thread(target=lateness, args=(stop, late))
        waker.start()
        c0, t0 = time.thread_time(), time.perf_counter()
        body, _ = metrics.render(None)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
        stop.set()
        waker.join()
        busy.extend(late)
        rows.append((cpu, wall))
        # the anchor: as many wake-ups with nothing else running
        stop, alone = threading.Event(), []
        waker = threading.Thread(target=lateness, args=(stop, alone))
        waker.start()
        while len(alone) < len(late) and waker.is_alive():
            time.sleep(0.01)
        stop.set()
        waker.join()
        quiet.extend(alone)
        print(f"rep {rep}: {cpu * 1000:.0f} ms CPU, {wall * 1000:.0f} ms wall, "
              f"{len(body) / 1e6:.2f} MB, {body.count(NL)} lines; a 1 ms sleeper woke late "
              f"by p50 {quantile(late, .5):.2f} / max {max(late, default=0):.2f} ms "
              f"({len(late)} wake-ups)", flush=True)
    print(json.dumps({"partitions": args.partitions,
                      "collect_cpu_ms_median": round(statistics.median(r[0] for r in rows) * 1000, 1),
                      "collect_wall_ms_median": round(statistics.median(r[1] for r in rows) * 1000, 1),
                      "sleeper_late_ms_p50_p99_max_collecting": [
                          round(quantile(busy, .5), 3), round(quantile(busy, .99), 3),
                          round(max(busy, default=0), 3)],
                      "sleeper_late_ms_p50_p99_max_alone": [
                          round(quantile(quiet, .5), 3), round(quantile(quiet, .99), 3),
                          round(max(quiet, default=0), 3)]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
