"""Transactions through a real fastlog-server with real clients: confluent-kafka's
transactional producer committing and aborting over two topics of several partitions,
read_committed consumers (confluent-kafka, kafka-python) seeing exactly the committed
records, zombie fencing, the transaction timeout, offsets sent in a transaction, the
coordinator's state across a restart; kafka-python's and aiokafka's transactional
producers; and the coordinator's APIs on the wire with the error codes Kafka gives bad
requests."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from fastlog.protocol import ApiKey, Errors
from fastlog.server.group.offsets import partition_for
from fastlog.testing import BrokerProcess, Wire
from tests.server.group.clients import create_topic, wait_until
from tests.server.wire import markers as wire_markers

OVERRIDES = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.max.timeout.ms": "120000",
}
PARTITIONS = 3


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", overrides=OVERRIDES)
    b.start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.log_tail()


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def topics(broker, n=2):
    names = [fresh(f"txn-t{i}") for i in range(n)]
    for name in names:
        create_topic(broker.bootstrap, name, PARTITIONS)
    return names


def producer(broker, txn_id, **extra):
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                  "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def send(p, names, values):
    for i, v in enumerate(values):
        for t in names:
            p.produce(t, value=v, partition=i % PARTITIONS)


def read_confluent(broker, names, isolation="read_committed", expect=None, timeout=20.0):
    """Every record of the topics' partitions from offset 0, as (topic, value)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": fresh("reader"),
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(t, p, 0) for t in names for p in range(PARTITIONS)])
        got: list[tuple[str, bytes]] = []
        deadline = time.monotonic() + timeout
        idle_until = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if expect is not None and len(got) >= expect:
                    # caught up: a short quiet spell shows nothing more comes
                    idle_until = idle_until or time.monotonic() + 1.0
                    if time.monotonic() > idle_until:
                        break
                continue
            if m.error():
                continue
            idle_until = None
            got.append((m.topic(), m.value()))
        return sorted(got)
    finally:
        c.close()


def read_kafka_python(broker, names, expect, timeout=20.0):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, consumer_timeout_ms=1500)
    try:
        c.assign([KTP(t, p) for t in names for p in range(PARTITIONS)])
        c.seek_to_beginning()
        got: list[tuple[str, bytes]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(got) < expect:
            for batch in c.poll(timeout_ms=300).values():
                got.extend((r.topic, r.value) for r in batch)
        # nothing beyond the committed records arrives
        for batch in c.poll(timeout_ms=1000).values():
            got.extend((r.topic, r.value) for r in batch)
        return sorted(got)
    finally:
        c.close()


def expected(names, values):
    return sorted((t, v) for t in names for v in values)


def describe(broker, txn_id):
    w = Wire(broker)
    try:
        return w.call(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                      {"transactional_ids": [txn_id]}).transaction_states[0]
    finally:
        w.close()


def stable_offset(broker, group, topic, partition=0):
    """OffsetFetch v7 with require_stable (KIP-447): (error, committed offset)."""
    w = Wire(broker)
    try:
        r = w.call(ApiKey.OFFSET_FETCH, 7, {
            "group_id": group, "require_stable": True,
            "topics": [{"name": topic, "partition_indexes": [partition]}]})
        part = r.topics[0].partitions[0]
        return part.error_code, part.committed_offset
    finally:
        w.close()


def markers(broker, names):
    """The transaction markers of the topics' partitions, in log order: {(topic,
    partition): ["COMMIT" | "ABORT", ...]}."""
    w = Wire(broker)
    try:
        return {(t, p): wire_markers(w, t, p) for t in names for p in range(PARTITIONS)}
    finally:
        w.close()


def test_commit_over_two_topics_read_committed(txn_broker):
    names = topics(txn_broker)
    p = producer(txn_broker, fresh("tx-commit"))
    committed = [b"c%d" % i for i in range(12)]
    p.begin_transaction()
    send(p, names, committed)
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, names, [b"last"])
    p.commit_transaction(30)
    want = expected(names, committed + [b"last"])
    assert read_confluent(txn_broker, names, expect=len(want)) == want
    assert read_kafka_python(txn_broker, names, expect=len(want)) == want
    # every partition of the two topics got a COMMIT marker per transaction
    assert markers(txn_broker, names) == {
        (t, q): ["COMMIT", "COMMIT"] if q == 0 else ["COMMIT"]
        for t in names for q in range(PARTITIONS)}


