"""Kafka API handlers of the group coordinator: GROUP_HANDLERS (ApiKey -> handler).

Each ``async def handle_xxx(ctx, request)`` follows the broker's handler contract
(fastlog/server/apis.py): ``request`` is the decoded struct with Kafka's snake_case names,
the return value a dict that fastlog.protocol encodes for ``ctx.api_version`` (fields
the version lacks are ignored). The handlers only translate between the wire and
``ctx.broker.group_coordinator``; every decision is the coordinator's.

FindCoordinator 0-4 (key type 1, transactional ids, points at the transaction
coordinator the same way; v4 asks for a batch of keys, KIP-699), JoinGroup 0-5, SyncGroup 0-3, Heartbeat 0-3, LeaveGroup 0-3,
OffsetCommit 1-7, OffsetFetch 1-7 (v7's require_stable answers UNSTABLE_OFFSET_COMMIT for a
partition with a transactional commit pending), ListGroups 0-5, DescribeGroups 0-4,
DeleteGroups 0-1, OffsetDelete 0. With an authorizer, each checks the principal as Kafka does (Read on the
group to join, commit and fetch offsets, Describe to find its coordinator and describe it,
Delete to delete it or its offsets; Read on each topic committed, Describe on each topic
fetched; ListGroups lists the groups the principal may Describe) and answers
GROUP_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED. Run on the broker's event loop; a JoinGroup/SyncGroup handler awaits
the rebalance without blocking anything else.
"""

from __future__ import annotations

from typing import Any

from fastlog.protocol.api_keys import ApiKey
from fastlog.protocol.errors import Errors
from fastlog.server.authz import (
    DELETE,
    DESCRIBE,
    GROUP,
    OPERATIONS_NOT_ASKED,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    authorize,
    authorize_cluster,
    authorized_operations,
)

from .coordinator import GroupCoordinator
from .offsets import GROUP_METADATA_TOPIC
from .schemas import OffsetAndMetadata

