"""Kafka's record formats for the internal topic ``__consumer_offsets``.

Each record key starts with an int16 version that says what the record is:

* versions 0 and 1: an offset commit, key = (group, topic, partition); the value is an
  ``OffsetCommitValue`` v0..v3 (we write v3: offset, leader epoch, metadata, commit time;
  v1 also carried an expire timestamp);
* version 2: group metadata, key = (group); the value is a ``GroupMetadataValue`` v0..v3
  (we write v3: protocol type, generation, protocol, leader, state timestamp, members with
  their instance ids, timeouts, subscription and assignment bytes).

A null value is a tombstone: the offset or group was deleted. Records written by Kafka
itself (any of these versions) load unchanged, so a data directory can move between the
two. Flexible versions (v4+, KIP-915) are read by skipping their tagged fields.

Pure functions over bytes; any thread may call them. Decoding raises SchemaError (a
ValueError) naming what was wrong, never anything else, for arbitrary input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastlog._codec import CodecError, Reader, Writer

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


class SchemaError(ValueError):
    """A __consumer_offsets record that does not decode."""


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass
class OffsetAndMetadata:
    """One committed offset as the cache and the log hold it."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only v1 values carried one; -1 when absent


@dataclass
class MemberRecord:
    """One member inside a GroupMetadataValue."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupRecord:
    """A GroupMetadataValue: the group as of its last completed rebalance."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberRecord] = field(default_factory=list)


# ------------------------------------------------------------------ encoding


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    w = Writer(16 + len(group) + len(topic))
    w.int16(OFFSET_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return w.getvalue()


def encode_group_key(group: str) -> bytes:
    w = Writer(8 + len(group))
    w.int16(GROUP_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def encode_offset_value(om: OffsetAndMetadata) -> bytes:
    """v3, or v1 when the commit carried its own expiry (OffsetCommit v2-v4
    retention_time_ms), the only version with a place for it (as Kafka does)."""
    w = Writer(40 + len(om.metadata or ""))
    if om.expire_timestamp >= 0:
        w.int16(1)
        w.int64(om.offset)
        w.string(om.metadata or "")
        w.int64(om.commit_timestamp)
        w.int64(om.expire_timestamp)
        return w.getvalue()
    w.int16(OFFSET_VALUE_VERSION)
    w.int64(om.offset)
    w.int32(om.leader_epoch)
    w.string(om.metadata or "")
    w.int64(om.commit_timestamp)
    return w.getvalue()


def encode_group_value(g: GroupRecord) -> bytes:
    w = Writer(64 + sum(len(m.subscription) + len(m.assignment) + 64 for m in g.members))
    w.int16(GROUP_VALUE_VERSION)
    w.string(g.protocol_type or "")
    w.int32(g.generation)
    w.nullable_string(g.protocol)
    w.nullable_string(g.leader)
    w.int64(g.current_state_timestamp)
    w.array_len(len(g.members))
    for m in g.members:
        w.string(m.member_id)
        w.nullable_string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


# ------------------------------------------------------------------ decoding


def decode_key(key) -> OffsetKey | GroupKey:
    """The key of a __consumer_offsets record; SchemaError for anything unknown."""
    if key is None:
        raise SchemaError("record without a key")
    try:
        r = Reader(key)
        version = r.int16()
        if version in (0, 1):
            out: OffsetKey | GroupKey = OffsetKey(r.string(), r.string(), r.int32())
        elif version == 2:
            out = GroupKey(r.string())
        else:
            raise SchemaError(f"unknown key version {version}")
    except CodecError as e:
        raise SchemaError(f"bad key: {e}") from None
    return out


def decode_offset_value(value) -> OffsetAndMetadata | None:
    """An OffsetCommitValue v0..v4, or None for a tombstone."""
    if value is None:
        return None
    try:
        r = Reader(value)
        version = r.int16()
        if version < 0 or version > 4:
            raise SchemaError(f"unknown offset value version {version}")
        flexible = version >= 4
        offset = r.int64()
        epoch = r.int32() if version >= 3 else -1
        metadata = r.compact_string() if flexible else r.string()
        commit_ts = r.int64()
        expire_ts = r.int64() if version == 1 else -1
        if flexible:
            r.tagged_fields()
    except CodecError as e:
        raise SchemaError(f"bad offset value: {e}") from None
    return OffsetAndMetadata(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_value(value) -> GroupRecord | None:
    """A GroupMetadataValue v0..v4, or None for a tombstone."""
    if value is None:
        return None
    try:
        r = Reader(value)
        version = r.int16()
        if version < 0 or version > 4:
            raise SchemaError(f"unknown group value version {version}")
        flex = version >= 4
        text = r.compact_string if flex else r.string
        ntext = r.compact_nullable_string if flex else r.nullable_string
        blob = r.compact_bytes if flex else r.bytes_
        g = GroupRecord(text(), r.int32(), ntext(), ntext())
        if version >= 2:
            g.current_state_timestamp = r.int64()
        n = r.compact_array_len() if flex else r.array_len()
        for _ in range(max(n, 0)):
            member_id = text()
            instance = ntext() if version >= 3 else None
            client_id = text()
            client_host = text()
            rebalance = r.int32() if version >= 1 else -1
            session = r.int32()
            if rebalance < 0:
                rebalance = session
            g.members.append(MemberRecord(member_id, instance, client_id, client_host,
                                          rebalance, session, bytes(blob()), bytes(blob())))
            if flex:
                r.tagged_fields()
        if flex:
            r.tagged_fields()
    except CodecError as e:
        raise SchemaError(f"bad group value: {e}") from None
    return g
