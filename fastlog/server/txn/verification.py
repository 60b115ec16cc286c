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

Kafka's switch is ``transaction.partition.verification.enable`` (default true). The check
is made here when this broker is the transactional id's coordinator (always on one node);
in cluster mode a leader whose coordinator is another broker takes the batch unverified,
as a Kafka leader does when the coordinator cannot answer verifyOnly requests.

Called by KafkaApis.handle_produce on the event loop; synchronous (no await between the
check and the append).
"""

from __future__ import annotations

from typing import Any

from fastlog.protocol.errors import Errors
from fastlog.server.replica_manager import PartitionResult, is_transactional_records

# Record batch v2 header: the attributes' low byte at 22 (0x20: a control batch),
# producerId (int64) at byte 43, producerEpoch (int16) at 51; the header is 61 bytes.
_ATTRIBUTES_LOW_BYTE = 22
_ATTR_CONTROL = 0x20
_PRODUCER_ID_AT = 43
_PRODUCER_EPOCH_AT = 51
_HEADER_BYTES = 61

_RETRIABLE = (Errors.CONCURRENT_TRANSACTIONS, Errors.COORDINATOR_LOAD_IN_PROGRESS,
              Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)


def _producer(records) -> tuple[int, int]:
    b = bytes(records[_PRODUCER_ID_AT:_PRODUCER_EPOCH_AT + 2])
    return int.from_bytes(b[:8], "big", signed=True), int.from_bytes(b[8:], "big", signed=True)


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


def unverified_partitions(broker: Any, transactional_id: str | None,
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
    if not wanted or (getattr(broker, "cluster", None) is not None
                      and coordinator.partition_for(transactional_id) not in coordinator.owned):
        return {}
    out: dict[tuple[str, int], PartitionResult] = {}
    for (producer_id, epoch), tps in wanted.items():
        for tp, err in coordinator.verify_partitions(transactional_id, producer_id, epoch,
                                                     tps).items():
            if err is not Errors.NONE:
                out[tp] = _result(err)
    coordinator.verification_failures += len(out)
    return out


__all__ = ["unverified_partitions"]
