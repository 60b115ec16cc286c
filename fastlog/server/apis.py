# fastlog/server/apis.py — KafkaApis: one handle_<api> per API key behind a dispatch table.
#
# Owns: turning a decoded request into a response, per Kafka's semantics and error codes.
# In cluster mode only a partition's leader serves clients for it (`_led_partition`:
# NOT_LEADER_OR_FOLLOWER elsewhere, so clients refresh Metadata and retry there).
# Reads/writes: nothing on disk — handlers reach storage only through the broker's
# ReplicaManager / LogManager / metadata store.
# A Produce request of one partition (what a producer sends to a partition leader; with a
# transactional id too, unless an authorizer must check it) skips
# the generic decode/dispatch/encode: fastlog.protocol._produce reads it from the frame and
# writes its success answer (`_produce_one` does what handle_produce does for that shape;
# its everyday partition is one compiled step, ReplicaManager.leader_produce);
# one of several partitions (kafka-python, the Java client) too (`_produce_many`, each
# everyday partition through the same step).
# Likewise a consumer's Fetch of one partition without a fetch session: fastlog.protocol.
# _fetch reads it and writes its answer when the partition has data for it at once
# (`_fetch_one`); an error or a wait for data goes through handle_fetch. A transactional
# producer's AddPartitionsToTxn and EndTxn (v0-v2) are read and answered by fastlog.
# protocol._txn around the transaction handlers' own steps (`_txn_one`).
# Called from: the broker's asyncio API loop only (fastlog._net runs every handler
# coroutine there), so broker state needs no locks; a handler may await (parked fetch)
# without blocking other connections.
#
# Handler contract (other modules — the group coordinator — register handlers with it):
#
#     async def handle_xxx(ctx: RequestContext, request) -> response | None
#
#   ctx.broker      BrokerServer (.config, .log_manager, .replica_manager, .metadata,
#                   .group_coordinator, .node_id, .advertised_host, .advertised_port,
#                   .live_brokers(listener), .broker_endpoint(id, listener),
#                   .cluster — None on one node)
#   ctx.header      RequestHeader(api_key, api_version, correlation_id, client_id)
#   ctx.api_version shortcut for ctx.header.api_version
#   ctx.connection  the fastlog._net Connection the request came on; its
#                   state["listener"] names the listener (request_listener(ctx)) and
#                   state["principal"] who sent it ("User:alice", "User:ANONYMOUS")
#
# Authorization (authorizer.class.name set): each handler checks the request's principal as
# Kafka's KafkaApis does, through fastlog/server/authz.py (a cached decision per resource),
# and answers Kafka's codes: TOPIC_AUTHORIZATION_FAILED (29) per topic or partition,
# GROUP_AUTHORIZATION_FAILED (30), CLUSTER_AUTHORIZATION_FAILED (31),
# TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53). A topic the principal may not Describe is
# answered with 29 whether it exists or not (its existence is not leaked).
#
# Client quotas (fastlog/security/quota.py): while any is configured, every request takes
# the generic path and `_throttle` accounts it and mutes a client over its quota.
#
# Authentication comes first: a connection of a SASL listener reaches the handlers only
# through fastlog/server/authenticator.py until it has authenticated (ApiVersions,
# SaslHandshake, SaslAuthenticate; anything else closes it).
#   request         the decoded request (fastlog.protocol structs, snake_case fields)
#   returns         a response body fastlog.protocol.encode_response accepts (dict or
#                   struct; missing fields take the spec default), or None for no
#                   response at all (Produce acks=0). Raising CloseConnection closes the
#                   connection; any other exception is logged and closes it too.
"""Kafka API request handlers and the dispatch from frames to them."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import time

from fastlog import protocol
from fastlog._net import CloseConnection
from fastlog.logs import report_limited
from fastlog.metadata import DEFAULT_BROKER_ENTITY
from fastlog.metadata.model import ELECTED, NOT_AVAILABLE, NOT_NEEDED, UNKNOWN_PARTITION
from fastlog.protocol import ApiKey, Errors, KafkaApiError
from fastlog.protocol._fetch import encode_fetch_response, parse_fetch_request
from fastlog.protocol._produce import (
    encode_produce_partitions,
    encode_produce_response,
    parse_produce_partitions,
    parse_produce_request,
    parse_transactional_produce_request,
)
from fastlog.protocol._txn import (
    encode_add_partitions_to_txn_response,
    encode_end_txn_response,
    parse_txn_request,
)
from fastlog.protocol.api_keys import SCRAM_MECHANISM_TYPES
from fastlog.protocol.schema import ZERO_UUID
from fastlog.protocol.topics import INTERNAL_TOPICS
from fastlog.security import ScramCredential
from fastlog.security.acl import AclBindingFilter, binding_from_wire
from fastlog.security.quota import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    QuotaError,
    check_quota_value,
    describe_entity,
    entity_from_parts,
    entity_parts,
    format_quota_value,
    match_entities,
    principal_name,
    quota_values,
)
from fastlog.security.scram import MAX_ITERATIONS, MIN_ITERATIONS
from fastlog.security.scram import MECHANISMS as SCRAM_DIGESTS
from fastlog.server import authz
from fastlog.server.authenticator import open_connection
from fastlog.server.authz import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER_ACTION,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    IDEMPOTENT_WRITE,
    OPERATIONS_NOT_ASKED,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    authorize,
    authorize_cluster,
)
from fastlog.server.config import (
    CONFIG_KEYS,
    CONFIG_TYPE_CODES,
    TLS_PROTOCOLS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIG_TYPES,
    ConfigError,
    format_config_value,
    message_format_ignored,
    parse_topic_config,
)
from fastlog.server.dynamic_config import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_DYNAMIC_TOPIC,
    is_dynamic,
)
from fastlog.server.group import GROUP_HANDLERS
from fastlog.server.group.apis import _by_topic
from fastlog.server.replica_manager import PartitionResult, is_transactional_records
from fastlog.server.request_metrics import response_size
from fastlog.server.txn import TXN_HANDLERS, handle_init_transactional_producer
from fastlog.server.txn.apis import add_partitions, end_txn
from fastlog.server.txn.markers import complete_group_offsets
from fastlog.server.txn.verification import unverified_partitions

log = logging.getLogger("fastlog.server.apis")

# DescribeConfigs resource types (Kafka's numbers).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

LIST_OFFSETS_LATEST = -1
LIST_OFFSETS_EARLIEST = -2
LIST_OFFSETS_MAX_TIMESTAMP = -3
LIST_OFFSETS_EARLIEST_LOCAL = -4   # v8+ (KIP-405): the local log's start
LIST_OFFSETS_LATEST_TIERED = -5    # v9+ (KIP-1005): the last offset in remote storage

# DescribeCluster v1's endpoint types (Kafka's EndpointType).
ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
# ElectLeaders' election types, Kafka's strategy names in its messages, and the
# controller's outcomes (fastlog/zk/controller.py) as Kafka's codes.
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
_ELECTION_STRATEGY = {False: "PreferredReplicaPartitionLeaderElectionStrategy",
                      True: "OfflinePartitionLeaderElectionStrategy(true)"}


def _election_result(topic: str, partition: int, outcome: str, unclean: bool
                     ) -> tuple[Errors, str | None]:
    """Kafka's code and message for one partition's outcome of ElectLeaders."""
    if outcome == ELECTED:
        return Errors.NONE, None
    if outcome == NOT_NEEDED:
        return Errors.ELECTION_NOT_NEEDED, None
    if outcome == UNKNOWN_PARTITION:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    return (Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE if unclean
            else Errors.PREFERRED_LEADER_NOT_AVAILABLE,
            f"Failed to elect leader for partition {topic}-{partition} under strategy "
            f"{_ELECTION_STRATEGY[unclean]}")


# Requests no request_percentage quota applies to (Kafka's exempt ones that we serve:
# the version and authentication handshakes).
QUOTA_EXEMPT_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                               ApiKey.SASL_AUTHENTICATE})


@dataclasses.dataclass
class RequestContext:
    broker: object
    header: protocol.RequestHeader
    connection: object

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def client_id(self) -> str | None:
        return self.header.client_id


def _partition_produce_response(index: int, r: PartitionResult) -> dict:
    return {
        "index": index,
        "error_code": r.error,
        "base_offset": r.base_offset,
        "log_append_time_ms": r.log_append_time,
        "log_start_offset": r.log_start_offset,
        "record_errors": r.record_errors,
        "error_message": r.error_message if r.error != Errors.NONE else None,
    }


def _partition_metadata(index: int, ps, live_ids, node_id: int, offline_here: bool) -> dict:
    """One partition of a Metadata answer. Replicas of dead brokers are offline; so is
    this broker's, when its log dir failed: if it was the leader, the partition has none
    (leader -1, KAFKA_STORAGE_ERROR) until the controller elects another in-sync replica."""
    leader = ps.leader
    if offline_here and leader == node_id:
        leader = -1
        error = Errors.KAFKA_STORAGE_ERROR
    else:
        # leader -1: offline until an in-sync replica returns; clients retry
        error = Errors.NONE if leader >= 0 else Errors.LEADER_NOT_AVAILABLE
    return {
        "error_code": error,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": ps.leader_epoch,
        "replica_nodes": ps.replicas,
        "isr_nodes": ps.isr,
        "offline_replicas": [r for r in ps.replicas
                             if r not in live_ids or (offline_here and r == node_id)],
    }


def _check_leader_epoch(current: int, ours: int) -> Errors:
    """Kafka's fencing of a client that knows a different leader epoch."""
    if current < 0 or current == ours:
        return Errors.NONE
    return Errors.FENCED_LEADER_EPOCH if current < ours else Errors.UNKNOWN_LEADER_EPOCH


def _scram_infos(config: dict[str, str]) -> list[dict]:
    """The mechanism and iterations of each SCRAM credential in a user's config."""
    infos = []
    for t, mechanism in sorted(SCRAM_MECHANISM_TYPES.items()):
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            iterations = ScramCredential.from_kafka_string(text).iterations
        except ValueError:
            continue
        infos.append({"mechanism": t, "iterations": iterations})
    return infos


def _scram_change_problem(change) -> tuple[Errors, str] | None:
    """Why one deletion or upsertion of AlterUserScramCredentials is refused (Kafka's
    codes and sentences), or None."""
    if not change.name:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = SCRAM_MECHANISM_TYPES.get(change.mechanism)
    if mechanism is None:
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if not hasattr(change, "iterations"):
        return None
    if change.iterations < MIN_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if change.iterations > MAX_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    size = hashlib.new(SCRAM_DIGESTS[mechanism]).digest_size
    if not change.salt or len(change.salted_password) != size:
        return (Errors.UNACCEPTABLE_CREDENTIAL,
                f"The salted password must be a {mechanism} digest with a non-empty salt")
    return None


def _altered_quotas(stored: dict[str, str], ops) -> dict[str, str]:
    """An entity's quota keys after AlterClientQuotas' ops (set, or remove), as stored
    strings; QuotaError for an unknown key, a bad value or a key named twice."""
    values = quota_values(stored)
    seen = set()
    for op in ops:
        if op.key in seen:
            raise QuotaError(f"Duplicate quota key {op.key!r} in the entry")
        seen.add(op.key)
        if op.remove:
            if op.key not in QUOTA_KEYS:
                raise QuotaError(check_quota_value(op.key, 1.0))
            values.pop(op.key, None)
            continue
        problem = check_quota_value(op.key, op.value)
        if problem is not None:
            raise QuotaError(problem)
        values[op.key] = op.value
    return {k: format_quota_value(k, v) for k, v in values.items()}


# How long a topic id no topic had at the last scan (Fetch v13+) is answered unknown
# without scanning again, and how many such ids are remembered (KafkaApis._topic_name)
TOPIC_ID_RESCAN_S = 0.1
MAX_UNKNOWN_TOPIC_IDS = 1000


def request_listener(ctx) -> str | None:
    """The name of the listener a request arrived on (None when not known)."""
    state = getattr(ctx.connection, "state", None)
    return state.get("listener") if state else None


