"""A consume-transform-produce application with exactly-once semantics, written as a real
one is with confluent-kafka, for the exactly-once tests under failures
(tests/server/txn/test_eos.py on one broker, tests/cluster/test_eos_cluster.py on three):
a read_committed consumer of an input topic (manually assigned, so no rebalances) and a
transactional producer copy every input record to an output topic, ~`batch` records per
transaction, with the consumer's next offsets sent in the same transaction
(send_offsets_to_transaction). On an abortable error the loop aborts and rewinds to the
committed offsets; fenced by a newer instance with the same transactional.id, it stops (a
zombie); on any other error (fatal, a commit that timed out while a broker was down) it
drops both clients and starts new ones with the same transactional.id, which fences the
old producer and completes or aborts its transaction. Runs on the thread
that calls run() (the tests run it on a background thread while they kill brokers).

    loop = CopyLoop(bootstrap, "app-1", "app-group", "in", "out", ends={0: 1000, ...})
    loop.run(deadline)            # returns once every input record's offset is committed
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# librdkafka >= 2.10 "re-bootstraps" when every broker it knows is down (a single broker
# killed), which decommissions the cached group coordinator; send_offsets_to_transaction
# then hangs past its timeout until some broker changes state (librdkafka issue #5511, a
# client bug): the loop's clients do not re-bootstrap, they reconnect to the same brokers.
CLIENT_CONFIG = {"metadata.recovery.strategy": "none"}
# A newer producer with the same transactional.id took over.
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
# A transaction left open by a killed client is aborted by the coordinator after this long.
TXN_TIMEOUT_MS = 10000


def produce_input(bootstrap: str, topic: str, n: int, keys: int = 50) -> dict[int, int]:
    """n keyed records with values b"<i>" (idempotent, acks=all); returns each partition's
    end offset (the number of records it got)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    ends: Counter = Counter()

    def delivered(err, msg):
        assert err is None, err
        ends[msg.partition()] += 1

    for i in range(n):
        p.produce(topic, key=b"k%d" % (i % keys), value=b"%d" % i, on_delivery=delivered)
        p.poll(0)
    assert p.flush(30) == 0
    return dict(ends)


class CopyLoop:
    def __init__(self, bootstrap: str, txn_id: str, group: str, src: str, dst: str,
                 ends: dict[int, int], batch: int = 100, pause: float = 0.0,
                 timeout: float = 20.0):
        self.bootstrap = bootstrap
        self.txn_id = txn_id
        self.group = group
        self.src = src
        self.dst = dst
        self.ends = dict(ends)
        self.batch = batch
        self.pause = pause       # seconds of "work" after each transaction
        self.timeout = timeout   # of each client call (seconds)
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.pos: dict[int, int] = {}
        # counters the tests read (from another thread: plain ints, read only)
        self.commits = 0
        self.copied = 0          # records in committed transactions of this loop
        self.aborts = 0
        self.restarts = 0
        self.errors: list[str] = []
        self.fenced = False

    # ------------------------------------------------------------------ clients
    def start(self) -> None:
        """New producer (init_transactions fences any older one with this id) and a consumer
        positioned at the group's committed offsets."""
        self.producer = Producer({
            **CLIENT_CONFIG, "bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5})
        self.producer.init_transactions(self.timeout)
        self.rewind()

    def rewind(self) -> None:
        """A fresh consumer at the group's committed offsets (earliest when none)."""
        self.close_consumer()
        self.consumer = Consumer({
            **CLIENT_CONFIG, "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"})
        parts = [TopicPartition(self.src, p) for p in sorted(self.ends)]
        committed = self.consumer.committed(parts, timeout=self.timeout)
        for tp in committed:
            if tp.error:
                raise KafkaException(tp.error)
        self.pos = {tp.partition: max(tp.offset, 0) for tp in committed}
        self.consumer.assign([TopicPartition(self.src, p, o) for p, o in self.pos.items()])

    def close_consumer(self) -> None:
        if self.consumer is not None:
            c, self.consumer = self.consumer, None
            c.close()

    def drop(self) -> None:
        """Forget both clients (after a fatal error); the next step starts new ones."""
        self.close_consumer()
        self.producer = None
        self.restarts += 1

    # ------------------------------------------------------------------ the loop
    def done(self) -> bool:
        return bool(self.pos) and all(self.pos[p] >= e for p, e in self.ends.items())

    def poll_batch(self, max_wait: float = 2.0) -> list:
        got = []
        deadline = time.monotonic() + max_wait
        while len(got) < self.batch and time.monotonic() < deadline:
            msgs = self.consumer.consume(self.batch - len(got), 0.3)
            for m in msgs:
                if m.error():
                    if m.error().fatal():
                        raise KafkaException(m.error())
                    continue
                got.append(m)
            if not msgs and got:
                break
        return got

    def produce_batch(self) -> int:
        """Begin a transaction, copy one batch into it, add the consumer's offsets; returns
        the number of records (0: nothing to copy, no transaction begun)."""
        msgs = self.poll_batch()
        if not msgs:
            return 0
        self.producer.begin_transaction()
        for m in msgs:
            self.producer.produce(self.dst, key=m.key(), value=m.value())
            self.producer.poll(0)
            self.pos[m.partition()] = m.offset() + 1
        offsets = [TopicPartition(self.src, p, o) for p, o in self.pos.items()]
        self.producer.send_offsets_to_transaction(
            offsets, self.consumer.consumer_group_metadata(), self.timeout)
        return len(msgs)

    def step(self) -> None:
        """One transaction (or, on an error, the recovery a real application does)."""
        try:
            if self.producer is None:
                self.start()
            n = self.produce_batch()
            if n:
                self.producer.commit_transaction(self.timeout)
                self.commits += 1
                self.copied += n
                time.sleep(self.pause)
        except KafkaException as e:
            err: KafkaError = e.args[0]
            self.errors.append(f"{err.name()}: {err.str()}")
            if err.code() in FENCED:
                self.fenced = True      # another instance owns the id now: stop
                return
            if self.producer is not None and err.txn_requires_abort():
                try:
                    self.producer.abort_transaction(self.timeout)
                    self.aborts += 1
                    self.rewind()
                    return
                except KafkaException as again:
                    self.errors.append(f"abort: {again.args[0].name()}")
            self.drop()
            time.sleep(0.2)

    def run(self, deadline: float, max_steps: int = 5000) -> None:
        """Steps until every input offset is committed, or until this instance is fenced by a
        newer one (a zombie stops); fails past the deadline (monotonic)."""
        for _ in range(max_steps):
            if self.fenced or (self.producer is not None and self.done()):
                return
            if time.monotonic() > deadline:
                break
            self.step()
        raise AssertionError(f"copy loop unfinished: {self.state()}")

    def state(self) -> str:
        return (f"at {self.pos} of {self.ends}, {self.commits} commits, {self.aborts} "
                f"aborts, {self.restarts} restarts, last errors {self.errors[-5:]}")

    def close(self) -> None:
        self.close_consumer()
        self.producer = None
