"""KIP-890 part 1 on a real broker (fastlog/server/txn/verification.py): a transactional
write to a partition the producer did not add to its transaction is refused, with the
codes Kafka 3.6+ gives producers of Produce v3-v8; a partition that was added takes it;
`transaction.partition.verification.enable=false` turns the check off; a librdkafka
transactional producer is unaffected."""

from __future__ import annotations

import contextlib

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import Wire
from tests.server.group.clients import wait_until
from tests.server.txn.test_txn_clients import (  # noqa: F401 - txn_broker is a fixture
    add_partitions,
    describe,
    end,
    fresh,
    init,
    producer,
    read_confluent,
    topics,
    txn_broker,
)
from tests.server.wire import create_topic, init_pid, list_offset, produce, txn_batch


def lso(w, topic, partition):
    return list_offset(w, topic, 1, partition=partition)


@contextlib.contextmanager
def initialized(broker, prefix):
    """(connection, a fresh topic, a transactional id, its producer id and epoch)."""
    t = topics(broker, 1)[0]
    txn_id = fresh(prefix)
    w = Wire(broker)
    try:
        r = init(w, txn_id)
        yield w, t, txn_id, r.producer_id, r.producer_epoch
    finally:
        w.close()


def test_a_partition_not_added_is_refused(txn_broker):  # noqa: F811 - the imported fixture
    with initialized(txn_broker, "verify") as (w, t, txn_id, pid, epoch):
        assert add_partitions(w, txn_id, pid, epoch, [(t, 0)]) == {(t, 0): Errors.NONE}
        assert produce(w, t, txn_batch([b"a"], pid, epoch, 0), partition=0,
                       transactional_id=txn_id).error_code == Errors.NONE
        # (t, 1) was never added: refused, nothing written, no transaction opened there
        for version in (3, 7, 8):
            r = produce(w, t, txn_batch([b"x"], pid, epoch, 0), partition=1, version=version,
                        transactional_id=txn_id)
            assert r.error_code == Errors.INVALID_TXN_STATE
        assert r.error_message == "Partition was not added to the transaction"
        assert lso(w, t, 1) == 0
        # the added partition goes on taking the transaction's batches
        assert produce(w, t, txn_batch([b"b"], pid, epoch, 1), partition=0,
                       transactional_id=txn_id).error_code == Errors.NONE
        assert end(w, txn_id, pid, epoch, True) == Errors.NONE
        wait_until(lambda: describe(txn_broker, txn_id).transaction_state == "CompleteCommit",
                   timeout=10, what="CompleteCommit")
        # the transaction is over: a late write is refused, even where it had been added
        assert produce(w, t, txn_batch([b"late"], pid, epoch, 2), partition=0,
                       transactional_id=txn_id).error_code == Errors.INVALID_TXN_STATE
        assert lso(w, t, 0) == 3    # a, b and the COMMIT marker: nothing left open


def test_fenced_and_unknown_producers_are_refused(txn_broker):  # noqa: F811 - the imported fixture
    with initialized(txn_broker, "verify-fenced") as (w, t, txn_id, pid, old):
        r = init(w, txn_id, pid=pid, epoch=old)     # a newer instance: the epoch moves on
        new = r.producer_epoch
        assert new == old + 1
        assert add_partitions(w, txn_id, pid, new, [(t, 0)]) == {(t, 0): Errors.NONE}
        r = produce(w, t, txn_batch([b"zombie"], pid, old, 0), transactional_id=txn_id)
        assert r.error_code == Errors.INVALID_PRODUCER_EPOCH
        # a producer id the transactional id does not have
        other_pid, other_epoch = init_pid(w)
        r = produce(w, t, txn_batch([b"stranger"], other_pid, other_epoch, 0),
                    transactional_id=txn_id)
        assert r.error_code == Errors.INVALID_PRODUCER_ID_MAPPING
        # a transactional id nobody initialized
        r = produce(w, t, txn_batch([b"nobody"], other_pid, other_epoch, 0),
                    transactional_id=fresh("never"))
        assert r.error_code == Errors.INVALID_PRODUCER_ID_MAPPING
        assert lso(w, t, 0) == 0
        assert produce(w, t, txn_batch([b"ok"], pid, new, 0),
                       transactional_id=txn_id).error_code == Errors.NONE
        assert end(w, txn_id, pid, new, False) == Errors.NONE


def test_the_check_can_be_turned_off(broker_factory):
    b = broker_factory({"transaction.partition.verification.enable": "false"})
    w = Wire(b)
    try:
        create_topic(b, "unverified")
        pid, epoch = init_pid(w)
        r = produce(w, "unverified", txn_batch([b"h"], pid, epoch, 0), transactional_id="raw")
        assert r.error_code == Errors.NONE
        assert lso(w, "unverified", 0) == 0   # an open transaction no coordinator knows
    finally:
        w.close()


def test_librdkafka_transactions_pass_the_check(txn_broker):  # noqa: F811 - the imported fixture
    names = topics(txn_broker, 2)
    p = producer(txn_broker, fresh("verify-rdkafka"))
    for round_ in range(3):
        p.begin_transaction()
        for t in names:
            for part in range(3):
                p.produce(t, f"{round_}-{part}".encode(), partition=part)
        p.commit_transaction(30)
    assert read_confluent(txn_broker, names, expect=18) == sorted(
        (t, f"{r}-{part}".encode()) for r in range(3) for t in names for part in range(3))


def test_add_partitions_v4_from_brokers(txn_broker):  # noqa: F811 - the imported fixture
    """AddPartitionsToTxn v4-5, what a partition leader sends the coordinator: a batch of
    transactions, each verified (verify_only) or added."""
    with initialized(txn_broker, "verify-v4") as (w, t, txn_id, pid, epoch):
        assert add_partitions(w, txn_id, pid, epoch, [(t, 0)]) == {(t, 0): Errors.NONE}
        other = fresh("verify-v4-other")
        o = init(w, other)

        def call(version, *txns):
            r = w.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": [
                {"transactional_id": i, "producer_id": p, "producer_epoch": e,
                 "verify_only": verify, "topics": [{"name": t, "partitions": parts}]}
                for i, p, e, verify, parts in txns]})
            assert r.error_code == Errors.NONE
            return {(x.transactional_id, p.partition_index): p.partition_error_code
                    for x in r.results_by_transaction for tr in x.topic_results
                    for p in tr.results_by_partition}

        for version in (4, 5):
            assert call(version, (txn_id, pid, epoch, True, [0, 1]),
                        (txn_id + "-unknown", pid, epoch, True, [0])) == {
                (txn_id, 0): Errors.NONE, (txn_id, 1): Errors.INVALID_TXN_STATE,
                (txn_id + "-unknown", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
        assert call(4, (txn_id, pid, epoch + 1, True, [0])) == {
            (txn_id, 0): Errors.PRODUCER_FENCED}
        # not verify_only: added, as v3 adds them
        assert call(4, (other, o.producer_id, o.producer_epoch, False, [1])) == {
            (other, 1): Errors.NONE}
        assert [(x.topic, list(x.partitions)) for x in describe(txn_broker, other).topics] == [
            (t, [1])]
        assert end(w, other, o.producer_id, o.producer_epoch, False) == Errors.NONE
        assert end(w, txn_id, pid, epoch, False) == Errors.NONE