def test_abort_writes_abort_markers_to_every_partition(txn_broker):
    names = topics(txn_broker)
    txn_id = fresh("tx-abort")
    p = producer(txn_broker, txn_id)
    p.begin_transaction()
    send(p, names, [b"aborted%d" % i for i in range(PARTITIONS)])
    assert p.flush(10) == 0
    p.abort_transaction(30)
    wait_until(lambda: describe(txn_broker, txn_id).transaction_state == "CompleteAbort",
               timeout=10, what="CompleteAbort")
    assert markers(txn_broker, names) == {(t, q): ["ABORT"] for t in names
                                          for q in range(PARTITIONS)}
    p.begin_transaction()
    send(p, names, [b"kept"])
    p.commit_transaction(30)
    # the next transaction marks only the partitions it wrote to
    assert markers(txn_broker, names) == {
        (t, q): ["ABORT", "COMMIT"] if q == 0 else ["ABORT"]
        for t in names for q in range(PARTITIONS)}
    assert read_confluent(txn_broker, names, expect=2) == expected(names, [b"kept"])
    assert read_kafka_python(txn_broker, names, expect=2) == expected(names, [b"kept"])


def test_read_committed_consumers_skip_aborted_and_open_records(txn_broker):
    names = topics(txn_broker)
    p = producer(txn_broker, fresh("tx-mixed"))
    p.begin_transaction()
    send(p, names, [b"c0", b"c1"])
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, names, [b"a%d" % i for i in range(6)])
    assert p.flush(10) == 0
    p.abort_transaction(30)
    p.begin_transaction()
    send(p, names, [b"c2"])
    p.commit_transaction(30)
    p.begin_transaction()       # left open: read_committed readers stop before it
    send(p, names, [b"open%d" % i for i in range(PARTITIONS)])
    assert p.flush(10) == 0
    want = expected(names, [b"c0", b"c1", b"c2"])
    assert read_confluent(txn_broker, names, expect=len(want)) == want
    assert read_kafka_python(txn_broker, names, expect=len(want)) == want
    p.abort_transaction(30)


def test_second_producer_fences_the_first(txn_broker):
    names = topics(txn_broker, 1)
    txn_id = fresh("tx-zombie")
    zombie = producer(txn_broker, txn_id)
    zombie.begin_transaction()
    send(zombie, names, [b"zombie%d" % i for i in range(3)])
    assert zombie.flush(10) == 0
    fresh_producer = producer(txn_broker, txn_id)   # aborts the zombie's transaction
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(20)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    fresh_producer.begin_transaction()
    send(fresh_producer, names, [b"alive"])
    fresh_producer.commit_transaction(30)
    found = markers(txn_broker, names)
    assert found == {(names[0], 0): ["ABORT", "COMMIT"], (names[0], 1): ["ABORT"],
                     (names[0], 2): ["ABORT"]}
    assert read_confluent(txn_broker, names, expect=1) == [(names[0], b"alive")]


def test_transaction_past_its_timeout_is_aborted(txn_broker):
    names = topics(txn_broker, 1)
    txn_id = fresh("tx-timeout")
    p = producer(txn_broker, txn_id, **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    send(p, names, [b"late%d" % i for i in range(3)])
    assert p.flush(10) == 0
    wait_until(lambda: describe(txn_broker, txn_id).transaction_state == "CompleteAbort",
               timeout=20, what="the coordinator to abort the timed-out transaction")
    with pytest.raises(KafkaException):
        p.commit_transaction(20)
    assert markers(txn_broker, names) == {(names[0], q): ["ABORT"] for q in range(PARTITIONS)}
    assert read_confluent(txn_broker, names, expect=0, timeout=5) == []


def test_offsets_sent_in_a_transaction_are_visible_after_commit_only(txn_broker):
    names = topics(txn_broker, 1)
    group = fresh("g-txn")
    tp = TopicPartition(names[0], 0)
    # read_uncommitted: librdkafka's OffsetFetch then does not ask for stable offsets
    meta_consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                              "enable.auto.commit": False,
                              "isolation.level": "read_uncommitted"})
    try:
        def committed():
            return meta_consumer.committed([tp], timeout=10)[0].offset

        def stable_fetch():
            return stable_offset(txn_broker, group, names[0])

        p = producer(txn_broker, fresh("tx-offsets"))
        for offset, commit in ((5, False), (7, True)):
            p.begin_transaction()
            send(p, names, [b"x"])
            p.send_offsets_to_transaction([TopicPartition(names[0], 0, offset)],
                                          meta_consumer.consumer_group_metadata(), 20)
            assert p.flush(10) == 0
            assert committed() < 0        # pending: not visible before the end
            assert stable_fetch() == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
            if commit:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
        wait_until(lambda: committed() == 7, timeout=10, what="the committed offset")
        assert stable_fetch() == (Errors.NONE, 7)
    finally:
        meta_consumer.close()


