"""Kafka's "consumer" embedded protocol: the bytes a consumer group passes through the
group coordinator without it having to understand them.

ConsumerProtocolSubscription travels as a member's JoinGroup metadata and
ConsumerProtocolAssignment as the SyncGroup assignment. Both open with an int16 version,
and every version starts with the same fields, which are all we read: a subscription is
[topic string] (then user data, and owned partitions from v1), an assignment is
[topic string, [int32 partition]] (then user data). We write version 0. Bad bytes raise
fastlog._codec.CodecError; callers decide what a bad member means to them.

Used by the client's group membership, the group coordinator (which topics a group reads)
and `fastlog consumer-groups` (which member owns which partition). Pure functions, any
thread.
"""

from __future__ import annotations

from fastlog._codec import Reader, Writer


def encode_subscription(topics, user_data: bytes = b"") -> bytes:
    """ConsumerProtocolSubscription v0 for these topics, in the order given."""
    w = Writer()
    w.int16(0)
    w.array_len(len(topics))
    for t in topics:
        w.string(t)
    w.bytes_(user_data)
    return w.getvalue()


def decode_subscription(data) -> list[str]:
    """The topics of a ConsumerProtocolSubscription of any version."""
    r = Reader(data)
    r.int16()
    return [r.string() for _ in range(max(r.array_len(), 0))]


def encode_assignment(partitions) -> bytes:
    """ConsumerProtocolAssignment v0 of (topic, partition) pairs: topics and partitions
    sorted, so equal assignments encode to equal bytes."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    w = Writer()
    w.int16(0)
    w.array_len(len(by_topic))
    for topic, parts in sorted(by_topic.items()):
        w.string(topic)
        w.array_len(len(parts))
        for p in sorted(parts):
            w.int32(p)
    w.bytes_(b"")
    return w.getvalue()


def decode_assignment(data) -> list[tuple[str, int]]:
    """(topic, partition) pairs of a ConsumerProtocolAssignment of any version; [] for
    empty bytes (a member that was given nothing)."""
    if not data:
        return []
    r = Reader(data)
    r.int16()
    out = []
    for _ in range(max(r.array_len(), 0)):
        topic = r.string()
        out.extend((topic, r.int32()) for _ in range(max(r.array_len(), 0)))
    return out