KEY_TYPE_GROUP = 0
# ListGroups v5's type of the groups this coordinator runs (Kafka's GroupType.CLASSIC).
GROUP_TYPE_CLASSIC = "classic"
_UNSTABLE = object()   # OffsetFetch v7: a partition whose transactional commit is pending
KEY_TYPE_TRANSACTION = 1
# FindCoordinator key type -> (the broker's coordinator attribute, its internal topic, the
# ACL resource type checked with Describe, the refusal and how Kafka words it).
_COORDINATORS = {
    KEY_TYPE_GROUP: ("group_coordinator", GROUP_METADATA_TOPIC, GROUP,
                     Errors.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
    KEY_TYPE_TRANSACTION: ("txn_coordinator", "__transaction_state", TRANSACTIONAL_ID,
                           Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           "Transactional Id authorization failed."),
}


def _coordinator(ctx) -> GroupCoordinator | None:
    return getattr(ctx.broker, "group_coordinator", None)


def _client_host(ctx) -> str:
    peer = getattr(ctx.connection, "peer", None)
    if isinstance(peer, (tuple, list)) and peer:
        return f"/{peer[0]}"
    return f"/{peer}" if peer else ""


def _by_topic(pairs: dict[tuple[str, int], Any], make) -> list[dict]:
    topics: dict[str, list] = {}
    for (t, p), v in pairs.items():
        topics.setdefault(t, []).append(make(p, v))
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


# ------------------------------------------------------------------ FindCoordinator
async def handle_find_coordinator(ctx, request):
    """v0-3 name one key; v4 (KIP-699) a batch of keys of one type, answered key by key."""
    if ctx.api_version < 4:
        return {"throttle_time_ms": 0,
                **await _find_coordinator(ctx, request.key_type, request.key)}
    return {"throttle_time_ms": 0, "coordinators": [
        {"key": key, **await _find_coordinator(ctx, request.key_type, key)}
        for key in request.coordinator_keys]}


async def _find_coordinator(ctx, key_type: int, key: str) -> dict:
    """One key's coordinator: error_code, error_message, node_id, host, port."""
    broker = ctx.broker

    def fail(err: Errors, msg: str):
        return {"error_code": err, "error_message": msg, "node_id": -1, "host": "",
                "port": -1}

    kind = _COORDINATORS.get(key_type)
    if kind is None:
        return fail(Errors.INVALID_REQUEST, f"unknown key type {key_type}")
    attr, topic, resource, refusal, refusal_text = kind
    c = getattr(broker, attr, None)
    if not authorize(ctx, DESCRIBE, resource, key):
        return fail(refusal, refusal_text)
    if c is None or not c.active:
        return fail(Errors.COORDINATOR_NOT_AVAILABLE, "the coordinator is not running")
    if not key:
        return fail(Errors.INVALID_REQUEST, "empty key")
    ensure = getattr(broker, "ensure_internal_topic", None)
    if ensure is not None and getattr(broker, "cluster", None) is not None:
        # Cluster mode creates the internal topic on first use, over the live brokers.
        try:
            created = await ensure(topic)
        except Exception as e:  # noqa: BLE001 - the client retries
            return fail(Errors.COORDINATOR_NOT_AVAILABLE, f"cannot create {topic}: {e}")
        if created is None:
            return fail(Errors.COORDINATOR_NOT_AVAILABLE,
                        f"{topic} needs its replication factor of live brokers")
    # Endpoints on the listener the request came in on, as Metadata gives them.
    state = getattr(ctx.connection, "state", None)
    listener = state.get("listener") if state else None
    if c.is_coordinator_for(key):
        own = getattr(broker, "own_endpoint", lambda _: None)(listener)
        host, port = own if own is not None else (broker.advertised_host,
                                                  broker.advertised_port)
        return {"error_code": Errors.NONE, "error_message": None,
                "node_id": broker.node_id, "host": host, "port": port}
    # Another broker leads the key's partition (cluster mode): point the client there.
    endpoint = _leader_endpoint(broker, c.partition_for(key), listener, topic)
    if endpoint is None:
        return fail(Errors.COORDINATOR_NOT_AVAILABLE, f"no leader for the key's {topic} partition")
    node, host, port = endpoint
    return {"error_code": Errors.NONE, "error_message": None, "node_id": node, "host": host,
            "port": port}


def _leader_endpoint(broker, partition: int, listener: str | None = None,
                     topic: str = GROUP_METADATA_TOPIC) -> tuple[int, str, int] | None:
    md = getattr(broker, "metadata", None)
    try:
        state = md.topic(topic)
        leader = state.partitions[partition].leader
        if leader < 0:
            return None
        find = getattr(broker, "broker_endpoint", None)
        if find is not None:
            host, port = find(leader, listener)
        else:
            find = getattr(md, "broker_endpoint", None)
            if find is None:
                return None
            host, port = find(leader)
        return leader, host, port
    except Exception:  # noqa: BLE001 - unknown topology means "not available"
        return None


# ------------------------------------------------------------------ membership
async def handle_join_group(ctx, request):
    c = _coordinator(ctx)
    v = ctx.api_version
    refused = None if authorize(ctx, READ, GROUP, request.group_id) else \
        Errors.GROUP_AUTHORIZATION_FAILED
    if c is None or refused is not None:
        return {"throttle_time_ms": 0, "error_code": refused or Errors.COORDINATOR_NOT_AVAILABLE,
                "generation_id": -1, "protocol_name": "", "leader": "",
                "member_id": request.member_id, "members": []}
    res = await c.join_group(
        request.group_id, request.member_id, request.group_instance_id,
        require_known_member_id=v >= 4,
        client_id=ctx.header.client_id or "",
        client_host=_client_host(ctx),
        rebalance_timeout_ms=request.rebalance_timeout_ms if v >= 1 else -1,
        session_timeout_ms=request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        skip_assignment_supported=v >= 9)
    return {
        "throttle_time_ms": 0,
        "error_code": res.error,
        "generation_id": res.generation_id,
        "protocol_type": res.protocol_type,  # v7+, if ever served
        "protocol_name": res.protocol_name or ("" if v < 7 else None),  # null v7+
        "leader": res.leader_id,
        "skip_assignment": res.skip_assignment,
        "member_id": res.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": md}
                    for m, i, md in res.members],
    }


