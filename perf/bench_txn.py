"""Where a transaction's broker CPU goes: each request of a librdkafka-shaped transaction
handled in process, its CPU time measured alone.

Starts a BrokerServer in this process (one partition, a temporary log dir; its listener
on 127.0.0.1 is not used) and feeds `KafkaApis.handle` the frames librdkafka sends for a
transaction of --records records of 100 B: AddPartitionsToTxn v0, one Produce v10 of one
transactional batch, EndTxn v1, then the loop's turns until the transaction is
CompleteCommit (the COMMIT marker and the state write, whether EndTxn did them or a
task). The anchor is the same batch from an idempotent producer (Produce v10, no
transactional id). Each step's time is the thread's CPU clock around it (the socket work
and the loop's wake-ups are not in it: those are in perf/txn_throughput.py's figures).
Prints, per step, the median over --txns transactions in us, then the JSON line:
`per_txn_us` (the steps' medians summed), `idempotent_produce_us` and `txn_extra_us` (the
transaction's cost beyond its records' Produce).

    .venv/bin/python perf/bench_txn.py [--txns 2000] [--records 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time

from fastlog._codec import build_batch
from fastlog.protocol import ApiKey, decode_response, encode_request
from fastlog.server.broker import BrokerServer
from fastlog.server.config import KafkaConfig
from fastlog.server.txn.schemas import TxnState

VALUE = b"x" * 100
TOPIC = "t"


class Conn:
    """What KafkaApis.handle reads of a connection (fastlog._net.Connection's state)."""

    def __init__(self):
        self.state = {"listener": "PLAINTEXT"}
        self.peer = ("127.0.0.1", 1)


def batch(records: int, pid: int, epoch: int, seq: int, transactional: bool) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(now, None, VALUE)] * records, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=transactional)


async def run(opts) -> dict:
    with tempfile.TemporaryDirectory(prefix="fastlog-bench-txn-") as tmp:
        config = KafkaConfig.from_sources(None, [
            "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp}", "num.partitions=1",
            "transaction.state.log.num.partitions=1"])
        broker = BrokerServer(config)
        await broker.startup()
        try:
            return await measure(broker, opts)
        finally:
            await broker.shutdown()


async def measure(broker, opts) -> dict:
    apis, conn, corr = broker.apis, Conn(), [0]
    coordinator = broker.txn_coordinator

    async def call(api, version, body):
        corr[0] += 1
        frame = bytearray(encode_request(api, version, corr[0], "bench", body))
        t0 = time.thread_time_ns()
        parts = await apis.handle(conn, memoryview(frame))
        spent = (time.thread_time_ns() - t0) / 1000
        data = b"".join(bytes(p) for p in parts)
        return spent, decode_response(api, version, data)[1]

    _, r = await call(ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 10000, "validate_only": False})
    for _ in range(100):   # InitProducerId answers CONCURRENT_TRANSACTIONS while it loads
        _, r = await call(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "bench", "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1})
        if r.error_code == 0:
            break
        await asyncio.sleep(0.05)
    pid, epoch = r.producer_id, r.producer_epoch
    _, r = await call(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60000,
        "producer_id": -1, "producer_epoch": -1})
    idem_pid, idem_epoch = r.producer_id, r.producer_epoch
    times: dict[str, list[float]] = {"AddPartitionsToTxn": [], "Produce (transactional)": [],
                                     "EndTxn": [], "completion after EndTxn": [],
                                     "Produce (idempotent)": []}
    for i in range(opts.txns):
        seq = i * opts.records % (2**31 - opts.records)
        t, r = await call(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
            "v3_and_below_transactional_id": "bench", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0] \
            .partition_error_code == 0, r
        times["AddPartitionsToTxn"].append(t)
        t, r = await call(ApiKey.PRODUCE, 10, {
            "transactional_id": "bench", "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": TOPIC, "partition_data": [
                    {"index": 0, "records": batch(opts.records, pid, epoch, seq, True)}]}]})
        assert r.responses[0].partition_responses[0].error_code == 0, r
        times["Produce (transactional)"].append(t)
        t, r = await call(ApiKey.END_TXN, 1, {
            "transactional_id": "bench", "producer_id": pid, "producer_epoch": epoch,
            "committed": True})
        assert r.error_code == 0, r
        times["EndTxn"].append(t)
        # a completion left to a task (markers, CompleteCommit) runs in the loop's next
        # turns: its CPU counts in the transaction's total
        t0 = time.thread_time_ns()
        for _ in range(1000):
            if coordinator.txns["bench"].state is TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0)
        times["completion after EndTxn"].append((time.thread_time_ns() - t0) / 1000)
        t, r = await call(ApiKey.PRODUCE, 10, {
            "transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": TOPIC, "partition_data": [
                    {"index": 0,
                     "records": batch(opts.records, idem_pid, idem_epoch, seq, False)}]}]})
        assert r.responses[0].partition_responses[0].error_code == 0, r
        times["Produce (idempotent)"].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:26s} {v:8.1f} us (median of {opts.txns})")
    per_txn = med["AddPartitionsToTxn"] + med["Produce (transactional)"] + med["EndTxn"] \
        + med["completion after EndTxn"]
    idem = med["Produce (idempotent)"]
    extra = per_txn - idem
    return {"per_txn_us": round(per_txn, 1), "idempotent_produce_us": round(idem, 1),
            "txn_extra_us": round(extra, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, default=2000)
    ap.add_argument("--records", type=int, default=1000)
    opts = ap.parse_args(argv)
    if not 1 <= opts.txns <= 100_000 or not 1 <= opts.records <= 100_000:
        print("bench_txn: --txns and --records must be 1 to 100,000", file=sys.stderr)
        return 2
    print(json.dumps(asyncio.run(run(opts))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
