"""What a transaction costs through a real broker: librdkafka's transactional producer
against its idempotent one, in one run.

Starts a fastlog broker on a free 127.0.0.1 port with topic `t` (one partition), then,
--reps times alternating: sends --records records of 100 bytes and flushes (idempotent
producer, the anchor), --transactions times; and runs --transactions transactions of the
same records (begin, produce, commit_transaction: AddPartitionsToTxn, Produce, EndTxn, the
markers and CompleteCommit behind it). Prints each run's median and p99 time per flush or
transaction and transactions/s and, as the last line (--json: every line is JSON), the
median transaction time over the median flush time. Every run is bounded by its counts
and the clients' timeouts.

Usage: .venv/bin/python perf/txn_commit.py [--transactions N] [--records R] [--reps K] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from fastlog.testing import BrokerProcess  # noqa: E402

TOPIC = "t"
VALUE = b"x" * 100


def timed(n: int, one) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        one()
        out.append(time.perf_counter() - start)
    return out


def figures(what: str, times: list[float]) -> dict:
    ordered = sorted(times)
    return {"what": what, "median_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000, 3),
            "per_s": round(len(times) / sum(times), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=300)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    def say(line: dict) -> None:
        print(json.dumps(line) if args.json else
              "  ".join(f"{k}={v}" for k, v in line.items()), flush=True)

    with tempfile.TemporaryDirectory() as d, BrokerProcess(Path(d) / "data", overrides={
            "transaction.state.log.num.partitions": "4"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        idem = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
        txn = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                        "transactional.id": "perf-txn-commit"})
        txn.init_transactions(30)

        def flush_once():
            for _ in range(args.records):
                idem.produce(TOPIC, VALUE)
            if idem.flush(30):
                raise SystemExit("records left unacknowledged")

        def transaction_once():
            txn.begin_transaction()
            for _ in range(args.records):
                txn.produce(TOPIC, VALUE)
            txn.commit_transaction(30)

        timed(20, flush_once)            # warm up both: connections, metadata, the ids
        timed(20, transaction_once)
        flushes, transactions = [], []
        for _ in range(args.reps):
            f = timed(args.transactions, flush_once)
            t = timed(args.transactions, transaction_once)
            say(figures("idempotent flush", f))
            say(figures("transaction", t))
            flushes.append(statistics.median(f))
            transactions.append(statistics.median(t))
        ratio = statistics.median(transactions) / statistics.median(flushes)
        say({"what": "median transaction / median flush", "ratio": round(ratio, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