async def handle_sync_group(ctx, request):
    c = _coordinator(ctx)
    if not authorize(ctx, READ, GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": Errors.GROUP_AUTHORIZATION_FAILED,
                "assignment": b""}
    if c is None:
        return {"throttle_time_ms": 0, "error_code": Errors.COORDINATOR_NOT_AVAILABLE,
                "assignment": b""}
    v5 = ctx.api_version >= 5  # (below, the fields hold their default, "": not sent)
    res = await c.sync_group(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id,
        request.protocol_type if v5 else None, request.protocol_name if v5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments})
    return {"throttle_time_ms": 0, "error_code": res.error,
            "protocol_type": res.protocol_type, "protocol_name": res.protocol_name,
            "assignment": res.assignment}


async def handle_heartbeat(ctx, request):
    c = _coordinator(ctx)
    if not authorize(ctx, READ, GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": Errors.GROUP_AUTHORIZATION_FAILED}
    if c is None:
        return {"throttle_time_ms": 0, "error_code": Errors.COORDINATOR_NOT_AVAILABLE}
    err = await c.heartbeat(request.group_id, request.member_id, request.group_instance_id,
                            request.generation_id)
    return {"throttle_time_ms": 0, "error_code": err}


async def handle_leave_group(ctx, request):
    c = _coordinator(ctx)
    v = ctx.api_version
    if v >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    if not authorize(ctx, READ, GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": Errors.GROUP_AUTHORIZATION_FAILED,
                "members": []}
    if c is None:
        return {"throttle_time_ms": 0, "error_code": Errors.COORDINATOR_NOT_AVAILABLE,
                "members": []}
    err, per = await c.leave_group(request.group_id, members)
    if v < 3 and err is Errors.NONE and per:
        err = per[0][2]  # one member, one error code
    return {"throttle_time_ms": 0, "error_code": err,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": e}
                        for m, i, e in per]}


# ------------------------------------------------------------------ offsets
def refuse_offset_commits(ctx, group_id: str, offsets: dict) -> dict[tuple[str, int], Errors]:
    """Kafka's checks of an offset commit (OffsetCommit, TxnOffsetCommit): Read on the
    group, then on each topic, then that the partition exists (KafkaApis: a partition the
    cluster does not have is not committed). The refused partitions leave ``offsets``;
    returns them with their codes."""
    refused: dict[tuple[str, int], Errors] = {}
    if not authorize(ctx, READ, GROUP, group_id):
        refused = dict.fromkeys(offsets, Errors.GROUP_AUTHORIZATION_FAILED)
    else:
        for t in {t for t, _ in offsets}:
            if not authorize(ctx, READ, TOPIC, t):
                refused.update((tp, Errors.TOPIC_AUTHORIZATION_FAILED)
                               for tp in offsets if tp[0] == t)
        metadata = ctx.broker.metadata
        for t, p in offsets:
            if (t, p) not in refused:
                state = metadata.topic(t)
                if state is None or p not in state.partitions:
                    refused[(t, p)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
    for tp in refused:
        del offsets[tp]
    return refused


async def handle_offset_commit(ctx, request):
    c = _coordinator(ctx)
    v = ctx.api_version
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    retention = getattr(request, "retention_time_ms", -1) if 2 <= v <= 4 else -1
    for t in request.topics:
        for p in t.partitions:
            om = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
                metadata=p.committed_metadata,
                commit_timestamp=p.commit_timestamp if v == 1 else -1)
            offsets[(t.name, p.partition_index)] = om
    refused = refuse_offset_commits(ctx, request.group_id, offsets)
    if c is None:
        result = dict.fromkeys(offsets, Errors.COORDINATOR_NOT_AVAILABLE)
    elif not offsets:
        result = {}
    else:
        if retention is not None and retention >= 0:
            from .group import now_ms

            now = now_ms()
            for om in offsets.values():
                om.commit_timestamp = now
                om.expire_timestamp = now + retention
        result = await c.commit_offsets(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch, offsets)
    if refused:
        result = {**refused, **result}
    return {"throttle_time_ms": 0,
            "topics": _by_topic(result, lambda p, e: {"partition_index": p, "error_code": e})}


