"""A transaction's broker CPU on the wire when the broker idles between transactions and
when it does not: the same requests, with and without a pause after each transaction.

Starts one fastlog-server (perf/compare.py's start_fastlog; its CPU is the sum of its
threads' run time from /proc/PID/task/*/schedstat, in ns). One raw connection
(fastlog.testing.Wire) runs transactions of --records records of 100 B as librdkafka
sends them (AddPartitionsToTxn v0, one Produce v10, EndTxn v1, each answered before the
next is sent); every rep runs --txns of them back to back and --txns with --pause-ms
after each (order alternated), and prints the broker's CPU per transaction of each. A
librdkafka producer lingers linger.ms (5) per transaction, so its broker wakes from idle
for each request; this shows what that costs. Ends with a JSON line of the medians and
their ratio.

    .venv/bin/python perf/txn_wakeups.py [--txns 300] [--records 1000] [--pause-ms 5] [--reps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import start_fastlog  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from fastlog._codec import build_batch  # noqa: E402
from fastlog.protocol import ApiKey  # noqa: E402
from fastlog.testing import Wire  # noqa: E402

TOPIC, TXN_ID, VALUE = "t", "wakeups", b"x" * 100


def cpu_ns(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass   # a thread that ended meanwhile
    return total


class Endpoint:
    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.host, self.port = host, int(port)


class Transactions:
    """One transactional producer on a raw connection."""

    def __init__(self, bootstrap: str, records: int):
        self.w = Wire(Endpoint(bootstrap))
        self.records, self.seq = records, 0
        deadline = time.monotonic() + 30
        while True:   # the coordinator loads first: CONCURRENT_TRANSACTIONS meanwhile
            r = self.w.call(ApiKey.INIT_PRODUCER_ID, 4, {
                "transactional_id": TXN_ID, "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1})
            if r.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if r.error_code != 0:
            raise SystemExit(f"txn_wakeups: InitProducerId answered {r.error_code}")
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def one(self) -> None:
        w, pid, epoch = self.w, self.pid, self.epoch
        r = w.call(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
            "v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
        errors = [p.partition_error_code for t in r.results_by_topic_v3_and_below
                  for p in t.results_by_partition]
        records = build_batch([(int(time.time() * 1000), None, VALUE)] * self.records,
                              producer_id=pid, producer_epoch=epoch,
                              base_sequence=self.seq, is_transactional=True)
        self.seq = (self.seq + self.records) % (2**31 - self.records)
        r2 = w.call(ApiKey.PRODUCE, 10, {
            "transactional_id": TXN_ID, "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]})
        errors.append(r2.responses[0].partition_responses[0].error_code)
        errors.append(w.call(ApiKey.END_TXN, 1, {
            "transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": epoch,
            "committed": True}).error_code)
        if any(errors):
            raise SystemExit(f"txn_wakeups: a transaction failed: {errors}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, default=300, help="transactions per phase")
    ap.add_argument("--records", type=int, default=1000, help="records per transaction")
    ap.add_argument("--pause-ms", type=float, default=5.0)
    ap.add_argument("--reps", type=int, default=4)
    opts = ap.parse_args(argv)
    if not 1 <= opts.txns <= 100_000 or not 1 <= opts.records <= 10_000 \
            or not 0 < opts.pause_ms <= 1000 or not 1 <= opts.reps <= 20:
        print("txn_wakeups: --txns must be 1 to 100,000, --records 1 to 10,000, --pause-ms "
              "above 0 and at most 1000, --reps 1 to 20", file=sys.stderr)
        return 2
    got: dict[str, list[float]] = {"back_to_back": [], "paused": []}
    with tempfile.TemporaryDirectory(prefix="fastlog-txn-wakeups-") as tmp:
        broker = start_fastlog(Path(tmp), "txn", extra=(
            "transaction.state.log.num.partitions=1",))
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                f.result(30)
            producer = Transactions(broker.bootstrap, opts.records)
            try:
                for _ in range(min(opts.txns, 100)):   # warm up, not measured
                    producer.one()
                for rep in range(opts.reps):
                    for mode in (list(got) if rep % 2 == 0 else list(got)[::-1]):
                        pause = opts.pause_ms / 1000 if mode == "paused" else 0.0
                        start = cpu_ns(broker.pid)
                        for _ in range(opts.txns):
                            producer.one()
                            if pause:
                                time.sleep(pause)
                        us = (cpu_ns(broker.pid) - start) / opts.txns / 1000
                        got[mode].append(us)
                        print(f"rep={rep}  {mode}  broker_cpu_us_per_txn={us:.0f}", flush=True)
            finally:
                producer.w.close()
        finally:
            broker.stop()
    b2b, paused = statistics.median(got["back_to_back"]), statistics.median(got["paused"])
    print(json.dumps({"txns": opts.txns, "records": opts.records, "pause_ms": opts.pause_ms,
                      "back_to_back_us_per_txn": round(b2b), "paused_us_per_txn": round(paused),
                      "paused_vs_back_to_back": round(paused / b2b, 2) if b2b else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