class KafkaApis:
    """Dispatch table ApiKey → handler; `handle` is the fastlog._net handler."""

    def __init__(self, broker):
        self.broker = broker
        self.quotas = broker.quotas
        # {topic id (16 bytes): name} of the topics known when last scanned (Fetch v13+
        # names topics by id); checked against the metadata on each use (the TopicState
        # seen then, the same object while the topic lives, no id ever set on one in
        # place: _topic_states, by id; its id's bytes otherwise). An id it lacks
        # rescans the topics, but not again for TOPIC_ID_RESCAN_S when no topic had it
        # (ids no topic has, kept in fetch sessions until forgotten, come on every
        # request): {id: monotonic time of the scan}, at most MAX_UNKNOWN_TOPIC_IDS
        self._topic_ids: dict[bytes, str] = {}
        self._topic_states: dict[bytes, object] = {}
        self._unknown_topic_ids: dict[bytes, float] = {}
        self.handlers = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.SASL_HANDSHAKE: self.handle_sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.handle_sasl_authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter_user_scram_credentials,
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.handle_create_acls,
            ApiKey.DELETE_ACLS: self.handle_delete_acls,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.handle_list_partition_reassignments,
            ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.ELECT_LEADERS: self.handle_elect_leaders,
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: self.handle_alter_replica_log_dirs,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter_client_quotas,
        }
        # ---- group coordinator hook (issue 5): its handlers use the same contract.
        self.handlers.update(GROUP_HANDLERS)
        # ---- transaction coordinator hook (issue 20).
        self.handlers.update(TXN_HANDLERS)

    # ------------------------------------------------------------------ dispatch
    async def handle(self, conn, frame):
        state = conn.state
        if "principal" not in state:
            security = self.broker.listener_security.get(state.get("listener"))
            open_connection(conn, security, asyncio.get_running_loop())
            peer = conn.peer
            # the client's IP address, as the ACLs' host field names it
            state["host"] = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else ""
        authenticator = state.get("authenticator")
        if authenticator is not None:
            authenticator.check_request(frame)
            if authenticator.raw_tokens:
                return authenticator.raw_token(frame)
            return await self._dispatch(conn, frame)
        if self.quotas.active:
            return await self._dispatch(conn, frame, True)
        fast = parse_produce_request(frame)
        if fast is None and self.broker.authorizer is None:
            # (with an authorizer, the transactional id's Write is the generic path's)
            fast = parse_transactional_produce_request(frame)
        if fast is not None:
            produce, topics, one = self._produce_one, (fast[5],), True
        elif (fast := parse_produce_partitions(frame)) is not None:
            produce, topics, one = self._produce_many, [topic for topic, _ in fast[5]], False
        if fast is not None and (self.broker.authorizer is None or all(
                self._may_fast(conn, WRITE, topic) for topic in topics)):
            try:
                if one:
                    # the everyday partition in one compiled step; None: not that case
                    r = self.broker.replica_manager.leader_produce.one(fast)
                    if r is not None:
                        if type(r) is list:
                            return r
                        if r is False:
                            return None   # acks=0
                        return await self._answer_one(conn, *fast[:2], *fast[3:7], r)
                return await produce(conn, *fast)
            except CloseConnection:
                raise
            except Exception:
                log.exception("PRODUCE v%d from client %r failed", fast[0], fast[2])
                raise CloseConnection("handler failed") from None
        fast = parse_fetch_request(frame)
        topic_id = None
        if fast is not None and fast[0] >= 13:
            # v13+ names the topic by id; an unknown id is the generic path's to answer
            topic_id = fast[7]
            name = self._topic_name(topic_id)
            fast = None if name is None else (*fast[:7], name, *fast[8:])
        if fast is not None and (self.broker.authorizer is None
                                 or self._may_fast(conn, READ, fast[7])):
            try:
                parts = self._fetch_one(*fast, topic_id)
            except Exception:
                log.exception("FETCH v%d from client %r failed", fast[0], fast[2])
                raise CloseConnection("handler failed") from None
            if parts is not None:
                return parts
        fast = parse_txn_request(frame)
        if fast is not None:
            return await self._txn_one(conn, *fast)
        return await self._dispatch(conn, frame)

    def _may_fast(self, conn, operation, topic: str) -> bool:
        """May the connection's principal do the operation (WRITE, READ) on the topic?
        (Otherwise the generic path answers the refusal and logs it.)"""
        state = conn.state
        return self.broker.authorizer.authorize(state["principal"], state["host"], operation,
                                                TOPIC, topic)

    async def _dispatch(self, conn, frame, quotas: bool = False):
        """Decode a request, run its handler and encode its response (with `quotas`, the
        client quotas in force are checked and applied: _throttle)."""
        try:
            header, body_offset = protocol.decode_request_header(frame)
        except protocol.UnsupportedVersionError as e:
            parts = protocol.unsupported_version_response(e.header)
            if parts is None:
                log.info("closing %r: %s", conn, e)
                raise CloseConnection(str(e)) from None
            return parts
        except protocol.InvalidRequestError as e:
            log.info("closing %r: %s", conn, e)
            raise CloseConnection(str(e)) from None
        handler = self.handlers.get(header.api_key)
        if handler is None:
            log.info("closing %r: no handler for %s", conn, ApiKey(header.api_key).name)
            raise CloseConnection(f"API {header.api_key} is not served")
        try:
            request = protocol.decode_request(header.api_key, header.api_version, frame, body_offset)
        except protocol.InvalidRequestError as e:
            log.info("closing %r (client %r): %s", conn, header.client_id, e)
            raise CloseConnection(str(e)) from None
        ctx = RequestContext(self.broker, header, conn)
        started = time.perf_counter() if quotas else 0.0
        try:
            response = await handler(ctx, request)
        except CloseConnection:
            raise
        except Exception:
            log.exception("%s v%d from client %r failed", ApiKey(header.api_key).name,
                          header.api_version, header.client_id)
            raise CloseConnection("handler failed") from None
        if quotas:
            return self._throttle(ctx, frame, request, response,
                                  (time.perf_counter() - started) * 1000.0)
        if response is None:
            return None
        return protocol.encode_response(header.api_key, header.api_version,
                                        header.correlation_id, response)

    def _throttle(self, ctx, frame, request, response, handler_ms: float):
        """Kafka's quota checks after a request was handled (client quotas configured):
        Produce counts the request's bytes against producer_byte_rate, a consumer's Fetch
        its response's bytes against consumer_byte_rate, every other request but the
        exempt ones its handler time against request_percentage (a Fetch's time is mostly
        its wait for data: it is not counted). Over a quota, the response carries the
        throttle time and the connection is muted for it (KIP-219); the request was
        served. While no quota is configured `handle` skips all this (one flag read), and
        the compiled Produce path runs as before."""
        header = ctx.header
        api = header.api_key
        parts = None
        if response is not None:
            parts = protocol.encode_response(api, header.api_version, header.correlation_id,
                                             response)
        quotas = self.quotas
        user = principal_name(ctx.connection.state.get("principal"))
        client_id = header.client_id
        throttle_ms = 0
        if api == ApiKey.PRODUCE:
            throttle_ms = quotas.record(PRODUCER_BYTE_RATE, user, client_id, len(frame))
        elif api == ApiKey.FETCH and request.replica_id < 0:
            throttle_ms = quotas.record(CONSUMER_BYTE_RATE, user, client_id,
                                        response_size(parts))
        if api not in QUOTA_EXEMPT_APIS and not (api == ApiKey.FETCH and request.replica_id >= 0):
            if api == ApiKey.FETCH:
                handler_ms = 0.0
            throttle_ms = max(throttle_ms, quotas.record(REQUEST_PERCENTAGE, user, client_id,
                                                          handler_ms))
        if throttle_ms <= 0:
            return parts
        ctx.connection.throttle(throttle_ms)
        if response is None:
            return None
        if isinstance(response, dict):
            response["throttle_time_ms"] = throttle_ms
        else:
            response.throttle_time_ms = throttle_ms
        return protocol.encode_response(api, header.api_version, header.correlation_id,
                                        response)

    # ------------------------------------------------------------------ leadership
    def _led_partition(self, topic: str, partition: int, write: bool = False):
        """(Partition, Errors.NONE) when this broker serves clients for it, else (None,
        error): UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have,
        NOT_LEADER_OR_FOLLOWER for one another broker leads (or none does, or — for
        writes — while this broker's ZooKeeper session has expired), so clients refresh
        their metadata and retry. KAFKA_STORAGE_ERROR for a replica in a failed log dir."""
        broker = self.broker
        rm = broker.replica_manager
        p = rm.get_partition(topic, partition)
        if p is not None and p.offline:
            return None, Errors.KAFKA_STORAGE_ERROR
        if broker.cluster is None:
            return (p, Errors.NONE) if p is not None else (None, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if p is not None and rm.is_leader(topic, partition) and not (
                write and broker.session_expired):
            return p, Errors.NONE
        state = broker.metadata.topic(topic)
        if state is None or partition not in state.partitions:
            return None, Errors.UNKNOWN_TOPIC_OR_PARTITION
        return None, Errors.NOT_LEADER_OR_FOLLOWER

    # ------------------------------------------------------------------ ApiVersions
    async def handle_api_versions(self, ctx, request):
        return protocol.api_versions_response()

    # ------------------------------------------------------------------ SASL
    async def handle_sasl_handshake(self, ctx, request):
        authenticator = ctx.connection.state.get("authenticator")
        if authenticator is None:
            # Not a SASL listener, or already authenticated (Kafka: re-authentication
            # is not enabled without connections.max.reauth.ms).
            return {"error_code": Errors.ILLEGAL_SASL_STATE, "mechanisms": []}
        return authenticator.handshake(ctx.api_version, request.mechanism)

    async def handle_sasl_authenticate(self, ctx, request):
        authenticator = ctx.connection.state.get("authenticator")
        if authenticator is None:
            return {"error_code": Errors.ILLEGAL_SASL_STATE, "auth_bytes": b"",
                    "error_message": "Unexpected SaslAuthenticate request: the connection "
                                     "is not authenticating"}
        return authenticator.authenticate(request.auth_bytes)

    # ------------------------------------------------------------------ SCRAM credentials
    async def handle_describe_user_scram_credentials(self, ctx, request):
        if not authorize_cluster(ctx, DESCRIBE):
            return {"throttle_time_ms": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None, "results": []}
        md = self.broker.metadata
        if request.users:
            names = [u.name for u in request.users]
        else:
            names = [u for u in md.user_names() if _scram_infos(md.user_config(u))]
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        results = []
        for name in dict.fromkeys(names):
            infos = _scram_infos(md.user_config(name))
            if counts[name] > 1:
                error, message = (Errors.DUPLICATE_RESOURCE, "Cannot describe SCRAM "
                                  "credentials for the same user twice in a single request")
            elif not infos:
                error, message = (Errors.RESOURCE_NOT_FOUND,
                                  "Attempt to describe a user credential that does not exist")
            else:
                error, message = Errors.NONE, None
            results.append({"user": name, "error_code": error, "error_message": message,
                             "credential_infos": infos if error == Errors.NONE else []})
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None,
                "results": results}

    async def handle_alter_user_scram_credentials(self, ctx, request):
        # Kafka's checks (ZkAdminManager.alterUserScramCredentials): each user gets one
        # result; any problem with one of its changes fails all of that user's changes.
        md = self.broker.metadata
        if not authorize_cluster(ctx, ALTER):
            names = [c.name for c in [*request.deletions, *request.upsertions]]
            return {"throttle_time_ms": 0, "results": [
                {"user": name, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                 "error_message": None} for name in dict.fromkeys(names)]}
        errors: dict[str, tuple[Errors, str]] = {}
        seen: set[tuple[str, int]] = set()
        users: list[str] = []
        for change in [*request.deletions, *request.upsertions]:
            users.append(change.name)
            problem = _scram_change_problem(change)
            if problem is None and (change.name, change.mechanism) in seen:
                problem = (Errors.DUPLICATE_RESOURCE,
                           "A user credential cannot be altered twice in the same request")
            seen.add((change.name, change.mechanism))
            if problem is not None:
                errors.setdefault(change.name, problem)
        for deletion in request.deletions:
            mechanism = SCRAM_MECHANISM_TYPES.get(deletion.mechanism)
            if (deletion.name not in errors and mechanism is not None
                    and mechanism not in md.user_config(deletion.name)):
                errors[deletion.name] = (Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user "
                                         "credential that does not exist")
        results = []
        for user in dict.fromkeys(users):
            if user in errors:
                code, message = errors[user]
                results.append({"user": user, "error_code": code, "error_message": message})
                continue
            config = md.user_config(user)
            for deletion in request.deletions:
                if deletion.name == user:
                    config.pop(SCRAM_MECHANISM_TYPES[deletion.mechanism], None)
            for up in request.upsertions:
                if up.name == user:
                    mechanism = SCRAM_MECHANISM_TYPES[up.mechanism]
                    config[mechanism] = ScramCredential.from_salted_password(
                        bytes(up.salted_password), bytes(up.salt), up.iterations,
                        mechanism).to_kafka_string()
            try:
                await md.set_user_config(user, config)
            except Exception as e:  # noqa: BLE001 - one user's failure is its result
                log.warning("storing the SCRAM credentials of a user failed: %s", e)
                results.append({"user": user, "error_code": Errors.UNKNOWN_SERVER_ERROR,
                                "error_message": "storing the credentials failed"})
                continue
            results.append({"user": user, "error_code": Errors.NONE, "error_message": None})
        return {"throttle_time_ms": 0, "results": results}

    # ------------------------------------------------------------------ ACLs
    async def handle_describe_acls(self, ctx, request):
        authorizer = self.broker.authorizer
        error, message = Errors.NONE, None
        if authorizer is None:
            error, message = authz.no_authorizer_error()
        elif not authorize_cluster(ctx, DESCRIBE):
            error = Errors.CLUSTER_AUTHORIZATION_FAILED
        else:
            acl_filter = AclBindingFilter.from_wire(
                request.resource_type_filter, request.resource_name_filter,
                request.pattern_type_filter, request.principal_filter, request.host_filter,
                request.operation, request.permission_type)
            message = acl_filter.validation_error()
            if message is not None:
                error = Errors.INVALID_REQUEST
        if error != Errors.NONE:
            return {"throttle_time_ms": 0, "error_code": error, "error_message": message,
                    "resources": []}
        resources: dict = {}
        for pattern, entry in authorizer.list(acl_filter):
            resources.setdefault(pattern, []).append({
                "principal": entry.principal, "host": entry.host,
                "operation": entry.operation, "permission_type": entry.permission_type})
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None,
                "resources": [{"resource_type": p.resource_type, "resource_name": p.name,
                               "pattern_type": p.pattern_type, "acls": acls}
                              for p, acls in resources.items()]}

    def _acl_change_refusal(self, ctx) -> tuple[Errors, str | None] | None:
        """Why CreateAcls / DeleteAcls is refused as a whole (Kafka: Alter on the cluster),
        or None."""
        if self.broker.authorizer is None:
            return authz.no_authorizer_error()
        if not authorize_cluster(ctx, ALTER):
            return Errors.CLUSTER_AUTHORIZATION_FAILED, None
        return None

    async def handle_create_acls(self, ctx, request):
        refusal = self._acl_change_refusal(ctx)
        if refusal is not None:
            return {"throttle_time_ms": 0, "results": [
                {"error_code": refusal[0], "error_message": refusal[1]}
                for _ in request.creations]}
        bindings = [binding_from_wire(c.resource_type, c.resource_name,
                                      c.resource_pattern_type, c.principal, c.host,
                                      c.operation, c.permission_type)
                    for c in request.creations]
        results = await authz.run_admin(self.broker.authorizer.add, bindings)
        return {"throttle_time_ms": 0, "results": [
            {"error_code": r.error, "error_message": r.message} for r in results]}

    async def handle_delete_acls(self, ctx, request):
        refusal = self._acl_change_refusal(ctx)
        if refusal is not None:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": refusal[0], "error_message": refusal[1], "matching_acls": []}
                for _ in request.filters]}
        filters = [AclBindingFilter.from_wire(
            f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
            f.principal_filter, f.host_filter, f.operation, f.permission_type)
            for f in request.filters]
        results = await authz.run_admin(self.broker.authorizer.remove, filters)
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": r.error, "error_message": r.message, "matching_acls": [
                {"error_code": error, "error_message": message,
                 "resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
                 "pattern_type": b.pattern.pattern_type, "principal": b.entry.principal,
                 "host": b.entry.host, "operation": b.entry.operation,
                 "permission_type": b.entry.permission_type}
                for b, error, message in r.matching]}
            for r in results]}

    # ------------------------------------------------------------------ client quotas
    async def handle_describe_client_quotas(self, ctx, request):
        if not authorize_cluster(ctx, DESCRIBE_CONFIGS):
            return {"throttle_time_ms": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None, "entries": None}
        quotas = {entity: quota_values(config)
                  for entity, config in self.broker.metadata.quota_configs().items()}
        try:
            entities = match_entities(
                [e for e, values in quotas.items() if values],
                [(c.entity_type, c.match_type, c.match) for c in request.components],
                request.strict)
        except QuotaError as e:
            return {"throttle_time_ms": 0, "error_code": Errors.INVALID_REQUEST,
                    "error_message": str(e), "entries": None}
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None,
                "entries": [
                    {"entity": [{"entity_type": t, "entity_name": n}
                                for t, n in entity_parts(entity)],
                     "values": [{"key": k, "value": v} for k, v in sorted(quotas[entity].items())]}
                    for entity in entities]}

    async def handle_alter_client_quotas(self, ctx, request):
        # Kafka's checks (ZkAdminManager.alterClientQuotas): each entry stands alone; a bad
        # entity, key or value fails its entry with INVALID_REQUEST and a sentence.
        md = self.broker.metadata
        allowed = authorize_cluster(ctx, ALTER_CONFIGS)
        results = []
        changed = False
        for entry in request.entries:
            wire_entity = [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                           for e in entry.entity]
            if not allowed:
                results.append({"error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                                "error_message": None, "entity": wire_entity})
                continue
            try:
                entity = entity_from_parts([(e.entity_type, e.entity_name) for e in entry.entity])
                config = _altered_quotas(md.quota_configs().get(entity, {}), entry.ops)
            except QuotaError as e:
                results.append({"error_code": Errors.INVALID_REQUEST, "error_message": str(e),
                                "entity": wire_entity})
                continue
            if not request.validate_only:
                try:
                    await md.set_quota_config(entity, config, tuple(QUOTA_KEYS))
                    changed = True
                except Exception as e:  # noqa: BLE001 - one entity's failure is its result
                    log.warning("storing the quotas of %s failed: %s", describe_entity(entity), e)
                    results.append({"error_code": Errors.UNKNOWN_SERVER_ERROR,
                                    "error_message": "storing the quotas failed",
                                    "entity": wire_entity})
                    continue
            results.append({"error_code": Errors.NONE, "error_message": None,
                            "entity": wire_entity})
        if changed:
            self.broker.quotas_changed()
        return {"throttle_time_ms": 0, "entries": results}

    # ------------------------------------------------------------------ Metadata
    async def handle_metadata(self, ctx, request):
        broker = self.broker
        v = ctx.api_version
        md = broker.metadata
        topics = []
        by_id = False
        if request.topics is None or (v == 0 and not request.topics):
            # All topics: only those the principal may Describe are listed.
            names = [n for n in md.topic_names()
                     if authorize(ctx, DESCRIBE, TOPIC, n, log_denied=False)]
        else:
            for t in request.topics:
                named, with_id = t.name is not None, t.topic_id != ZERO_UUID
                if (v < 12 and (not named or with_id)) or not (named or with_id):
                    # Kafka: up to v11 names only (v10-11 have the id field unused); v12+
                    # a name or an id
                    why = f"Metadata v{v}: a topic needs a name" + (
                        " or an id" if v >= 12 else " (no topic ids before v12)")
                    report_limited(log, logging.INFO, ("metadata-topic", v), "closing %r: %s",
                                   ctx.connection, why)
                    raise CloseConnection(why)
            # v12+: topics asked for by id (Kafka then ignores the names)
            by_id = v >= 12 and any(t.topic_id != ZERO_UUID for t in request.topics)
            if by_id:
                ids = {t.topic_id for t in request.topics if t.topic_id != ZERO_UUID}
                known = _topic_names_by_id(md, ids)
                names = [known[i] for i in ids if i in known]
                topics.extend({"error_code": Errors.UNKNOWN_TOPIC_ID, "name": None,
                               "topic_id": i, "is_internal": False, "partitions": []}
                              for i in ids if i not in known)
            else:
                names = list(dict.fromkeys(t.name for t in request.topics))  # Kafka dedups
        auto_create = broker.config["auto.create.topics.enable"] and not by_id and (
            v < 4 or request.allow_auto_topic_creation)
        topic_ops = v >= 8 and request.include_topic_authorized_operations
        may_create_any = None
        live_ids = {b[0] for b in broker.live_brokers()}
        # Each broker as reachable on the listener this request came in on (Kafka matches
        # the listener name; a broker without that listener is left out).
        live = broker.live_brokers(request_listener(ctx))
        for name in names:
            if not authorize(ctx, DESCRIBE, TOPIC, name):
                # (asked by id: the id is answered, the name withheld, as Kafka does)
                state = md.topic(name) if by_id else None
                topics.append({"error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                               "name": None if by_id else name,
                               "topic_id": state.topic_id_bytes if state else ZERO_UUID,
                               "is_internal": False, "partitions": []})
                continue
            state = md.topic(name)
            error = Errors.NONE
            if state is None:
                problem = broker.topic_name_problem(name)
                if problem is not None:
                    error = Errors.INVALID_TOPIC_EXCEPTION
                elif auto_create and name not in INTERNAL_TOPICS:
                    if may_create_any is None:
                        may_create_any = authorize_cluster(ctx, CREATE, log_denied=False)
                    if not (may_create_any or authorize(ctx, CREATE, TOPIC, name)):
                        topics.append({"error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                                       "name": name, "is_internal": False, "partitions": []})
                        continue
                    try:
                        state = await broker.create_topic(
                            name, broker.config["num.partitions"],
                            broker.config["default.replication.factor"], {})
                    except Exception as e:  # noqa: BLE001 - answer, don't crash
                        log.warning("auto-creating topic %r failed: %s", name, e)
                        error = Errors.LEADER_NOT_AVAILABLE
                else:
                    error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            if state is None:
                topics.append({"error_code": error, "name": name, "is_internal": False,
                               "partitions": []})
                continue
            topics.append({
                "error_code": Errors.NONE,
                "name": name,
                "topic_id": state.topic_id_bytes,
                "is_internal": state.internal,
                "partitions": [_partition_metadata(p, ps, live_ids, broker.node_id,
                                                   broker.replica_manager.is_offline(name, p))
                               for p, ps in sorted(state.partitions.items())],
                "topic_authorized_operations": (
                    authz.authorized_operations(ctx, TOPIC, name) if topic_ops
                    else OPERATIONS_NOT_ASKED),
            })
        return {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": bid, "host": host, "port": port, "rack": rack}
                        for bid, host, port, rack in live],
            "cluster_id": md.cluster_id,
            "controller_id": md.controller_id,
            "topics": topics,
            "cluster_authorized_operations": (
                authz.cluster_authorized_operations(ctx)
                if v >= 8 and request.include_cluster_authorized_operations
                else OPERATIONS_NOT_ASKED),
        }

    # ------------------------------------------------------------------ DescribeCluster
    async def handle_describe_cluster(self, ctx, request):
        """Cluster id, controller and the live brokers as reachable on this request's
        listener (as Metadata lists them); v1 asks for an endpoint type, and a broker is
        no controller endpoint (Kafka's computeDescribeClusterResponse)."""
        md = self.broker.metadata
        endpoint_type = request.endpoint_type if ctx.api_version >= 1 else ENDPOINT_BROKER
        out = {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None,
               "endpoint_type": ENDPOINT_BROKER, "cluster_id": md.cluster_id,
               "controller_id": md.controller_id, "brokers": [],
               "cluster_authorized_operations": OPERATIONS_NOT_ASKED}
        if endpoint_type != ENDPOINT_BROKER:
            if endpoint_type == ENDPOINT_CONTROLLER:
                out.update(error_code=Errors.MISMATCHED_ENDPOINT_TYPE, error_message=(
                    "The request was sent to an endpoint of type BROKER, but we wanted an "
                    "endpoint of type CONTROLLER"))
            else:
                out.update(error_code=Errors.UNSUPPORTED_ENDPOINT_TYPE,
                           error_message=f"Unsupported endpoint type {endpoint_type}")
            return out
        out["brokers"] = [{"broker_id": bid, "host": host, "port": port, "rack": rack}
                          for bid, host, port, rack in
                          self.broker.live_brokers(request_listener(ctx))]
        if request.include_cluster_authorized_operations:
            out["cluster_authorized_operations"] = authz.cluster_authorized_operations(ctx)
        return out

    # ------------------------------------------------------------------ ElectLeaders
    async def handle_elect_leaders(self, ctx, request):
        """Preferred (v0+) or unclean (v1+) leader elections on demand, by the active
        controller (Kafka's admin clients send it there; elsewhere NOT_CONTROLLER). One
        node leads every partition itself: ELECTION_NOT_NEEDED, or no leader available
        while its log dir has failed. Needs Alter on the cluster. Asked for every
        partition (null), the answer leaves out those that needed no election."""
        v = ctx.api_version
        broker = self.broker
        election_type = request.election_type if v >= 1 else ELECTION_PREFERRED
        unclean = election_type == ELECTION_UNCLEAN
        if request.topic_partitions is None:
            asked = None
            tps = [(t, p) for t in broker.metadata.topic_names()
                   for p in sorted(broker.metadata.topic(t).partitions)]
        else:
            tps = list(dict.fromkeys((t.topic, p) for t in request.topic_partitions
                                     for p in t.partitions))
            asked = tps
        top = Errors.NONE
        results: dict[tuple[str, int], tuple[Errors, str | None]] = {}
        if election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
            top = Errors.INVALID_REQUEST
            results = dict.fromkeys(tps, (top, f"Unknown election type {election_type}"))
        elif not authorize_cluster(ctx, ALTER):
            top = Errors.CLUSTER_AUTHORIZATION_FAILED
            results = dict.fromkeys(asked or [], (top, None))
        elif broker.cluster is None:
            # One node: the only replica leads every partition unless its log dir failed.
            for t, p in tps:
                state = broker.metadata.topic(t)
                if state is None or p not in state.partitions:
                    outcome = UNKNOWN_PARTITION
                elif broker.replica_manager.is_offline(t, p):
                    outcome = NOT_AVAILABLE
                else:
                    outcome = NOT_NEEDED
                results[(t, p)] = _election_result(t, p, outcome, unclean)
        else:
            outcomes = await broker.elect_leaders(unclean, asked) if broker.is_controller() else None
            if outcomes is None:
                results = dict.fromkeys(tps, (Errors.NOT_CONTROLLER, None))
            else:
                results = {(t, p): _election_result(t, p, outcome, unclean)
                           for (t, p), outcome in outcomes.items()}
        if asked is None:
            results = {tp: r for tp, r in results.items()
                       if r[0] is not Errors.ELECTION_NOT_NEEDED}
        by_topic: dict[str, list] = {}
        for (t, p), (code, message) in results.items():
            by_topic.setdefault(t, []).append(
                {"partition_id": p, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "error_code": top, "replica_election_results": [
            {"topic": t, "partition_result": parts} for t, parts in by_topic.items()]}

    # ------------------------------------------------------------------ DescribeLogDirs
    async def handle_describe_log_dirs(self, ctx, request):
        """Each of this broker's log dirs (KAFKA_STORAGE_ERROR when offline) with its
        partitions (all, or those asked for): size on disk, offset lag (Kafka's max(HW -
        log end, 0) of a current replica) and is_future_key (true for the copy of a
        partition moving into the dir, AlterReplicaLogDirs, its lag what it has yet to
        copy); v4 adds the file system's total and usable bytes. Needs
        Describe on the cluster (else CLUSTER_AUTHORIZATION_FAILED and no dirs)."""
        if not authorize_cluster(ctx, DESCRIBE):
            return {"throttle_time_ms": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                    "results": []}
        lm = self.broker.log_manager
        wanted = (None if request.topics is None else
                  {(t.topic, p) for t in request.topics for p in t.partitions})
        by_dir: dict[str, dict[str, list]] = {d: {} for d in lm.log_dirs}
        for lg in lm.all_logs():
            if wanted is not None and (lg.topic, lg.partition) not in wanted:
                continue
            by_dir.setdefault(os.path.dirname(lg.dir), {}).setdefault(lg.topic, []).append({
                "partition_index": lg.partition, "partition_size": lg.size_in_bytes,
                "offset_lag": max(lg.high_watermark - lg.log_end_offset, 0),
                "is_future_key": False})
        for lg, d in lm.future_logs():
            current = lm.get_log(lg.topic, lg.partition)
            if current is None or (wanted is not None and (lg.topic, lg.partition) not in wanted):
                continue
            by_dir.setdefault(d, {}).setdefault(lg.topic, []).append({
                "partition_index": lg.partition, "partition_size": lg.size_in_bytes,
                "offset_lag": max(current.log_end_offset - lg.log_end_offset, 0),
                "is_future_key": True})
        offline = lm.dir_failure_channel.offline
        results = []
        for d, topics in by_dir.items():
            if d in offline:
                results.append({"error_code": Errors.KAFKA_STORAGE_ERROR, "log_dir": d,
                                "topics": []})
                continue
            total, usable = lm.disk_space(d)
            results.append({
                "error_code": Errors.NONE, "log_dir": d, "total_bytes": total,
                "usable_bytes": usable,
                "topics": [{"name": t, "partitions": sorted(ps, key=lambda x: x["partition_index"])}
                           for t, ps in sorted(topics.items())]})
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "results": results}

    # ------------------------------------------------------------------ AlterReplicaLogDirs
    async def handle_alter_replica_log_dirs(self, ctx, request):
        """Move partitions hosted here into another of this broker's log dirs (absolute
        paths, as DescribeLogDirs names them); the move runs in the background
        (ReplicaManager.alter_log_dir) and DescribeLogDirs shows its future log until the
        swap. LOG_DIR_NOT_FOUND, REPLICA_NOT_AVAILABLE or KAFKA_STORAGE_ERROR per
        partition; needs Alter on the cluster."""
        allowed = authorize_cluster(ctx, ALTER)
        rm = self.broker.replica_manager
        by_topic: dict[str, list] = {}
        for d in request.dirs:
            for t in d.topics:
                for p in t.partitions:
                    code = (rm.alter_log_dir(t.name, p, d.path) if allowed
                            else Errors.CLUSTER_AUTHORIZATION_FAILED)
                    by_topic.setdefault(t.name, []).append(
                        {"partition_index": p, "error_code": code})
        return {"throttle_time_ms": 0, "results": [
            {"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]}

    # ------------------------------------------------------------------ Produce
    async def handle_produce(self, ctx, request):
        v = ctx.api_version
        acks = request.acks
        responses = []
        if v < protocol.PRODUCE_MIN_IMPLEMENTED:
            # Advertised from v0 for old librdkafka's feature checks; never served (Kafka 4).
            for t in request.topic_data:
                responses.append({"name": t.name, "partition_responses": [
                    {"index": p.index, "error_code": Errors.UNSUPPORTED_VERSION,
                     "base_offset": -1} for p in t.partition_data]})
            if acks == 0:
                raise CloseConnection("Produce below v3 is not supported")
            return {"responses": responses, "throttle_time_ms": 0}
        # Kafka: transactional batches need the request's transactional id and Write on it
        if any(is_transactional_records(p.records) for t in request.topic_data for p in t.partition_data) \
                and (request.transactional_id is None
                     or not authorize(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id)):
            err = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            for t in request.topic_data:
                responses.append({"name": t.name, "partition_responses": [
                    {"index": p.index, "error_code": err, "base_offset": -1}
                    for p in t.partition_data]})
            if acks == 0:
                raise CloseConnection("transactional produce refused")
            return {"responses": responses, "throttle_time_ms": 0}
        results = {}
        # KIP-890: a transactional write to a partition not in the transaction is refused
        unverified = {} if request.transactional_id is None else await unverified_partitions(
            self.broker, request.transactional_id,
            [(t.name, p.index, p.records) for t in request.topic_data for p in t.partition_data])
        for t in request.topic_data:
            if not authorize(ctx, WRITE, TOPIC, t.name):
                for p in t.partition_data:
                    results[(t.name, p.index)] = PartitionResult(Errors.TOPIC_AUTHORIZATION_FAILED)
                continue
            for p in t.partition_data:
                r = unverified.get((t.name, p.index))
                if r is None:
                    r = self._append_inline(t.name, p.index, p.records, acks, v)
                    if r is None:
                        r = await self._append_led(t.name, p.index, p.records, acks, v)
                else:
                    r = self.broker.topic_stats.produce_done(t.name, p.records, r)
                results[(t.name, p.index)] = r
        if not await self._completed(results, acks, request.timeout_ms):
            return None
        return self._produce_response(v, request_listener(ctx), [
            (t.name, [p.index for p in t.partition_data]) for t in request.topic_data], results)

    async def _completed(self, results: dict, acks: int, timeout_ms: int) -> bool:
        """Wait for what the appends' `results` still wait for (ReplicaManager.completion);
        False when no answer goes back (acks=0), where, like Kafka, an error closes the
        connection so the client notices."""
        wait = self.broker.replica_manager.completion(results, acks, timeout_ms)
        if wait is not None:
            await wait
        if acks != 0:
            return True
        if any(r.error != Errors.NONE for r in results.values()):
            raise CloseConnection("acks=0 produce failed")
        return False

    def _produce_response(self, api_version: int, listener: str | None, topics,
                          results: dict) -> dict:
        """The ProduceResponse of `results` ({(topic, partition): PartitionResult}) in the
        request's order (`topics`: [(topic, [partition, ...])]), with KIP-951's leader hints
        (v10+) for the partitions answered NOT_LEADER_OR_FOLLOWER."""
        moved = []
        responses = []
        for name, indexes in topics:
            parts = []
            for i in indexes:
                parts.append(_partition_produce_response(i, results[(name, i)]))
                if parts[-1]["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER:
                    moved.append((parts[-1], name, i))
            responses.append({"name": name, "partition_responses": parts})
        return {"responses": responses, "throttle_time_ms": 0,
                "node_endpoints": self._leader_hints(listener, moved)
                if moved and api_version >= 10 else []}

    def _leader_hints(self, listener: str | None, moved: list[tuple[dict, str, int]]
                      ) -> list[dict]:
        """KIP-951 (Produce v10+, Fetch v12+): each partition answer in `moved` (a
        partition answered NOT_LEADER_OR_FOLLOWER, or FENCED_LEADER_EPOCH to a fetch, with
        its topic and index) names the partition's leader and epoch as this broker knows
        them, so the client goes there without a Metadata round trip; returns those
        leaders' endpoints on `listener` (Produce's node_endpoints)."""
        md = self.broker.metadata
        leaders = set()
        for entry, topic, partition in moved:
            state = md.topic(topic)
            ps = state.partitions.get(partition) if state is not None else None
            if ps is None or ps.leader < 0:
                continue  # unknown: Kafka's -1/-1, the tag's default
            entry["current_leader"] = {"leader_id": ps.leader, "leader_epoch": ps.leader_epoch}
            leaders.add(ps.leader)
        if not leaders:
            return []
        return [{"node_id": b, "host": host, "port": port, "rack": rack}
                for b, host, port, rack in self.broker.live_brokers(listener) if b in leaders]

    async def _append_led(self, topic, partition, records, acks, api_version
                          ) -> PartitionResult:
        """Append one partition's records of a Produce request in place (the frame is ours
        until the handler returns): only the leader takes writes, and only while its
        ZooKeeper session lives. A large batch is checked on the verification pool (see
        ReplicaManager.check_produce), and written by it, so the loop serves others
        meanwhile. The result may still wait for ReplicaManager.completion (always
        awaited before the handler returns: the frame must outlive the write)."""
        stats = self.broker.topic_stats  # Kafka's BrokerTopicMetrics, per partition
        if self.broker.cluster is not None:
            _, err = self._led_partition(topic, partition, write=True)
            if err != Errors.NONE:
                return stats.produce_done(topic, records, PartitionResult(err))
        rm = self.broker.replica_manager
        checked = await rm.check_produce(topic, partition, records, api_version)
        if self.broker.cluster is not None and checked is not None:
            # (the checks may have run on the verification pool: leadership can have moved)
            _, err = self._led_partition(topic, partition, write=True)
            if err != Errors.NONE:
                return stats.produce_done(topic, records, PartitionResult(err))
        return stats.produce_done(topic, records, rm.append_to_partition(
            topic, partition, records, acks, api_version, in_place=True, checked=checked,
            write_behind=True))

    def _append_inline(self, topic, partition, records, acks, api_version
                       ) -> PartitionResult | None:
        """_append_led without awaiting anything, where nothing needs to wait before the
        append (ReplicaManager.append_inline: the everyday small batch of a partition this
        broker leads); None otherwise, and the caller awaits _append_led."""
        if self.broker.cluster is not None:
            _, err = self._led_partition(topic, partition, write=True)
            if err != Errors.NONE:
                return None   # _append_led answers it
        r = self.broker.replica_manager.append_inline(topic, partition, records, acks,
                                                      api_version)
        return None if r is None else self.broker.topic_stats.produce_done(topic, records, r)

    async def _produce_one(self, conn, api_version, correlation_id, client_id, acks,
                           timeout_ms, topic, partition, records, transactional_id=None):
        """Produce v3-v11 of one partition of one topic, as fastlog.protocol._produce read
        it from the frame (a transactional id only when no authorizer is configured):
        the same steps as handle_produce, answered in compiled code when the append
        succeeded. Returns the response parts (None for acks=0)."""
        if transactional_id is not None:
            # KIP-890: a transactional write to a partition not in the transaction
            unverified = await unverified_partitions(self.broker, transactional_id,
                                                     [(topic, partition, records)])
            r = unverified.get((topic, partition))
            r = await self._append_led(topic, partition, records, acks, api_version) \
                if r is None else self.broker.topic_stats.produce_done(topic, records, r)
        elif is_transactional_records(records):   # transactional batches need the id
            r = PartitionResult(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            r = self._append_inline(topic, partition, records, acks, api_version)
            if r is None:
                r = await self._append_led(topic, partition, records, acks, api_version)
        return await self._answer_one(conn, api_version, correlation_id, acks, timeout_ms,
                                      topic, partition, r)

    async def _answer_one(self, conn, api_version, correlation_id, acks, timeout_ms, topic,
                          partition, r):
        """_produce_one's answer of its partition's result `r` (a PartitionResult, counted
        already): once what it waits for is done, the response parts (None for acks=0)."""
        if r.pending is not None or r.flush_future is not None or acks == -1:
            # (otherwise ReplicaManager.completion has nothing to wait for)
            wait = self.broker.replica_manager.completion({(topic, partition): r}, acks,
                                                          timeout_ms)
            if wait is not None:
                await wait
        if acks == 0:
            if r.error != Errors.NONE:
                raise CloseConnection("acks=0 produce failed")
            return None
        if r.error == Errors.NONE and not r.record_errors:
            return [encode_produce_response(api_version, correlation_id, topic, partition,
                                            r.base_offset, r.log_append_time,
                                            r.log_start_offset)]
        return protocol.encode_response(ApiKey.PRODUCE, api_version, correlation_id,
                                        self._produce_response(
                                            api_version, conn.state.get("listener"),
                                            [(topic, [partition])], {(topic, partition): r}))

    async def _produce_many(self, conn, api_version, correlation_id, client_id, acks,
                            timeout_ms, topics):
        """Produce v3-v11 of several partitions without a transactional id, as
        fastlog.protocol._produce.parse_produce_partitions read it from the frame (what
        kafka-python and the Java client send: every partition a broker leads in one
        request): handle_produce's steps, answered in compiled code when every partition's
        append succeeded. Returns the response parts (None for acks=0)."""
        results = {}
        if any(is_transactional_records(records) for _, parts in topics
               for _, records in parts):   # (no transactional id on this path)
            refused = PartitionResult(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            for topic, parts in topics:
                for partition, _ in parts:
                    results[(topic, partition)] = refused
        else:
            step = self.broker.replica_manager.leader_produce.partition   # (compiled)
            for topic, parts in topics:
                for partition, records in parts:
                    results[(topic, partition)] = (
                        step(topic, partition, records, acks, api_version)
                        or self._append_inline(topic, partition, records, acks, api_version)
                        or await self._append_led(topic, partition, records, acks,
                                                  api_version))
        if not await self._completed(results, acks, timeout_ms):
            return None
        if all(r.error == Errors.NONE and not r.record_errors for r in results.values()):
            return [encode_produce_partitions(api_version, correlation_id, [
                (topic, [(partition, (r := results[(topic, partition)]).base_offset,
                          r.log_append_time, r.log_start_offset) for partition, _ in parts])
                for topic, parts in topics])]
        return protocol.encode_response(ApiKey.PRODUCE, api_version, correlation_id,
                                        self._produce_response(
                                            api_version, conn.state.get("listener"),
                                            [(topic, [i for i, _ in parts])
                                             for topic, parts in topics], results))

    # ------------------------------------------------------------------ transactions
    async def _txn_one(self, conn, api_key, api_version, correlation_id, client_id,
                       transactional_id, producer_id, producer_epoch, arg):
        """AddPartitionsToTxn v0-v2 (`arg`: the (topic, partition) pairs) or EndTxn v0-v2
        (`arg`: committed), as fastlog.protocol._txn read them from the frame: the
        generic handlers' steps (fastlog/server/txn/apis.py), answered in compiled
        code."""
        ctx = RequestContext(self.broker, protocol.RequestHeader(
            api_key, api_version, correlation_id, client_id), conn)
        try:
            if api_key == ApiKey.END_TXN:
                err = await end_txn(ctx, transactional_id, producer_id, producer_epoch, arg)
                return [encode_end_txn_response(api_version, correlation_id, err)]
            result = await add_partitions(ctx, transactional_id, producer_id, producer_epoch,
                                          arg, False)
            return [encode_add_partitions_to_txn_response(
                api_version, correlation_id,
                [(t["name"], t["partitions"]) for t in _by_topic(result, lambda p, e: (p, e))])]
        except CloseConnection:
            raise
        except Exception:
            log.exception("%s v%d from client %r failed", ApiKey(api_key).name, api_version,
                          client_id)
            raise CloseConnection("handler failed") from None

    # ------------------------------------------------------------------ Fetch
    def _fetch_one(self, api_version, correlation_id, client_id, max_wait_ms, min_bytes,
                   max_bytes, isolation_level, topic, partition, current_leader_epoch,
                   fetch_offset, partition_max_bytes, last_fetched_epoch, topic_id=None):
        """Fetch v4-v17 of one partition by a consumer without a fetch session, as
        fastlog.protocol._fetch read it from the frame (v13+: `topic` is the name its
        `topic_id` resolved to): the read handle_fetch makes for
        that shape, answered in compiled code. None when the answer is not that simple (an
        error, a diverging epoch, a follower's read, too little data for a fetch that
        waits): handle_fetch then serves the request (reading again; a consumer's read
        changes nothing)."""
        broker = self.broker
        p, err = self._led_partition(topic, partition)
        if p is None or _check_leader_epoch(current_leader_epoch, p.leader_epoch) != Errors.NONE:
            return None
        if last_fetched_epoch >= 0:
            # v12+: _read_fetch's diverging-epoch check; a divergence is answered there
            epoch, end = broker.end_offset_for_epoch(p, last_fetched_epoch)
            if epoch < last_fetched_epoch or end < fetch_offset:
                return None
        read_committed = isolation_level == 1
        budget = min(partition_max_bytes, max_bytes, broker.config["fetch.max.bytes"])
        res = broker.replica_manager.read_partition(
            p, fetch_offset, max(budget, 0), min_one_batch=True, from_follower=False,
            api_version=api_version, replica_id=-1, read_committed=read_committed)
        if (res.error != Errors.NONE or res.preferred_read_replica >= 0
                or (res.size < min_bytes and max_wait_ms > 0)):
            return None
        regions = res.regions
        stats = broker.topic_stats
        stats.fetch_done([{"topic": topic, "partitions": [{
            "error_code": Errors.NONE, "records": (regions, res.size) if regions else b""}]}],
            False)
        stats.compiled_fetch_requests += 1
        aborted = None
        if read_committed:
            aborted = res.aborted_transactions or []
        return encode_fetch_response(api_version, correlation_id,
                                     topic if topic_id is None else topic_id, partition,
                                     res.high_watermark, res.last_stable_offset,
                                     res.log_start_offset, aborted, regions or None, res.size)

    def _topic_name(self, topic_id: bytes) -> str | None:
        """The name of the topic with this id (Fetch v13+), None when there is none."""
        md = self.broker.metadata
        name = self._topic_ids.get(topic_id)
        if name is not None:
            state = md.topic(name)
            if state is not None and (state is self._topic_states.get(topic_id)
                                      or state.topic_id_bytes == topic_id):
                self._topic_states[topic_id] = state
                return name
        if topic_id == ZERO_UUID:
            return None
        now = time.monotonic()
        unknown = self._unknown_topic_ids
        if now - unknown.get(topic_id, -TOPIC_ID_RESCAN_S) < TOPIC_ID_RESCAN_S:
            return None
        known = self._topic_ids = _topic_names_by_id(md, None)
        self._topic_states = {}
        name = known.get(topic_id)
        if name is None:
            if len(unknown) >= MAX_UNKNOWN_TOPIC_IDS:
                unknown.clear()
            unknown[topic_id] = now
        return name

    async def handle_fetch(self, ctx, request):
        v = ctx.api_version
        rm = self.broker.replica_manager
        if v >= 15:
            # KIP-903: the replica id moved into the replica_state tagged field
            state = request.replica_state
            request.replica_id = state.replica_id if state is not None else -1
        from_follower = request.replica_id >= 0
        read_committed = request.isolation_level == 1
        # Topics refused: every one for a client claiming to be a replica without
        # ClusterAction (CVE-2018-1288), else those the principal may not Read.
        may_replicate = from_follower and authorize_cluster(ctx, CLUSTER_ACTION)
        # The partitions to read: the request's, or its fetch session's (KIP-227).
        fetch = self.broker.fetch_manager.new_context(request, may_replicate,
                                                      int(time.monotonic() * 1000), v,
                                                      self._topic_name)
        if fetch.error != Errors.NONE:
            return {"throttle_time_ms": 0, "error_code": fetch.error, "session_id": 0,
                    "responses": []}
        topics = fetch.topics
        if from_follower:
            refused = set() if may_replicate else {t.topic for t in topics}
        else:
            refused = {t.topic for t in topics
                       if t.topic is not None and not authorize(ctx, READ, TOPIC, t.topic)}
        max_bytes = min(request.max_bytes, self.broker.config["fetch.max.bytes"])
        if max_bytes <= 0:
            max_bytes = 0
        keys = fetch.watch_keys()
        # an incremental fetch reads only the partitions that may have news for a consumer
        consumer = not from_follower and not (v >= 11 and request.rack_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(request.max_wait_ms, 0) / 1000.0
        while True:
            topics = fetch.to_read(rm.partitions, refused, consumer)
            responses, total, errored, moved = self._read_fetch(
                request, topics, v, max_bytes, from_follower, read_committed, refused)
            remaining = deadline - loop.time()
            if (total >= request.min_bytes or errored or remaining <= 0 or not keys
                    or self.broker.stopping):
                break
            woken = await rm.fetch_purgatory.wait(keys, remaining)
            if not woken:
                topics = fetch.to_read(rm.partitions, refused, consumer)
                responses, total, errored, moved = self._read_fetch(
                    request, topics, v, max_bytes, from_follower, read_committed, refused)
                break
        # KIP-951: the leaders of partitions answered NOT_LEADER_OR_FOLLOWER or
        # FENCED_LEADER_EPOCH (v12+), and their endpoints (v16+)
        endpoints = self._leader_hints(request_listener(ctx), moved) if moved else []
        self.broker.topic_stats.fetch_done(responses, from_follower, fetch.quiet)
        error, session_id, responses = fetch.respond(responses)
        return {"throttle_time_ms": 0, "error_code": error, "session_id": session_id,
                "responses": responses, "node_endpoints": endpoints if v >= 16 else []}

    def _read_fetch(self, request, topics, v, max_bytes, from_follower, read_committed, refused):
        """One read of `topics`: (topic responses, bytes read, whether to answer now, the
        partition answers that name their leader: (entry, topic, partition))."""
        rm = self.broker.replica_manager
        responses = []
        moved = []
        total = 0
        errored = False
        for t in topics:
            parts = []
            for fp in t.partitions:
                entry = {"partition_index": fp.partition, "error_code": Errors.NONE,
                         "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                         "aborted_transactions": [] if read_committed else None,
                         "preferred_read_replica": -1, "records": b""}
                parts.append(entry)
                if t.topic is None:
                    # v13+: an id no topic has (Kafka answers it without waking the wait)
                    entry["error_code"] = Errors.UNKNOWN_TOPIC_ID
                    continue
                if t.topic in refused:
                    entry["error_code"] = Errors.TOPIC_AUTHORIZATION_FAILED
                    errored = True
                    continue
                p, err = self._led_partition(t.topic, fp.partition)
                if p is None and not from_follower and err == Errors.NOT_LEADER_OR_FOLLOWER:
                    # KIP-392: a follower may serve consumers of its rack (below its HW)
                    p = rm.follower_read_partition(t.topic, fp.partition)
                if p is None:
                    entry["error_code"] = err
                    errored = True
                    if v >= 12 and err == Errors.NOT_LEADER_OR_FOLLOWER:
                        moved.append((entry, t.topic, fp.partition))
                    continue
                if v >= 13 and self._topic_name(t.topic_id) != t.topic:
                    # a session's partition of a topic since deleted and recreated
                    # under its name (Kafka's ReplicaManager.readFromLog)
                    entry["error_code"] = Errors.INCONSISTENT_TOPIC_ID
                    errored = True
                    continue
                if from_follower and (request.replica_id not in p.replicas
                                      or request.replica_id == self.broker.node_id):
                    # Only the partition's other replicas may fetch as followers (a client
                    # posing as a broker must not read past the high watermark, CVE-2018-1288).
                    entry["error_code"] = Errors.NOT_LEADER_OR_FOLLOWER
                    errored = True
                    continue
                epoch_error = _check_leader_epoch(fp.current_leader_epoch, p.leader_epoch)
                if epoch_error != Errors.NONE:
                    entry["error_code"] = epoch_error
                    errored = True
                    if v >= 12 and epoch_error == Errors.FENCED_LEADER_EPOCH:
                        moved.append((entry, t.topic, fp.partition))
                    continue
                if v >= 12 and fp.last_fetched_epoch >= 0:
                    # KIP-595/Fetch v12: the fetcher's log ends with that epoch; if ours
                    # ends that epoch earlier (or knows only older ones), answer where they
                    # diverge instead of records, so it truncates without
                    # OffsetForLeaderEpoch (Kafka's Partition.readRecords).
                    epoch, end = self.broker.end_offset_for_epoch(p, fp.last_fetched_epoch)
                    if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
                        log_ = p.log
                        entry.update(high_watermark=p.high_watermark,
                                     last_stable_offset=rm.last_stable_offset(p),
                                     log_start_offset=log_.log_start_offset,
                                     diverging_epoch={"epoch": epoch, "end_offset": end})
                        errored = True  # answer now: the fetcher must truncate first
                        continue
                budget = min(fp.partition_max_bytes, max_bytes - total)
                res = rm.read_partition(p, fp.fetch_offset, max(budget, 0),
                                        min_one_batch=(total == 0), from_follower=from_follower,
                                        api_version=v, replica_id=request.replica_id,
                                        client_rack=request.rack_id if v >= 11 else None,
                                        read_committed=read_committed)
                entry["error_code"] = res.error
                entry["preferred_read_replica"] = res.preferred_read_replica
                entry["high_watermark"] = res.high_watermark
                entry["last_stable_offset"] = res.last_stable_offset
                entry["log_start_offset"] = res.log_start_offset
                if res.error != Errors.NONE or res.preferred_read_replica >= 0:
                    errored = True  # answer now: an error, or "read from that replica"
                elif res.regions:
                    entry["records"] = (res.regions, res.size)
                    total += res.size
                    if res.aborted_transactions:
                        entry["aborted_transactions"] = [
                            {"producer_id": pid, "first_offset": first}
                            for pid, first in res.aborted_transactions]
            responses.append({"topic": t.topic, "topic_id": t.topic_id, "partitions": parts})
        return responses, total, errored, moved

    # ------------------------------------------------------------------ ListOffsets
    async def handle_list_offsets(self, ctx, request):
        v = ctx.api_version
        read_committed = v >= 2 and request.isolation_level == 1
        topics = []
        for t in request.topics:
            parts = []
            may_describe = authorize(ctx, DESCRIBE, TOPIC, t.name)
            for lp in t.partitions:
                entry = {"partition_index": lp.partition_index, "error_code": Errors.NONE,
                         "timestamp": -1, "offset": -1, "leader_epoch": -1}
                parts.append(entry)
                if not may_describe:
                    entry["error_code"] = Errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                p, err = self._led_partition(t.name, lp.partition_index)
                if p is None:
                    entry["error_code"] = err
                    continue
                err = _check_leader_epoch(lp.current_leader_epoch if v >= 4 else -1, p.leader_epoch)
                if err != Errors.NONE:
                    entry["error_code"] = err
                    continue
                log_ = p.log
                ts = lp.timestamp
                # read_committed sees up to the last stable offset (the high watermark
                # without open transactions); read_uncommitted up to the high watermark.
                visible = (self.broker.replica_manager.last_stable_offset(p) if read_committed
                           else p.high_watermark)
                if ts == LIST_OFFSETS_EARLIEST:
                    entry["offset"] = log_.log_start_offset
                    entry["leader_epoch"] = p.leader_epoch
                elif ts == LIST_OFFSETS_EARLIEST_LOCAL:
                    # no tiered storage: the whole log is local (Kafka answers the same)
                    entry["offset"] = log_.log_start_offset
                    entry["leader_epoch"] = log_.leader_epoch_cache.epoch_for_offset(
                        log_.log_start_offset)
                elif ts == LIST_OFFSETS_LATEST_TIERED:
                    pass  # nothing tiered: Kafka answers offset -1, epoch -1
                elif ts == LIST_OFFSETS_LATEST:
                    if self.broker.replica_manager.high_watermark_pending(p):
                        # a new leader still learning the committed end: clients retry
                        entry["error_code"] = Errors.OFFSET_NOT_AVAILABLE
                        continue
                    entry["offset"] = visible
                    entry["leader_epoch"] = p.leader_epoch
                elif ts < 0 and ts != LIST_OFFSETS_MAX_TIMESTAMP:
                    entry["error_code"] = Errors.INVALID_REQUEST
                else:
                    found = log_.fetch_offset_by_timestamp(ts)
                    if found is not None:
                        off, found_ts, epoch = _timestamp_offset(found, p.leader_epoch)
                        cached = log_.leader_epoch_cache.epoch_for_offset(off)
                        epoch = cached if cached >= 0 else epoch
                        if off < visible:
                            entry["offset"] = off
                            entry["timestamp"] = found_ts
                            entry["leader_epoch"] = epoch
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # ------------------------------------------------------------------ CreateTopics
    def _not_controller(self) -> bool:
        """Cluster mode, as Kafka's ZooKeeper-mode brokers: topic admin requests (create,
        delete, add partitions) are served by the active controller only; elsewhere each
        topic gets NOT_CONTROLLER and the client refreshes Metadata (controller_id) and
        retries there. One node is always its own controller."""
        return self.broker.cluster is not None and not self.broker.is_controller()

    async def handle_create_topics(self, ctx, request):
        broker = self.broker
        v = ctx.api_version
        seen: dict[str, int] = {}
        for t in request.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        if self._not_controller():
            return {"throttle_time_ms": 0, "topics": [
                {"name": t.name, "error_code": Errors.NOT_CONTROLLER,
                 "error_message": "This is not the correct controller for this cluster."}
                for t in request.topics]}
        results = []
        may_create_any = authorize_cluster(ctx, CREATE, log_denied=False)
        for t in request.topics:
            error, message = Errors.NONE, None
            created = {}
            topic_id = ZERO_UUID  # (v7+: the new topic's; validate_only creates none)
            name = t.name
            try:
                if seen[name] > 1:
                    raise _ApiError(Errors.INVALID_REQUEST, f"topic {name!r} appears more than once")
                if not (may_create_any or authorize(ctx, CREATE, TOPIC, name)):
                    raise _ApiError(Errors.TOPIC_AUTHORIZATION_FAILED,
                                    "Authorization failed.")
                problem = broker.topic_name_problem(name)
                if problem is not None:
                    raise _ApiError(Errors.INVALID_TOPIC_EXCEPTION, problem)
                if broker.metadata.topic(name) is not None:
                    raise _ApiError(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
                partitions, rf, assignment = self._creation_shape(t, v)
                broker.check_partition_room(partitions, rf)
                configs = self._parse_topic_configs({c.name: c.value for c in t.configs},
                                                    name)
                if not request.validate_only:
                    state = await broker.create_topic(name, partitions, rf, configs,
                                                      assignment=assignment)
                    topic_id = state.topic_id_bytes if state is not None else ZERO_UUID
                if v >= 5:
                    # KIP-525: what the topic got (also for validate_only, as Kafka); its
                    # configs only for a principal that may describe them
                    created = {"num_partitions": partitions, "replication_factor": rf}
                    if authorize(ctx, DESCRIBE_CONFIGS, TOPIC, name, log_denied=False):
                        created["configs"] = [
                            {k: c[k] for k in ("name", "value", "read_only", "config_source",
                                               "is_sensitive")}
                            for c in self._topic_config_entries(configs, None, False)]
                    else:
                        created["topic_config_error_code"] = Errors.TOPIC_AUTHORIZATION_FAILED
            except _ApiError as e:
                error, message = e.code, e.message
            except KeyError:  # cluster mode: another broker created it meanwhile
                error, message = Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            except Exception as e:  # noqa: BLE001 - one bad topic must not fail the rest
                log.exception("creating topic %r failed", name)
                error, message = Errors.UNKNOWN_SERVER_ERROR, str(e)
            results.append({"name": name, "topic_id": topic_id, "error_code": error,
                            "error_message": message, **created})
        return {"throttle_time_ms": 0, "topics": results}

    def _creation_shape(self, t, v) -> tuple[int, int, list[list[int]] | None]:
        """(partitions, replication factor, explicit replica lists by partition or None)."""
        cfg = self.broker.config
        live = [b[0] for b in self.broker.live_brokers()]
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise _ApiError(Errors.INVALID_REQUEST,
                                "both partition assignments and a partition count were given")
            indexes = sorted(a.partition_index for a in t.assignments)
            if indexes != list(range(len(indexes))):
                raise _ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                "partition assignments must number partitions 0..n-1")
            sizes = {len(a.broker_ids) for a in t.assignments}
            for a in t.assignments:
                if not a.broker_ids or len(set(a.broker_ids)) != len(a.broker_ids) or \
                        any(b not in live for b in a.broker_ids):
                    raise _ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                    f"partition {a.partition_index} names unknown or repeated brokers")
            if len(sizes) != 1:
                raise _ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                "all partitions need the same replication factor")
            by_index = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            return len(indexes), sizes.pop(), [by_index[p] for p in range(len(indexes))]
        partitions = t.num_partitions
        rf = t.replication_factor
        if partitions == -1 and v >= 4:
            partitions = cfg["num.partitions"]
        if rf == -1 and v >= 4:
            rf = cfg["default.replication.factor"]
        if partitions <= 0:
            raise _ApiError(Errors.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if rf <= 0:
            raise _ApiError(Errors.INVALID_REPLICATION_FACTOR,
                            "Replication factor must be larger than 0.")
        if rf > len(live):
            raise _ApiError(Errors.INVALID_REPLICATION_FACTOR,
                            f"Replication factor: {rf} larger than available brokers: {len(live)}.")
        return partitions, rf, None

    def _parse_topic_configs(self, raw: dict[str, str | None], topic: str) -> dict[str, str]:
        out = {}
        for name, value in raw.items():
            try:
                parse_topic_config(name, value)
            except ConfigError as e:
                raise _ApiError(Errors.INVALID_CONFIG, str(e)) from None
            out[name] = value.strip()
        if "message.format.version" in out:
            report_limited(log, logging.WARNING, ("message.format.version", topic), "%s",
                           message_format_ignored("message.format.version",
                                                  out["message.format.version"], topic))
        try:
            self.broker.build_log_config(out)
        except ValueError as e:
            raise _ApiError(Errors.INVALID_CONFIG, str(e)) from None
        return out

    # ------------------------------------------------------------------ CreatePartitions
    async def handle_create_partitions(self, ctx, request):
        if self._not_controller():
            return {"throttle_time_ms": 0, "results": [
                {"name": t.name, "error_code": Errors.NOT_CONTROLLER,
                 "error_message": "This is not the correct controller for this cluster."}
                for t in request.topics]}
        seen: dict[str, int] = {}
        for t in request.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        results = []
        for t in request.topics:
            error, message = Errors.NONE, None
            try:
                if seen[t.name] > 1:
                    raise _ApiError(Errors.INVALID_REQUEST,
                                    f"topic {t.name!r} appears more than once")
                if not authorize(ctx, ALTER, TOPIC, t.name):
                    raise _ApiError(Errors.TOPIC_AUTHORIZATION_FAILED,
                                    "The topic authorization failed.")
                assignments = (None if t.assignments is None
                               else [list(a.broker_ids) for a in t.assignments])
                await self.broker.create_partitions(t.name, t.count, assignments,
                                                    validate_only=request.validate_only)
            except _ApiError as e:
                error, message = e.code, e.message
            except Exception as e:  # noqa: BLE001 - one bad topic must not fail the rest
                log.exception("adding partitions to topic %r failed", t.name)
                error, message = Errors.UNKNOWN_SERVER_ERROR, str(e)
            results.append({"name": t.name, "error_code": error, "error_message": message})
        return {"throttle_time_ms": 0, "results": results}

    # ------------------------------------------------------------------ DeleteTopics
    async def handle_delete_topics(self, ctx, request):
        broker = self.broker
        # (name, id) of each topic: v6+ names a topic or gives its id (KIP-516)
        if ctx.api_version >= 6:
            asked = [(t.name, bytes(t.topic_id)) for t in request.topics]
        else:
            asked = [(name, ZERO_UUID) for name in request.topic_names]
        if self._not_controller():
            return {"throttle_time_ms": 0, "responses": [
                {"name": name, "topic_id": topic_id, "error_code": Errors.NOT_CONTROLLER}
                for name, topic_id in asked]}
        known = _topic_names_by_id(broker.metadata,
                                   {i for n, i in asked if n is None and i != ZERO_UUID})
        results = []
        for name, topic_id in asked:
            error = Errors.NONE
            message = None
            if name is not None and topic_id != ZERO_UUID:
                results.append({"name": name, "topic_id": topic_id,
                                "error_code": Errors.INVALID_REQUEST, "error_message":
                                "You may not specify both topic name and topic id."})
                continue
            if name is None:
                name = known.get(topic_id)
                if name is None:
                    results.append({"name": None, "topic_id": topic_id,
                                    "error_code": Errors.UNKNOWN_TOPIC_ID})
                    continue
            state = broker.metadata.topic(name)
            if state is not None:
                topic_id = state.topic_id_bytes
            if not authorize(ctx, DELETE, TOPIC, name):
                error = Errors.TOPIC_AUTHORIZATION_FAILED
            elif not broker.config["delete.topic.enable"]:
                error = Errors.TOPIC_DELETION_DISABLED
            elif name in INTERNAL_TOPICS:
                # The group coordinator's own log: without it no group can commit or join.
                log.info("refused to delete internal topic %r", name)
                error = Errors.INVALID_TOPIC_EXCEPTION
            elif broker.metadata.topic(name) is None:
                error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    await broker.delete_topic(name)
                except Exception as e:  # noqa: BLE001
                    log.exception("deleting topic %r failed", name)
                    error, message = Errors.UNKNOWN_SERVER_ERROR, str(e)
            results.append({"name": name, "topic_id": topic_id, "error_code": error,
                            "error_message": message})
        return {"throttle_time_ms": 0, "responses": results}

    # ------------------------------------------------------------------ DeleteRecords
    async def handle_delete_records(self, ctx, request):
        rm = self.broker.replica_manager
        topics = []
        for t in request.topics:
            parts = []
            may_delete = authorize(ctx, DELETE, TOPIC, t.name)
            for dp in t.partitions:
                if may_delete:
                    _, error = self._led_partition(t.name, dp.partition_index, write=True)
                else:
                    error = Errors.TOPIC_AUTHORIZATION_FAILED
                low = -1
                if error == Errors.NONE:
                    error, low = rm.delete_records(t.name, dp.partition_index, dp.offset)
                parts.append({"partition_index": dp.partition_index, "low_watermark": low,
                              "error_code": error})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # ------------------------------------------------------------------ DescribeConfigs
    async def handle_describe_configs(self, ctx, request):
        results = []
        for res in request.resources:
            result = {"error_code": Errors.NONE, "error_message": None,
                      "resource_type": res.resource_type, "resource_name": res.resource_name,
                      "configs": []}
            results.append(result)
            keys = None if res.configuration_keys is None else set(res.configuration_keys)
            try:
                _check_config_access(ctx, res, DESCRIBE_CONFIGS)
                if res.resource_type == RESOURCE_TOPIC:
                    result["configs"] = self._describe_topic(res.resource_name, keys,
                                                             request.include_synonyms,
                                                             request.include_documentation)
                elif res.resource_type == RESOURCE_BROKER:
                    result["configs"] = self._describe_broker(res.resource_name, keys,
                                                              request.include_synonyms,
                                                              request.include_documentation)
                else:
                    raise _ApiError(Errors.INVALID_REQUEST,
                                    f"resource type {res.resource_type} is not supported")
            except _ApiError as e:
                result["error_code"], result["error_message"] = e.code, e.message
        return {"throttle_time_ms": 0, "results": results}

    def _describe_topic(self, name, keys, synonyms, documentation):
        broker = self.broker
        state = broker.metadata.topic(name)
        if state is None:
            problem = broker.topic_name_problem(name)
            if problem is not None:
                raise _ApiError(Errors.INVALID_TOPIC_EXCEPTION, problem)
            raise _ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        return self._topic_config_entries(state.configs, keys, synonyms)

    def _topic_config_entries(self, overrides: dict[str, str], keys, synonyms) -> list[dict]:
        """Every topic config key (or those in `keys`) of a topic with these overrides,
        with its value, source and (with `synonyms`) the layers below it."""
        defaults = self.broker.config.topic_defaults()
        out = []
        for key in sorted(TOPIC_CONFIG_TYPES):
            if keys is not None and key not in keys:
                continue
            syn = self._broker_synonyms(key)
            if key in overrides:
                value, source = overrides[key], SOURCE_DYNAMIC_TOPIC
                syn.insert(0, {"name": key, "value": value, "source": SOURCE_DYNAMIC_TOPIC})
            else:
                value = format_config_value(defaults[key])
                source = syn[0]["source"] if syn else SOURCE_DEFAULT
            out.append({
                "name": key, "value": value, "read_only": False, "config_source": source,
                "is_sensitive": False, "synonyms": syn if synonyms else [],
                "config_type": CONFIG_TYPE_CODES[TOPIC_CONFIG_TYPES[key]],
                "documentation": None,
            })
        return out

    def _broker_synonyms(self, topic_key: str) -> list[dict]:
        """The broker layers that set a topic key's default: dynamic per-broker, dynamic
        default, static, Kafka's default."""
        return [{"name": k, "value": v, "source": source} for k, v, source in
                self.broker.dynamic_config.synonyms(TOPIC_CONFIG_SYNONYMS.get(topic_key, []))]

    def _broker_entity(self, name: str) -> str:
        """The dynamic-config entity a BROKER resource names: "" is the cluster default;
        otherwise only this broker's own id (Kafka's answer for another id)."""
        if name == "":
            return DEFAULT_BROKER_ENTITY
        if name != str(self.broker.node_id):
            raise _ApiError(Errors.INVALID_REQUEST,
                            f"Unexpected broker id, expected {self.broker.node_id} or empty "
                            f"string, but received {name}")
        return name

    def _describe_broker(self, name, keys, synonyms, documentation):
        broker = self.broker
        dynamic = broker.dynamic_config
        if self._broker_entity(name) == DEFAULT_BROKER_ENTITY:
            # As Kafka: the cluster-wide default resource lists the dynamic defaults only.
            listed = {k: [(k, v, SOURCE_DYNAMIC_DEFAULT_BROKER)]
                      for k, v in dynamic.default.items()}
        else:
            listed = {k: dynamic.broker_key_synonyms(k)
                      for k in (*CONFIG_KEYS, *self._keystore_keys())}
        out = []
        for key, syn in sorted(listed.items()):
            if keys is not None and key not in keys:
                continue
            # A listener's keystore key is described as the key it prefixes.
            spec = CONFIG_KEYS.get(key) or CONFIG_KEYS["ssl.keystore.location"]
            if name == "" or key not in CONFIG_KEYS:
                value = syn[0][1] if syn else None
            else:
                value = format_config_value(broker.config[key])
            out.append({
                "name": key, "value": None if spec.sensitive else value,
                "read_only": not is_dynamic(key),
                "config_source": syn[0][2] if syn else SOURCE_DEFAULT,
                "is_sensitive": spec.sensitive,
                "synonyms": [{"name": k, "value": v, "source": source}
                             for k, v, source in syn] if synonyms else [],
                "config_type": CONFIG_TYPE_CODES[spec.type],
                "documentation": (spec.doc or None) if documentation else None,
            })
        return out

    # ------------------------------------------------------------------ AlterConfigs
    async def handle_alter_configs(self, ctx, request):
        # Non-incremental: the given set replaces every override of the resource.
        return await self._alter_configs(ctx, request, incremental=False)

    async def handle_incremental_alter_configs(self, ctx, request):
        return await self._alter_configs(ctx, request, incremental=True)

    async def _alter_configs(self, ctx, request, incremental: bool):
        responses = []
        for res in request.resources:
            error, message = Errors.NONE, None
            try:
                _check_config_access(ctx, res, ALTER_CONFIGS)
                if res.resource_type == RESOURCE_BROKER:
                    await self._alter_broker_configs(res, incremental, request.validate_only)
                else:
                    self._check_alterable(res)
                    new = (self._incremental_configs(res) if incremental else
                           {c.name: c.value for c in res.configs})
                    await self._apply_topic_configs(res.resource_name, new,
                                                    request.validate_only)
            except _ApiError as e:
                error, message = e.code, e.message
            responses.append({"error_code": error, "error_message": message,
                              "resource_type": res.resource_type,
                              "resource_name": res.resource_name})
        return {"throttle_time_ms": 0, "responses": responses}

    def _keystore_keys(self) -> list[str]:
        """listener.name.<listener>.ssl.keystore.location of each TLS listener."""
        cfg = self.broker.config
        return [f"listener.name.{name.lower()}.ssl.keystore.location"
                for name, _, _ in cfg.listeners
                if cfg.listener_security_protocol(name) in TLS_PROTOCOLS]

    async def _alter_broker_configs(self, res, incremental: bool, validate_only: bool):
        """A broker's dynamic configs (KIP-226): resource name "" is the cluster-wide
        default, else this broker's id."""
        entity = self._broker_entity(res.resource_name)
        if incremental:
            types = {k: spec.type for k, spec in CONFIG_KEYS.items()}
            types.update((k, "string") for k in self._keystore_keys())
            new = self._incremental_configs(
                res, self.broker.metadata.broker_config(entity), self.broker.config.values,
                types, Errors.INVALID_REQUEST)
        else:
            new = {c.name: c.value for c in res.configs if c.value is not None}
        await self.broker.alter_broker_configs(entity, new, validate_only)

    def _incremental_configs(self, res, current=None, defaults=None, types=None,
                             unknown=Errors.INVALID_CONFIG) -> dict:
        """The resource's configs after SET / DELETE / APPEND / SUBTRACT operations: a
        topic's overrides by default, else `current` over `defaults` of keys `types`."""
        if current is None:
            current = self.broker.metadata.topic(res.resource_name).configs
            defaults = self.broker.config.topic_defaults()
            types = TOPIC_CONFIG_TYPES
        new = dict(current)
        for c in res.configs:
            op = c.config_operation
            if c.name not in types:
                raise _ApiError(unknown, f"unknown config {c.name!r}")
            if op == OP_SET:
                new[c.name] = c.value
            elif op == OP_DELETE:
                new.pop(c.name, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                if types[c.name] != "list":
                    raise _ApiError(Errors.INVALID_CONFIG,
                                    f"{c.name} is not a list, so it cannot be appended to")
                cur = new.get(c.name)
                items = ([x.strip() for x in cur.split(",") if x.strip()] if cur is not None
                         else list(defaults[c.name] or ()))
                given = [x.strip() for x in (c.value or "").split(",") if x.strip()]
                if op == OP_APPEND:
                    items += [x for x in given if x not in items]
                else:
                    items = [x for x in items if x not in given]
                new[c.name] = ",".join(items)
            else:
                raise _ApiError(Errors.INVALID_REQUEST, f"unknown config operation {op}")
        return new

    def _check_alterable(self, res) -> None:
        if res.resource_type != RESOURCE_TOPIC:
            raise _ApiError(Errors.INVALID_REQUEST,
                            f"resource type {res.resource_type} is not supported")
        if self.broker.metadata.topic(res.resource_name) is None:
            raise _ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                            f"Topic {res.resource_name} does not exist")

    async def _apply_topic_configs(self, topic: str, new: dict, validate_only: bool) -> None:
        configs = self._parse_topic_configs(new, topic)
        if not validate_only:
            await self.broker.set_topic_configs(topic, configs)

    # ------------------------------------------------------------------ reassignments
    def _reassignment_refusal(self, ctx, operation: int) -> dict | None:
        """The top-level answer of a refused reassignment request (KIP-455): the active
        controller serves them, and they need Alter (Describe to list) on the cluster."""
        if not authorize_cluster(ctx, operation):
            return {"throttle_time_ms": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "Cluster authorization failed."}
        if self._not_controller():
            return {"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER,
                    "error_message": "This is not the correct controller for this cluster."}
        return None

    async def handle_alter_partition_reassignments(self, ctx, request):
        refused = self._reassignment_refusal(ctx, ALTER)
        if refused is not None:
            return {**refused, "responses": []}
        changes = {(t.name, p.partition_index): None if p.replicas is None else list(p.replicas)
                   for t in request.topics for p in t.partitions}
        try:
            results = await self.broker.metadata.alter_partition_reassignments(changes)
        except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: an answer, not a close
            log.exception("partition reassignment failed")
            return {"throttle_time_ms": 0, "error_code": Errors.UNKNOWN_SERVER_ERROR,
                    "error_message": str(e), "responses": []}
        by_topic: dict[str, list] = {}
        for (topic, p), result in results.items():
            code, message = (Errors.NONE, None) if result is None else (Errors[result[0]],
                                                                       result[1])
            by_topic.setdefault(topic, []).append(
                {"partition_index": p, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None,
                "responses": [{"name": t, "partitions": parts}
                              for t, parts in by_topic.items()]}

    async def handle_list_partition_reassignments(self, ctx, request):
        refused = self._reassignment_refusal(ctx, DESCRIBE)
        if refused is not None:
            return {**refused, "topics": []}
        wanted = None if request.topics is None else [
            (t.name, p) for t in request.topics for p in t.partition_indexes]
        try:
            ongoing = await self.broker.metadata.list_partition_reassignments(wanted)
        except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: an answer, not a close
            log.exception("listing partition reassignments failed")
            return {"throttle_time_ms": 0, "error_code": Errors.UNKNOWN_SERVER_ERROR,
                    "error_message": str(e), "topics": []}
        by_topic: dict[str, list] = {}
        for (topic, p), (replicas, adding, removing) in sorted(ongoing.items()):
            by_topic.setdefault(topic, []).append(
                {"partition_index": p, "replicas": replicas, "adding_replicas": adding,
                 "removing_replicas": removing})
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None,
                "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}

    # ------------------------------------------------------------------ InitProducerId
    async def handle_init_producer_id(self, ctx, request):
        if request.transactional_id is not None:
            return await handle_init_transactional_producer(ctx, request)
        # KIP-679: an idempotent producer needs IdempotentWrite on the cluster or Write
        # on some topic.
        if not (authorize_cluster(ctx, IDEMPOTENT_WRITE, log_denied=False)
                or authz.authorize_by_resource_type(ctx, WRITE, TOPIC)):
            return {"throttle_time_ms": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        pid, epoch = -1, 0
        if ctx.api_version >= 3 and request.producer_id >= 0:
            # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
            if request.producer_epoch < 0:
                return {"throttle_time_ms": 0, "error_code": Errors.INVALID_REQUEST,
                        "producer_id": -1, "producer_epoch": -1}
            if request.producer_epoch < 32766:
                pid, epoch = request.producer_id, request.producer_epoch + 1
        if pid < 0:
            pid = await self.broker.producer_id_manager.generate_producer_id()
            epoch = 0
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "producer_id": pid,
                "producer_epoch": epoch}

    # ------------------------------------------------------------------ WriteTxnMarkers
    async def handle_write_txn_markers(self, ctx, request):
        """Transaction markers from a transaction coordinator (ClusterAction on the
        cluster): ReplicaManager.append_txn_markers on the partitions led here, Kafka's
        per-partition codes for the others."""
        allowed = authorize_cluster(ctx, CLUSTER_ACTION)
        rm = self.broker.replica_manager
        refused: list[dict] = []
        markers = []
        for m in request.markers:
            errors = {}
            led = []
            for t in m.topics:
                for index in t.partition_indexes:
                    err = Errors.CLUSTER_AUTHORIZATION_FAILED
                    if allowed:
                        _, err = self._led_partition(t.name, index, write=True)
                    if err == Errors.NONE:
                        led.append((t.name, index))
                    else:
                        errors[(t.name, index)] = err
            refused.append(errors)
            markers.append((m.producer_id, m.producer_epoch, m.transaction_result,
                            m.coordinator_epoch, led))
        written = await rm.append_txn_markers(markers)
        out = []
        for m, errors, done in zip(request.markers, refused, written, strict=True):
            errors.update(done)
            # A marker on __consumer_offsets ends the producer's pending offsets there.
            complete_group_offsets(self.broker, m.producer_id,
                                   [tp for tp, e in done.items() if e == Errors.NONE],
                                   m.transaction_result)
            topics = []
            for t in m.topics:
                topics.append({"name": t.name, "partitions": [
                    {"partition_index": i, "error_code": errors[(t.name, i)]}
                    for i in t.partition_indexes]})
            out.append({"producer_id": m.producer_id, "topics": topics})
        return {"markers": out}

    # ------------------------------------------------------------------ DescribeProducers
    async def handle_describe_producers(self, ctx, request):
        """The active producers of each partition led here (Read on the topic)."""
        topics = []
        for t in request.topics:
            may_read = authorize(ctx, READ, TOPIC, t.name)
            parts = []
            for index in t.partition_indexes:
                entry = {"partition_index": index, "error_code": Errors.NONE,
                         "active_producers": []}
                parts.append(entry)
                if not may_read:
                    entry["error_code"] = Errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                p, err = self._led_partition(t.name, index)
                if p is None:
                    entry["error_code"] = err
                    continue
                entry["active_producers"] = [
                    {"producer_id": e.producer_id, "producer_epoch": e.epoch,
                     "last_sequence": e.last_seq, "last_timestamp": e.last_timestamp,
                     "coordinator_epoch": e.coordinator_epoch,
                     "current_txn_start_offset": e.current_txn_first_offset}
                    for e in p.producer_state.producers.values()]
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # ------------------------------------------------------------------ OffsetForLeaderEpoch
    async def handle_offset_for_leader_epoch(self, ctx, request):
        # Followers have ClusterAction; clients need Describe on each topic.
        replica = authorize_cluster(ctx, CLUSTER_ACTION, log_denied=False)
        topics = []
        for t in request.topics:
            parts = []
            may_describe = replica or authorize(ctx, DESCRIBE, TOPIC, t.topic)
            for op in t.partitions:
                entry = {"error_code": Errors.NONE, "partition": op.partition,
                         "leader_epoch": -1, "end_offset": -1}
                parts.append(entry)
                if not may_describe:
                    entry["error_code"] = Errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                p, err = self._led_partition(t.topic, op.partition)
                if p is None:
                    entry["error_code"] = err
                    continue
                err = _check_leader_epoch(op.current_leader_epoch, p.leader_epoch)
                if err != Errors.NONE:
                    entry["error_code"] = err
                    continue
                epoch, end = self.broker.end_offset_for_epoch(p, op.leader_epoch)
                entry["leader_epoch"], entry["end_offset"] = epoch, end
            topics.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}


# A refusal with a Kafka error code, from a handler or from a broker operation it calls.
_ApiError = KafkaApiError


def _check_config_access(ctx, res, operation: int) -> None:
    """DescribeConfigs / AlterConfigs on the topic, or on the cluster for a broker's (or
    its loggers') configs; _ApiError with Kafka's code when refused."""
    if res.resource_type == RESOURCE_TOPIC:
        if not authorize(ctx, operation, TOPIC, res.resource_name):
            raise _ApiError(Errors.TOPIC_AUTHORIZATION_FAILED,
                            f"Topic authorization failed for {res.resource_name}")
    elif res.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        if not authorize_cluster(ctx, operation):
            raise _ApiError(Errors.CLUSTER_AUTHORIZATION_FAILED,
                            "Cluster authorization failed.")


def _topic_names_by_id(md, ids: set[bytes] | None) -> dict[bytes, str]:
    """{topic id (16 bytes): name} of the topics with those ids, or (`ids` None) of every
    topic that has one (a scan: Metadata requests by id are rare and small, Fetch v13+
    scans only for an id it does not know)."""
    if ids is not None and not ids:
        return {}
    found = {}
    for name in md.topic_names():
        state = md.topic(name)
        if state is None:
            continue
        topic_id = state.topic_id_bytes
        if topic_id in ids if ids is not None else topic_id != ZERO_UUID:
            found[topic_id] = name
    return found


def _timestamp_offset(found, default_epoch: int) -> tuple[int, int, int]:
    """Normalise what Log.fetch_offset_by_timestamp returns: an object with offset /
    timestamp (/ leader_epoch) attributes, or an (offset, timestamp[, epoch]) tuple."""
    if isinstance(found, tuple):
        off, ts = found[0], found[1]
        epoch = found[2] if len(found) > 2 and found[2] is not None else default_epoch
        return off, ts, epoch
    epoch = getattr(found, "leader_epoch", None)
    return found.offset, found.timestamp, default_epoch if epoch is None or epoch < 0 else epoch


def now_ms() -> int:
    return int(time.time() * 1000)