def test_coordinator_state_survives_restart(tmp_path):
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    try:
        names = topics(b, 1)
        txn_id = fresh("tx-restart")
        p = producer(b, txn_id)
        p.begin_transaction()
        send(p, names, [b"before"])
        p.commit_transaction(30)
        before = describe(b, txn_id)
        del p
        b.restart()
        after = describe(b, txn_id)
        assert (after.error_code, after.transaction_state) == (Errors.NONE, "CompleteCommit")
        assert (after.producer_id, after.producer_epoch) == (before.producer_id,
                                                             before.producer_epoch)
        p = producer(b, txn_id)        # the same id again: same producer id, next epoch
        bumped = describe(b, txn_id)
        assert (bumped.producer_id, bumped.producer_epoch) == (before.producer_id,
                                                               before.producer_epoch + 1)
        p.begin_transaction()
        send(p, names, [b"after"])
        p.commit_transaction(30)
        assert read_confluent(b, names, expect=2) == [(names[0], b"after"), (names[0], b"before")]
    finally:
        if b.alive():
            b.stop()


def test_a_lost_txnindex_of_a_partition_with_aborts_is_rebuilt_at_restart(tmp_path):
    """A `.txnindex` comes with a segment's first aborted transaction (a partition with
    none has no file); the producer-state snapshot lists the segments that have one, so a
    lost file is rebuilt at the restart and read_committed readers still skip the aborted
    records (the clean shutdown's snapshot covers the whole log: nothing is replayed)."""
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    try:
        aborted, committed = topics(b, 2)
        p = producer(b, fresh("tx-lost-index"))
        p.begin_transaction()
        send(p, [aborted, committed], [b"c%d" % i for i in range(PARTITIONS)])
        p.commit_transaction(30)
        p.begin_transaction()
        send(p, [aborted], [b"a%d" % i for i in range(PARTITIONS)])
        assert p.flush(10) == 0
        p.abort_transaction(30)
        del p
        want = expected([aborted, committed], [b"c%d" % i for i in range(PARTITIONS)])
        assert read_confluent(b, [aborted, committed], expect=len(want)) == want
        assert b.stop() == 0, b.log_tail()
        indexes = sorted(b.data_dir.glob(f"{aborted}-*/*.txnindex"))
        assert len(indexes) == PARTITIONS
        assert not list(b.data_dir.glob(f"{committed}-*/*.txnindex"))
        for path in indexes:
            path.unlink()
        b.start()
        assert read_confluent(b, [aborted, committed], expect=len(want)) == want
        assert sorted(b.data_dir.glob(f"{aborted}-*/*.txnindex")) == indexes
        assert "rebuilding the transaction index" in b.log_tail(400)
    finally:
        if b.alive():
            b.stop()


def test_pending_offsets_survive_a_restart_and_commit_after_it(tmp_path):
    """Offsets sent in a transaction still open at a restart are pending again after it
    (rebuilt from the transactional batch in __consumer_offsets), and become visible when
    the producer commits afterwards."""
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    try:
        names = topics(b, 1)
        group = fresh("g-restart")

        def stable_fetch():
            return stable_offset(b, group, names[0])

        txn_id = fresh("tx-offsets-restart")
        p = producer(b, txn_id)
        meta = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
        p.begin_transaction()
        send(p, names, [b"x"])
        p.send_offsets_to_transaction([TopicPartition(names[0], 0, 42)],
                                      meta.consumer_group_metadata(), 20)
        assert p.flush(10) == 0
        meta.close()
        assert stable_fetch() == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
        b.restart()
        wait_until(lambda: stable_fetch()[0] != Errors.COORDINATOR_LOAD_IN_PROGRESS, 10,
                   what="the group loaded")
        assert stable_fetch() == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
        assert describe(b, txn_id).transaction_state == "Ongoing"
        p.commit_transaction(30)
        wait_until(lambda: stable_fetch() == (Errors.NONE, 42), 10, what="the offset")
    finally:
        if b.alive():
            b.stop()


