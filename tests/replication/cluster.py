"""A replicated cluster for fault tests, and the checker (used by tests/replication and
tests/replication/soak.py). Cluster is tests/cluster/harness.ClusterHarness with replicated
settings.

    cluster = Cluster(tmp_path, zk_hosts).start()      # 3 fastlog-server processes
    cluster.create_topic("t", partitions=3)              # RF=3, min.insync.replicas=2
    load = Load(cluster.bootstrap, "t", 3).start()       # idempotent acks=all producer
    ... cluster.kill(cluster.leader_of("t", 0)); cluster.restart(id) ...
    load.stop(); report = check(cluster, "t", 3, load)   # lost / duplicates / order / ...
    cluster.close()                                      # kill every broker

Every wait is bounded; processes are real brokers (fastlog.testing.BrokerProcess),
ZooKeeper is real (fastlog.testing.ZooKeeperServer), clients are confluent-kafka (librdkafka).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import signal
import threading
import time

from fastlog import _codec
from tests.cluster.harness import ClusterHarness

# A replicated cluster's settings, over tests/cluster/harness.overrides: RF=3 with
# min.insync.replicas=2, quick ISR and fetch timings, nothing automatic behind the test's
# back (no unclean election, leader rebalance or topic creation).
REPLICATED = {
    "zookeeper.session.timeout.ms": "4000",
    "num.partitions": "1",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "false",
    "auto.create.topics.enable": "false",
}


class Cluster(ClusterHarness):
    """ClusterHarness with replicated defaults, racks, SIGSTOP pauses, and the checker's
    views of partition states and of the replicas' batches on disk."""

    START_TIMEOUT = 30.0

    def __init__(self, workdir, zk_hosts: str, racks: dict[int, str] | None = None, **extra):
        racks = racks or {}
        super().__init__(workdir, zk_hosts, rack_of=racks.get, **{**REPLICATED, **extra})
        self.paused: set[int] = set()

    # ------------------------------------------------------------------ lifecycle
    def close(self, clean: bool = False) -> None:
        """Kill every broker (tests are done with them; a clean stop waits for controlled
        shutdowns), or SIGTERM them with clean=True."""
        for i, b in self.brokers.items():
            if i in self.paused:
                self.resume(i)
            if b.alive() and clean:
                try:
                    b.stop(timeout=30)
                except AssertionError:
                    b.kill()
            b.kill()
        self.reset_zk()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.port)

    def restart(self, node_id: int) -> None:
        # Without start_broker's metadata wait: a paused broker would not answer it.
        self.brokers[node_id].start()

    def pause(self, node_id: int) -> None:
        self.brokers[node_id].proc.send_signal(signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        self.brokers[node_id].proc.send_signal(signal.SIGCONT)
        self.paused.discard(node_id)

    @staticmethod
    def wait(cond, timeout: float, what: str, step: float = 0.1):
        """wait_until that also rides out exceptions (brokers coming up, leaders moving)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = cond()
            except Exception as e:  # noqa: BLE001 - brokers may be coming up
                last = e
            if last and not isinstance(last, Exception):
                return last
            time.sleep(step)
        raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")

    # ------------------------------------------------------------------ ZooKeeper view
    def live_ids(self) -> list[int]:
        return self.registered()

    def states(self, topic: str, partitions: int) -> dict[int, dict]:
        """{partition: {"leader", "leader_epoch", "isr"}} from the state znodes."""
        return {p: self.json(f"/brokers/topics/{topic}/partitions/{p}/state")
                for p in range(partitions)}

    def leader_of(self, topic: str, partition: int) -> int:
        return self.states(topic, partition + 1)[partition]["leader"]

    def wait_full_isr(self, topic: str, partitions: int, timeout: float = 40.0) -> None:
        want = sorted(self.brokers)
        self.wait(lambda: all(sorted(s["isr"]) == want and s["leader"] in want
                              for s in self.states(topic, partitions).values()),
                  timeout, f"ISR {want} on every partition of {topic}")

    # ------------------------------------------------------------------ topics
    def create_topic(self, topic: str, partitions: int = 3, rf: int = 3) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        fut = admin.create_topics([NewTopic(topic, partitions, rf,
                                            config={"min.insync.replicas": "2"})])[topic]
        fut.result(30)
        self.wait_full_isr(topic, partitions)

    # ------------------------------------------------------------------ replicas on disk
    def batch_crcs(self, node_id: int, topic: str, partition: int, below: int):
        """[(base offset, last offset, leader epoch, CRC)] of the batches below `below`
        in this broker's segment files."""
        d = self.brokers[node_id].data_dir / f"{topic}-{partition}"
        out = []
        for path in sorted(glob.glob(os.path.join(d, "*.log"))):
            with open(path, "rb") as f:
                data = f.read()
            for b in _codec.scan_batches(data, verify_crc=True).batches:
                if b.last_offset < below:
                    out.append((b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc))
        return out


@dataclasses.dataclass
class Load:
    """An idempotent acks=all producer of unique increasing values ("<n>"), partition
    n % partitions, at `rate` records/s, on its own thread; every delivery report kept."""

    bootstrap: str
    topic: str
    partitions: int
    rate: int = 200
    acked: dict = dataclasses.field(default_factory=dict)   # value -> (partition, offset)
    failed: dict = dataclasses.field(default_factory=dict)  # value -> error text
    sent: int = 0
    fatal: str = ""

    def start(self) -> Load:
        from confluent_kafka import Producer

        self._producer = Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "delivery.timeout.ms": 120000, "request.timeout.ms": 10000,
            "max.in.flight.requests.per.connection": 5, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, "socket.timeout.ms": 10000,
            "log_level": 2, "error_cb": self._error,
        })
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)
        self._thread.start()
        return self

    def _error(self, err):
        if err.fatal():
            self.fatal = str(err)

    def _report(self, err, msg):
        value = int(msg.value())
        with self._lock:
            if err is None:
                self.acked[value] = (msg.partition(), msg.offset())
            else:
                self.failed[value] = str(err)

    def _run(self):
        interval = 1.0 / self.rate
        nxt = time.monotonic()
        n = 0
        while not self._stop.is_set():
            try:
                try:
                    self._producer.produce(self.topic, str(n).encode(),
                                           partition=n % self.partitions,
                                           on_delivery=self._report)
                    n += 1
                    self.sent = n
                except BufferError:
                    pass   # the queue is full: poll serves delivery reports
                self._producer.poll(0)
            except:  # noqa: E722 - a fatal error (KafkaError is no Exception subclass) ends it
                self.fatal = self.fatal or "fatal producer error"
                return
            nxt += interval
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                nxt = time.monotonic()

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acked(self, more: int, timeout: float = 30.0) -> None:
        base = self.acked_count()
        Cluster.wait(lambda: self.acked_count() >= base + more, timeout,
                     f"{more} more acknowledged records")

    def stop(self, flush_timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(10)
        try:
            self._producer.flush(flush_timeout)
        except:  # noqa: E722 - confluent-kafka raises KafkaError, not an Exception subclass
            self.fatal = self.fatal or "fatal producer error at flush"
        self._producer = None  # destroys the librdkafka handle


class HwMonitor:
    """Polls every partition's high watermark (ListOffsets latest, as a consumer sees it)
    every `interval` s on its own thread and records any decrease."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval: float = 0.2):
        self.bootstrap, self.topic, self.partitions, self.interval = (
            bootstrap, topic, partitions, interval)
        self.highest: dict[int, int] = {}
        self.decreases: list[tuple[int, int, int]] = []  # (partition, before, after)
        self.polls = 0

    def start(self) -> HwMonitor:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hw-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "hw-monitor",
                      "log_level": 2, "topic.metadata.refresh.interval.ms": 500})
        try:
            while not self._stop.wait(self.interval):
                for p in range(self.partitions):
                    try:
                        high = c.get_watermark_offsets(TopicPartition(self.topic, p),
                                                       timeout=2)[1]
                    except Exception:  # noqa: BLE001 - leader moving: no answer this time
                        continue
                    self.polls += 1
                    before = self.highest.get(p, -1)
                    if high < before:
                        self.decreases.append((p, before, high))
                    self.highest[p] = max(before, high)
        finally:
            c.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclasses.dataclass
class Report:
    acked: int
    read: int
    lost: list
    duplicates: list
    out_of_order: list
    inconsistent: list
    diverged: list

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicates or self.out_of_order or self.inconsistent
                    or self.diverged)

    def __str__(self) -> str:
        return (f"acked={self.acked} read={self.read} lost={len(self.lost)} "
                f"duplicates={len(self.duplicates)} out_of_order={len(self.out_of_order)} "
                f"inconsistent={len(self.inconsistent)} diverged={self.diverged[:3]} "
                f"(first lost: {sorted(self.lost)[:5]})")


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0):
    """{partition: [(offset, value)]} read from offset 0 up to each partition's HW."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"checker-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        ends = {}
        for p in range(partitions):
            # a new leader answers OFFSET_NOT_AVAILABLE until its HW caught up: retry
            ends[p] = Cluster.wait(
                lambda p=p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] + 1,
                30, f"the high watermark of partition {p}") - 1
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        done = {p for p in range(partitions) if ends[p] == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                if m.error():
                    continue
                p = m.partition()
                out[p].append((m.offset(), int(m.value())))
                if m.offset() + 1 >= ends[p]:
                    done.add(p)
        return out, ends
    finally:
        c.close()


def check(cluster: Cluster, topic: str, partitions: int, load: Load) -> Report:
    """Port of Kafka's validate_delivery plus Jepsen's queue checks, and a comparison of
    the replicas' batch CRCs below the high watermark."""
    cluster.wait_full_isr(topic, partitions, timeout=60)
    got, ends = read_all(cluster.bootstrap, topic, partitions)
    seen: dict[int, int] = {}
    dups, order, inconsistent = [], [], []
    where = {}
    for p, recs in got.items():
        last = -1
        for off, v in recs:
            seen[v] = seen.get(v, 0) + 1
            where[(p, off)] = v
            if v <= last:
                order.append((p, off, v))
            last = v
    dups = [v for v, n in seen.items() if n > 1]
    acked = dict(load.acked)
    lost = [v for v in acked if v not in seen]
    for v, (p, off) in acked.items():
        if (p, off) in where and where[(p, off)] != v:
            inconsistent.append((p, off, v, where[(p, off)]))
    diverged = []
    for p in range(partitions):
        views = {b: cluster.batch_crcs(b, topic, p, ends[p]) for b in cluster.brokers}
        first = next(iter(views.values()))
        for b, v in views.items():
            if v != first:
                diverged.append((p, b))
    return Report(len(acked), sum(len(r) for r in got.values()), lost, dups, order,
                  inconsistent, diverged)
