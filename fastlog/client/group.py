# fastlog/client/group.py: consumer group membership for fastlog's Consumer (subscribe).
#
# Owns one member's life in a Kafka consumer group: FindCoordinator, JoinGroup (with the
# MEMBER_ID_REQUIRED second join of KIP-394), the leader's partition assignment (range or
# roundrobin, the names librdkafka, kafka-python and aiokafka offer too), SyncGroup,
# heartbeats, offset commits tagged with the generation, and LeaveGroup on close. The
# "consumer" embedded protocol (ConsumerProtocolSubscription / ConsumerProtocolAssignment)
# is fastlog.protocol.consumer_protocol's; here assignments are TopicPartitions.
#
# It talks to the coordinator over a connection of its own, so a JoinGroup the broker
# holds during a rebalance never queues behind (or in front of) the consumer's fetches.
# Runs on the consumer's event loop; the Consumer calls start/poll_assignment/commit/close.

from __future__ import annotations

import asyncio
import time

from fastlog._codec import CodecError
from fastlog.client import errors
from fastlog.client.admin import offset_commit_request
from fastlog.client.cluster import TopicPartition
from fastlog.client.connection import BrokerConnection
from fastlog.client.versions import ApiKey
from fastlog.protocol import consumer_protocol
from fastlog.protocol.consumer_protocol import decode_subscription, encode_subscription

MEMBER_ID_REQUIRED = 79
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
_REJOIN = {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS}
_COORDINATOR_MOVED = {errors.NOT_COORDINATOR, errors.COORDINATOR_NOT_AVAILABLE,
                      errors.COORDINATOR_LOAD_IN_PROGRESS}


def encode_assignment(tps) -> bytes:
    """ConsumerProtocolAssignment v0 of TopicPartitions (fastlog.protocol.consumer_protocol)."""
    return consumer_protocol.encode_assignment((tp.topic, tp.partition) for tp in tps)


def decode_assignment(data) -> list[TopicPartition]:
    """TopicPartitions of a ConsumerProtocolAssignment; CodecError on bad bytes."""
    return [TopicPartition(t, p) for t, p in consumer_protocol.decode_assignment(data)]


def assign_range(members: dict[str, list[str]], partitions: dict[str, int]
                 ) -> dict[str, list[TopicPartition]]:
    """Kafka's range assignor: per topic, consecutive partition ranges by member id order."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted(partitions):
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribed:
            continue
        n = partitions[topic]
        per, extra = divmod(n, len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            count = per + (1 if i < extra else 0)
            out[m].extend(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return out


def assign_roundrobin(members: dict[str, list[str]], partitions: dict[str, int]
                      ) -> dict[str, list[TopicPartition]]:
    """Kafka's roundrobin assignor: all partitions in order dealt to subscribed members."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    ring = sorted(members)
    i = 0
    for topic in sorted(partitions):
        for p in range(partitions[topic]):
            for _ in range(len(ring)):
                m = ring[i % len(ring)]
                i += 1
                if topic in members[m]:
                    out[m].append(TopicPartition(topic, p))
                    break
    return out


ASSIGNORS = {"range": assign_range, "roundrobin": assign_roundrobin}


