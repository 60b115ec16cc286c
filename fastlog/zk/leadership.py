# LeadershipTracker: turns the cluster metadata cache (ZkMetadataStore) into this broker's
# replica role changes — the part of Kafka's LeaderAndIsr / StopReplica handling that says
# WHAT to do: become leader of a partition (at a leader epoch), become follower of another
# broker, stop being a replica (and delete the log when the topic is gone). It compares
# the cache's latest snapshot with the roles it last handed out, so bursts of ZooKeeper
# notifications collapse into one pass and a missed or repeated notification cannot leave
# a stale role behind.
#
# Threading: the store's listener runs on kazoo's thread and only schedules a pass on the
# broker's asyncio loop (call_soon_threadsafe); the passes and every handler call run on
# that loop, one at a time, so the handler needs no locks.

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from fastlog.metadata import PartitionState
from fastlog.zk.metadata_store import ZkMetadataStore
from fastlog.zk.paths import NO_LEADER

log = logging.getLogger("fastlog.zk.leadership")

TopicPartition = tuple[str, int]


class ReplicaRoleHandler(Protocol):
    """What the broker implements (all called on its asyncio loop)."""

    def become_leader(self, topic: str, partition: int, state: PartitionState) -> None: ...

    def become_follower(self, topic: str, partition: int, state: PartitionState) -> None:
        """`state.leader` is another broker, or -1 while the partition is offline."""

    def stop_replica(self, topic: str, partition: int, delete: bool) -> None:
        """No longer a replica here; `delete` when the topic is gone (remove the log)."""

    def session_changed(self, expired: bool) -> None:
        """ZooKeeper session expired (stop taking writes) or renewed."""


@dataclass(frozen=True)
class _Role:
    # The ISR is not part of a role: the leader itself keeps it (Kafka's ISR changes do not
    # trigger LeaderAndIsr either); it is passed along when the role changes.
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...] = field(default=(), compare=False)
    partition_epoch: int = field(default=-1, compare=False)
    # A topic deleted and created again under the same name is another topic: its old log
    # must go even if this broker never saw the name disappear.
    topic_id: str = ""


class LeadershipTracker:
    def __init__(self, store: ZkMetadataStore, broker_id: int, handler: ReplicaRoleHandler,
                 loop: asyncio.AbstractEventLoop):
        self.store = store
        self.broker_id = broker_id
        self.handler = handler
        self.loop = loop
        self._roles: dict[TopicPartition, _Role] = {}
        self._scheduled = False
        self._stopped = False

    def start(self) -> None:
        """Listen to the store and run the first pass (on the loop)."""
        self.store.add_listener(self._on_change)
        self._schedule()

    def stop(self) -> None:
        self._stopped = True

    @property
    def roles(self) -> dict[TopicPartition, str]:
        """'leader' / 'follower' for each partition this broker replicates."""
        return {tp: "leader" if r.leader == self.broker_id else "follower"
                for tp, r in self._roles.items()}

    # -- kazoo thread ------------------------------------------------------------------------

    def _on_change(self, kind: str, name) -> None:
        if self._stopped:
            return
        if kind == "session":
            expired = name == "expired"
            self.loop.call_soon_threadsafe(self._session, expired)
            return
        if kind in ("topic", "partition"):
            self._schedule()

    def _schedule(self) -> None:
        # At most one pass pending: it reads the newest snapshot whenever it runs.
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon_threadsafe(self._pass)

    # -- loop thread ---------------------------------------------------------------------------

    def _session(self, expired: bool) -> None:
        if not self._stopped:
            self.handler.session_changed(expired)

    def _pass(self) -> None:
        self._scheduled = False
        if self._stopped:
            return
        me = self.broker_id
        wanted: dict[TopicPartition, _Role] = {}
        topic_names = set(self.store.topic_names())
        for name in topic_names:
            state = self.store.topic(name)
            if state is None:
                continue
            for p, ps in state.partitions.items():
                if me in ps.replicas:
                    if ps.leader == NO_LEADER and ps.partition_epoch < 0:
                        # Assigned, but the controller has not written its state yet: no
                        # role to hand out (nor to take back) until it does.
                        if (name, p) in self._roles:
                            wanted[(name, p)] = self._roles[(name, p)]
                        continue
                    wanted[(name, p)] = _Role(ps.leader, ps.leader_epoch, tuple(ps.replicas),
                                              tuple(ps.isr), ps.partition_epoch,
                                              state.topic_id)
        for tp in sorted(set(self._roles) - set(wanted)):
            del self._roles[tp]
            self._call(self.handler.stop_replica, tp[0], tp[1], tp[0] not in topic_names)
        for tp, role in sorted(wanted.items()):
            old = self._roles.get(tp)
            if old == role:
                continue
            if old is not None and old.topic_id and role.topic_id and old.topic_id != role.topic_id:
                self._call(self.handler.stop_replica, tp[0], tp[1], True)
            self._roles[tp] = role
            ps = PartitionState(list(role.replicas), role.leader, role.leader_epoch,
                                list(role.isr), role.partition_epoch)
            if role.leader == me:
                self._call(self.handler.become_leader, tp[0], tp[1], ps)
            else:
                self._call(self.handler.become_follower, tp[0], tp[1], ps)

    def _call(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("replica role change %s%r failed", fn.__name__, args)
