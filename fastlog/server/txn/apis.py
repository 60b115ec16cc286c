"""Kafka API handlers of the transaction coordinator: TXN_HANDLERS (ApiKey -> handler),
and ``handle_init_transactional_producer`` for InitProducerId with a transactional id.

Same contract as the group handlers (fastlog/server/apis.py): ``request`` is the decoded
struct, the return value a dict encoded for ``ctx.api_version``; the handlers translate
between the wire and ``ctx.broker.txn_coordinator`` (every decision is the
coordinator's) or, for TxnOffsetCommit, ``ctx.broker.group_coordinator``.

AddPartitionsToTxn 0-5 (4-5: brokers' batched and verify-only requests, KIP-890),
AddOffsetsToTxn 0-3, EndTxn 0-3, TxnOffsetCommit 0-3,
DescribeTransactions 0, ListTransactions 0-1. With an authorizer each checks as Kafka's
KafkaApis: Write on the TransactionalId (Describe to describe or list it), Write on each
topic added, Read on the group whose offsets are added or committed, Read on each topic
committed; refusals are TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED. Clients older than KIP-588 (InitProducerId < 4,
AddPartitionsToTxn / AddOffsetsToTxn / EndTxn < 2, TxnOffsetCommit < 3) get
INVALID_PRODUCER_EPOCH where newer ones get PRODUCER_FENCED, as Kafka answers them.
Run on the broker's event loop.
"""

from __future__ import annotations

from fastlog.protocol.api_keys import ApiKey
from fastlog.protocol.errors import Errors
from fastlog.server.authz import (
    CLUSTER_ACTION,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    authorize,
    authorize_cluster,
)
from fastlog.server.group.apis import _by_topic, refuse_offset_commits
from fastlog.server.group.offsets import GROUP_METADATA_TOPIC
from fastlog.server.group.schemas import OffsetAndMetadata

from .schemas import TxnState


def _coordinator(ctx):
    return getattr(ctx.broker, "txn_coordinator", None)


def _fenced(err: Errors, version: int, first_fenced_version: int) -> Errors:
    """PRODUCER_FENCED as the request version knows it (KIP-588)."""
    if err is Errors.PRODUCER_FENCED and version < first_fenced_version:
        return Errors.INVALID_PRODUCER_EPOCH
    return err


def _topic_exists(ctx, topic: str, partition: int) -> bool:
    state = ctx.broker.metadata.topic(topic)
    return state is not None and partition in state.partitions


# ------------------------------------------------------------------ InitProducerId
async def handle_init_transactional_producer(ctx, request):
    """InitProducerId with a transactional id (KafkaApis answers the idempotent one)."""
    c = _coordinator(ctx)
    v = ctx.api_version

    def answer(err, pid=-1, epoch=-1):
        return {"throttle_time_ms": 0, "error_code": _fenced(err, v, 4),
                "producer_id": pid, "producer_epoch": epoch}

    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return answer(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if c is None:
        return answer(Errors.COORDINATOR_NOT_AVAILABLE)
    pid, epoch = (request.producer_id, request.producer_epoch) if v >= 3 else (-1, -1)
    if (pid >= 0) != (epoch >= 0):
        return answer(Errors.INVALID_REQUEST)   # a producer id needs its epoch (KIP-360)
    res = await c.init_producer_id(request.transactional_id, request.transaction_timeout_ms,
                                   pid, epoch)
    return answer(res.error, res.producer_id, res.producer_epoch)


# ------------------------------------------------------------------ AddPartitionsToTxn
async def handle_add_partitions_to_txn(ctx, request):
    """v0-3 from producers: one transaction. v4-5 (KIP-890) from brokers only (ClusterAction
    on the cluster): a batch of transactions, each added or, with verify_only, checked
    (a partition leader asking whether a producer's partitions are in its transaction)."""
    v = ctx.api_version
    if v < 4:
        result = await add_partitions(
            ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions], False)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(result)}
    if not authorize_cluster(ctx, CLUSTER_ACTION):
        return {"throttle_time_ms": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}
    out = []
    for txn in request.transactions:
        result = await add_partitions(
            ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch,
            [(t.name, p) for t in txn.topics for p in t.partitions], txn.verify_only)
        out.append({"transactional_id": txn.transactional_id,
                    "topic_results": _topic_results(result)})
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "results_by_transaction": out}


def _topic_results(result: dict[tuple[str, int], Errors]) -> list[dict]:
    return [{"name": t["name"], "results_by_partition": t["partitions"]}
            for t in _by_topic(result, lambda p, e: {"partition_index": p,
                                                      "partition_error_code": e})]


