"""GroupCoordinator: Kafka's classic consumer-group protocol and offset storage.

Owns every group whose ``__consumer_offsets`` partition this broker leads: membership and
rebalances (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), committed offsets (OffsetCommit,
OffsetFetch, OffsetDelete) and the admin views (ListGroups, DescribeGroups, DeleteGroups).
State changes follow Kafka's GroupCoordinator; where Kafka parks a request in a purgatory
we park an asyncio future and use loop timers:

* a JoinGroup waits on ``member.join_waiter`` until the rebalance completes: when every
  member has rejoined, when the rebalance timeout fires, or, for a new group, after
  ``group.initial.rebalance.delay.ms`` (extended while members keep arriving);
* a SyncGroup waits on ``member.sync_waiter`` until the leader's assignment is written;
* each member has a session timer, reset by every heartbeat, join, sync and commit;
  when it fires the member is removed and the group rebalances.

Offsets and group metadata are acknowledged only after the record reached the log (the
``GroupStore``); the in-memory cache is then updated and serves OffsetFetch. At startup
the cache is rebuilt from the topic; groups in a partition being loaded answer
COORDINATOR_LOAD_IN_PROGRESS (the partitions owned and loading, and leadership changes:
fastlog/server/partitioned_coordinator.py, shared with the transaction coordinator). A load hands the loop back every LOAD_YIELD_RECORDS records
(and the store between reads), so a large partition never stalls the broker; a load that
the partition's leadership moved under is dropped.

Event-loop thread only: every method runs on the broker's asyncio loop, and nothing here
blocks (no I/O other than awaiting the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from typing import Any

from fastlog.protocol.errors import Errors
from fastlog.server.partitioned_coordinator import PartitionedCoordinator

from .group import GroupMetadata, GroupState, MemberMetadata, now_ms
from .offsets import (
    GROUP_METADATA_TOPIC,
    GroupStore,
    LogGroupStore,
    StoreError,
    TxnControl,
    partition_for,
)
from .schemas import (
    GroupKey,
    OffsetAndMetadata,
    OffsetKey,
    SchemaError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)

log = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
# Records decoded per loop turn while loading a partition (~4 us each: ~5 ms of Python).
LOAD_YIELD_RECORDS = 1000
# A member's first JoinGroup may wait for a whole rebalance (up to the other members'
# rebalance timeout): Kafka gives new members this long instead of their session timeout.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclasses.dataclass
class JoinResult:
    error: Errors
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = dataclasses.field(default_factory=list)
    skip_assignment: bool = False  # JoinGroup v9+ (KIP-814)


@dataclasses.dataclass
class SyncResult:
    error: Errors
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclasses.dataclass
class GroupSummary:
    group_id: str
    error: Errors
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    # (member id, instance id, client id, client host, metadata, assignment)
    members: list[tuple[str, str | None, str, str, bytes, bytes]] = dataclasses.field(
        default_factory=list)


class GroupCoordinator(PartitionedCoordinator):
    """See the module comment. ``broker`` provides ``config`` (KafkaConfig) and, for the
    default store and topic creation, ``replica_manager`` and ``create_internal_topic``."""

    TOPIC = GROUP_METADATA_TOPIC
    LOADED = "group"

    def __init__(self, broker: Any, store: GroupStore | None = None):
        super().__init__(broker)
        cfg = broker.config
        self.num_partitions = int(cfg["offsets.topic.num.partitions"])
        self.initial_rebalance_delay_ms = int(cfg["group.initial.rebalance.delay.ms"])
        self.min_session_timeout_ms = int(cfg["group.min.session.timeout.ms"])
        self.max_session_timeout_ms = int(cfg["group.max.session.timeout.ms"])
        self.max_group_size = int(_cfg(cfg, "group.max.size", 2**31 - 1))
        self.retention_ms = int(cfg["offsets.retention.minutes"]) * 60_000
        self.offset_metadata_max_bytes = int(_cfg(cfg, "offset.metadata.max.bytes", 4096))
        self.retention_check_ms = int(_cfg(cfg, "offsets.retention.check.interval.ms", 600_000))
        self.store: GroupStore = store if store is not None else LogGroupStore(broker)
        self.groups: dict[str, GroupMetadata] = {}

    # ================================================================ lifecycle
    async def startup(self, load: bool = True) -> None:
        """Ensure __consumer_offsets exists (compacted) and start loading every partition
        this broker leads; returns before loading ends (clients retry meanwhile)."""
        create = getattr(self.broker, "create_internal_topic", None)
        if create is not None:
            await _maybe_await(create(GROUP_METADATA_TOPIC, self.num_partitions, {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(_cfg(self.broker.config, "offsets.topic.segment.bytes",
                                          104857600)),
            }))
        self._own_led_partitions(load)
        self._spawn(self._expire_offsets_loop())

    async def shutdown(self) -> None:
        await self._stop()
        self.groups.clear()

    def _forget_partition(self, partition: int) -> None:
        """Resigned (PartitionedCoordinator.on_resigned): its groups go, their waiting
        members answered NOT_COORDINATOR."""
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            self._cancel_join_timer(group)
            for m in group.members.values():
                _cancel(m.heartbeat_timer)
                m.heartbeat_timer = None
                self._complete_join(m, JoinResult(Errors.NOT_COORDINATOR, member_id=m.member_id))
                self._complete_sync(m, SyncResult(Errors.NOT_COORDINATOR))

    async def load_partition(self, partition: int, election: int | None = None) -> int | None:
        """Rebuild the groups of one partition from its records (last record per key wins,
        a null value deletes). Loaded groups with members come back Stable with their
        assignments; the members' session timers start now. Nothing is installed when
        leadership of the partition moved since `election` (default: the current one).
        Returns how many groups were installed, or None when the load was dropped."""
        if election is None:
            election = self._elections.get(partition, 0)
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # TxnOffsetCommit records per producer, per group, until the producer's marker.
        pending: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        records: dict[str, Any] = {}
        decoded = 0
        async for chunk in self.store.load(partition):
            for item in chunk:
                decoded += 1
                if decoded % LOAD_YIELD_RECORDS == 0:
                    await asyncio.sleep(0)   # let requests in: decoding is Python per record
                if isinstance(item, TxnControl):
                    for group_id, tps in pending.pop(item.producer_id, {}).items():
                        if item.committed:
                            offsets.setdefault(group_id, {}).update(tps)
                    continue
                key, value = item[0], item[1]
                try:
                    k = decode_key(key)
                    if isinstance(k, OffsetKey) and len(item) == 3:
                        om = decode_offset_value(value)
                        if om is not None:
                            pending.setdefault(item[2], {}).setdefault(k.group, {})[
                                (k.topic, k.partition)] = om
                    elif isinstance(k, OffsetKey):
                        om = decode_offset_value(value)
                        tps = offsets.setdefault(k.group, {})
                        if om is None:
                            tps.pop((k.topic, k.partition), None)
                        else:
                            tps[(k.topic, k.partition)] = om
                    elif isinstance(k, GroupKey):
                        records[k.group] = decode_group_value(value)
                except SchemaError as e:
                    log.warning("skipping a bad record in %s-%d: %s", GROUP_METADATA_TOPIC,
                                partition, e)
        if self._elections.get(partition, 0) != election or partition not in self.owned:
            log.info("%s-%d moved while it loaded: load dropped", GROUP_METADATA_TOPIC,
                     partition)
            return None
        installed = 0
        with_pending = {g for by_group in pending.values() for g in by_group}
        for group_id in set(offsets) | set(records) | with_pending:
            rec = records.get(group_id)
            tps = offsets.get(group_id, {})
            if rec is None and not tps and group_id not in with_pending:
                continue  # deleted group, or nothing left of it
            if rec is not None:
                group = GroupMetadata.from_record(group_id, rec)
            else:
                group = GroupMetadata(group_id)
            group.load_offsets(tps)
            for producer_id, by_group in pending.items():
                if group_id in by_group:
                    group.pending_txn_offsets[producer_id] = by_group[group_id]
            old = self.groups.get(group_id)
            if old is not None and old.members:
                continue  # a live group already formed here (cannot happen while loading)
            self.groups[group_id] = group
            installed += 1
            for m in group.members.values():
                self._schedule_heartbeat(group, m)
        log.debug("loaded %s-%d (%d groups)", GROUP_METADATA_TOPIC, partition, installed)
        return installed

    # ================================================================ routing
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _check_status(self, group_id: str | None) -> Errors:
        """Kafka's validateGroupStatus: may this broker serve the group right now?"""
        if not group_id:
            return Errors.INVALID_GROUP_ID
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(group_id)
        if p not in self.owned:
            return Errors.NOT_COORDINATOR
        if p in self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        return Errors.NONE

    def is_coordinator_for(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    # ================================================================ JoinGroup
    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                         require_known_member_id: bool, client_id: str, client_host: str,
                         rebalance_timeout_ms: int, session_timeout_ms: int,
                         protocol_type: str, protocols: list[tuple[str, bytes]],
                         skip_assignment_supported: bool = False) -> JoinResult:
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return JoinResult(err, member_id=member_id)
        if not (self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms):
            return JoinResult(Errors.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has none
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(GroupState.DEAD):
            # The group was deleted or unloaded since the lookup: client rediscovers.
            return JoinResult(Errors.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if (len(group.members) >= self.max_group_size and is_unknown
                and not group.has_static_member(group_instance_id)):
            return JoinResult(Errors.GROUP_MAX_SIZE_REACHED, member_id=member_id)
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            return JoinResult(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)

        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if is_unknown:
            new_id = f"{client_id}-{uuid.uuid4()}"
            if group_instance_id is not None:
                self._static_member_join(group, new_id, group_instance_id,
                                         skip_assignment_supported, client_id,
                                         client_host, rebalance_timeout_ms, session_timeout_ms,
                                         protocol_type, protocols, fut)
            elif require_known_member_id:
                # KIP-394: hand out the id first; the member rejoins with it.
                group.pending_members.add(new_id)
                self._schedule_pending_expiry(group, new_id, session_timeout_ms)
                return JoinResult(Errors.MEMBER_ID_REQUIRED, member_id=new_id,
                                  generation_id=group.generation_id)
            else:
                self._add_member_and_rebalance(group, new_id, None, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms,
                                               protocol_type, protocols, fut)
        else:
            res = self._current_member_join(group, member_id, group_instance_id, client_id,
                                            client_host, rebalance_timeout_ms,
                                            session_timeout_ms, protocol_type, protocols, fut)
            if res is not None:
                return res
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        return await fut

    def _current_member_join(self, group, member_id, group_instance_id, client_id, client_host,
                             rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                             fut) -> JoinResult | None:
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id=member_id)
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms,
                                           protocol_type, protocols, fut)
            return None
        err = self._validate_member(group, member_id, group_instance_id)
        if err is not Errors.NONE:
            return JoinResult(err, member_id=member_id)
        member = group.get(member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                              session_timeout_ms, fut)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # A resent JoinGroup (e.g. the response was lost): answer it again.
                self._schedule_heartbeat(group, member)
                return self._join_result_for(group, member)
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                              session_timeout_ms, fut)
        elif group.is_(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining means it wants a new assignment (e.g. metadata
                # changed); a changed subscription needs one too.
                self._update_member_and_rebalance(group, member, protocols,
                                                  rebalance_timeout_ms, session_timeout_ms, fut)
            else:
                self._schedule_heartbeat(group, member)
                return self._join_result_for(group, member, with_members=False)
        else:
            return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id=member_id)
        return None

    def _static_member_join(self, group, new_id, instance_id, skip_assignment_supported,
                            client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                            protocol_type, protocols, fut) -> None:
        old_id = group.static_member_id(instance_id)
        if old_id is None:
            self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms,
                                           protocol_type, protocols, fut)
            return
        # A known static member restarted: it takes over its old place under a new id, and
        # whatever the old incarnation was waiting for is fenced (FENCED_INSTANCE_ID).
        old = group.get(old_id)
        self._complete_join(old, JoinResult(Errors.FENCED_INSTANCE_ID, member_id=old_id))
        self._complete_sync(old, SyncResult(Errors.FENCED_INSTANCE_ID))
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.client_id = client_id
        member.client_host = client_host
        if group.is_(GroupState.STABLE) and member.same_subscription(protocols,
                                                                     group.protocol_type):
            # Kafka's updateStaticMemberAndRebalance: a stable group keeps its generation
            # and assignment; the answer names the leader as it was (the old id when the
            # leader itself restarted), so the member does not assign again but syncs and
            # gets its previous assignment. A changed subscription rebalances below.
            member.protocols = list(protocols)
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.session_timeout_ms = session_timeout_ms
            self._schedule_heartbeat(group, member)
            self._spawn(self._store_group_quietly(group))
            if skip_assignment_supported and group.is_leader(new_id):
                # JoinGroup v9+ (KIP-814): the restarted leader learns it leads (so it goes
                # on watching metadata for changes) and that it must not assign again.
                fut.set_result(dataclasses.replace(self._join_result_for(group, member),
                                                   skip_assignment=True))
                return
            fut.set_result(JoinResult(Errors.NONE, group.generation_id, group.protocol_type,
                                      group.protocol_name, current_leader or "", new_id, []))
            return
        self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                          session_timeout_ms, fut)

    def _join_result_for(self, group: GroupMetadata, member: MemberMetadata,
                         with_members: bool = True) -> JoinResult:
        members = (group.current_member_metadata()
                   if with_members and group.is_leader(member.member_id) else [])
        return JoinResult(Errors.NONE, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", member.member_id, members)

    def _add_member_and_rebalance(self, group, member_id, instance_id, client_id, client_host,
                                  rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                  protocols, fut) -> None:
        member = MemberMetadata(member_id, instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                protocols)
        member.is_new = True
        member.join_waiter = fut
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(self, group, member, protocols, rebalance_timeout_ms,
                                     session_timeout_ms, fut) -> None:
        member.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_waiter is not None and member.join_waiter is not fut:
            # An older JoinGroup of the same member is superseded by this one.
            self._complete_join(member, JoinResult(Errors.REBALANCE_IN_PROGRESS,
                                                   member_id=member.member_id))
        member.join_waiter = fut
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    # ================================================================ rebalance
    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, Errors.REBALANCE_IN_PROGRESS)
        was_empty = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("group %s: rebalancing (generation %d): %s", group.group_id,
                 group.generation_id, reason)
        self._cancel_join_timer(group)
        loop = asyncio.get_running_loop()
        if was_empty:
            delay = min(self.initial_rebalance_delay_ms, group.rebalance_timeout_ms())
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_timer = loop.call_later(
                delay / 1000, self._initial_join_expired, group, delay, remaining)
            group.initial_join_pending = True
        else:
            group.join_timer = loop.call_later(
                group.rebalance_timeout_ms() / 1000, self._complete_join_phase, group)

    def _initial_join_expired(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        group.join_timer = None
        if group.new_member_added and remaining > 0:
            # Members are still arriving: wait one more delay (bounded by the rebalance
            # timeout) so a starting group of N consumers forms in one generation.
            group.new_member_added = False
            nxt = min(delay, remaining)
            group.join_timer = asyncio.get_running_loop().call_later(
                nxt / 1000, self._initial_join_expired, group, delay, remaining - nxt)
        else:
            group.initial_join_pending = False
            self._complete_join_phase(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """Kafka's DelayedJoin.tryComplete: done when everyone rejoined. The initial delay
        of a new group only ends by its timer."""
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.initial_join_pending:
            return
        if group.all_members_joined():
            self._complete_join_phase(group)

    def _cancel_join_timer(self, group: GroupMetadata) -> None:
        _cancel(group.join_timer)
        group.join_timer = None
        group.initial_join_pending = False

    def _complete_join_phase(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: drop members that did not rejoin, start the next
        generation and answer every parked JoinGroup."""
        self._cancel_join_timer(group)
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        for m in group.not_yet_rejoined():
            log.info("group %s: removing member %s, it did not rejoin in time",
                     group.group_id, m.member_id)
            self._remove_member(group, m)
        group.init_next_generation()
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name)
        if group.is_(GroupState.EMPTY):
            self._spawn(self._store_group_quietly(group))
            return
        for m in list(group.members.values()):
            self._complete_join(m, self._join_result_for(group, m))
            m.is_new = False
            self._schedule_heartbeat(group, m)
        # Kafka's pending-sync check (KIP-814 era): every member must SyncGroup within the
        # rebalance timeout, or a leader that heartbeats but never syncs would stall the
        # group in CompletingRebalance forever.
        group.pending_sync = set(group.members)
        group.join_timer = asyncio.get_running_loop().call_later(
            max(group.rebalance_timeout_ms(), 1) / 1000, self._sync_expired, group,
            group.generation_id)

    def _sync_expired(self, group: GroupMetadata, generation: int) -> None:
        group.join_timer = None
        if group.generation_id != generation or not group.pending_sync or group.state not in (
                GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        late = [group.members[m] for m in group.pending_sync if m in group.members]
        group.pending_sync.clear()
        for m in late:
            log.info("group %s: removing member %s, it did not SyncGroup in time",
                     group.group_id, m.member_id)
            self._remove_member(group, m)
        self._maybe_prepare_rebalance(group, "members did not sync in time")

    def _complete_join(self, member: MemberMetadata, result: JoinResult) -> None:
        fut, member.join_waiter = member.join_waiter, None
        if fut is not None and not fut.done():
            fut.set_result(result)

    def _complete_sync(self, member: MemberMetadata, result: SyncResult) -> None:
        fut, member.sync_waiter = member.sync_waiter, None
        if fut is not None and not fut.done():
            fut.set_result(result)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: Errors) -> None:
        for m in group.members.values():
            m.assignment = b""
            self._complete_sync(m, SyncResult(error))

    def _set_and_propagate_assignment(self, group: GroupMetadata,
                                      assignment: dict[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        for m in group.members.values():
            self._complete_sync(m, SyncResult(Errors.NONE, group.protocol_type,
                                              group.protocol_name, m.assignment))
            self._schedule_heartbeat(group, m)

    # ================================================================ members, timers
    def _validate_member(self, group: GroupMetadata, member_id: str,
                         group_instance_id: str | None,
                         generation_id: int | None = None) -> Errors:
        """Kafka's validateCurrentMember: fenced static instance, unknown member, stale
        generation, in that order."""
        if group_instance_id is not None:
            known = group.static_member_id(group_instance_id)
            if known is not None and known != member_id:
                return Errors.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id is not None and generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        return Errors.NONE

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                            timeout_ms: int | None = None) -> None:
        _cancel(member.heartbeat_timer)
        timeout_ms = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._heartbeat_expired, group, member)

    def _schedule_pending_expiry(self, group: GroupMetadata, member_id: str,
                                 session_timeout_ms: int) -> None:
        asyncio.get_running_loop().call_later(
            session_timeout_ms / 1000, self._pending_expired, group, member_id)

    def _pending_expired(self, group: GroupMetadata, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)

    def _heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if (member.is_awaiting_join and not member.is_new) or member.is_awaiting_sync:
            # A member waiting in a rebalance needs no heartbeats; the rebalance timeout
            # governs it, and its session restarts when the rebalance answers it.
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        _cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        self._complete_join(member, JoinResult(Errors.UNKNOWN_MEMBER_ID,
                                               member_id=member.member_id))
        self._complete_sync(member, SyncResult(Errors.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: GroupMetadata,
                                        member: MemberMetadata) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"member {member.member_id} left")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # ================================================================ SyncGroup
    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return SyncResult(err)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(Errors.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.DEAD):
            return SyncResult(Errors.COORDINATOR_NOT_AVAILABLE)
        err = self._validate_member(group, member_id, group_instance_id, generation_id)
        if err is not Errors.NONE:
            return SyncResult(err)
        if ((protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)):
            return SyncResult(Errors.INCONSISTENT_GROUP_PROTOCOL)
        member = group.get(member_id)
        if group.is_(GroupState.EMPTY):
            return SyncResult(Errors.UNKNOWN_MEMBER_ID)
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            group.pending_sync.discard(member_id)
            if not group.pending_sync and group.join_timer is not None:
                self._cancel_join_timer(group)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return SyncResult(Errors.REBALANCE_IN_PROGRESS)
        if group.is_(GroupState.STABLE):
            self._schedule_heartbeat(group, member)
            return SyncResult(Errors.NONE, group.protocol_type, group.protocol_name,
                              member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored.
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if member.sync_waiter is not None:
            self._complete_sync(member, SyncResult(Errors.REBALANCE_IN_PROGRESS))
        member.sync_waiter = fut
        self._schedule_heartbeat(group, member)
        if group.is_leader(member_id):
            self._spawn(self._store_assignment(group, group.generation_id, dict(assignments)))
        return await fut

    async def _store_assignment(self, group: GroupMetadata, generation: int,
                                assignments: dict[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        error = Errors.NONE
        try:
            await self._store_group(group)
        except StoreError as e:
            error = e.error
        if not (group.is_(GroupState.COMPLETING_REBALANCE)
                and group.generation_id == generation):
            return  # a member left or joined meanwhile; that rebalance answers everyone
        if error is not Errors.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        self._set_and_propagate_assignment(group, assignments)
        group.transition_to(GroupState.STABLE)

    async def _store_group(self, group: GroupMetadata) -> None:
        p = self.partition_for(group.group_id)
        await self.store.append(p, [(encode_group_key(group.group_id),
                                     encode_group_value(group.to_record()))])

    async def _store_group_quietly(self, group: GroupMetadata) -> None:
        try:
            await self._store_group(group)
        except StoreError as e:
            log.warning("group %s: storing metadata failed: %s", group.group_id, e.error.name)

    # ================================================================ Heartbeat
    async def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                        generation_id: int) -> Errors:
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return err
        group = self.groups.get(group_id)
        if group is None:
            return Errors.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if group.is_(GroupState.EMPTY):
            return Errors.UNKNOWN_MEMBER_ID
        err = self._validate_member(group, member_id, group_instance_id, generation_id)
        if err is not Errors.NONE:
            return err
        self._schedule_heartbeat(group, group.get(member_id))
        if group.is_(GroupState.PREPARING_REBALANCE):
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    # ================================================================ LeaveGroup
    async def leave_group(self, group_id: str, members: list[tuple[str, str | None]]
                          ) -> tuple[Errors, list[tuple[str, str | None, Errors]]]:
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return err, [(m, i, err) for m, i in members]
        group = self.groups.get(group_id)
        if group is None:
            return Errors.NONE, [(m, i, Errors.UNKNOWN_MEMBER_ID) for m, i in members]
        if group.is_(GroupState.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        out = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
                known = group.static_member_id(instance_id)
                if known is None:
                    out.append((member_id, instance_id, Errors.UNKNOWN_MEMBER_ID))
                    continue
                member_id = known
            if group.is_pending_member(member_id):
                group.pending_members.discard(member_id)
                self._try_complete_join(group)
                out.append((member_id, instance_id, Errors.NONE))
                continue
            err = self._validate_member(group, member_id, instance_id)
            if err is not Errors.NONE:
                out.append((member_id, instance_id, err))
                continue
            log.info("group %s: member %s leaves", group_id, member_id)
            self._remove_member_and_update_group(group, group.get(member_id))
            out.append((member_id, instance_id, Errors.NONE))
        return Errors.NONE, out

    # ================================================================ offsets
    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int,
                             offsets: dict[tuple[str, int], OffsetAndMetadata]
                             ) -> dict[tuple[str, int], Errors]:
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return dict.fromkeys(offsets, err)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A group member committing to a group this coordinator does not know.
                return dict.fromkeys(offsets, Errors.ILLEGAL_GENERATION)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(GroupState.DEAD):
            return dict.fromkeys(offsets, Errors.COORDINATOR_NOT_AVAILABLE)
        if not (generation_id < 0 and group.is_(GroupState.EMPTY)):
            # Commits from group members: check who and which generation (admin and
            # standalone consumers commit with generation -1 to an empty group).
            if group.is_(GroupState.COMPLETING_REBALANCE):
                return dict.fromkeys(offsets, Errors.REBALANCE_IN_PROGRESS)
            err = self._validate_member(group, member_id, group_instance_id, generation_id)
            if err is not Errors.NONE:
                return dict.fromkeys(offsets, err)
            self._schedule_heartbeat(group, group.get(member_id))
        result, accepted = self._accept_offsets(offsets)
        records = [(encode_offset_key(group_id, t, p), encode_offset_value(om))
                   for (t, p), om in accepted.items()]
        if records:
            try:
                await self.store.append(self.partition_for(group_id), records)
            except StoreError as e:
                result.update(dict.fromkeys(accepted, e.error))
                return result
            if not group.is_(GroupState.DEAD):
                for tp, om in accepted.items():
                    group.commit_offset(tp[0], tp[1], om)
            result.update(dict.fromkeys(accepted, Errors.NONE))
        return result

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 member_id: str, group_instance_id: str | None,
                                 generation_id: int,
                                 offsets: dict[tuple[str, int], OffsetAndMetadata]
                                 ) -> dict[tuple[str, int], Errors]:
        """TxnOffsetCommit: the offsets go to the log in a transactional batch of the
        producer and stay pending (OffsetFetch does not see them) until the marker of the
        producer's transaction reaches this group's partition (complete_txn_offsets).
        A member id or generation (v3, KIP-447) is checked against the group's."""
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return dict.fromkeys(offsets, err)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(GroupState.DEAD):
            return dict.fromkeys(offsets, Errors.COORDINATOR_NOT_AVAILABLE)
        if group_instance_id is not None:
            known = group.static_member_id(group_instance_id)
            if known is not None and known != member_id:
                return dict.fromkeys(offsets, Errors.FENCED_INSTANCE_ID)
        if member_id and not group.has(member_id):
            return dict.fromkeys(offsets, Errors.UNKNOWN_MEMBER_ID)
        if generation_id >= 0 and generation_id != group.generation_id:
            return dict.fromkeys(offsets, Errors.ILLEGAL_GENERATION)
        result, accepted = self._accept_offsets(offsets)
        if not accepted:
            return result
        try:
            await self.store.append(self.partition_for(group_id), [
                (encode_offset_key(group_id, t, p), encode_offset_value(om))
                for (t, p), om in accepted.items()], producer=(producer_id, producer_epoch))
        except StoreError as e:
            result.update(dict.fromkeys(accepted, e.error))
            return result
        group.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
        result.update(dict.fromkeys(accepted, Errors.NONE))
        return result

    def _accept_offsets(self, offsets: dict[tuple[str, int], OffsetAndMetadata]
                        ) -> tuple[dict[tuple[str, int], Errors],
                                   dict[tuple[str, int], OffsetAndMetadata]]:
        """(refused, accepted): metadata longer than offset.metadata.max.bytes is
        OFFSET_METADATA_TOO_LARGE; the rest get the commit time now unless they carry
        one, and "" for no metadata."""
        refused: dict[tuple[str, int], Errors] = {}
        accepted = {}
        now = now_ms()
        for tp, om in offsets.items():
            if om.metadata is not None and \
                    len(om.metadata.encode()) > self.offset_metadata_max_bytes:
                refused[tp] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            if om.commit_timestamp < 0:
                om.commit_timestamp = now
            om.metadata = om.metadata or ""
            accepted[tp] = om
        return refused, accepted

    def complete_txn_offsets(self, producer_id: int, partitions: list[int],
                             committed: bool) -> None:
        """A transaction marker of the producer reached these __consumer_offsets
        partitions: its pending offsets in their groups become visible or are dropped."""
        wanted = set(partitions)
        for group in list(self.groups.values()):
            if producer_id in group.pending_txn_offsets \
                    and self.partition_for(group.group_id) in wanted:
                group.complete_txn_offsets(producer_id, committed)

    def unstable_offsets(self, group_id: str, partitions) -> set[tuple[str, int]]:
        """Which of the partitions have a transactional commit still pending: what an
        OffsetFetch with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT for."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {tp for tp in partitions if group.has_pending_txn_offset(*tp)}

    async def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                            ) -> tuple[Errors, dict[tuple[str, int], OffsetAndMetadata | None]]:
        """Committed offsets of the listed partitions (None: all the group has); a partition
        without a commit maps to None."""
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return Errors.NONE, dict.fromkeys(partitions or [])
        if partitions is None:
            return Errors.NONE, dict(group.offsets)
        return Errors.NONE, {tp: group.offsets.get(tp) for tp in partitions}

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[Errors, dict[tuple[str, int], Errors]]:
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return Errors.GROUP_ID_NOT_FOUND, {}
        if group.protocol_type not in (None, "", "consumer") and not group.is_(GroupState.EMPTY):
            return Errors.NON_EMPTY_GROUP, {}
        subscribed = group.subscribed_topics() if not group.is_(GroupState.EMPTY) else set()
        result: dict[tuple[str, int], Errors] = {}
        deletable = []
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                result[tp] = Errors.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[tp] = Errors.NONE
                deletable.append(tp)
        present = [tp for tp in deletable if tp in group.offsets]
        if present:
            try:
                await self.store.append(self.partition_for(group_id), [
                    (encode_offset_key(group_id, t, p), None) for t, p in present])
            except StoreError as e:
                return e.error, {}
            for t, p in present:
                group.remove_offset(t, p)
        return Errors.NONE, result

    # ================================================================ admin views
    def list_groups(self) -> tuple[Errors, list[tuple[str, str, str]]]:
        """(group id, protocol type, state) of every live group; COORDINATOR_LOAD_IN_PROGRESS
        while any partition is loading, like Kafka."""
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        if self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, []
        return Errors.NONE, [(g.group_id, g.protocol_type or "", g.state.value)
                             for g in self.groups.values() if not g.is_(GroupState.DEAD)]

    def describe_group(self, group_id: str) -> GroupSummary:
        err = self._check_status(group_id)
        if err is not Errors.NONE:
            return GroupSummary(group_id, err)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return GroupSummary(group_id, Errors.NONE)
        stable = group.is_(GroupState.STABLE)
        members = []
        for m in group.members.values():
            meta = b""
            if stable and group.protocol_name:
                with contextlib.suppress(KeyError):
                    meta = m.metadata(group.protocol_name)
            members.append((m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            meta, m.assignment if stable else b""))
        return GroupSummary(group_id, Errors.NONE, group.state.value, group.protocol_type or "",
                            group.protocol_or_empty() if stable else "", members)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, Errors]:
        out: dict[str, Errors] = {}
        for group_id in group_ids:
            err = self._check_status(group_id)
            if err is not Errors.NONE:
                out[group_id] = err
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                out[group_id] = Errors.GROUP_ID_NOT_FOUND
                continue
            if not group.is_(GroupState.EMPTY):
                out[group_id] = Errors.NON_EMPTY_GROUP
                continue
            records = [(encode_offset_key(group_id, t, p), None) for t, p in group.offsets]
            records.append((encode_group_key(group_id), None))
            try:
                await self.store.append(self.partition_for(group_id), records)
            except StoreError as e:
                out[group_id] = e.error
                continue
            group.transition_to(GroupState.DEAD)
            group.clear_offsets()
            self._cancel_join_timer(group)
            if self.groups.get(group_id) is group:
                del self.groups[group_id]
            out[group_id] = Errors.NONE
        return out

    # ================================================================ retention
    async def _expire_offsets_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_ms / 1000)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiration failed")

    async def expire_offsets(self, now: int | None = None) -> int:
        """Write tombstones for offsets past offsets.retention.minutes (Empty groups only);
        an Empty group left with no offsets is deleted too. Returns how many expired."""
        now = now_ms() if now is None else now
        removed = 0
        for group in list(self.groups.values()):
            p = self.partition_for(group.group_id)
            if p in self.loading or p not in self.owned:
                continue
            expired = group.expired_offsets(now, self.retention_ms)
            records = [(encode_offset_key(group.group_id, t, q), None) for t, q in expired]
            drop_group = (group.is_(GroupState.EMPTY) and not group.members
                          and len(expired) == len(group.offsets))
            if drop_group:
                records.append((encode_group_key(group.group_id), None))
            if not records:
                continue
            try:
                await self.store.append(p, records)
            except StoreError as e:
                log.warning("group %s: expiring offsets failed: %s", group.group_id,
                            e.error.name)
                continue
            for t, q in expired:
                group.remove_offset(t, q)
            removed += len(expired)
            if drop_group and group.is_(GroupState.EMPTY) and not group.offsets:
                group.transition_to(GroupState.DEAD)
                self.groups.pop(group.group_id, None)
        return removed


def _cancel(timer: Any) -> None:
    if timer is not None:
        timer.cancel()


def _cfg(cfg: Any, key: str, default: Any) -> Any:
    try:
        v = cfg[key]
    except (KeyError, TypeError):
        return default
    return default if v is None else v


async def _maybe_await(x: Any) -> Any:
    if asyncio.iscoroutine(x) or isinstance(x, asyncio.Future):
        return await x
    return x
