"""The transaction coordinator's `__transaction_state` writes and the COMMIT/ABORT markers
take the compiled leader append (fastlog/server/log/_append.pyx) on a broker in this
process fed librdkafka's request frames: after the first of each, every append is a
compiled one, and what they leave is what Kafka's path leaves (offsets in order, CRCs
valid, the aborted transaction in `.txnindex`, the last stable offset at the high
watermark once the transactions are complete)."""

from __future__ import annotations

import asyncio
import glob
import os
import time

from fastlog import _codec
from fastlog.protocol import ApiKey, decode_response, encode_request
from fastlog.server.broker import BrokerServer
from fastlog.server.config import KafkaConfig
from fastlog.server.txn.schemas import TxnState
from tests.server.wire import HandlerConnection

TOPIC = "t"
TXNS = 12


def _batch(pid: int, epoch: int, seq: int) -> bytes:
    now = int(time.time() * 1000)
    return _codec.build_batch([(now, None, b"v%d" % i) for i in range(5)], producer_id=pid,
                              producer_epoch=epoch, base_sequence=seq, is_transactional=True)


async def _transactions(tmp_path) -> dict:
    config = KafkaConfig.from_sources(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path}", "num.partitions=1",
        "transaction.state.log.num.partitions=1"])
    broker = BrokerServer(config)
    await broker.startup()
    apis, conn, corr = broker.apis, HandlerConnection(), [0]

    async def call(api, version, body):
        corr[0] += 1
        frame = bytearray(encode_request(api, version, corr[0], "test", body))
        parts = await apis.handle(conn, memoryview(frame))
        return decode_response(api, version, b"".join(bytes(p) for p in parts))[1]

    try:
        r = await call(ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []}], "timeout_ms": 10000, "validate_only": False})
        for _ in range(200):   # CONCURRENT_TRANSACTIONS while the state partition loads
            r = await call(ApiKey.INIT_PRODUCER_ID, 4, {
                "transactional_id": "tx", "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1})
            if r.error_code == 0:
                break
            await asyncio.sleep(0.05)
        assert r.error_code == 0, r
        pid, epoch = r.producer_id, r.producer_epoch
        for i in range(TXNS):
            r = await call(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
                "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
            assert r.results_by_topic_v3_and_below[0].results_by_partition[0] \
                .partition_error_code == 0, r
            r = await call(ApiKey.PRODUCE, 10, {
                "transactional_id": "tx", "acks": -1, "timeout_ms": 30000, "topic_data": [
                    {"name": TOPIC, "partition_data": [
                        {"index": 0, "records": _batch(pid, epoch, 5 * i)}]}]})
            assert r.responses[0].partition_responses[0].error_code == 0, r
            commit = i % 3 != 2                        # every third one aborted
            r = await call(ApiKey.END_TXN, 1, {"transactional_id": "tx", "producer_id": pid,
                                               "producer_epoch": epoch, "committed": commit})
            assert r.error_code == 0, r
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            for _ in range(1000):
                if broker.txn_coordinator.txns["tx"].state is done:
                    break
                await asyncio.sleep(0)
            assert broker.txn_coordinator.txns["tx"].state is done
        rm = broker.replica_manager
        data, state = rm.get_log(TOPIC, 0), rm.get_log("__transaction_state", 0)
        p = rm.partitions[(TOPIC, 0)]
        return {"data": data, "state": state, "data_compiled": data._fast.appends,
                "state_compiled": state._fast.appends, "end": data.log_end_offset,
                "hw": data.high_watermark, "lso": rm.last_stable_offset(p),
                "aborted": data.collect_aborted_txns(0, data.log_end_offset),
                "state_end": state.log_end_offset}
    finally:
        await broker.shutdown()


def test_state_writes_and_markers_take_the_compiled_append(tmp_path):
    out = asyncio.run(_transactions(tmp_path))
    # Per transaction: a data batch and a marker; Ongoing, PrepareX and CompleteX.
    assert out["end"] == TXNS * (5 + 1) == out["hw"] == out["lso"]
    assert out["data_compiled"] >= 2 * TXNS - 2
    assert out["state_compiled"] >= 3 * TXNS - 2
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in out["aborted"]] == [
        (out["aborted"][0].producer_id, 6 * i, 6 * i + 5) for i in range(2, TXNS, 3)]
    markers = {}
    for name in ("data", "state"):
        log, batches = out[name], []
        for path in sorted(glob.glob(os.path.join(log.dir, "*.log"))):
            with open(path, "rb") as f:
                scan = _codec.scan_batches(f.read(), verify_crc=True)
            assert scan.error is None
            batches += scan.batches
        offsets = [b.base_offset for b in batches]
        assert offsets == sorted(set(offsets))
        assert batches[-1].next_offset == log.log_end_offset
        markers[name] = [b.base_offset for b in batches if b.is_control]
    assert markers == {"data": [6 * i + 5 for i in range(TXNS)], "state": []}
