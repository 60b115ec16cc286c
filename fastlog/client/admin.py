# fastlog/client/admin.py: the asyncio admin client.
#
# Owns the administrative requests: CreateTopics/DeleteTopics/CreatePartitions (sent to the
# controller), Metadata for listing and describing topics, DescribeConfigs and
# IncrementalAlterConfigs (AlterConfigs as a fallback) for topic configs, ListOffsets
# (earliest, latest, by timestamp) and DeleteRecords (sent to each partition's leader), and
# the group requests the consumer-groups tool needs: ListGroups, DescribeGroups,
# FindCoordinator, OffsetFetch, OffsetCommit, DeleteGroups; Describe/AlterUserScramCredentials
# for SCRAM users; CreateAcls/DescribeAcls/DeleteAcls with fastlog.security.acl's bindings
# and filters; ElectLeaders (to the controller); Describe/AlterClientQuotas with
# fastlog.security.quota's entities; DescribeLogDirs (asked of every broker); DescribeProducers
# (to each partition's leader) and WriteTxnMarkers (abort_transaction, as Kafka's
# Admin.abortTransaction). Answers become small Python
# values; a Kafka error code becomes KafkaError naming the topic, partition or group.
#
# Use from the event loop that created it; sync.SyncAdmin wraps it for threads.

from __future__ import annotations

import asyncio
import collections
import dataclasses
import secrets

from fastlog.client import errors
from fastlog.client.cluster import DEFAULT_BOOTSTRAP, Cluster, TopicInfo, TopicPartition
from fastlog.client.versions import ApiKey
from fastlog.protocol.api_keys import SCRAM_MECHANISM_TYPES as SCRAM_MECHANISMS
from fastlog.security.acl import AclBinding, AclBindingFilter, binding_from_wire
from fastlog.security.quota import DEFAULT as DEFAULT_ENTITY
from fastlog.security.quota import entity_parts
from fastlog.security.scram import salted_password