# ------------------------------------------------------------------ the wire
def call(w, api, version, body):
    return w.call(api, version, body)


def add_partitions(w, txn_id, pid, epoch, parts, version=3):
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    resp = call(w, ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t.name, r.partition_index): r.partition_error_code
            for t in resp.results_by_topic_v3_and_below for r in t.results_by_partition}


def init(w, txn_id, timeout_ms=60000, version=4, pid=-1, epoch=-1):
    return call(w, ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": txn_id, "transaction_timeout_ms": timeout_ms,
        "producer_id": pid, "producer_epoch": epoch})


def end(w, txn_id, pid, epoch, commit, version=3):
    return call(w, ApiKey.END_TXN, version, {"transactional_id": txn_id, "producer_id": pid,
                                             "producer_epoch": epoch,
                                             "committed": commit}).error_code


def test_coordinator_apis_and_error_codes_on_the_wire(txn_broker):
    names = topics(txn_broker, 1)
    t = names[0]
    txn_id = fresh("tx-wire")
    w = Wire(txn_broker)
    try:
        fc = call(w, ApiKey.FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})
        assert fc.error_code == Errors.NONE and fc.port == txn_broker.port
        assert call(w, ApiKey.FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 5}
                    ).error_code == Errors.INVALID_REQUEST
        assert init(w, txn_id, timeout_ms=120001).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
        assert init(w, txn_id, timeout_ms=-1).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
        r = init(w, txn_id)
        assert r.error_code == Errors.NONE and r.producer_epoch == 0
        pid = r.producer_id
        r = init(w, txn_id, pid=pid, epoch=0)            # KIP-360 bump
        assert (r.error_code, r.producer_id, r.producer_epoch) == (Errors.NONE, pid, 1)
        assert init(w, txn_id, pid=pid + 100, epoch=1).error_code == Errors.PRODUCER_FENCED
        assert init(w, txn_id, version=3, pid=pid + 100, epoch=1
                    ).error_code == Errors.INVALID_PRODUCER_EPOCH
        assert end(w, txn_id, pid, 1, True) == Errors.INVALID_TXN_STATE     # nothing begun
        # stale epoch, unknown producer id, unknown partition: nothing is added
        assert add_partitions(w, txn_id, pid, 0, [(t, 0)]) == {(t, 0): Errors.PRODUCER_FENCED}
        assert add_partitions(w, txn_id, pid, 0, [(t, 0)], version=1) == {
            (t, 0): Errors.INVALID_PRODUCER_EPOCH}
        assert add_partitions(w, txn_id, pid + 1, 1, [(t, 0)]) == {
            (t, 0): Errors.INVALID_PRODUCER_ID_MAPPING}
        assert add_partitions(w, txn_id, pid, 1, [(t, 0), (t, 9), ("txn-no-such", 0)]) == {
            (t, 0): Errors.OPERATION_NOT_ATTEMPTED, (t, 9): Errors.UNKNOWN_TOPIC_OR_PARTITION,
            ("txn-no-such", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        assert describe(txn_broker, txn_id).transaction_state == "Empty"
        assert add_partitions(w, txn_id, pid, 1, [(t, 0), (t, 1)]) == {
            (t, 0): Errors.NONE, (t, 1): Errors.NONE}
        group = fresh("g-wire")
        assert call(w, ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": txn_id, "producer_id": pid, "producer_epoch": 1,
            "group_id": group}).error_code == Errors.NONE
        d = describe(txn_broker, txn_id)
        assert d.transaction_state == "Ongoing" and d.producer_epoch == 1
        assert sorted((x.topic, sorted(x.partitions)) for x in d.topics) == [
            ("__consumer_offsets", [partition_for(group, 4)]), (t, [0, 1])]
        lt = call(w, ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Bogus"],
                                                    "producer_id_filters": [pid],
                                                    "duration_filter": -1})
        assert lt.error_code == Errors.NONE and list(lt.unknown_state_filters) == ["Bogus"]
        assert [(s.transactional_id, s.transaction_state) for s in lt.transaction_states] == [
            (txn_id, "Ongoing")]
        assert end(w, txn_id, pid, 1, True) == Errors.NONE
        wait_until(lambda: describe(txn_broker, txn_id).transaction_state == "CompleteCommit",
                   timeout=10, what="CompleteCommit")
        assert end(w, txn_id, pid, 1, True) == Errors.NONE                  # a retry
        assert end(w, txn_id, pid, 1, False) == Errors.INVALID_TXN_STATE
        assert end(w, txn_id, pid, 0, True, version=1) == Errors.INVALID_PRODUCER_EPOCH
        unknown = describe(txn_broker, fresh("never"))
        assert unknown.error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND
        assert call(w, ApiKey.API_VERSIONS, 2, {}).error_code == Errors.NONE   # still served
    finally:
        w.close()


