"""One consumer group's membership and state: GroupMetadata and MemberMetadata.

The classic rebalance protocol as Kafka's GroupMetadata keeps it: a state machine
(Empty, PreparingRebalance, CompletingRebalance, Stable, Dead), members keyed by member id
(static members also by group.instance.id), the generation, the chosen protocol and leader,
and the committed offsets of the group (also kept in C memory for the metrics scrape,
_offset_figures.OffsetFigures, written by the offset methods here: every change of
``offsets`` goes through them). Decisions that need time or I/O (timers, parked
JoinGroup/SyncGroup responses, writes to __consumer_offsets) belong to the coordinator;
this module only answers questions and applies transitions, so it can be tested alone.

Not thread-safe: only the broker's event loop thread touches a group.
"""

from __future__ import annotations

import enum
import time
from typing import Any

from ._offset_figures import OffsetFigures
from .schemas import GroupRecord, MemberRecord, OffsetAndMetadata


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's valid previous states for each target state.
_VALID_PREVIOUS = {
    GroupState.DEAD: set(GroupState),
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {
        GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
}


class IllegalStateTransition(RuntimeError):
    pass


def parse_subscription_topics(data: bytes) -> list[str]:
    """The topic list of a ConsumerProtocolSubscription (any version); ValueError if it
    does not parse."""
    from fastlog._codec import CodecError
    from fastlog.protocol.consumer_protocol import decode_subscription

    try:
        return decode_subscription(data)
    except CodecError as e:
        raise ValueError(f"bad consumer subscription: {e}") from None


def now_ms() -> int:
    return int(time.time() * 1000)


class MemberMetadata:
    """A member of a group: identity, timeouts, the protocols it offers (in its order of
    preference) and its current assignment. ``join_waiter``/``sync_waiter`` hold the
    coordinator's parked response (an asyncio future) while the member waits."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host",
                 "rebalance_timeout_ms", "session_timeout_ms", "protocol_type",
                 "protocols", "assignment", "join_waiter", "sync_waiter", "is_new",
                 "heartbeat_timer", "last_heartbeat")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]]):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = list(protocols)
        self.assignment = b""
        self.join_waiter: Any = None
        self.sync_waiter: Any = None
        self.is_new = False
        self.heartbeat_timer: Any = None
        self.last_heartbeat = 0.0

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order (a rejoin that changes
        nothing need not trigger a rebalance)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def same_subscription(self, protocols: list[tuple[str, bytes]], protocol_type: str) -> bool:
        """Whether a rejoin with these protocols asks for what this member has: the same
        protocols in the same order and, for consumers, the same topics in each
        subscription (owned partitions and user data may differ after a restart); other
        protocol types compare their metadata bytes."""
        if [n for n, _ in protocols] != self.protocol_names():
            return False
        for name, data in protocols:
            mine = self.metadata(name)
            if protocol_type == "consumer":
                try:
                    if set(parse_subscription_topics(data)) == set(
                            parse_subscription_topics(mine)):
                        continue
                except ValueError:
                    pass
            if bytes(data) != bytes(mine):
                return False
        return True

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")

    def __repr__(self) -> str:
        return (f"MemberMetadata({self.member_id!r}, instance={self.group_instance_id!r}, "
                f"client={self.client_id!r})")


class GroupMetadata:
    """State of one group (see the module comment)."""

    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY):
        self.group_id = group_id
        self.state = state
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # issued ids awaiting their first join (v4+)
        self.new_member_added = False
        self.current_state_timestamp: int = now_ms()
        # Changed only through the offset methods below, which keep offset_figures (the
        # offsets in C memory, for the metrics scrape) in step.
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.offset_figures = OffsetFigures()
        # TxnOffsetCommit offsets per producer id, written but invisible to OffsetFetch
        # until the producer's transaction commits (Kafka's pendingTransactionalOffsetCommits).
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # Per-group coordinator state that has to live somewhere: the rebalance timer.
        self.join_timer: Any = None  # the rebalance timer, then the pending-sync timer
        self.pending_sync: set[str] = set()  # members of this generation yet to SyncGroup
        self.initial_join_pending = False  # the new-group delay runs; only its timer ends it

    # ---------------------------------------------------------------- state
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed")
        self.state = target
        self.current_state_timestamp = now_ms()

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # ---------------------------------------------------------------- members
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def has_static_member(self, instance_id: str | None) -> bool:
        return instance_id is not None and instance_id in self.static_members

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def is_empty(self) -> bool:
        return not self.members

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # Prefer a member that is already waiting to join, like Kafka.
            self.leader_id = next(
                (m.member_id for m in self.members.values() if m.is_awaiting_join),
                next(iter(self.members), None))
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """A static member rejoined without its member id: it gets a fresh id and keeps
        its place (and leadership) in the group."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def all_members_joined(self) -> bool:
        return (not self.pending_members
                and all(m.is_awaiting_join for m in self.members.values()))

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---------------------------------------------------------------- protocols
    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member offering these protocols may join: an empty group takes any
        non-empty offer; otherwise the type must match and one offered protocol must be
        supported by every current member."""
        if not names or not protocol_type:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & set(names))

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support; the
        one with most votes wins (ties go to the earliest vote, deterministically)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: no protocol supported by all members")
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda n: votes[n])

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY)

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, instance id, metadata for the chosen protocol): what the leader gets."""
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    def protocol_or_empty(self) -> str:
        return self.protocol_name or ""

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, read from their ConsumerProtocolSubscription
        (protocol type "consumer"); None when that cannot be known."""
        if self.protocol_type != "consumer" or not self.protocol_name:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                found = parse_subscription_topics(m.metadata(self.protocol_name))
            except (KeyError, ValueError):
                return None
            topics.update(found)
        return topics

    # ---------------------------------------------------------------- offsets
    def commit_offset(self, topic: str, partition: int, om: OffsetAndMetadata) -> None:
        key = (topic, partition)
        self.offsets[key] = om
        self.offset_figures.put(key, om.offset)

    def load_offsets(self, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        """Offsets read back from __consumer_offsets (the coordinator's load)."""
        self.offsets.update(offsets)
        put = self.offset_figures.put
        for key, om in offsets.items():
            put(key, om.offset)

    def clear_offsets(self) -> None:
        """The group is deleted: every committed offset goes."""
        self.offsets.clear()
        self.offset_figures.clear()

    def rebuild_offset_figures(self) -> None:
        """offset_figures written anew from the offsets (the metrics scrape's check found
        them apart)."""
        self.offset_figures.rebuild(self.offsets)

    def has_pending_txn_offset(self, topic: str, partition: int) -> bool:
        return any((topic, partition) in tps for tps in self.pending_txn_offsets.values())

    def complete_txn_offsets(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended: its pending offsets become the committed
        ones (commit) or are dropped (abort)."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if pending and committed:
            self.load_offsets(pending)

    def remove_offset(self, topic: str, partition: int) -> OffsetAndMetadata | None:
        key = (topic, partition)
        self.offset_figures.remove(key)
        return self.offsets.pop(key, None)

    def expired_offsets(self, now: int, retention_ms: int) -> list[tuple[str, int]]:
        """Offsets past retention. Like Kafka (KIP-211) they expire only while the group is
        Empty, counted from when it became empty (or from the commit, if later)."""
        if not self.is_(GroupState.EMPTY):
            return []
        out = []
        for tp, om in self.offsets.items():
            if om.expire_timestamp >= 0:
                deadline = om.expire_timestamp
            else:
                deadline = max(self.current_state_timestamp, om.commit_timestamp) + retention_ms
            if deadline <= now:
                out.append(tp)
        return out

    # ---------------------------------------------------------------- persistence
    def to_record(self) -> GroupRecord:
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.current_state_timestamp,
            members=[MemberRecord(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout_ms, m.session_timeout_ms,
                m.metadata(self.protocol_name) if self.protocol_name else b"",
                m.assignment) for m in self.members.values()],
        )

    @classmethod
    def from_record(cls, group_id: str, rec: GroupRecord) -> GroupMetadata:
        """A group as loaded from __consumer_offsets: Stable with its members and their
        assignments if it had any, else Empty."""
        g = cls(group_id, GroupState.STABLE if rec.members else GroupState.EMPTY)
        g.generation_id = rec.generation
        g.protocol_type = rec.protocol_type or None
        g.protocol_name = rec.protocol
        g.leader_id = rec.leader
        if rec.current_state_timestamp >= 0:
            g.current_state_timestamp = rec.current_state_timestamp
        for mr in rec.members:
            m = MemberMetadata(mr.member_id, mr.group_instance_id, mr.client_id, mr.client_host,
                               mr.rebalance_timeout_ms, mr.session_timeout_ms,
                               rec.protocol_type, [(rec.protocol or "", mr.subscription)])
            m.assignment = mr.assignment
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members), None)
        return g

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state.value}, gen={self.generation_id}, "
                f"members={list(self.members)})")
