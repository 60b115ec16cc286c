# fastlog/metadata/store.py — the cluster metadata interface the broker uses.
#
# Owns: MetadataStore, what the broker needs from cluster metadata whoever stores it —
# topic reads, topic creation/deletion, added partitions, config overrides, producer-id
# blocks, the cluster id, the controller id, users' configs (the SCRAM credentials and
# quotas, Kafka's /config/users/<user> map), client quotas' configs (Kafka's
# /config/clients/<id> and /config/users/<user>/clients/<id>), dynamic broker configs
# (/config/brokers/<id> and /config/brokers/<default>, KIP-226) and partition
# reassignments (KIP-455's Admin API over what the controller moves). Implemented by EmbeddedMetadataStore
# (single node, fastlog/metadata/embedded.py) and ZkMetadataStore (cluster mode, Kafka's
# znodes, fastlog/zk/metadata_store.py).
# Called from: the broker's asyncio API loop only (reads are plain attribute reads of an
# in-memory cache; mutations are coroutines so a ZooKeeper store can await its round trip).
"""The metadata store interface."""

from __future__ import annotations

import abc
from collections.abc import Mapping

from fastlog.metadata.model import TopicState

PRODUCER_ID_BLOCK_SIZE = 1000

TopicPartition = tuple[str, int]
# What a reassignment request gets per partition: None (accepted) or (Kafka's error name,
# message), e.g. ("NO_REASSIGNMENT_IN_PROGRESS", "...").
ReassignmentResult = tuple[str, str] | None


def reassignment_problem(target: list[int], current: list[int], live) -> str | None:
    """Why a partition cannot move to replicas `target` (Kafka's controller checks:
    not empty, no duplicates, no negative ids, every added replica on a live broker),
    or None."""
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return f"Duplicate replica ids in partition reassignment replica list: {target}"
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {target}"
    adding = [r for r in target if r not in current]
    if any(r not in live for r in adding):
        return (f"Replica assignment has brokers that are not alive. Replica list: {adding}, "
                f"live broker list: {sorted(live)}")
    return None
# Kafka's ConfigEntityName.Default: the broker entity of the cluster-wide dynamic configs.
DEFAULT_BROKER_ENTITY = "<default>"


class MetadataStore(abc.ABC):
    """What the broker needs from cluster metadata, whoever stores it."""

    cluster_id: str
    controller_id: int

    @abc.abstractmethod
    def topic(self, name: str) -> TopicState | None: ...

    @abc.abstractmethod
    def topic_names(self) -> list[str]: ...

    @abc.abstractmethod
    def topics(self) -> Mapping[str, TopicState]:
        """Every topic by name, as of now. The map returned is never changed afterwards
        (each change makes a new one), so a reader may keep it and compare the next one
        with it by identity to know whether any topic changed meanwhile."""

    @abc.abstractmethod
    async def create_topic(self, name: str, partitions: int, replicas: list[list[int]],
                           configs: dict[str, str], internal: bool = False) -> TopicState: ...

    @abc.abstractmethod
    async def delete_topic(self, name: str) -> None: ...

    @abc.abstractmethod
    async def add_partitions(self, name: str, new_replicas: list[list[int]]) -> TopicState:
        """Append len(new_replicas) partitions to topic `name`, numbered on from its current
        count, partition i's replicas new_replicas[i] (first one the preferred leader);
        returns the topic's new state. KeyError if the topic does not exist."""

    @abc.abstractmethod
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's config overrides with `configs`."""

    @abc.abstractmethod
    def user_config(self, name: str) -> dict[str, str]:
        """A user's config map (SCRAM credentials by mechanism in Kafka's stored form);
        empty for a user without one."""

    @abc.abstractmethod
    def user_names(self) -> list[str]:
        """Users that have a config."""

    @abc.abstractmethod
    async def set_user_config(self, name: str, config: dict[str, str]) -> None:
        """Replace a user's config map (an empty one removes the user), durably and, in a
        cluster, for every broker."""

    @abc.abstractmethod
    def broker_config(self, entity: str) -> dict[str, str]:
        """The dynamic configs of broker `entity` (its id as text, or "<default>" for the
        cluster-wide default); empty when none is set."""

    @abc.abstractmethod
    async def set_broker_config(self, entity: str, config: dict[str, str]) -> None:
        """Replace the dynamic configs of broker `entity` durably and, in a cluster, tell
        every broker."""

    @abc.abstractmethod
    async def alter_partition_reassignments(
            self, changes: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, ReassignmentResult]:
        """Start moving each partition to its target replicas, or cancel its move (None:
        back to the replicas it had), as Kafka's AlterPartitionReassignments does."""

    @abc.abstractmethod
    async def list_partition_reassignments(
            self, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of each partition being moved (of `partitions`
        only, when given)."""

    @abc.abstractmethod
    def client_configs(self) -> dict[tuple, dict[str, str]]:
        """The config maps of client-id and user + client-id entities (client quotas),
        by (user or None, client id); "<default>" names a default entity."""

    @abc.abstractmethod
    async def set_client_config(self, user: str | None, client_id: str,
                                config: dict[str, str]) -> None:
        """Replace the config of a client-id (user None) or user + client-id entity (an
        empty one removes it), durably and, in a cluster, for every broker."""

    def quota_configs(self) -> dict[tuple, dict[str, str]]:
        """Every client-quota entity's stored config by (user, client id), None for a part
        the entity does not have. A user's map also holds its SCRAM credentials: the
        quota model (fastlog/security/quota.py) reads only the quota keys."""
        out: dict[tuple, dict[str, str]] = {(u, None): self.user_config(u)
                                             for u in self.user_names()}
        out.update(self.client_configs())
        return out

    async def set_quota_config(self, entity: tuple, config: dict[str, str],
                               keys: tuple[str, ...]) -> None:
        """Replace the `keys` of the entity's config by those of `config` (a user's other
        keys, its SCRAM credentials, are kept)."""
        user, client_id = entity
        if client_id is None:
            merged = {k: v for k, v in self.user_config(user).items() if k not in keys}
            merged.update(config)
            await self.set_user_config(user, merged)
        else:
            await self.set_client_config(user, client_id, dict(config))

    @abc.abstractmethod
    async def allocate_producer_ids(self, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> tuple[int, int]:
        """Reserve a block of producer ids durably; returns (first, count)."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