async def add_partitions(ctx, txn_id, producer_id, producer_epoch, wanted, verify_only
                         ) -> dict[tuple[str, int], Errors]:
    """Kafka's handleAddPartitionsToTransaction (or, verify_only,
    handleVerifyPartitionsInTransaction) for one transaction: an error per partition
    (also KafkaApis's compiled path for v0-v2, with the partitions as it read them)."""
    c = _coordinator(ctx)
    v = ctx.api_version
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, txn_id):
        return dict.fromkeys(wanted, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if c is None:
        return dict.fromkeys(wanted, Errors.COORDINATOR_NOT_AVAILABLE)
    if verify_only:
        return c.verify_partitions(txn_id, producer_id, producer_epoch, wanted)
    refused: dict[tuple[str, int], Errors] = {}
    writable: dict[str, bool] = {}
    for t, p in wanted:
        if t not in writable:
            writable[t] = authorize(ctx, WRITE, TOPIC, t)
        if not writable[t]:
            refused[(t, p)] = Errors.TOPIC_AUTHORIZATION_FAILED
        elif not _topic_exists(ctx, t, p):
            refused[(t, p)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        # Nothing is added when any partition is refused; the rest were not tried.
        return {tp: refused.get(tp, Errors.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    err = await c.add_partitions(txn_id, producer_id, producer_epoch, set(wanted))
    return dict.fromkeys(wanted, _fenced(err, v, 2))


# ------------------------------------------------------------------ AddOffsetsToTxn
async def handle_add_offsets_to_txn(ctx, request):
    c = _coordinator(ctx)
    gc = getattr(ctx.broker, "group_coordinator", None)
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        err = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(ctx, READ, GROUP, request.group_id):
        err = Errors.GROUP_AUTHORIZATION_FAILED
    elif c is None or gc is None:
        err = Errors.COORDINATOR_NOT_AVAILABLE
    else:
        tp = (GROUP_METADATA_TOPIC, gc.partition_for(request.group_id))
        err = _fenced(await c.add_partitions(request.transactional_id, request.producer_id,
                                             request.producer_epoch, {tp}),
                      ctx.api_version, 2)
    return {"throttle_time_ms": 0, "error_code": err}


# ------------------------------------------------------------------ EndTxn
async def handle_end_txn(ctx, request):
    return {"throttle_time_ms": 0, "error_code": await end_txn(
        ctx, request.transactional_id, request.producer_id, request.producer_epoch,
        bool(request.committed))}


async def end_txn(ctx, txn_id, producer_id, producer_epoch, committed: bool) -> Errors:
    """Kafka's handleEndTxn: the error code of the answer (also KafkaApis's compiled path
    for v0-v2)."""
    c = _coordinator(ctx)
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, txn_id):
        return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if c is None:
        return Errors.COORDINATOR_NOT_AVAILABLE
    return _fenced(await c.end_transaction(txn_id, producer_id, producer_epoch, committed),
                   ctx.api_version, 2)


# ------------------------------------------------------------------ TxnOffsetCommit
async def handle_txn_offset_commit(ctx, request):
    gc = getattr(ctx.broker, "group_coordinator", None)
    v = ctx.api_version
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for t in request.topics:
        for p in t.partitions:
            offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if v >= 2 else -1,
                metadata=p.committed_metadata or "")
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        refused = dict.fromkeys(offsets, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        offsets = {}
    else:
        refused = refuse_offset_commits(ctx, request.group_id, offsets)
        for tp in [tp for tp in offsets if ctx.broker.metadata.topic(tp[0]) is None]:
            refused[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
            del offsets[tp]
    if not offsets:
        result = {}
    elif gc is None:
        result = dict.fromkeys(offsets, Errors.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await gc.commit_txn_offsets(
            request.group_id, request.producer_id, request.producer_epoch,
            request.member_id if v >= 3 else "",
            request.group_instance_id if v >= 3 else None,
            request.generation_id if v >= 3 else -1, offsets)
        result = {tp: _fenced(e, v, 3) for tp, e in result.items()}
    result = {**refused, **result}
    return {"throttle_time_ms": 0,
            "topics": _by_topic(result, lambda p, e: {"partition_index": p, "error_code": e})}


# ------------------------------------------------------------------ admin
async def handle_describe_transactions(ctx, request):
    c = _coordinator(ctx)
    out = []
    for txn_id in request.transactional_ids:
        entry = {"error_code": Errors.NONE, "transactional_id": txn_id,
                 "transaction_state": "", "transaction_timeout_ms": 0,
                 "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1,
                 "topics": []}
        out.append(entry)
        if not authorize(ctx, DESCRIBE, TRANSACTIONAL_ID, txn_id):
            entry["error_code"] = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            continue
        if c is None:
            entry["error_code"] = Errors.COORDINATOR_NOT_AVAILABLE
            continue
        err, txn = c.describe(txn_id)
        entry["error_code"] = err
        if txn is None:
            continue
        topics: dict[str, list[int]] = {}
        for t, p in sorted(txn.partitions):
            # Kafka leaves out the topics the principal may not Describe.
            if authorize(ctx, DESCRIBE, TOPIC, t, log_denied=False):
                topics.setdefault(t, []).append(p)
        entry.update(transaction_state=txn.state.kafka_name,
                     transaction_timeout_ms=txn.timeout_ms,
                     transaction_start_time_ms=txn.start_ms, producer_id=txn.producer_id,
                     producer_epoch=txn.producer_epoch,
                     topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])
    return {"throttle_time_ms": 0, "transaction_states": out}


async def handle_list_transactions(ctx, request):
    c = _coordinator(ctx)
    unknown = [s for s in request.state_filters if TxnState.from_name(s) is None]
    if c is None:
        return {"throttle_time_ms": 0, "error_code": Errors.COORDINATOR_NOT_AVAILABLE,
                "unknown_state_filters": unknown, "transaction_states": []}
    states = {TxnState.from_name(s) for s in request.state_filters} - {None}
    if request.state_filters and not states:
        txns: list = []   # only unknown states asked for: nothing matches
        err = Errors.NONE
    else:
        err, txns = c.list_transactions(
            states or None, set(request.producer_id_filters) or None,
            request.duration_filter if ctx.api_version >= 1 else -1)
    return {"throttle_time_ms": 0, "error_code": err, "unknown_state_filters": unknown,
            "transaction_states": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                 "transaction_state": t.state.kafka_name} for t in txns
                if authorize(ctx, DESCRIBE, TRANSACTIONAL_ID, t.transactional_id,
                             log_denied=False)]}


TXN_HANDLERS = {
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
}
