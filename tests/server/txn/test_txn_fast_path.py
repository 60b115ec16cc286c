"""A transaction in the request shapes librdkafka sends, on a real broker: AddPartitionsToTxn
v0-v2 and EndTxn v0-v2 (read and answered in compiled code, fastlog/protocol/_txn.pyx)
answer as v3 (the generic path) does, with each version's fencing code; a transactional
Produce of one partition (the compiled Produce path) is checked against the transaction
(KIP-890); and on one node EndTxn is answered once the markers and CompleteCommit are
written, so the next transaction starts without CONCURRENT_TRANSACTIONS."""

from __future__ import annotations

import pytest

from fastlog.protocol import Errors
from fastlog.testing import Wire
from tests.server.txn.test_txn_clients import (  # noqa: F401 - txn_broker is a fixture
    add_partitions,
    describe,
    end,
    fresh,
    init,
    topics,
    txn_broker,
)
from tests.server.wire import list_offset, produce, txn_batch


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_a_transaction_at_each_version(txn_broker, version):  # noqa: F811 - the fixture
    t = topics(txn_broker, 1)[0]
    txn_id = fresh(f"fast-v{version}")
    fenced = Errors.PRODUCER_FENCED if version >= 2 else Errors.INVALID_PRODUCER_EPOCH
    w = Wire(txn_broker)
    try:
        r = init(w, txn_id)
        pid, epoch = r.producer_id, r.producer_epoch
        r = init(w, txn_id, pid=pid, epoch=epoch)          # bumped: the old epoch is stale
        old, epoch = epoch, r.producer_epoch
        assert end(w, txn_id, pid, epoch, True, version=version) == Errors.INVALID_TXN_STATE
        assert add_partitions(w, txn_id, pid, old, [(t, 0)], version=version) == {
            (t, 0): fenced}
        assert add_partitions(w, txn_id, pid + 1, epoch, [(t, 0)], version=version) == {
            (t, 0): Errors.INVALID_PRODUCER_ID_MAPPING}
        assert add_partitions(w, fresh("unknown"), pid, epoch, [(t, 0)], version=version) == {
            (t, 0): Errors.INVALID_PRODUCER_ID_MAPPING}
        assert add_partitions(w, txn_id, pid, epoch, [(t, 0), (t, 9), ("no-such", 0)],
                              version=version) == {
            (t, 0): Errors.OPERATION_NOT_ATTEMPTED, (t, 9): Errors.UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        seq = 0
        for n in range(3):   # three transactions back to back, as a producer runs them
            assert add_partitions(w, txn_id, pid, epoch, [(t, 0)], version=version) == {
                (t, 0): Errors.NONE}
            for produce_version in (8, 10):    # non-flexible and flexible compiled shapes
                r = produce(w, t, txn_batch([b"v%d" % n], pid, epoch, seq), partition=0,
                            version=produce_version, transactional_id=txn_id)
                assert r.error_code == Errors.NONE
                seq += 1
            # (t, 1) is not in the transaction: refused, nothing written there
            r = produce(w, t, txn_batch([b"x"], pid, epoch, 0), partition=1, version=10,
                        transactional_id=txn_id)
            assert r.error_code == Errors.INVALID_TXN_STATE
            assert end(w, txn_id, pid, old, True, version=version) == fenced
            assert end(w, txn_id, pid, epoch, True, version=version) == Errors.NONE
            # one node: answered once the COMMIT marker and CompleteCommit are written
            assert describe(txn_broker, txn_id).transaction_state == "CompleteCommit"
            assert list_offset(w, t, 1) == 3 * (n + 1)   # two records and the marker
        assert end(w, txn_id, pid, epoch, True, version=version) == Errors.NONE   # a retry
        assert end(w, txn_id, pid, epoch, False, version=version) == Errors.INVALID_TXN_STATE
        assert list_offset(w, t, 1, partition=1) == 0
    finally:
        w.close()
