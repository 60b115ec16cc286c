"""Broker CPU of one idle-ish consumer of many partitions, with and without fetch sessions.

A consumer of 1,000 partitions that see little traffic costs the broker a full Fetch every
poll without sessions (1,000 partitions parsed, read and answered); with KIP-227 sessions
the request and the answer carry only what changed. This script starts a fresh broker from
each given source tree in turn (each rep alternates them, as perf/ab_trees.py does), makes
a topic of --partitions partitions, runs kafka-python's consumer (it uses fetch sessions
when the broker creates them; librdkafka never does) assigned to all of them and a
producer writing --rate records/s to random partitions, and reads the broker's
utime+stime from /proc over --seconds after a warm-up. It prints one JSON line per run,
the medians of broker CPU per second for each tree, and each tree's ratio to the first.

With --wire it measures instead, in each tree's broker, the CPU of one Fetch of all the
partitions (max_wait 0, nothing new) sent --fetches times over a raw connection: without a
session, then as incremental fetches of one session (a tree without sessions answers
those with an error, and its incremental figure means nothing).

    git worktree add /tmp/base <commit> && (cd /tmp/base && python setup.py -q build_ext --inplace)
    .venv/bin/python perf/fetch_sessions.py base=/tmp/base new=. --reps 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402  (perf/compare.py: broker process helpers)


def _consume(bootstrap: str, topic: str, partitions: int, stop: threading.Event,
             counts: dict) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=200).values():
                counts["records"] += len(records)
    finally:
        consumer.close()


def _fetch_body(session_id: int, epoch: int, partitions) -> dict:
    parts = [{"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p in partitions]
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": "fs", "partitions": parts}] if parts else [],
            "forgotten_topics_data": [], "rack_id": ""}


def wire_run(tree: Path, name: str, opts) -> dict:
    from fastlog.protocol import ApiKey

    with tempfile.TemporaryDirectory(prefix="fastlog-fs-") as d:
        broker = compare.start_fastlog(Path(d), name, tree=tree)
        try:
            w = compare.raw_connection(broker)
            try:
                compare.create_topic_raw(w, "fs", opts.partitions)
                time.sleep(1.0)
                every = range(opts.partitions)
                c0 = broker.cpu_seconds()
                for _ in range(opts.fetches):
                    w.call(ApiKey.FETCH, 11, _fetch_body(0, -1, every))
                c1 = broker.cpu_seconds()
                sid = w.call(ApiKey.FETCH, 11, _fetch_body(0, 0, every)).session_id
                c2 = broker.cpu_seconds()
                for i in range(opts.fetches):
                    r = w.call(ApiKey.FETCH, 11, _fetch_body(sid, i + 1, ()))
                c3 = broker.cpu_seconds()
            finally:
                w.close()
        finally:
            broker.stop()
    return {"tree": name, "session_id": sid, "last_error": r.error_code,
            "full_fetch_ms": round((c1 - c0) * 1000 / opts.fetches, 3),
            "incremental_fetch_ms": round((c3 - c2) * 1000 / opts.fetches, 3)}


def one_run(tree: Path, name: str, opts) -> dict:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="fastlog-fs-") as d:
        broker = compare.start_fastlog(Path(d), name, tree=tree)
        stop = threading.Event()
        counts = {"records": 0}
        consumer = None
        try:
            admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
            admin.create_topics([NewTopic("fs", opts.partitions, 1)], timeout_ms=60_000)
            admin.close()
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
            consumer = threading.Thread(target=_consume, args=(
                broker.bootstrap, "fs", opts.partitions, stop, counts), daemon=True)
            consumer.start()
            rng = random.Random(7)
            sent = 0

            def produce_for(seconds: float) -> None:
                nonlocal sent
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    producer.send("fs", b"x" * 100, partition=rng.randrange(opts.partitions))
                    sent += 1
                    time.sleep(1.0 / opts.rate)

            produce_for(opts.warmup)
            c0, t0 = broker.cpu_seconds(), time.monotonic()
            produce_for(opts.seconds)
            c1, t1 = broker.cpu_seconds(), time.monotonic()
            producer.flush(10)
            producer.close(5)
            received = counts["records"]
        finally:
            stop.set()
            if consumer is not None:
                consumer.join(30)
            broker.stop()
    return {"tree": name, "broker_cpu_s_per_s": round((c1 - c0) / (t1 - t0), 4),
            "sent": sent, "received_by_end": received}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", metavar="NAME=PATH")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=10.0, help="records/s, all partitions")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--wire", action="store_true", help="per-fetch CPU over a raw connection")
    ap.add_argument("--fetches", type=int, default=300, help="fetches of each kind (--wire)")
    opts = ap.parse_args(argv)
    trees = compare.source_trees(opts.trees)
    if trees is None:
        return 2
    if (not 1 <= opts.reps <= 20 or not 1 <= opts.partitions <= 10_000
            or not 0.1 <= opts.rate <= 1000 or not 1 <= opts.seconds <= 600
            or not 0 <= opts.warmup <= 120 or not 10 <= opts.fetches <= 100_000):
        print("fetch_sessions.py: --reps 1-20, --partitions 1-10,000, --rate 0.1-1,000, "
              "--seconds 1-600, --warmup 0-120, --fetches 10-100,000", file=sys.stderr)
        return 2
    if opts.wire:
        runs: dict[str, list[dict]] = {}
        for rep in range(opts.reps):
            for name, path in trees.items():
                r = wire_run(path, name, opts)
                runs.setdefault(name, []).append(r)
                print(json.dumps({"rep": rep, **r}), flush=True)
        for name, rs in runs.items():
            full = statistics.median(r["full_fetch_ms"] for r in rs)
            inc = statistics.median(r["incremental_fetch_ms"] for r in rs)
            print(json.dumps({"tree": name, "median_full_fetch_ms": full,
                              "median_incremental_fetch_ms": inc,
                              "incremental_to_full": round(inc / full, 3) if full else None}))
        return 0
    per: dict[str, list[float]] = {}
    for rep in range(opts.reps):
        for name, path in trees.items():
            r = one_run(path, name, opts)
            per.setdefault(name, []).append(r["broker_cpu_s_per_s"])
            print(json.dumps({"rep": rep, **r}), flush=True)
    first = next(iter(trees))
    base = statistics.median(per[first])
    for name, vals in per.items():
        med = statistics.median(vals)
        print(json.dumps({"tree": name, "median_broker_cpu_s_per_s": round(med, 4),
                          "all": vals, f"ratio_to_{first}": round(med / base, 3) if base else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