async def handle_offset_fetch(ctx, request):
    c = _coordinator(ctx)
    v = ctx.api_version
    if v >= 8:
        # v8+ (KIP-709): several groups in one request, each answered as a request of its
        # own would be (v9's member id and epoch are for KIP-848 groups; a classic group,
        # the only kind served, ignores them as Kafka's does)
        groups = []
        for g in request.groups:
            err, topics = await _fetch_group_offsets(ctx, c, g.group_id, g.topics,
                                                     request.require_stable)
            groups.append({"group_id": g.group_id, "error_code": err, "topics": topics})
        return {"throttle_time_ms": 0, "groups": groups}
    err, topics = await _fetch_group_offsets(ctx, c, request.group_id, request.topics,
                                             v >= 7 and request.require_stable)
    if err is not Errors.NONE and v < 2:
        # v1 has no top-level error: every partition carries it.
        got = dict.fromkeys([(t.name, p) for t in request.topics or ()
                             for p in t.partition_indexes], None)
        return {"throttle_time_ms": 0, "topics": _by_topic(got, lambda p, _: {
            "partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
            "metadata": "", "error_code": err})}
    return {"throttle_time_ms": 0, "error_code": err, "topics": topics}


async def _fetch_group_offsets(ctx, c, group_id: str, asked, require_stable: bool):
    """(error code, topic answers) of one group's OffsetFetch: the partitions `asked`
    (request topics; None for all the group has)."""
    wanted = None
    if asked is not None:
        wanted = [(t.name, p) for t in asked for p in t.partition_indexes]
    if not authorize(ctx, READ, GROUP, group_id):
        err, got = Errors.GROUP_AUTHORIZATION_FAILED, {}
    elif c is None:
        err, got = Errors.COORDINATOR_NOT_AVAILABLE, {}
    else:
        err, got = await c.fetch_offsets(group_id, wanted)
    if err is not Errors.NONE:
        return err, []

    def part(p, om):
        if om is None:
            return {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                    "metadata": "", "error_code": Errors.NONE}
        return {"partition_index": p, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch, "metadata": om.metadata,
                "error_code": Errors.NONE}

    def refused(p, _):
        return {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                "metadata": "", "error_code": Errors.TOPIC_AUTHORIZATION_FAILED}

    def part_or_unstable(p, om):
        if om is _UNSTABLE:
            return {"partition_index": p, "committed_offset": -1,
                    "committed_leader_epoch": -1, "metadata": "",
                    "error_code": Errors.UNSTABLE_OFFSET_COMMIT}
        return part(p, om)
    # Topics the principal may not Describe: refused when asked for by name, left out
    # when all were asked for (Kafka's OffsetFetch).
    topics: dict[str, bool] = {}
    for t, _ in got:
        if t not in topics:
            topics[t] = authorize(ctx, DESCRIBE, TOPIC, t, log_denied=wanted is not None)
    denied = {tp: om for tp, om in got.items() if not topics[tp[0]]}
    allowed = {tp: om for tp, om in got.items() if topics[tp[0]]}
    # v7 require_stable (KIP-447): a partition with a transactional commit still pending
    # answers UNSTABLE_OFFSET_COMMIT (the client retries) instead of the older offset.
    if require_stable:
        for tp in c.unstable_offsets(group_id, allowed):
            allowed[tp] = _UNSTABLE
    out = _by_topic(allowed, part_or_unstable)
    if wanted is not None:
        out += _by_topic(denied, refused)
    return Errors.NONE, out