class GroupMembership:
    """One consumer's membership of group_id, subscribed to topics."""

    def __init__(self, consumer, group_id: str, topics, *, session_timeout_ms: int = 10000,
                 rebalance_timeout_ms: int = 30000, heartbeat_interval_ms: int = 3000,
                 assignors=("range", "roundrobin"), auto_commit_interval_ms: int | None = 5000):
        unknown = [a for a in assignors if a not in ASSIGNORS]
        if unknown:
            raise errors.FastlogError(f"unknown partition assignor '{unknown[0]}'")
        self.consumer = consumer
        self.cluster = consumer.cluster
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000.0
        self.assignors = list(assignors)
        self.auto_commit_interval = None if auto_commit_interval_ms is None \
            else auto_commit_interval_ms / 1000.0
        self.member_id = ""
        self.generation_id = -1
        self.assignment: list[TopicPartition] = []
        self._conn: BrokerConnection | None = None
        self._rejoin = True
        self._heartbeat_task: asyncio.Task | None = None
        self._last_commit = time.monotonic()
        self._closed = False

    # -- the Consumer's side --------------------------------------------------------------

    async def ensure_active(self) -> None:
        """Join (or rejoin) if needed, then make the consumer's assignment match ours."""
        if self._closed:
            return
        if self._heartbeat_task is not None and self._heartbeat_task.done():
            exc = self._heartbeat_task.exception()
            self._heartbeat_task = None
            if exc is not None and not isinstance(exc, errors.FastlogError):
                raise exc
            self._rejoin = True
        if self._rejoin:
            await self._join()
        elif self.auto_commit_interval is not None and \
                time.monotonic() - self._last_commit >= self.auto_commit_interval:
            await self.commit(self.consumer.consumed_offsets())

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        conn = await self._coordinator()
        resp = await conn.request(ApiKey.OFFSET_COMMIT, offset_commit_request(
            self.group_id, offsets, generation_id=self.generation_id,
            member_id=self.member_id))
        self._last_commit = time.monotonic()
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code in _REJOIN:
                    self._rejoin = True
                    raise errors.KafkaError(p.error_code, f"commit for group '{self.group_id}' "
                                                          f"(the group is rebalancing)")
                errors.raise_for(p.error_code, f"commit offset of group '{self.group_id}' for "
                                               f"{t.name}-{p.partition_index}")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        if self._conn is not None:
            try:
                if self.auto_commit_interval is not None and self.generation_id >= 0:
                    await self.commit(self.consumer.consumed_offsets())
                if self.member_id:
                    await self._conn.request(ApiKey.LEAVE_GROUP, {
                        "group_id": self.group_id, "member_id": self.member_id,
                        "members": [{"member_id": self.member_id,
                                     "group_instance_id": None}]}, timeout=5)
            except errors.FastlogError:
                pass  # leaving is best effort: the session timeout removes us anyway
            await self._conn.close()

    # -- protocol steps ---------------------------------------------------------------

    async def _coordinator(self) -> BrokerConnection:
        if self._conn is not None and self._conn.connected:
            return self._conn
        node = await self.consumer.admin.find_coordinator(self.group_id)
        broker = self.cluster.brokers[node]
        self._conn = await BrokerConnection(
            broker.host, broker.port, client_id=self.cluster.client_id, node_id=node,
            request_timeout_ms=self.cluster.request_timeout_ms,
            security=self.cluster.security).connect()
        return self._conn

    async def _join(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None
        if self.auto_commit_interval is not None and self.generation_id >= 0:
            try:  # hand our progress over before the partitions move (Kafka does the same)
                await self.commit(self.consumer.consumed_offsets())
            except errors.FastlogError:
                pass
        self.consumer.assign([])
        deadline = time.monotonic() + self.rebalance_timeout_ms / 1000.0 + 30
        attempt = 0
        while True:
            try:
                await self._join_once()
                break
            except errors.FastlogError as exc:
                code = getattr(exc, "code", None)
                if code in _COORDINATOR_MOVED or isinstance(
                        exc, errors.BrokerUnavailable | errors.ClientTimeout):
                    if self._conn is not None:
                        await self._conn.close()
                        self._conn = None
                elif code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                elif code not in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
                    raise
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(self.cluster.backoff(attempt))
                attempt += 1
        self._rejoin = False
        self.consumer.assign(self.assignment)
        self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _join_once(self) -> None:
        conn = await self._coordinator()
        metadata = encode_subscription(self.topics)
        timeout = self.rebalance_timeout_ms / 1000.0 + 10
        for _ in range(3):
            resp = await conn.request(ApiKey.JOIN_GROUP, {
                "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": a, "metadata": metadata} for a in self.assignors]},
                timeout=timeout)
            if resp.error_code == MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            errors.raise_for(resp.error_code, f"join group '{self.group_id}'")
            break
        else:
            raise errors.KafkaError(MEMBER_ID_REQUIRED, f"join group '{self.group_id}'")
        self.member_id = resp.member_id
        self.generation_id = resp.generation_id
        assignments = []
        if resp.leader == resp.member_id:
            assignments = await self._assign(resp.protocol_name, resp.members)
        sync = await conn.request(ApiKey.SYNC_GROUP, {
            "group_id": self.group_id, "generation_id": self.generation_id,
            "member_id": self.member_id, "group_instance_id": None,
            "assignments": assignments}, timeout=timeout)
        errors.raise_for(sync.error_code, f"sync group '{self.group_id}'")
        try:
            self.assignment = decode_assignment(sync.assignment)
        except CodecError as exc:
            raise errors.ProtocolMismatch(f"bad assignment from group '{self.group_id}': "
                                          f"{exc}") from None

    async def _assign(self, protocol: str, members) -> list[dict]:
        subscriptions = {}
        for m in members:
            try:
                subscriptions[m.member_id] = decode_subscription(m.metadata)
            except CodecError:
                subscriptions[m.member_id] = []
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        await self.cluster.refresh_metadata(topics)
        counts = {t: len(self.cluster.topics[t].partitions)
                  for t in topics if t in self.cluster.topics}
        plan = ASSIGNORS.get(protocol, assign_range)(subscriptions, counts)
        return [{"member_id": m, "assignment": encode_assignment(tps)} for m, tps in plan.items()]

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                conn = await self._coordinator()
                resp = await conn.request(ApiKey.HEARTBEAT, {
                    "group_id": self.group_id, "generation_id": self.generation_id,
                    "member_id": self.member_id, "group_instance_id": None})
            except errors.FastlogError:
                self._rejoin = True
                return
            if resp.error_code:
                if resp.error_code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self._rejoin = True
                self.consumer.wake()
                return
