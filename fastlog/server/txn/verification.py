"""Transaction verification on the partition leader (KIP-890 part 1, Kafka 3.6+).

Before a leader takes a producer's first transactional batch of a transaction on a
partition (the producer has no open transaction there yet), it asks the transaction
coordinator whether the producer added that partition to its transaction (Kafka's
AddPartitionsToTxnManager, an AddPartitionsToTxn verifyOnly request). A write to a
partition that was not added, as a buggy or hanging producer sends, would otherwise open a
transaction the coordinator never ends: it would hold the last stable offset until
someone aborts it by hand. ``unverified_partitions`` answers which partitions of a Produce
request to refuse, with the codes Kafka gives producers of the versions our clients send
(Produce below v11/12):

* not added: INVALID_TXN_STATE, "Partition was not added to the transaction";
* a stale epoch: INVALID_PRODUCER_EPOCH (the coordinator's PRODUCER_FENCED);
* a coordinator loading, moving or busy (COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS): NOT_ENOUGH_REPLICAS,
  which producers retry;
* an unknown producer: INVALID_PRODUCER_ID_MAPPING.

Kafka's switch is ``transaction.partition.verification.enable`` (default true). When this
broker is the transactional id's coordinator (always on one node) the coordinator is asked
in place; otherwise (cluster mode) its broker gets an AddPartitionsToTxn v4 verify_only
request over the inter-broker listener (the coordinator's MarkerWriter connections). A
coordinator broker that does not serve v4 lets the batch through unverified, as Kafka's
leader does; one that cannot be reached answers NETWORK_EXCEPTION, which producers retry.

Called (awaited) by KafkaApis.handle_produce on the event loop; with a local coordinator
nothing is awaited between the check and the append.
"""

from __future__ import annotations

import struct
from typing import Any

from fastlog.client.errors import ProtocolMismatch
from fastlog.protocol import ApiKey
from fastlog.protocol.errors import Errors
from fastlog.server.replica_manager import PartitionResult, is_transactional_records

from .coordinator import TXN_STATE_TOPIC
from .markers import _errors

# Record batch v2 header: the attributes' low byte at 22 (0x20: a control batch),
# producerId (int64) at byte 43, producerEpoch (int16) at 51; the header is 61 bytes.
_ATTRIBUTES_LOW_BYTE = 22
_ATTR_CONTROL = 0x20
_PRODUCER_ID_AT = 43
_PRODUCER_EPOCH_AT = 51
_PRODUCER = struct.Struct(">qh")   # the producer id and epoch, adjacent in the header
_HEADER_BYTES = 61

# AddPartitionsToTxn's first version with verify_only
VERIFY_VERSION = 4
_RETRIABLE = (Errors.CONCURRENT_TRANSACTIONS, Errors.COORDINATOR_LOAD_IN_PROGRESS,
              Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)


def _producer(records) -> tuple[int, int]:
    return _PRODUCER.unpack_from(records, _PRODUCER_ID_AT)


def _result(err: Errors) -> PartitionResult:
    if err is Errors.INVALID_TXN_STATE:
        return PartitionResult(err, error_message="Partition was not added to the transaction")
    if err is Errors.PRODUCER_FENCED:
        return PartitionResult(Errors.INVALID_PRODUCER_EPOCH,
                               error_message="the producer's epoch is not the current one")
    if err in _RETRIABLE:
        return PartitionResult(
            Errors.NOT_ENOUGH_REPLICAS,
            error_message="Unable to verify the partition has been added to the transaction. "
                          f"Underlying error: {err.name}")
    return PartitionResult(err)


async def unverified_partitions(broker: Any, transactional_id: str | None,
                                partitions: list[tuple[str, int, Any]]
                                ) -> dict[tuple[str, int], PartitionResult]:
    """The partitions of a Produce request ((topic, partition, records) each, the request's
    transactional id already authorized) to refuse, with their results; {} to append all.
    Only transactional batches of producers without an open transaction on a partition
    this broker hosts are verified."""
    coordinator = getattr(broker, "txn_coordinator", None)
    if coordinator is None or not transactional_id \
            or not broker.config["transaction.partition.verification.enable"]:
        return {}
    rm = broker.replica_manager
    wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for topic, partition, records in partitions:
        if not is_transactional_records(records) or len(records) < _HEADER_BYTES \
                or records[_ATTRIBUTES_LOW_BYTE] & _ATTR_CONTROL \
                or (topic, partition) not in rm.partitions:
            continue   # (a malformed or control batch is refused by the append's checks)
        producer = _producer(records)
        if not rm.has_ongoing_txn(topic, partition, producer[0]):
            wanted.setdefault(producer, []).append((topic, partition))
    if not wanted:
        return {}
    local = getattr(broker, "cluster", None) is None \
        or coordinator.partition_for(transactional_id) in coordinator.owned
    out: dict[tuple[str, int], PartitionResult] = {}
    for (producer_id, epoch), tps in wanted.items():
        errors = coordinator.verify_partitions(transactional_id, producer_id, epoch, tps) \
            if local else await _ask_coordinator(broker, coordinator, transactional_id,
                                                 producer_id, epoch, tps)
        for tp, err in errors.items():
            if err is not Errors.NONE:
                out[tp] = _result(err)
    coordinator.verification_failures += len(out)
    return out


async def _ask_coordinator(broker: Any, coordinator: Any, transactional_id: str,
                           producer_id: int, epoch: int, tps: list[tuple[str, int]]
                           ) -> dict[tuple[str, int], Errors]:
    """AddPartitionsToTxn v4 verify_only to the broker leading the id's
    __transaction_state partition (Kafka's AddPartitionsToTxnManager.verifyTransaction)."""
    try:
        state = broker.metadata.topic(TXN_STATE_TOPIC)
        node = int(state.partitions[coordinator.partition_for(transactional_id)].leader)
    except Exception:  # noqa: BLE001 - no topic or no leader: Kafka's coordinator lookup fails
        node = -1
    if node < 0:
        return dict.fromkeys(tps, Errors.COORDINATOR_NOT_AVAILABLE)
    topics: dict[str, list[int]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append(p)
    try:
        resp = await coordinator.markers.request(node, ApiKey.ADD_PARTITIONS_TO_TXN, {
            "transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                              "producer_epoch": epoch, "verify_only": True,
                              "topics": [{"name": t, "partitions": ps}
                                         for t, ps in topics.items()]}]}, VERIFY_VERSION,
            timeout=int(broker.config["request.timeout.ms"]) / 1000)
    except LookupError:
        return dict.fromkeys(tps, Errors.COORDINATOR_NOT_AVAILABLE)
    except ProtocolMismatch:
        return {}   # a coordinator that cannot verify: as Kafka, go on unverified
    except Exception:  # noqa: BLE001 - unreachable: the producer retries
        return dict.fromkeys(tps, Errors.NETWORK_EXCEPTION)
    if resp.error_code != Errors.NONE:
        # (Kafka hides CLUSTER_AUTHORIZATION_FAILED from producers as INVALID_TXN_STATE)
        err = Errors.INVALID_TXN_STATE if resp.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED \
            else _errors(resp.error_code)
        return dict.fromkeys(tps, err)
    out = dict.fromkeys(tps, Errors.NONE)
    for txn in resp.results_by_transaction:
        for t in txn.topic_results:
            for r in t.results_by_partition:
                if (t.name, r.partition_index) in out:
                    out[(t.name, r.partition_index)] = _errors(r.partition_error_code)
    return out


__all__ = ["unverified_partitions"]
