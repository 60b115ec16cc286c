# fastlog/metadata/embedded.py — the single-node metadata store.
#
# Owns: EmbeddedMetadataStore, the MetadataStore used when no zookeeper.connect is set,
# persisted as one JSON file `<first log dir>/fastlog-metadata.json` written atomically
# (write tmp, fsync, rename, fsync dir) so a crash leaves either the old or the new version.
# Format: {"version": 1, "cluster_id", "next_producer_id_block", "topics": {name:
# {"topic_id", "internal", "configs", "partitions": {p: {"replicas", "leader",
# "leader_epoch", "isr"}}}}, "users": {name: {key: value}}, "brokers": {entity: {key:
# value}}, "clients": [{"user": name or null, "client_id", "config": {key: value}}]
# ("users" holds what Kafka keeps in /config/users/<user>: SCRAM credentials, never a
# password, and quotas; "brokers" the dynamic broker configs of /config/brokers/<id> and
# <default>; "clients" what Kafka keeps in /config/clients/<id> and
# /config/users/<user>/clients/<id>: client quotas, "<default>" naming a default
# entity; each absent in older files).
# Called from: the broker's asyncio API loop only (see fastlog/metadata/store.py).
"""The embedded single-node metadata store."""

from __future__ import annotations

import copy
import dataclasses
import json
import os

from fastlog.fileio import atomic_write
from fastlog.metadata.model import MetadataError, PartitionState, TopicState, new_kafka_uuid
from fastlog.metadata.store import (
    PRODUCER_ID_BLOCK_SIZE,
    MetadataStore,
    reassignment_problem,
)

METADATA_FILE = "fastlog-metadata.json"
FORMAT_VERSION = 1


