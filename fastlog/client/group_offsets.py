# fastlog/client/group_offsets.py: a consumer group's offsets seen against its partitions,
# for the consumer-groups command and the web console alike.
#
# Owns: which partitions a member was assigned (its ConsumerProtocolAssignment, decoded
# without trusting it), the log end offsets that lag is measured against (a partition
# that cannot be asked is left out), and where committed offsets go when they are reset
# (kafka-consumer-groups.sh --reset-offsets). Reset targets: earliest (log start), latest (log end), an offset, the first offset at
# or after a timestamp (the log end when there is none), or a shift of the committed offset
# (the log end for a partition without one); like Kafka, a target outside the log moves to
# its nearest end. Reads offsets through Admin.list_offsets; commits nothing itself. Runs
# on the caller's event loop.

from __future__ import annotations

from fastlog._codec import CodecError
from fastlog.client.admin import EARLIEST, LATEST
from fastlog.client.cluster import TopicPartition
from fastlog.client.errors import KafkaError
from fastlog.client.group import decode_assignment

RESET_KINDS = ("earliest", "latest", "offset", "datetime", "shift")


def assigned_partitions(data: bytes) -> list[TopicPartition]:
    """The TopicPartitions of a member's ConsumerProtocolAssignment; [] if it does not
    parse (the group's members are not ours to trust)."""
    try:
        return decode_assignment(data)
    except CodecError:
        return []


async def end_offsets(admin, tps) -> dict[TopicPartition, int]:
    """Log end offset per partition; a topic that cannot be asked (deleted since the
    commit, no leader) is left out."""
    ends = {}
    for topic in sorted({tp.topic for tp in tps}):
        mine = [tp for tp in tps if tp.topic == topic]
        try:
            got = await admin.list_offsets(dict.fromkeys(mine, LATEST))
        except KafkaError:
            continue
        ends.update((tp, o.offset) for tp, o in got.items())
    return ends


async def reset_targets(admin, tps: list[TopicPartition], kind: str, value: int | None,
                        committed: dict[TopicPartition, tuple[int, str | None]]
                        ) -> dict[TopicPartition, int]:
    """{tp: new offset} for a reset of kind (RESET_KINDS) with its value (the offset, the
    timestamp in ms, or the shift); KafkaError when a partition's offsets cannot be read."""
    if kind not in RESET_KINDS:
        raise ValueError(f"unknown reset kind {kind!r}")
    earliest = {tp: o.offset for tp, o in
                (await admin.list_offsets(dict.fromkeys(tps, EARLIEST))).items()}
    latest = {tp: o.offset for tp, o in
              (await admin.list_offsets(dict.fromkeys(tps, LATEST))).items()}
    by_time = {}
    if kind == "datetime":
        by_time = {tp: o.offset for tp, o in
                   (await admin.list_offsets(dict.fromkeys(tps, value))).items()}
    new: dict[TopicPartition, int] = {}
    for tp in tps:
        if kind == "earliest":
            target = earliest[tp]
        elif kind == "latest":
            target = latest[tp]
        elif kind == "offset":
            target = value
        elif kind == "datetime":
            target = by_time[tp] if by_time[tp] >= 0 else latest[tp]
        else:  # shift
            base = committed[tp][0] if tp in committed else latest[tp]
            target = base + value
        new[tp] = min(max(target, earliest[tp]), latest[tp])
    return new
