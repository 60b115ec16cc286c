"""A transaction's broker CPU on the wire when the broker idles between transactions and
when it does not: the same requests, with and without a pause after each transaction.

Starts one fastlog-server (perf/compare.py's start_fastlog; its CPU is the sum of its
threads' run time in ns, compare.cpu_ns). One raw connection
(fastlog.testing.Wire) runs transactions of --records records of 100 B as librdkafka
sends them (AddPartitionsToTxn v0, one Produce v10, EndTxn v1, each answered before the
next is sent); every rep runs --txns of them back to back and --txns with --pause-ms
after each (order alternated), and prints the broker's CPU per transaction of each. A
librdkafka producer lingers linger.ms (5) per transaction, so its broker wakes from idle
for each request; this shows what that costs. Ends with a JSON line of the medians and
their ratio.

--floor adds what the transactions' goal (transactional produce at >= 0.8x the idempotent
producer's broker CPU per record) allows and what the request pattern costs any process:
the broker's CPU per 1,000 records sent as back-to-back Produce requests of
--anchor-records (the shape of librdkafka's idempotent requests, ~1 MB), whose quarter is
the goal's allowance per transaction; and a null server of the script's own (each request
frame read whole and answered with 8 bytes, no broker work at all) fed the same two
patterns: the transactions with their pause, and the back-to-back large requests. The
null server's extra per transaction (the first less the second per 1,000 records) is the
floor under what a broker in one Python process pays for librdkafka's transaction pattern
on this machine; the null server's own score on the goal's ratio ends the JSON line.

    .venv/bin/python perf/txn_wakeups.py [--txns 300] [--records 1000] [--pause-ms 5] [--reps 4]
                                         [--floor] [--anchor-records 10000]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import accept_one, cpu_ns, exchange, produce_frame, recv_exact, start_fastlog  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from fastlog import protocol  # noqa: E402
from fastlog._codec import build_batch  # noqa: E402
from fastlog.protocol import ApiKey  # noqa: E402
from fastlog.testing import Wire  # noqa: E402

TOPIC, TXN_ID, VALUE = "t", "wakeups", b"x" * 100


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
        w = self.w
        add, produce, end = transaction_bodies(self.pid, self.epoch, self.seq, self.records)
        self.seq = (self.seq + self.records) % (2**31 - self.records)
        r = w.call(ApiKey.ADD_PARTITIONS_TO_TXN, 0, add)
        errors = [p.partition_error_code for t in r.results_by_topic_v3_and_below
                  for p in t.results_by_partition]
        r2 = w.call(ApiKey.PRODUCE, 10, produce)
        errors.append(r2.responses[0].partition_responses[0].error_code)
        errors.append(w.call(ApiKey.END_TXN, 1, end).error_code)
        if any(errors):
            raise SystemExit(f"txn_wakeups: a transaction failed: {errors}")


def transaction_bodies(pid: int, epoch: int, seq: int, records: int) -> tuple:
    """The three requests of one transaction as librdkafka sends them: AddPartitionsToTxn
    v0, Produce v10 of `records` transactional records, EndTxn v1 (commit)."""
    add = {"v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": pid,
           "v3_and_below_producer_epoch": epoch,
           "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}
    batch = build_batch([(int(time.time() * 1000), None, VALUE)] * records,
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)
    produce = {"transactional_id": TXN_ID, "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}
    end = {"transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": epoch,
           "committed": True}
    return add, produce, end


def anchor_frame(records: int) -> bytes:
    """One framed Produce v10 (acks -1) of `records` plain 100 B records to TOPIC."""
    batch = build_batch([(int(time.time() * 1000), None, VALUE)] * records)
    return produce_frame(TOPIC, batch, client="txn-wakeups")


def _null_broker_main(port, ready) -> None:
    """--floor's server: one connection; each request frame read whole and answered with
    8 bytes (its correlation id, four zero bytes) at once. No broker work at all."""
    gc.disable()
    with accept_one(port, ready) as conn:
        view = memoryview(bytearray(16 << 20))
        answer = bytearray(struct.pack(">iii", 8, 0, 0))
        while True:
            try:
                recv_exact(conn, view, 4)
                size = struct.unpack_from(">i", view, 0)[0]
                if not 8 <= size <= len(view):
                    return
                recv_exact(conn, view, size)
            except (ConnectionError, OSError):
                return
            answer[4:8] = view[4:8]   # the correlation id, after api key and version
            conn.sendall(answer)


def per_record_anchor(pid: int, sock: socket.socket, frame: bytes, requests: int,
                      records: int) -> float:
    """The server's CPU (us) per 1,000 records over `requests` back-to-back frames."""
    view = memoryview(bytearray(1 << 16))
    start = cpu_ns(pid)
    for _ in range(requests):
        exchange(sock, frame, view)
    return (cpu_ns(pid) - start) / (requests * records)   # ns per record: us per 1,000