class EmbeddedMetadataStore(MetadataStore):
    """Single-node store: everything in one JSON document, rewritten atomically."""

    def __init__(self, data_dir: str, node_id: int):
        self.path = os.path.join(data_dir, METADATA_FILE)
        self.node_id = node_id
        self.controller_id = node_id
        self._topics: dict[str, TopicState] = {}
        self._users: dict[str, dict[str, str]] = {}
        self._brokers: dict[str, dict[str, str]] = {}
        self._clients: dict[tuple, dict[str, str]] = {}
        self._next_producer_id = 0
        self.cluster_id = ""
        self._load()

    # ------------------------------------------------------------ persistence
    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            self.cluster_id = new_kafka_uuid()
            self._write()
            return
        except (OSError, ValueError) as e:
            raise MetadataError(f"cannot read metadata file {self.path}: {e}") from None
        try:
            if doc.get("version") != FORMAT_VERSION:
                raise MetadataError(f"metadata file {self.path} has unknown version {doc.get('version')!r}")
            self.cluster_id = doc["cluster_id"]
            self._next_producer_id = int(doc["next_producer_id_block"])
            topics = {}
            for name, t in doc["topics"].items():
                parts = {
                    int(p): PartitionState(list(s["replicas"]), int(s["leader"]),
                                           int(s.get("leader_epoch", 0)), list(s.get("isr", s["replicas"])))
                    for p, s in t["partitions"].items()
                }
                topics[name] = TopicState(name, t["topic_id"], parts,
                                          {str(k): str(v) for k, v in t.get("configs", {}).items()},
                                          bool(t.get("internal", False)))
            self._topics = topics
            self._users = {str(name): {str(k): str(v) for k, v in config.items()}
                           for name, config in doc.get("users", {}).items()}
            self._brokers = {str(entity): {str(k): str(v) for k, v in config.items()}
                             for entity, config in doc.get("brokers", {}).items()}
            for c in doc.get("clients", []):
                user = None if c["user"] is None else str(c["user"])
                self._clients[(user, str(c["client_id"]))] = {
                    str(k): str(v) for k, v in c["config"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise MetadataError(f"metadata file {self.path} is malformed ({e!r})") from None

    def _document(self) -> dict:
        return {
            "version": FORMAT_VERSION,
            "cluster_id": self.cluster_id,
            "next_producer_id_block": self._next_producer_id,
            "topics": {
                name: {
                    "topic_id": t.topic_id,
                    "internal": t.internal,
                    "configs": t.configs,
                    "partitions": {
                        str(p): {"replicas": s.replicas, "leader": s.leader,
                                 "leader_epoch": s.leader_epoch, "isr": s.isr}
                        for p, s in sorted(t.partitions.items())
                    },
                }
                for name, t in sorted(self._topics.items())
            },
            "users": self._users,
            "brokers": self._brokers,
            "clients": [{"user": user, "client_id": client_id, "config": config}
                        for (user, client_id), config in sorted(
                            self._clients.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))],
        }

    def _write(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        data = json.dumps(self._document(), indent=1, sort_keys=True).encode()
        atomic_write(self.path, data)

    # ------------------------------------------------------------ reads
    def topic(self, name: str) -> TopicState | None:
        return self._topics.get(name)

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    def topics(self) -> dict[str, TopicState]:
        return self._topics  # (replaced on every change, never changed: _put_topic)

    def _put_topic(self, name: str, state: TopicState | None) -> None:
        """Topic `name` is `state` now (None: no such topic), in a new map of topics: the
        one `topics` returned stays as it was."""
        topics = dict(self._topics)
        if state is None:
            topics.pop(name, None)
        else:
            topics[name] = state
        self._topics = topics

    # ------------------------------------------------------------ mutations
    async def create_topic(self, name, partitions, replicas, configs, internal=False):
        if name in self._topics:
            raise KeyError(name)
        state = TopicState(
            name, new_kafka_uuid(),
            {p: PartitionState(list(replicas[p]), replicas[p][0], 0, list(replicas[p]))
             for p in range(partitions)},
            dict(configs), internal)
        self._put_topic(name, state)
        try:
            self._write()
        except BaseException:
            self._put_topic(name, None)
            raise
        return state

    async def delete_topic(self, name):
        old = self._topics[name]
        self._put_topic(name, None)
        try:
            self._write()
        except BaseException:
            self._put_topic(name, old)
            raise

    async def add_partitions(self, name, new_replicas):
        old = self._topics[name]
        parts = dict(old.partitions)
        first = max(parts, default=-1) + 1
        for i, replicas in enumerate(new_replicas):
            parts[first + i] = PartitionState(list(replicas), replicas[0], 0, list(replicas))
        # Replace, never mutate, the state readers may hold; restore it if the write fails.
        self._put_topic(name, dataclasses.replace(old, partitions=parts))
        try:
            self._write()
        except BaseException:
            self._put_topic(name, old)
            raise
        return self._topics[name]

    async def set_topic_configs(self, name, configs):
        topic = self._topics[name]
        old = copy.copy(topic.configs)
        topic.configs = dict(configs)
        try:
            self._write()
        except BaseException:
            topic.configs = old
            raise

    def user_config(self, name):
        return dict(self._users.get(name, {}))

    def user_names(self):
        return sorted(self._users)

    async def set_user_config(self, name, config):
        self._set_config(self._users, name, config)

    def broker_config(self, entity):
        return dict(self._brokers.get(entity, {}))

    async def set_broker_config(self, entity, config):
        self._set_config(self._brokers, entity, config)

    def client_configs(self):
        return {entity: dict(config) for entity, config in self._clients.items()}

    async def set_client_config(self, user, client_id, config):
        self._set_config(self._clients, (user, client_id), config)

    def _set_config(self, table: dict, key, config: dict[str, str]) -> None:
        """Replace table[key] (an empty config removes it) and write the file; the old
        entry is restored if the write fails."""
        old = table.get(key)
        if config:
            table[key] = dict(config)
        else:
            table.pop(key, None)
        try:
            self._write()
        except BaseException:
            if old is None:
                table.pop(key, None)
            else:
                table[key] = old
            raise

    async def alter_partition_reassignments(self, changes):
        # One broker: a partition can only stay where it is, and nothing is ever moving.
        out = {}
        for (topic, p), target in changes.items():
            t = self._topics.get(topic)
            if t is None or p not in t.partitions:
                out[(topic, p)] = ("UNKNOWN_TOPIC_OR_PARTITION",
                                   f"The partition {topic}-{p} does not exist.")
            elif target is None:
                out[(topic, p)] = ("NO_REASSIGNMENT_IN_PROGRESS",
                                   f"No reassignment of {topic}-{p} is in progress.")
            else:
                problem = reassignment_problem(target, t.partitions[p].replicas,
                                               {self.node_id})
                out[(topic, p)] = None if problem is None else ("INVALID_REPLICA_ASSIGNMENT",
                                                                problem)
        return out

    async def list_partition_reassignments(self, partitions=None):
        return {}

    async def allocate_producer_ids(self, block_size=PRODUCER_ID_BLOCK_SIZE):
        first = self._next_producer_id
        self._next_producer_id = first + block_size
        try:
            self._write()
        except BaseException:
            self._next_producer_id = first
            raise
        return first, block_size