# ------------------------------------------------------------------ other clients
def test_kafka_python_and_aiokafka_transactional_producers(txn_broker):
    """kafka-python's and aiokafka's transactional producers (their own API versions:
    aiokafka sends v0 of every transaction API) commit and abort."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    names = topics(txn_broker, 1)
    kp = KafkaProducer(bootstrap_servers=txn_broker.bootstrap,
                       transactional_id=fresh("tx-kafka-python"))
    try:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send(names[0], b"kp-committed", partition=0)
        kp.commit_transaction()
        kp.begin_transaction()
        kp.send(names[0], b"kp-aborted", partition=1).get(timeout=10)
        kp.abort_transaction()
    finally:
        kp.close(timeout=10)

    async def aio():
        p = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap,
                             transactional_id=fresh("tx-aiokafka"))
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(names[0], b"aio-committed", partition=2)
            await p.begin_transaction()
            await p.send_and_wait(names[0], b"aio-aborted", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(aio(), 60))
    assert read_confluent(txn_broker, names, expect=2) == expected(
        names, [b"aio-committed", b"kp-committed"])
    assert markers(txn_broker, names) == {(names[0], 0): ["COMMIT", "ABORT"],
                                          (names[0], 1): ["ABORT"],
                                          (names[0], 2): ["COMMIT"]}


def test_odd_values_get_kafka_codes_and_leave_the_broker_serving(txn_broker):
    names = topics(txn_broker, 1)
    w = Wire(txn_broker)
    try:
        assert init(w, "").error_code == Errors.INVALID_REQUEST
        assert init(w, fresh("tx-odd"), pid=5, epoch=-1).error_code == Errors.INVALID_REQUEST
        assert init(w, fresh("tx-odd"), timeout_ms=-(1 << 31)).error_code == \
            Errors.INVALID_TRANSACTION_TIMEOUT
        assert end(w, "", 1, 0, True) == Errors.INVALID_REQUEST
        assert end(w, fresh("tx-never"), -1, -1, False) == Errors.INVALID_PRODUCER_ID_MAPPING
        txn_id = fresh("tx-odd")
        r = init(w, txn_id)
        assert add_partitions(w, txn_id, r.producer_id, r.producer_epoch,
                              [(names[0], -1), (names[0], 1 << 30)]) == {
            (names[0], -1): Errors.UNKNOWN_TOPIC_OR_PARTITION,
            (names[0], 1 << 30): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        assert describe(txn_broker, txn_id).transaction_state == "Empty"   # nothing added
        commit = call(w, ApiKey.TXN_OFFSET_COMMIT, 3, {
            "transactional_id": txn_id, "group_id": fresh("g-odd"),
            "producer_id": r.producer_id, "producer_epoch": r.producer_epoch,
            "generation_id": 7, "member_id": "nobody", "group_instance_id": None,
            "topics": [{"name": names[0], "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": "m" * 5000}]},
                {"name": "txn-no-such-topic", "partitions": [
                    {"partition_index": 0, "committed_offset": 1,
                     "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        codes = {(t.name, p.partition_index): p.error_code
                 for t in commit.topics for p in t.partitions}
        assert codes == {(names[0], 0): Errors.UNKNOWN_MEMBER_ID,
                         ("txn-no-such-topic", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        many = call(w, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                    {"transactional_ids": [f"nope-{i}" for i in range(500)] + [""]})
        assert {s.error_code for s in many.transaction_states} == {
            Errors.TRANSACTIONAL_ID_NOT_FOUND, Errors.INVALID_REQUEST}
        lt = call(w, ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": ["x" * 1000],
                                                    "producer_id_filters": [-5],
                                                    "duration_filter": 1 << 62})
        assert lt.error_code == Errors.NONE and list(lt.transaction_states) == []
    finally:
        w.close()
    assert "Traceback" not in txn_broker.log_tail(400)
