"""What transactions cost in throughput: broker CPU per record of librdkafka's
transactional producer against its idempotent one, and read_committed against
read_uncommitted consume, in one run.

Starts one fastlog-server (perf/compare.py's start_fastlog; broker CPU is its utime+stime
from /proc/PID/stat around each phase). Each rep, alternating: the idempotent producer
(enable.idempotence, linger.ms=5) sends --records records of 100 bytes to a fresh topic
and flushes; the transactional producer sends the same records as transactions of
--txn-records (begin, produce, commit_transaction) to another fresh topic. Then the
transactional topic is read to its end by a librdkafka consumer with
isolation.level=read_uncommitted and with read_committed, alternately (--reps times each,
the order flipped every rep; records/s from the first record received, and the broker's
CPU). Prints one line per phase, then a JSON line with the
medians: broker CPU us/record of each producer, `txn_vs_idempotent_cpu` = idempotent CPU
per record / transactional CPU per record (goal >= 0.8: at most 25% more CPU), records/s
of each isolation level and `read_committed_vs_uncommitted` (goal >= 0.95; `_best`: the
best rep of each, as the rate on this 2-core machine jumps between two levels whichever the
isolation), and the broker CPU us/record of each level. Every phase is
bounded by its counts and the clients' timeouts.

    .venv/bin/python perf/txn_throughput.py [--records 1000000] [--txn-records 1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import measure, start_fastlog  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

VALUE = b"x" * 100
CONSUME_TIMEOUT_S = 120


def _produce_all(p: Producer, topic: str, n: int) -> None:
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.05)


def produce_idempotent(bootstrap: str, topic: str, records: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5, "acks": "all"})
    _produce_all(p, topic, records)
    if p.flush(60):
        raise SystemExit("txn_throughput: idempotent records left unacknowledged")


def produce_transactions(bootstrap: str, topic: str, records: int, per_txn: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                  "transactional.id": f"perf-txn-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    left = records
    while left > 0:
        n = min(per_txn, left)
        p.begin_transaction()
        _produce_all(p, topic, n)
        p.commit_transaction(60)
        left -= n


def consume(bootstrap: str, topic: str, level: str, expected: int) -> float:
    """Read topic partition 0 from the start until `expected` records; records/s from the
    first record received (connecting and the first Fetch are not the isolation level's)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"perf-{uuid.uuid4().hex[:8]}",
                  "isolation.level": level, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.max.bytes": 8 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = None
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while got < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"txn_throughput: {level} read {got} of {expected} records "
                                 f"in {CONSUME_TIMEOUT_S} s")
            batch = c.consume(10_000, 0.5)
            if batch and start is None:
                start = time.perf_counter()
            got += sum(1 for m in batch if m.error() is None)
        return got / max(1e-9, time.perf_counter() - start)
    finally:
        c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="records per producer run")
    ap.add_argument("--txn-records", type=int, default=1000, help="records per transaction")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="every line is JSON")
    opts = ap.parse_args(argv)
    if not 1 <= opts.records <= 10_000_000 or not 1 <= opts.txn_records <= opts.records \
            or not 1 <= opts.reps <= 20:
        print("txn_throughput: --records must be 1 to 10,000,000, --txn-records 1 to "
              "--records and --reps 1 to 20", file=sys.stderr)
        return 2

    def say(line: dict) -> None:
        print(json.dumps(line) if opts.json else
              "  ".join(f"{k}={v}" for k, v in line.items()), flush=True)

    cpu = {"idempotent": [], "transactional": []}
    rate = {"read_uncommitted": [], "read_committed": []}
    read_cpu = {"read_uncommitted": [], "read_committed": []}
    with tempfile.TemporaryDirectory(prefix="fastlog-txn-perf-") as tmp:
        broker = start_fastlog(Path(tmp), "txn", extra=(
            "transaction.state.log.num.partitions=4",))
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for rep in range(opts.reps):
                topics = {mode: f"{mode}-{rep}" for mode in cpu}
                for f in admin.create_topics([NewTopic(t, 1, 1)
                                              for t in topics.values()]).values():
                    f.result(30)
                runs = {"idempotent": functools.partial(
                            produce_idempotent, broker.bootstrap, topics["idempotent"],
                            opts.records),
                        "transactional": functools.partial(
                            produce_transactions, broker.bootstrap, topics["transactional"],
                            opts.records, opts.txn_records)}
                for mode in (list(cpu) if rep % 2 == 0 else list(cpu)[::-1]):
                    t0 = time.perf_counter()
                    _, seconds, _ = measure(broker, runs[mode])
                    wall = time.perf_counter() - t0
                    us = seconds / opts.records * 1e6
                    cpu[mode].append(us)
                    say({"phase": f"produce {mode}", "rep": rep,
                         "records_per_s": round(opts.records / wall),
                         "broker_cpu_s": round(seconds, 3), "cpu_us_per_record": round(us, 3)})
                for level in (list(rate) if rep % 2 == 0 else list(rate)[::-1]):
                    rps, seconds, _ = measure(broker, functools.partial(
                        consume, broker.bootstrap, topics["transactional"], level,
                        opts.records))
                    rate[level].append(rps)
                    read_cpu[level].append(seconds / opts.records * 1e6)
                    say({"phase": f"consume {level}", "rep": rep, "records_per_s": round(rps),
                         "broker_cpu_s": round(seconds, 3),
                         "cpu_us_per_record": round(seconds / opts.records * 1e6, 3)})
        finally:
            broker.stop()
    idem, txn = statistics.median(cpu["idempotent"]), statistics.median(cpu["transactional"])
    ru, rc = statistics.median(rate["read_uncommitted"]), statistics.median(rate["read_committed"])
    print(json.dumps({"records": opts.records, "txn_records": opts.txn_records,
                      "reps": opts.reps,
                      "idempotent_cpu_us_per_record": round(idem, 3),
                      "transactional_cpu_us_per_record": round(txn, 3),
                      "txn_vs_idempotent_cpu": round(idem / txn, 3) if txn else None,
                      "read_uncommitted_records_per_s": round(ru),
                      "read_committed_records_per_s": round(rc),
                      "read_committed_vs_uncommitted": round(rc / ru, 3) if ru else None,
                      "read_committed_vs_uncommitted_best": round(
                          max(rate["read_committed"]) / max(rate["read_uncommitted"]), 3),
                      "read_uncommitted_cpu_us_per_record": round(
                          statistics.median(read_cpu["read_uncommitted"]), 3),
                      "read_committed_cpu_us_per_record": round(
                          statistics.median(read_cpu["read_committed"]), 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