# ListOffsets special timestamps (Kafka's numbering).
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE = 0, 1
# DescribeConfigs config_source values.
CONFIG_SOURCES = {
    -1: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool = False
    sensitive: bool = False
    # (source, name, value) of each layer that sets it, with include_synonyms.
    synonyms: tuple = ()

    @property
    def is_default(self) -> bool:
        return self.source in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG", "UNKNOWN")


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One partition's copy in a log dir (Kafka's ReplicaInfo): its size on disk, its
    offset lag, and is_future for the copy of a partition moving into the dir."""
    size: int
    offset_lag: int
    is_future: bool


@dataclasses.dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of one broker (Kafka's LogDirDescription): error is the Kafka error's
    name (KAFKA_STORAGE_ERROR for an offline dir) or None; total_bytes and usable_bytes
    of its file system are -1 when unknown (DescribeLogDirs below v4)."""
    error: str | None
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    metadata: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str | None  # None when not asked of a broker older than ListGroups v4


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[GroupMember]
    coordinator: int


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int      # -1: no transaction open
    partitions: list[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition (DescribeProducers)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int    # -1: no transaction open


def _tp_tree(tps):
    """{tp: x} or [tp] grouped by topic -> {topic: [(partition, x)]}."""
    tree = collections.defaultdict(list)
    items = tps.items() if isinstance(tps, dict) else ((tp, None) for tp in tps)
    for tp, value in items:
        tree[tp.topic].append((tp.partition, value))
    return tree


def offset_commit_request(group_id: str, offsets: dict, *, generation_id: int = -1,
                          member_id: str = "", metadata: str | None = "") -> dict:
    """The OffsetCommit request body for {TopicPartition: offset} (shared by the admin's
    commit_offsets and a group member's commit)."""
    return {
        "group_id": group_id, "generation_id_or_member_epoch": generation_id,
        "member_id": member_id, "group_instance_id": None, "retention_time_ms": -1,
        "topics": [{"name": t, "partitions": [
            {"partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
             "commit_timestamp": -1, "committed_metadata": metadata}
            for p, off in parts]} for t, parts in _tp_tree(offsets).items()]}


class Admin:
    """Asyncio admin client. `async with Admin("host:port") as admin: ...`."""

    def __init__(self, bootstrap_servers=DEFAULT_BOOTSTRAP, *, client_id: str = "fastlog-admin",
                 request_timeout_ms: int = 30000, cluster: Cluster | None = None,
                 security=None):
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster(bootstrap_servers, client_id=client_id,
                                          request_timeout_ms=request_timeout_ms,
                                          security=security)
        self.request_timeout_ms = request_timeout_ms

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def start(self) -> None:
        await self.cluster.refresh_metadata([])

    async def close(self) -> None:
        if self._own_cluster:
            await self.cluster.close()

    # -- topics -----------------------------------------------------------------------

    async def _controller_request(self, api_key, body: dict, codes):
        """Send a topic admin request to the controller; on NOT_CONTROLLER (a cluster
        broker that is not, or no longer, the controller) refresh Metadata and retry there,
        a bounded number of times. `codes(resp)` lists the response's error codes."""
        import asyncio

        for attempt in range(10):
            conn = await self.cluster.controller_connection()
            resp = await conn.request(api_key, body)
            if errors.NOT_CONTROLLER not in codes(resp) or attempt == 9:
                return resp
            await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
            self.cluster.controller_id = -1  # re-read from Metadata
        return resp

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1, configs: dict | None = None, *,
                           validate_only: bool = False) -> None:
        """Create one topic (-1: the broker's default partitions / replication factor)."""
        conn = await self.cluster.controller_connection()
        if conn.version(ApiKey.CREATE_TOPICS) < 4 and (num_partitions < 0 or
                                                       replication_factor < 0):
            num_partitions = 1 if num_partitions < 0 else num_partitions
            replication_factor = 1 if replication_factor < 0 else replication_factor
        resp = await self._controller_request(ApiKey.CREATE_TOPICS, {
            "topics": [{
                "name": name, "num_partitions": num_partitions,
                "replication_factor": replication_factor, "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }],
            "timeout_ms": self.request_timeout_ms, "validate_only": validate_only,
        }, lambda r: [t.error_code for t in r.topics])
        for t in resp.topics:
            if t.error_code == errors.TOPIC_ALREADY_EXISTS:
                raise errors.KafkaError(t.error_code, f"topic '{name}' already exists")
            errors.raise_for(t.error_code, f"cannot create topic '{name}'",
                             getattr(t, "error_message", None))
        await self._await_metadata(name, present=True)

    async def delete_topic(self, name: str) -> None:
        resp = await self._controller_request(ApiKey.DELETE_TOPICS, {
            "topic_names": [name], "timeout_ms": self.request_timeout_ms},
            lambda r: [t.error_code for t in r.responses])
        for t in resp.responses:
            if t.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise errors.UnknownTopic(name)
            errors.raise_for(t.error_code, f"cannot delete topic '{name}'")
        await self._await_metadata(name, present=False)

    async def _await_metadata(self, name: str, present: bool) -> None:
        """Wait (briefly) until metadata shows the change, as Kafka's tools do."""
        import asyncio

        for attempt in range(20):
            await self.cluster.refresh_metadata([name])
            info = self.cluster.topics.get(name)
            if (info is not None and bool(info.partitions)) == present:
                return
            await asyncio.sleep(min(0.02 * (attempt + 1), 0.2))

    async def elect_leaders(self, unclean: bool = False,
                            partitions: list[tuple[str, int]] | None = None
                            ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """ElectLeaders on the controller: a preferred (or unclean) leader election of
        these (topic, partition)s, every partition when None. {(topic, partition):
        (error code, message)}: 0 elected, ELECTION_NOT_NEEDED (84) when the right leader
        leads already (left out of an all-partitions answer), Kafka's codes otherwise.
        KafkaError for a refusal of the whole request (e.g. no Alter on the cluster)."""
        conn = await self.cluster.controller_connection()
        if not conn.supports(ApiKey.ELECT_LEADERS) or (
                unclean and conn.version(ApiKey.ELECT_LEADERS) < 1):
            raise errors.ProtocolMismatch("leader elections are not supported by this broker")
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions or ():
            by_topic.setdefault(t, []).append(p)
        resp = await self._controller_request(ApiKey.ELECT_LEADERS, {
            "election_type": 1 if unclean else 0,
            "topic_partitions": None if partitions is None else [
                {"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "timeout_ms": self.request_timeout_ms},
            lambda r: [getattr(r, "error_code", 0)] + [
                p.error_code for t in r.replica_election_results for p in t.partition_result])
        errors.raise_for(getattr(resp, "error_code", 0), "leader election")
        return {(t.topic, p.partition_id): (p.error_code, p.error_message)
                for t in resp.replica_election_results for p in t.partition_result}

    async def create_partitions(self, name: str, total: int) -> None:
        """Grow topic `name` to `total` partitions."""
        conn = await self.cluster.controller_connection()
        if not conn.supports(ApiKey.CREATE_PARTITIONS):
            raise errors.ProtocolMismatch(
                "changing the partition count is not supported by this broker")
        try:
            resp = await self._controller_request(ApiKey.CREATE_PARTITIONS, {
                "topics": [{"name": name, "count": total, "assignments": None}],
                "timeout_ms": self.request_timeout_ms, "validate_only": False},
                lambda r: [t.error_code for t in r.results])
        except errors.BrokerUnavailable as exc:
            # A broker that advertises the API but drops the request lands here.
            raise errors.BrokerUnavailable(
                f"cannot change partitions of topic '{name}': {exc}") from None
        for r in resp.results:
            errors.raise_for(r.error_code, f"cannot change partitions of topic '{name}'",
                             getattr(r, "error_message", None))

    async def alter_partition_reassignments(
            self, moves: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Move each partition to its replicas, or cancel its move (None), through the
        controller (AlterPartitionReassignments, KIP-455); what the controller said per
        partition: None when accepted, else the KafkaError."""
        topics: dict[str, list] = {}
        for tp, replicas in moves.items():
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition,
                 "replicas": None if replicas is None else list(replicas)})
        resp = await self._controller_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "timeout_ms": self.request_timeout_ms,
            "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]},
            lambda r: [r.error_code])
        errors.raise_for(resp.error_code, "cannot reassign partitions", resp.error_message)
        return {TopicPartition(t.name, p.partition_index):
                errors.KafkaError(p.error_code, f"{t.name}-{p.partition_index}",
                                  p.error_message) if p.error_code else None
                for t in resp.responses for p in t.partitions}

    async def list_partition_reassignments(
            self, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of each partition being moved (of `partitions`
        only, when given), from the controller (ListPartitionReassignments)."""
        wanted = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            wanted = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        resp = await self._controller_request(ApiKey.LIST_PARTITION_REASSIGNMENTS, {
            "timeout_ms": self.request_timeout_ms, "topics": wanted}, lambda r: [r.error_code])
        errors.raise_for(resp.error_code, "cannot list partition reassignments",
                         resp.error_message)
        return {TopicPartition(t.name, p.partition_index):
                (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        await self.cluster.refresh_metadata(None)
        return sorted(n for n, t in self.cluster.topics.items()
                      if include_internal or not t.internal)

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        """TopicInfo for each named topic (UnknownTopic if one is absent), or for all."""
        await self.cluster.refresh_metadata(names)
        if names is None:
            return [self.cluster.topics[n] for n in sorted(self.cluster.topics)]
        out = []
        for n in names:
            info = self.cluster.topics.get(n)
            if info is None:
                raise errors.UnknownTopic(n)
            out.append(info)
        return out

    # -- configs ----------------------------------------------------------------------

    async def describe_configs(self, topic: str, keys: list[str] | None = None,
                               resource_type: int = RESOURCE_TOPIC,
                               include_synonyms: bool = False) -> list[ConfigEntry]:
        """The configs of a topic, or with resource_type RESOURCE_BROKER of a broker (its
        id) or of the cluster-wide broker default ("")."""
        conn = await self._node_for_configs(resource_type, topic)
        resp = await conn.request(ApiKey.DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": resource_type, "resource_name": topic,
                           "configuration_keys": keys}],
            "include_synonyms": include_synonyms, "include_documentation": False})
        out = []
        for r in resp.results:
            if r.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise errors.UnknownTopic(topic)
            errors.raise_for(r.error_code, f"cannot describe configs of '{topic}'",
                             getattr(r, "error_message", None))
            for c in r.configs:
                source = CONFIG_SOURCES.get(getattr(c, "config_source", -1), "UNKNOWN")
                synonyms = tuple((CONFIG_SOURCES.get(s.source, "UNKNOWN"), s.name, s.value)
                                 for s in getattr(c, "synonyms", None) or ())
                out.append(ConfigEntry(c.name, c.value, source, c.read_only, c.is_sensitive,
                                       synonyms))
        return out

    async def _node_for_configs(self, resource_type: int, name: str):
        if resource_type == RESOURCE_BROKER and name.isdigit():
            return await self.cluster.connection(int(name))
        return await self.cluster.bootstrap_connection()

    async def alter_configs(self, topic: str, set_configs: dict | None = None,
                            delete: list[str] | None = None,
                            resource_type: int = RESOURCE_TOPIC) -> None:
        """Set some keys and remove others (back to the default) on one topic, or with
        resource_type RESOURCE_BROKER the dynamic configs of one broker (its id) or the
        cluster-wide broker default ("")."""
        set_configs = dict(set_configs or {})
        delete = list(delete or [])
        kind = "topic" if resource_type == RESOURCE_TOPIC else "broker"
        conn = await self._node_for_configs(resource_type, topic)
        if conn.supports(ApiKey.INCREMENTAL_ALTER_CONFIGS):
            ops = [{"name": k, "config_operation": OP_SET, "value": str(v)}
                   for k, v in set_configs.items()]
            ops += [{"name": k, "config_operation": OP_DELETE, "value": None} for k in delete]
            resp = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
                "resources": [{"resource_type": resource_type, "resource_name": topic,
                               "configs": ops}], "validate_only": False})
        else:
            # AlterConfigs replaces the whole set: start from the resource's own values.
            own = {RESOURCE_TOPIC: "DYNAMIC_TOPIC_CONFIG"}.get(
                resource_type, "DYNAMIC_BROKER_CONFIG" if topic else
                "DYNAMIC_DEFAULT_BROKER_CONFIG")
            current = {c.name: c.value for c in await self.describe_configs(
                topic, resource_type=resource_type) if c.source == own}
            current.update({k: str(v) for k, v in set_configs.items()})
            for k in delete:
                current.pop(k, None)
            resp = await conn.request(ApiKey.ALTER_CONFIGS, {
                "resources": [{"resource_type": resource_type, "resource_name": topic,
                               "configs": [{"name": k, "value": v}
                                           for k, v in current.items()]}],
                "validate_only": False})
        for r in resp.responses:
            if r.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise errors.UnknownTopic(topic)
            errors.raise_for(r.error_code, f"cannot alter configs of {kind} '{topic}'",
                             getattr(r, "error_message", None))

    # -- offsets and records ----------------------------------------------------------

    async def _by_leader(self, tps) -> dict[int, list[TopicPartition]]:
        by_node = collections.defaultdict(list)
        for tp in tps:
            by_node[await self.cluster.leader_for(tp)].append(tp)
        return by_node

    async def list_offsets(self, specs: dict[TopicPartition, int], *,
                           isolation_level: int = 0) -> dict[TopicPartition, OffsetAndTimestamp]:
        """For each partition: the offset for a timestamp, or EARLIEST / LATEST / MAX_TIMESTAMP.

        By timestamp, the answer is the first offset whose timestamp is >= the one asked
        for; offset -1 means there is no such record.
        """
        result: dict[TopicPartition, OffsetAndTimestamp] = {}

        async def ask(node: int, tps: list[TopicPartition], todo: dict) -> None:
            conn = await self.cluster.connection(node)
            resp = await conn.request(ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}
                    for p, ts in parts]}
                    for t, parts in _tp_tree({tp: todo[tp] for tp in tps}).items()]})
            failure = None
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        failure = failure or errors.KafkaError(
                            p.error_code, f"list offsets of {tp}")
                        continue
                    result[tp] = OffsetAndTimestamp(p.offset, p.timestamp)
            if failure is not None:
                raise failure

        async def attempt():
            # every leader asked at once: one round trip, not one per broker
            todo = {tp: ts for tp, ts in specs.items() if tp not in result}
            asked = await asyncio.gather(
                *(ask(node, tps, todo) for node, tps in (await self._by_leader(todo)).items()),
                return_exceptions=True)
            for outcome in asked:
                if isinstance(outcome, BaseException):
                    raise outcome
            return result

        await self.cluster.retry(attempt, what="ListOffsets")
        return result

    async def delete_records(self, before: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete every record below the given offset (-1: the high watermark) per partition.

        Returns each partition's new log start offset (low watermark).
        """
        result = {}
        for node, tps in (await self._by_leader(before)).items():
            conn = await self.cluster.connection(node)
            resp = await conn.request(ApiKey.DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": [
                    {"partition_index": p, "offset": off} for p, off in parts]}
                    for t, parts in _tp_tree({tp: before[tp] for tp in tps}).items()],
                "timeout_ms": self.request_timeout_ms})
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    errors.raise_for(p.error_code, f"delete records of {tp}")
                    result[tp] = p.low_watermark
        return result

    # -- log dirs ---------------------------------------------------------------------

    async def describe_log_dirs(self, brokers: list[int] | None = None,
                                tps: list[TopicPartition] | None = None
                                ) -> dict[int, dict[str, LogDirDescription]]:
        """{broker: {log dir: LogDirDescription}} from DescribeLogDirs on each broker
        named (every registered broker when None), listing the partitions in tps (all
        when None). KafkaError for a broker that refuses (CLUSTER_AUTHORIZATION_FAILED
        without Describe on the cluster); ProtocolMismatch for one that lacks the API."""
        await self.cluster.refresh_metadata([])
        topics = None if tps is None else [
            {"topic": t, "partitions": [p for p, _ in parts]}
            for t, parts in _tp_tree(dict.fromkeys(tps)).items()]
        out = {}
        for node in sorted(self.cluster.brokers) if brokers is None else brokers:
            conn = await self.cluster.connection(node)
            resp = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": topics})
            errors.raise_for(getattr(resp, "error_code", 0),
                             f"describe the log dirs of broker {node}")
            dirs = out[node] = {}
            for r in resp.results:
                replicas = {TopicPartition(t.name, p.partition_index):
                            ReplicaInfo(p.partition_size, p.offset_lag, p.is_future_key)
                            for t in r.topics for p in t.partitions}
                dirs[r.log_dir] = LogDirDescription(
                    errors.error_name(r.error_code) if r.error_code else None,
                    replicas, getattr(r, "total_bytes", -1), getattr(r, "usable_bytes", -1))
        return out

    # -- transactions -----------------------------------------------------------------

    async def list_transactions(self, states: list[str] | None = None,
                                producer_ids: list[int] | None = None
                                ) -> list[TransactionListing]:
        """The transactional ids every broker coordinates (ListTransactions on each),
        optionally only those in these states (Kafka's names: Ongoing, CompleteCommit...)
        or of these producer ids."""
        await self.cluster.refresh_metadata([])
        out = []
        for node in sorted(self.cluster.brokers):
            conn = await self.cluster.connection(node)
            resp = await conn.request(ApiKey.LIST_TRANSACTIONS, {
                "state_filters": list(states or []),
                "producer_id_filters": list(producer_ids or []), "duration_filter": -1})
            errors.raise_for(resp.error_code, f"list the transactions of broker {node}")
            out.extend(TransactionListing(s.transactional_id, node, s.producer_id,
                                          s.transaction_state)
                       for s in resp.transaction_states)
        return sorted(out, key=lambda t: t.transactional_id)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """The state of a transactional id, from its transaction coordinator."""
        node = await self.cluster.find_coordinator(transactional_id, 1)
        conn = await self.cluster.connection(node)
        resp = await conn.request(ApiKey.DESCRIBE_TRANSACTIONS,
                                  {"transactional_ids": [transactional_id]})
        s = resp.transaction_states[0]
        errors.raise_for(s.error_code, f"describe transactional id '{transactional_id}'")
        return TransactionDescription(
            s.transactional_id, node, s.producer_id, s.producer_epoch, s.transaction_state,
            s.transaction_timeout_ms, s.transaction_start_time_ms,
            sorted(TopicPartition(t.topic, p) for t in s.topics for p in t.partitions))

    async def describe_producers(self, tps: list[TopicPartition]
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers of each partition, from its leader (DescribeProducers)."""
        result: dict[TopicPartition, list[ProducerState]] = {}
        for node, led in (await self._by_leader(tps)).items():
            conn = await self.cluster.connection(node)
            resp = await conn.request(ApiKey.DESCRIBE_PRODUCERS, {"topics": [
                {"name": t, "partition_indexes": [p for p, _ in parts]}
                for t, parts in _tp_tree(led).items()]})
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    errors.raise_for(p.error_code, f"describe the producers of {tp}",
                                     getattr(p, "error_message", None))
                    result[tp] = [ProducerState(
                        s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                        s.coordinator_epoch, s.current_txn_start_offset)
                        for s in p.active_producers]
        return result

    async def abort_transaction(self, tp: TopicPartition, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's open transaction on one partition
        (WriteTxnMarkers to its leader, as Kafka's Admin.abortTransaction)."""
        conn = await self.cluster.connection(await self.cluster.leader_for(tp))
        resp = await conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "transaction_result": False, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}]})
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    errors.raise_for(p.error_code, f"abort the transaction of producer "
                                     f"{producer_id} on {tp}")

    # -- groups -----------------------------------------------------------------------

    async def find_coordinator(self, group_id: str) -> int:
        return await self.cluster.find_coordinator(group_id, 0)

    async def list_groups(self, states: list[str] | None = None) -> list[ListedGroup]:
        """Every group over every broker, sorted by group id. With states (even empty),
        each group's state; a non-empty list keeps only the groups in one of them
        (ListGroups v4's filter, compared without regard to case; for a broker older than
        v4 the states come from DescribeGroups and the filter is applied here)."""
        await self.cluster.refresh_metadata([])
        wanted = {s.lower() for s in states or ()}
        groups = {}
        for node in list(self.cluster.brokers):
            conn = await self.cluster.connection(node)
            resp = await conn.request(ApiKey.LIST_GROUPS, {"states_filter": list(states or ())})
            errors.raise_for(resp.error_code, f"list groups on broker {node}")
            for g in resp.groups:
                groups[g.group_id] = ListedGroup(g.group_id, g.protocol_type,
                                                 getattr(g, "group_state", None))
        listed = sorted(groups.values(), key=lambda g: g.group_id)
        unknown = [g.group_id for g in listed if g.state is None]
        if unknown and states is not None:
            known = {d.group_id: d.state for d in await self.describe_groups(unknown)}
            listed = [dataclasses.replace(g, state=known.get(g.group_id, ""))
                      if g.state is None else g for g in listed]
        if wanted:
            listed = [g for g in listed if g.state.lower() in wanted]
        return listed

    async def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        out = []
        for gid in group_ids:
            node = await self.find_coordinator(gid)
            conn = await self.cluster.connection(node)
            resp = await conn.request(ApiKey.DESCRIBE_GROUPS, {
                "groups": [gid], "include_authorized_operations": False})
            for g in resp.groups:
                errors.raise_for(g.error_code, f"describe group '{g.group_id}'")
                members = [GroupMember(m.member_id, m.client_id, m.client_host,
                                       getattr(m, "group_instance_id", None),
                                       bytes(m.member_metadata or b""),
                                       bytes(m.member_assignment or b""))
                           for m in g.members]
                out.append(GroupDescription(g.group_id, g.group_state, g.protocol_type,
                                            g.protocol_data, members, node))
        return out

    async def fetch_offsets(self, group_id: str, tps: list[TopicPartition] | None = None
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Committed (offset, metadata) per partition of a group; None tps: all it has."""
        conn = await self.cluster.connection(await self.find_coordinator(group_id))
        topics = None if tps is None else [
            {"name": t, "partition_indexes": [p for p, _ in parts]}
            for t, parts in _tp_tree(tps).items()]
        resp = await conn.request(ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": topics})
        errors.raise_for(getattr(resp, "error_code", 0), f"fetch offsets of group '{group_id}'")
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                errors.raise_for(p.error_code, f"fetch offset of group '{group_id}' for {tp}")
                if p.committed_offset >= 0:
                    out[tp] = (p.committed_offset, p.metadata)
        return out

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, int], *,
                             generation_id: int = -1, member_id: str = "",
                             metadata: str | None = "") -> None:
        """Commit offsets for a group (generation -1: a group with no active members)."""
        conn = await self.cluster.connection(await self.find_coordinator(group_id))
        resp = await conn.request(ApiKey.OFFSET_COMMIT, offset_commit_request(
            group_id, offsets, generation_id=generation_id, member_id=member_id,
            metadata=metadata))
        for t in resp.topics:
            for p in t.partitions:
                errors.raise_for(p.error_code, f"commit offset of group '{group_id}' for "
                                               f"{t.name}-{p.partition_index}")

    async def delete_groups(self, group_ids: list[str]) -> None:
        for gid in group_ids:
            conn = await self.cluster.connection(await self.find_coordinator(gid))
            resp = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [gid]})
            for r in resp.results:
                errors.raise_for(r.error_code, f"delete group '{r.group_id}'")

    # -- SCRAM credentials ------------------------------------------------------------

    async def describe_user_scram_credentials(self, users: list[str] | None = None
                                              ) -> dict[str, list[tuple[str, int]]]:
        """{user: [(mechanism, iterations)]} for the users named (all users with SCRAM
        credentials when None); KafkaError for a user without any."""
        conn = await self.cluster.bootstrap_connection()
        body = {"users": None if users is None else [{"name": u} for u in users]}
        resp = await conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body)
        errors.raise_for(resp.error_code, "describe SCRAM credentials", resp.error_message)
        out = {}
        for r in resp.results:
            errors.raise_for(r.error_code, f"describe SCRAM credentials of user '{r.user}'",
                             r.error_message)
            out[r.user] = [(SCRAM_MECHANISMS.get(i.mechanism, str(i.mechanism)), i.iterations)
                           for i in r.credential_infos]
        return out

    async def alter_user_scram_credentials(
            self, upsertions: list[tuple[str, str, str, int]] = (),
            deletions: list[tuple[str, str]] = ()) -> None:
        """Set (user, mechanism, password, iterations) and delete (user, mechanism)
        credentials. The password never leaves this process: a random salt and the salted
        password are sent, as Kafka's admin client does."""
        types = {name: t for t, name in SCRAM_MECHANISMS.items()}
        for _, mechanism, *_ in [*upsertions, *deletions]:
            if mechanism not in types:
                raise errors.FastlogError(f"{mechanism!r} is not a SCRAM mechanism (use "
                                          f"{' or '.join(types)})")
        ups = []
        for user, mechanism, password, iterations in upsertions:
            salt = secrets.token_bytes(32)
            ups.append({"name": user, "mechanism": types[mechanism], "iterations": iterations,
                        "salt": salt,
                        "salted_password": salted_password(password, salt, iterations, mechanism)})
        body = {"upsertions": ups,
                "deletions": [{"name": u, "mechanism": types[m]} for u, m in deletions]}
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        for r in resp.results:
            errors.raise_for(r.error_code, f"alter SCRAM credentials of user '{r.user}'",
                             r.error_message)

    # -- client quotas ----------------------------------------------------------------

    async def describe_client_quotas(self, components: list[tuple[str, int, str | None]] = (),
                                     strict: bool = False) -> dict[tuple, dict[str, float]]:
        """DescribeClientQuotas: {entity: {quota key: value}} of the entities the filter
        matches, each component (entity type, match type, name) with match types
        fastlog.security.quota.MATCH_EXACT/DEFAULT/SPECIFIED; an entity is (user, client
        id), None for a part it lacks and "<default>" for a default one."""
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {
            "components": [{"entity_type": t, "match_type": m, "match": n}
                           for t, m, n in components],
            "strict": strict})
        errors.raise_for(resp.error_code, "describe client quotas", resp.error_message)
        out = {}
        for entry in resp.entries or []:
            entity = {e.entity_type: DEFAULT_ENTITY if e.entity_name is None else e.entity_name
                      for e in entry.entity}
            out[(entity.get("user"), entity.get("client-id"))] = {
                v.key: v.value for v in entry.values}
        return out

    async def alter_client_quotas(self, changes: list[tuple[tuple, dict[str, float | None]]],
                                  validate_only: bool = False) -> None:
        """AlterClientQuotas: for each (entity, {key: value, or None to remove}) set or
        remove those quotas; KafkaError for the first entity refused."""
        body = {"entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity_parts(entity)],
             "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                     for k, v in ops.items()]}
            for entity, ops in changes], "validate_only": validate_only}
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, body)
        for entry in resp.entries:
            names = ", ".join(f"{e.entity_type}={e.entity_name or DEFAULT_ENTITY}"
                              for e in entry.entity)
            errors.raise_for(entry.error_code, f"alter client quotas of {names}",
                             entry.error_message)

    # -- ACLs -------------------------------------------------------------------------

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        """CreateAcls: store each binding (fastlog.security.acl.AclBinding); KafkaError for
        the first one refused (CLUSTER_AUTHORIZATION_FAILED without Alter on the cluster)."""
        body = {"creations": [
            {"resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
             "resource_pattern_type": b.pattern.pattern_type, "principal": b.entry.principal,
             "host": b.entry.host, "operation": b.entry.operation,
             "permission_type": b.entry.permission_type} for b in bindings]}
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(ApiKey.CREATE_ACLS, body)
        for r in resp.results:
            errors.raise_for(r.error_code, "create ACLs", r.error_message)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls: the stored bindings the filter matches."""
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(ApiKey.DESCRIBE_ACLS, _acl_filter_body(acl_filter))
        errors.raise_for(resp.error_code, "describe ACLs", resp.error_message)
        return [binding_from_wire(r.resource_type, r.resource_name, r.pattern_type,
                                  a.principal, a.host, a.operation, a.permission_type)
                for r in resp.resources for a in r.acls]

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclBinding]:
        """DeleteAcls: delete every binding a filter matches; the bindings deleted."""
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(ApiKey.DELETE_ACLS,
                                  {"filters": [_acl_filter_body(f) for f in filters]})
        deleted = []
        for r in resp.filter_results:
            errors.raise_for(r.error_code, "delete ACLs", r.error_message)
            for m in r.matching_acls:
                errors.raise_for(m.error_code, "delete ACLs", m.error_message)
                deleted.append(binding_from_wire(m.resource_type, m.resource_name,
                                                 m.pattern_type, m.principal, m.host,
                                                 m.operation, m.permission_type))
        return deleted


def _acl_filter_body(f: AclBindingFilter) -> dict:
    """The DescribeAcls request / DeleteAcls filter fields of an AclBindingFilter."""
    return {"resource_type_filter": f.pattern.resource_type,
            "resource_name_filter": f.pattern.name,
            "pattern_type_filter": f.pattern.pattern_type,
            "principal_filter": f.entry.principal, "host_filter": f.entry.host,
            "operation": f.entry.operation, "permission_type": f.entry.permission_type}