def floor(opts, broker_pid: int, broker_bootstrap: str) -> dict:
    """The goal's allowance per transaction from the broker's large-request anchor, and
    the null server's cost of the same two patterns (see the module comment)."""
    requests = max(10, opts.txns * opts.records // opts.anchor_records)
    frame = anchor_frame(opts.anchor_records)
    host, port = broker_bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        exchange(s, frame, memoryview(bytearray(1 << 16)))   # warm
        broker_anchor = [per_record_anchor(broker_pid, s, frame, requests,
                                           opts.anchor_records) for _ in range(opts.reps)]
    ctx = multiprocessing.get_context("spawn")
    port_v, ready = ctx.RawValue("i", 0), ctx.Event()
    null = ctx.Process(target=_null_broker_main, args=(port_v, ready), daemon=True)
    null.start()
    try:
        if not ready.wait(60):
            raise SystemExit("txn_wakeups: the null server did not start within 60 s")
        add, produce, end = transaction_bodies(1, 0, 0, opts.records)
        frames = [protocol.encode_request(k, v, 1, "txn-wakeups", b, framed=True)
                  for k, v, b in ((ApiKey.ADD_PARTITIONS_TO_TXN, 0, add),
                                  (ApiKey.PRODUCE, 10, produce), (ApiKey.END_TXN, 1, end))]
        view = memoryview(bytearray(1 << 16))
        null_txn, null_anchor = [], []
        with socket.create_connection(("127.0.0.1", port_v.value), timeout=60) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(opts.reps):
                start = cpu_ns(null.pid)
                for _ in range(opts.txns):
                    for f in frames:
                        exchange(s, f, view)
                    time.sleep(opts.pause_ms / 1000)
                null_txn.append((cpu_ns(null.pid) - start) / opts.txns / 1000)
                null_anchor.append(per_record_anchor(null.pid, s, frame, requests,
                                                     opts.anchor_records))
    finally:
        null.terminate()
        null.join(10)
    for rep in range(opts.reps):
        print(f"rep={rep}  broker_anchor_us_per_1000_records={broker_anchor[rep]:.0f}  "
              f"null_txn_us={null_txn[rep]:.0f}  "
              f"null_anchor_us_per_1000_records={null_anchor[rep]:.0f}", flush=True)
    anchor = statistics.median(broker_anchor) * opts.records / 1000
    extra = statistics.median(t - a * opts.records / 1000
                              for t, a in zip(null_txn, null_anchor, strict=True))
    # The goal's own ratio scored by the null server: its CPU for the records in large
    # requests over its CPU for the same records in transactions.
    ratio = statistics.median(a * opts.records / 1000 / t if t else 0.0
                              for t, a in zip(null_txn, null_anchor, strict=True))
    return {"broker_anchor_us_per_txn_records": round(anchor),
            "goal_allowance_us_per_txn": round(anchor * 0.25),
            "null_server_extra_us_per_txn": round(extra),
            "null_server_txn_vs_anchor": round(ratio, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, default=300, help="transactions per phase")
    ap.add_argument("--records", type=int, default=1000, help="records per transaction")
    ap.add_argument("--pause-ms", type=float, default=5.0)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--floor", action="store_true",
                    help="also measure the goal's allowance and a null server's floor")
    ap.add_argument("--anchor-records", type=int, default=10_000,
                    help="records per back-to-back request of --floor's anchor")
    opts = ap.parse_args(argv)
    if not 1 <= opts.txns <= 100_000 or not 1 <= opts.records <= 10_000 \
            or not 0 < opts.pause_ms <= 1000 or not 1 <= opts.reps <= 20 \
            or not 1 <= opts.anchor_records <= 100_000:
        print("txn_wakeups: --txns must be 1 to 100,000, --records 1 to 10,000, --pause-ms "
              "above 0 and at most 1000, --reps 1 to 20, --anchor-records 1 to 100,000",
              file=sys.stderr)
        return 2
    floor_figures: dict = {}
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
            if opts.floor:
                floor_figures = floor(opts, broker.pid, broker.bootstrap)
        finally:
            broker.stop()
    b2b, paused = statistics.median(got["back_to_back"]), statistics.median(got["paused"])
    print(json.dumps({"txns": opts.txns, "records": opts.records, "pause_ms": opts.pause_ms,
                      "back_to_back_us_per_txn": round(b2b), "paused_us_per_txn": round(paused),
                      "paused_vs_back_to_back": round(paused / b2b, 2) if b2b else None,
                      **floor_figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
