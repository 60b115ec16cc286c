"""Real Kafka clients as group members for the group tests.

Each ``Member`` owns one consumer (confluent-kafka, kafka-python or aiokafka) on its own
thread, polling continuously; the test talks to it through thread-safe snapshots
(``records``, ``assignment``) and ``call`` (run a function on the consumer's thread).
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time

from fastlog.testing import BrokerProcess

CLIENTS = ("confluent", "kafka-python", "aiokafka")

GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "200",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "4",
    "num.partitions": "4",
}


class GroupBroker(BrokerProcess):
    """fastlog-server with GROUP_OVERRIDES unless told otherwise."""

    def __init__(self, data_dir, overrides=None, **kw):
        super().__init__(data_dir, overrides=GROUP_OVERRIDES if overrides is None else overrides,
                         **kw)


def wait_until(cond, timeout=20.0, what="condition", interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name]
    fut.result(timeout=20)


def produce(bootstrap: str, topic: str, partitions: int, n: int, start: int = 0) -> None:
    """n records with values b"<i>", spread round-robin over the partitions."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(20) == 0


class Member:
    """One group member on its own thread (see module comment)."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str, *,
                 assignors: list[str] | None = None, session_ms: int = 1500,
                 instance_id: str | None = None, auto_offset_reset: str = "earliest"):
        self.kind = kind
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.assignors = assignors
        self.session_ms = session_ms
        self.instance_id = instance_id
        self.auto_offset_reset = auto_offset_reset
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self._assignment: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._cmds: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"member-{kind}", daemon=True)
        self._thread.start()
        self._started.wait(20)
        if self._error:
            raise self._error

    # -- snapshots ---------------------------------------------------------------------
    @property
    def assignment(self) -> frozenset[int]:
        with self._lock:
            return self._assignment

    def values(self) -> list[bytes]:
        with self._lock:
            return [v for _, _, v in self.records]

    def check(self) -> None:
        if self._error is not None:
            raise AssertionError(f"{self.kind} member failed: {self._error!r}")

    # -- control -----------------------------------------------------------------------
    def call(self, fn, timeout: float = 20.0):
        """Run fn(consumer) on the member's thread and return its result."""
        done: queue.Queue = queue.Queue()
        self._cmds.put((fn, done))
        ok, value = done.get(timeout=timeout)
        if not ok:
            raise value
        return value

    def commit(self, offsets: dict[int, int]) -> None:
        """Synchronously commit next-offsets per partition."""
        self.call(lambda c: self._commit(c, offsets))

    def close(self, timeout: float = 20.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.kind} member did not close"

    # -- thread ------------------------------------------------------------------------
    def _main(self) -> None:
        if self.kind == "aiokafka":
            asyncio.run(self._amain())
            return
        try:
            consumer = self._make()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self._error = e
            self._started.set()
            return
        self._started.set()
        try:
            while not self._stop.is_set():
                self._run_commands(consumer)
                self._poll(consumer)
        except BaseException as e:  # noqa: BLE001
            self._error = e
        finally:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass

    def _run_commands(self, consumer) -> None:
        while True:
            try:
                fn, done = self._cmds.get_nowait()
            except queue.Empty:
                return
            try:
                done.put((True, fn(consumer)))
            except BaseException as e:  # noqa: BLE001
                done.put((False, e))

    def _make(self):
        if self.kind == "confluent":
            from confluent_kafka import Consumer

            conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                    "auto.offset.reset": self.auto_offset_reset, "enable.auto.commit": False,
                    "session.timeout.ms": self.session_ms,
                    "heartbeat.interval.ms": max(self.session_ms // 5, 100),
                    "topic.metadata.refresh.interval.ms": 1000}
            if self.assignors:
                conf["partition.assignment.strategy"] = ",".join(self.assignors)
            if self.instance_id:
                conf["group.instance.id"] = self.instance_id
            c = Consumer(conf)
            c.subscribe([self.topic])
            return c
        if self.kind == "kafka-python":
            from kafka import KafkaConsumer
            from kafka.coordinator.assignors.range import RangePartitionAssignor
            from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

            names = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
            strategies = [names[a] for a in (self.assignors or ["range", "roundrobin"])]
            c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                              auto_offset_reset=self.auto_offset_reset,
                              enable_auto_commit=False, session_timeout_ms=self.session_ms,
                              heartbeat_interval_ms=max(self.session_ms // 5, 100),
                              partition_assignment_strategy=strategies,
                              group_instance_id=self.instance_id,
                              max_poll_interval_ms=10000, metadata_max_age_ms=1000)
            c.subscribe([self.topic])
            return c
        raise ValueError(self.kind)

    def _poll(self, consumer) -> None:
        got = []
        if self.kind == "confluent":
            msgs = consumer.consume(100, 0.1)
            for m in msgs:
                if m.error() is None:
                    got.append((m.partition(), m.offset(), m.value()))
            parts = frozenset(tp.partition for tp in consumer.assignment())
        else:
            batch = consumer.poll(timeout_ms=100)
            for tp, recs in batch.items():
                got.extend((tp.partition, r.offset, r.value) for r in recs)
            parts = frozenset(tp.partition for tp in consumer.assignment())
        with self._lock:
            self.records.extend(got)
            self._assignment = parts

    def _commit(self, consumer, offsets: dict[int, int]) -> None:
        if self.kind == "confluent":
            from confluent_kafka import TopicPartition

            consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                            asynchronous=False)
        elif self.kind == "kafka-python":
            from kafka import OffsetAndMetadata, TopicPartition

            consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                             for p, o in offsets.items()})
        else:
            raise ValueError(self.kind)

    # -- aiokafka ----------------------------------------------------------------------
    async def _amain(self) -> None:
        from aiokafka import AIOKafkaConsumer

        try:
            c = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                 group_id=self.group, auto_offset_reset=self.auto_offset_reset,
                                 enable_auto_commit=False, session_timeout_ms=self.session_ms,
                                 heartbeat_interval_ms=max(self.session_ms // 5, 100),
                                 max_poll_interval_ms=10000, metadata_max_age_ms=1000)
            await c.start()
        except BaseException as e:  # noqa: BLE001
            self._error = e
            self._started.set()
            return
        self._started.set()
        try:
            while not self._stop.is_set():
                while True:
                    try:
                        fn, done = self._cmds.get_nowait()
                    except queue.Empty:
                        break
                    try:
                        res = fn(c)
                        if asyncio.iscoroutine(res):
                            res = await res
                        done.put((True, res))
                    except BaseException as e:  # noqa: BLE001
                        done.put((False, e))
                batch = await c.getmany(timeout_ms=100)
                got = [(tp.partition, r.offset, r.value) for tp, recs in batch.items()
                       for r in recs]
                parts = frozenset(tp.partition for tp in c.assignment())
                with self._lock:
                    self.records.extend(got)
                    self._assignment = parts
        except BaseException as e:  # noqa: BLE001
            self._error = e
        finally:
            try:
                await c.stop()
            except Exception:  # noqa: BLE001
                pass

    def acommit(self, offsets: dict[int, int]) -> None:
        from aiokafka import TopicPartition

        self.call(lambda c: c.commit({TopicPartition(self.topic, p): o
                                      for p, o in offsets.items()}))


def commit_any(member: Member, offsets: dict[int, int]) -> None:
    if member.kind == "aiokafka":
        member.acommit(offsets)
    else:
        member.commit(offsets)