async def handle_offset_delete(ctx, request):
    c = _coordinator(ctx)
    tps = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if not authorize(ctx, DELETE, GROUP, request.group_id):
        return {"error_code": Errors.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0,
                "topics": []}
    if c is None:
        return {"error_code": Errors.COORDINATOR_NOT_AVAILABLE, "throttle_time_ms": 0,
                "topics": []}
    readable = {t: authorize(ctx, READ, TOPIC, t) for t, _ in tps}
    err, per = await c.delete_offsets(request.group_id, [tp for tp in tps if readable[tp[0]]])
    if err is Errors.NONE:
        per = {**per, **{tp: Errors.TOPIC_AUTHORIZATION_FAILED
                         for tp in tps if not readable[tp[0]]}}
    return {"error_code": err, "throttle_time_ms": 0,
            "topics": _by_topic(per, lambda p, e: {"partition_index": p, "error_code": e})}


# ------------------------------------------------------------------ admin
async def handle_list_groups(ctx, request):
    c = _coordinator(ctx)
    if c is None:
        return {"throttle_time_ms": 0, "error_code": Errors.COORDINATOR_NOT_AVAILABLE,
                "groups": []}
    err, groups = c.list_groups()
    v = ctx.api_version
    # v4 (KIP-518): only the groups in the asked states; v5 (KIP-848): of the asked types.
    # Kafka compares both without regard to case; every group here is a classic group.
    states = {s.lower() for s in request.states_filter} if v >= 4 else None
    if states:
        groups = [g for g in groups if g[2].lower() in states]
    types = {t.lower() for t in request.types_filter} if v >= 5 else None
    if types and GROUP_TYPE_CLASSIC not in types:
        groups = []
    if not authorize_cluster(ctx, DESCRIBE, log_denied=False):
        groups = [g for g in groups if authorize(ctx, DESCRIBE, GROUP, g[0], log_denied=False)]
    return {"throttle_time_ms": 0, "error_code": err,
            "groups": [{"group_id": g, "protocol_type": t, "group_state": s,
                        "group_type": GROUP_TYPE_CLASSIC}
                       for g, t, s in groups]}


async def handle_describe_groups(ctx, request):
    c = _coordinator(ctx)
    out = []
    asked = ctx.api_version >= 3 and request.include_authorized_operations
    for group_id in request.groups:
        if not authorize(ctx, DESCRIBE, GROUP, group_id):
            out.append({"error_code": Errors.GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                        "group_state": "", "protocol_type": "", "protocol_data": "",
                        "members": []})
            continue
        if c is None:
            out.append({"error_code": Errors.COORDINATOR_NOT_AVAILABLE, "group_id": group_id,
                        "group_state": "", "protocol_type": "", "protocol_data": "",
                        "members": []})
            continue
        s = c.describe_group(group_id)
        out.append({
            "error_code": s.error, "group_id": group_id, "group_state": s.state,
            "protocol_type": s.protocol_type, "protocol_data": s.protocol,
            "members": [{"member_id": m, "group_instance_id": i, "client_id": cid,
                         "client_host": host, "member_metadata": md,
                         "member_assignment": asg}
                        for m, i, cid, host, md, asg in s.members],
            "authorized_operations": (authorized_operations(ctx, GROUP, group_id) if asked
                                      else OPERATIONS_NOT_ASKED),
        })
    return {"throttle_time_ms": 0, "groups": out}


async def handle_delete_groups(ctx, request):
    c = _coordinator(ctx)
    names = list(request.groups_names)
    refused = {g: Errors.GROUP_AUTHORIZATION_FAILED for g in names
               if not authorize(ctx, DELETE, GROUP, g)}
    names = [g for g in names if g not in refused]
    if c is None:
        result = dict.fromkeys(names, Errors.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await c.delete_groups(names) if names else {}
    result = {**refused, **result}
    return {"throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": e} for g, e in result.items()]}


GROUP_HANDLERS = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
}
