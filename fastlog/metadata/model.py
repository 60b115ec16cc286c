# fastlog/metadata/model.py — the cluster metadata model: what a topic and a partition are.
#
# Owns: TopicState (name, topic id, partition assignment, per-topic config overrides,
# internal flag) and PartitionState (replicas, leader, leader epoch, ISR, partition epoch),
# the topic-id format (Kafka's Uuid.toString: 22 chars of base64url), MetadataError, and the
# outcomes of a leader election an admin asks for (ElectLeaders; the controller decides).
# Plain data, no I/O: built by the stores (fastlog/metadata/embedded.py,
# fastlog/zk/metadata_store.py) and read by the broker (fastlog/server/) on its asyncio
# loop.
"""Topics, partitions, leaders and ISR: the records every metadata store keeps."""

from __future__ import annotations

import base64
import dataclasses
import uuid


class MetadataError(Exception):
    """The metadata file is unreadable or inconsistent; message is one sentence."""


# One partition's outcome of an election an admin asked for: a new leader; none needed
# (the preferred replica leads already, or, for an unclean election, a live leader does);
# no replica may lead; no such partition.
ELECTED = "elected"
NOT_NEEDED = "not_needed"
NOT_AVAILABLE = "not_available"
UNKNOWN_PARTITION = "unknown_partition"


@dataclasses.dataclass
class PartitionState:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = dataclasses.field(default_factory=list)
    # The recorded state's version (Kafka's partition epoch: ZooKeeper's znode version of
    # .../partitions/<p>/state), for a leader's conditional ISR updates; -1 when unknown.
    partition_epoch: int = -1


@dataclasses.dataclass
class TopicState:
    name: str
    topic_id: str  # 22-char base64url of a UUID, like Kafka's Uuid.toString()
    partitions: dict[int, PartitionState]
    configs: dict[str, str]  # overrides only, raw strings as the user gave them
    internal: bool = False

    @property
    def topic_id_bytes(self) -> bytes:
        """The id's 16 raw bytes, as the wire carries it (all zero, Kafka's ZERO_UUID, for
        a topic created before topic ids, which ZooKeeper then holds without one)."""
        if not self.topic_id:
            return bytes(16)
        return base64.urlsafe_b64decode(self.topic_id + "==")

    @property
    def replication_factor(self) -> int:
        first = self.partitions.get(0)
        return len(first.replicas) if first else 0


def new_kafka_uuid() -> str:
    """A random id rendered like Kafka's Uuid.toString (base64url, no padding)."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like CLI flags
            return text
