"""Three real `fastlog-server` processes forming one ZooKeeper-mode cluster, for the
cluster tests (tests/cluster/; tests/replication/cluster.py's Cluster builds on it):
brokers 1-3 on free 127.0.0.1 ports, each with its own data dir, all under one ZooKeeper
chroot; a kazoo client in the same chroot reads what they wrote. Every wait is bounded
(fastlog.testing.wait_until). Used from the pytest thread.

    c = ClusterHarness(tmp_path, zk_hosts).start()
    c.bootstrap                  # one broker's "127.0.0.1:PORT"
    c.state("t", 0)              # {"leader":..,"leader_epoch":..,"isr":[..],...} from ZooKeeper
    c.kill(2); c.start_broker(2) # SIGKILL and restart on the same port and data
    c.close()
"""

from __future__ import annotations

import json

from fastlog.protocol import ApiKey
from fastlog.testing import BrokerProcess, wait_until
from tests.server.wire import Wire

BROKER_IDS = (1, 2, 3)
SESSION_TIMEOUT_MS = 2000


def overrides(zk_hosts: str, node_id: int, **extra) -> dict[str, str]:
    props = {
        "broker.id": str(node_id),
        "zookeeper.connect": zk_hosts,
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "num.partitions": "3",
        "default.replication.factor": "1",
        "offsets.topic.num.partitions": "6",
        "offsets.topic.replication.factor": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    props.update({k: str(v) for k, v in extra.items()})
    return props


class ClusterHarness:
    # How long start() waits for registration, a controller and full metadata.
    START_TIMEOUT = 30.0

    def __init__(self, tmp_path, zk_hosts: str, ids=BROKER_IDS, rack_of=None, **extra):
        """rack_of: node id -> broker.rack (or None for none)."""
        self.tmp_path = tmp_path
        self.zk_hosts = zk_hosts
        self.brokers = {}
        for i in ids:
            rack = rack_of(i) if rack_of else None
            props = overrides(zk_hosts, i, **extra, **({"broker.rack": rack} if rack else {}))
            self.brokers[i] = BrokerProcess(tmp_path / f"broker-{i}", props)
        self._kazoo = None

    # -------------------------------------------------------------- lifecycle
    def start(self) -> ClusterHarness:
        for b in self.brokers.values():
            b.start()
        t = self.START_TIMEOUT
        wait_until(lambda: self.registered() == sorted(self.brokers), t,
                   what="every broker registered")
        wait_until(lambda: self.controller() is not None, t, what="a controller")
        # Each broker learns of the others through its ZooKeeper watches a moment after they
        # register; topic creation in between would see too few live brokers.
        wait_until(self.every_broker_sees_all, t, what="every broker's metadata listing all")
        return self

    def every_broker_sees_all(self) -> bool:
        want = set(self.brokers)
        return all(ids == want for ids in self._metadata_brokers(self.brokers))

    def _metadata_brokers(self, ids):
        """For each of these brokers, the set of broker ids its Metadata lists."""
        for i in ids:
            w = Wire(self.brokers[i])
            try:
                md = w.call(ApiKey.METADATA, 1, {"topics": []})
            finally:
                w.close()
            yield {x.node_id for x in md.brokers}

    def start_broker(self, node_id: int) -> BrokerProcess:
        """(Re)start one broker and wait until every live broker's metadata lists it: the
        others learn of it through their /brokers/ids watch a moment after it registers,
        and a topic created in between would not count it."""
        b = self.brokers[node_id].start()
        wait_until(lambda: self.every_live_broker_sees(node_id), self.START_TIMEOUT,
                   what=f"broker {node_id} in every live broker's metadata")
        return b

    def every_live_broker_sees(self, node_id: int) -> bool:
        return all(node_id in ids for ids in self._metadata_brokers(self.alive_ids()))

    def kill(self, node_id: int) -> None:
        self.brokers[node_id].kill()

    def stop(self, node_id: int) -> int:
        return self.brokers[node_id].stop()

    def close(self) -> None:
        for b in self.brokers.values():
            if b.alive():
                try:
                    b.stop()
                except AssertionError:
                    b.kill()
        self.reset_zk()

    @property
    def bootstrap(self) -> str:
        return self.brokers[min(self.brokers)].bootstrap

    def alive_ids(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.alive()]

    # -------------------------------------------------------------- ZooKeeper reads
    @property
    def zk(self):
        if self._kazoo is None:
            from kazoo.client import KazooClient

            self._kazoo = KazooClient(hosts=self.zk_hosts, timeout=5.0)
            self._kazoo.start(timeout=15)
        return self._kazoo

    def reset_zk(self) -> None:
        """Drop the inspecting client (before ZooKeeper stops); the next read opens a new one."""
        if self._kazoo is not None:
            self._kazoo.stop()
            self._kazoo.close()
            self._kazoo = None

    def json(self, path: str):
        data, _ = self.zk.get(path)
        return json.loads(data)

    def registered(self) -> list[int]:
        if not self.zk.exists("/brokers/ids"):
            return []
        return sorted(int(c) for c in self.zk.get_children("/brokers/ids"))

    def controller(self) -> int | None:
        if not self.zk.exists("/controller"):
            return None
        try:
            return self.json("/controller")["brokerid"]
        except Exception:  # noqa: BLE001 - gone between the two reads
            return None

    def controller_epoch(self) -> int:
        data, _ = self.zk.get("/controller_epoch")
        return int(data)

    def state(self, topic: str, partition: int) -> dict | None:
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        if not self.zk.exists(path):
            return None
        return self.json(path)

    def leaders(self, topic: str, partitions: int) -> dict[int, int]:
        out = {}
        for p in range(partitions):
            st = self.state(topic, p)
            out[p] = st["leader"] if st else -1
        return out

    def wait_leaders(self, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, int]:
        return wait_until(
            lambda: (ls := self.leaders(topic, partitions)) and all(v >= 0 for v in ls.values())
            and ls, timeout, what=f"leaders of every partition of {topic}")


def attach_broker_logs(rep, clusters) -> None:
    """Add the tail of every broker's log to a failed test's report (conftest hooks)."""
    for c in clusters:
        for i, b in c.brokers.items():
            rep.sections.append((f"broker {i} log tail", b.log_tail(60)))
