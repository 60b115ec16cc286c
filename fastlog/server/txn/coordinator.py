"""TransactionCoordinator: Kafka's transaction coordinator (KIP-98, KIP-360 epoch bumps).

Owns every transactional id whose ``__transaction_state`` partition this broker leads
(``abs(javaHashCode(id)) % transaction.state.log.num.partitions``, the group coordinator's
helper): its producer id and epoch, its timeout, its state (Kafka's TransactionState:
Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead;
PrepareEpochFence is the in-memory step of fencing an Ongoing transaction), and the
partitions of its ongoing transaction. Every state change is written to the log first
(``LogGroupStore`` over ``__transaction_state``, formats in schemas.py) and applied to the
cache only once the write succeeded; while a write is in flight the id has a pending state
and other requests for it answer CONCURRENT_TRANSACTIONS, as Kafka's
``pendingTransitionInProgress``.

After PrepareCommit/PrepareAbort is durable the markers go out (``_complete_transaction``):
to every partition of the transaction through a ``MarkerWriter`` (markers.py: the local
replica manager, or WriteTxnMarkers to the partition's leader), retried until each
partition took it, then CompleteCommit / CompleteAbort is written. EndTxn starts this
eagerly (``_start``): what needs no waiting (on one node, all of it) is done before the
client is answered; the rest (another broker's answer, a retry) goes on in a task while
the client has its answer, as Kafka answers once the Prepare state is written. A transaction found in PrepareCommit/PrepareAbort when a
partition loads (restart, new leader) is completed the same way.

Timers: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` the Ongoing
transactions past their timeout are aborted with the producer's epoch bumped (the producer
is fenced, as Kafka does); every
``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle (Empty or
Complete*) for ``transactional.id.expiration.ms`` are removed with a tombstone.

Event-loop thread only: every method runs on the broker's asyncio loop; nothing blocks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from fastlog.logs import report_limited
from fastlog.protocol.errors import Errors
from fastlog.server.group.coordinator import LOAD_YIELD_RECORDS, _maybe_await
from fastlog.server.group.group import now_ms
from fastlog.server.group.offsets import LogGroupStore, StoreError, TxnControl, partition_for
from fastlog.server.group.schemas import SchemaError
from fastlog.server.partitioned_coordinator import PartitionedCoordinator

from .markers import MarkerWriter
from .schemas import (
    TxnRecord,
    TxnState,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767
# Marker retries back off from the first to the last delay (seconds).
MARKER_BACKOFF = (0.05, 1.0)

_PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's isEpochExhausted: the last epoch is kept for fencing, so Short.MaxValue - 1
    is the last one handed out."""
    return epoch >= MAX_EPOCH - 1


@dataclasses.dataclass
class TxnMetadata:
    """One transactional id in the cache (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None
    # Not yet written to the log (a new id whose first InitProducerId is in flight).
    fresh: bool = False
    # The id's __transaction_state key, encoded once (every transition writes it).
    key: bytes = dataclasses.field(default=b"", repr=False, compare=False)

    def record(self, **changes) -> TxnRecord:
        rec = TxnRecord(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        set(self.partitions), self.last_update_ms, self.start_ms)
        for k, v in changes.items():
            setattr(rec, k, v)
        return rec

    def apply(self, rec: TxnRecord) -> None:
        if rec.producer_id != self.producer_id:
            self.last_producer_id = self.producer_id
        self.producer_id = rec.producer_id
        self.producer_epoch = rec.producer_epoch
        self.timeout_ms = rec.timeout_ms
        self.state = rec.state
        self.partitions = set(rec.partitions)
        self.last_update_ms = rec.last_update_ms
        self.start_ms = rec.start_ms
        self.fresh = False

    @classmethod
    def from_record(cls, transactional_id: str, rec: TxnRecord) -> TxnMetadata:
        return cls(transactional_id, rec.producer_id, rec.producer_epoch, rec.timeout_ms,
                   rec.state, set(rec.partitions), rec.start_ms, rec.last_update_ms)


@dataclasses.dataclass
class InitResult:
    error: Errors
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator(PartitionedCoordinator):
    """See the module comment. ``broker`` provides ``config``, ``replica_manager``,
    ``producer_id_manager`` and ``create_internal_topic`` (a test may pass ``store`` and
    ``markers`` stand-ins)."""

    TOPIC = TXN_STATE_TOPIC
    LOADED = "transactional id"

    def __init__(self, broker: Any, store: Any = None, markers: Any = None):
        super().__init__(broker)
        cfg = broker.config
        self.num_partitions = int(cfg["transaction.state.log.num.partitions"])
        self.max_timeout_ms = int(cfg["transaction.max.timeout.ms"])
        self.expiration_ms = int(cfg["transactional.id.expiration.ms"])
        self.abort_interval_ms = int(
            cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"])
        self.remove_interval_ms = int(
            cfg["transaction.remove.expired.transaction.cleanup.interval.ms"])
        self.store = store if store is not None else LogGroupStore(broker, TXN_STATE_TOPIC)
        self.markers = markers if markers is not None else MarkerWriter(broker)
        self.txns: dict[str, TxnMetadata] = {}
        # id -> the metadata whose markers are being written (a reload's new metadata
        # for the same id gets its own completion)
        self._completing: dict[str, TxnMetadata] = {}
        self._create_lock = asyncio.Lock()
        # Partitions refused by KIP-890's check (verification.py), for Kafka's
        # AddPartitionsToTxnManager VerificationFailureRate (fastlog/server/metrics.py)
        self.verification_failures = 0

    # ================================================================ lifecycle
    async def startup(self, load: bool = True) -> None:
        """Start loading the partitions of __transaction_state this broker leads; returns
        before loading ends (clients retry meanwhile). The topic itself is created on
        first use, as Kafka does (a broker nobody uses transactions on never has it):
        by the first state write on one node, by FindCoordinator in cluster mode."""
        md = getattr(self.broker, "metadata", None)
        existing = md.topic(TXN_STATE_TOPIC) if md is not None else None
        if existing is not None and len(existing.partitions) != self.num_partitions:
            # As Kafka: the topic's own partition count routes ids (changing the key
            # later would send every id to another partition).
            log.warning("%s has %d partitions: transaction.state.log.num.partitions=%d "
                        "is not used", TXN_STATE_TOPIC, len(existing.partitions),
                        self.num_partitions)
            self.num_partitions = len(existing.partitions)
        cluster = getattr(self.broker, "cluster", None) is not None
        if cluster or existing is not None:
            await self._create_topic()   # (cluster mode: records how to create it)
        # (one node without the topic yet: every partition is ours, with nothing to load)
        self._own_led_partitions(load and (cluster or existing is not None or md is None))
        self._spawn(self._every(self.abort_interval_ms, self.abort_timed_out_transactions))
        self._spawn(self._every(self.remove_interval_ms, self.expire_transactional_ids))

    async def shutdown(self) -> None:
        await self._stop()
        self.txns.clear()
        await self.markers.close()

    async def _create_topic(self) -> None:
        """Create __transaction_state (compacted, Kafka's settings) unless it exists."""
        create = getattr(self.broker, "create_internal_topic", None)
        if create is None:
            return
        cfg = self.broker.config
        async with self._create_lock:
            try:
                await _maybe_await(create(TXN_STATE_TOPIC, self.num_partitions, {
                    "cleanup.policy": "compact",
                    "compression.type": "uncompressed",
                    "unclean.leader.election.enable": "false",
                    "min.insync.replicas": str(cfg["transaction.state.log.min.isr"]),
                    "segment.bytes": str(cfg["transaction.state.log.segment.bytes"]),
                }))
            except Exception as e:  # noqa: BLE001 - the client retries
                log.warning("cannot create %s: %s", TXN_STATE_TOPIC, e)
                raise StoreError(Errors.COORDINATOR_NOT_AVAILABLE, str(e)) from None

    async def _every(self, interval_ms: int, fn) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except Exception:
                log.exception("%s failed", fn.__name__)

    def coordinator_epoch(self, partition: int) -> int:
        """The leader epoch of the state partition (Kafka's coordinator epoch)."""
        rm = getattr(self.broker, "replica_manager", None)
        p = rm.get_partition(TXN_STATE_TOPIC, partition) if rm is not None else None
        return max(int(getattr(p, "leader_epoch", 0) or 0), 0)

    def _forget_partition(self, partition: int) -> None:
        """Resigned (PartitionedCoordinator.on_resigned): its ids go (their markers stop
        being retried here; the new coordinator completes them)."""
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]

    async def load_partition(self, partition: int, election: int | None = None) -> int | None:
        """Rebuild the ids of one partition (last record per id wins, a tombstone removes
        it); transactions caught in PrepareCommit/PrepareAbort get their markers sent and
        complete. Returns how many ids were installed, None when leadership moved."""
        if election is None:
            election = self._elections.get(partition, 0)
        records: dict[str, TxnRecord | None] = {}
        decoded = 0
        async for chunk in self.store.load(partition):
            for item in chunk:
                decoded += 1
                if decoded % LOAD_YIELD_RECORDS == 0:
                    await asyncio.sleep(0)
                if isinstance(item, TxnControl):
                    continue   # (never written here: the state log is not transactional)
                try:
                    records[decode_txn_key(item[0])] = decode_txn_value(item[1])
                except SchemaError as e:
                    log.warning("skipping a bad record in %s-%d: %s", TXN_STATE_TOPIC,
                                partition, e)
        if self._elections.get(partition, 0) != election or partition not in self.owned:
            log.info("%s-%d moved while it loaded: load dropped", TXN_STATE_TOPIC, partition)
            return None
        installed = 0
        for txn_id, rec in records.items():
            if rec is None or rec.state is TxnState.DEAD:
                continue
            if rec.state is TxnState.PREPARE_EPOCH_FENCE:   # never written by us; Kafka's too
                rec.state = TxnState.ONGOING
            txn = TxnMetadata.from_record(txn_id, rec)
            self.txns[txn_id] = txn
            installed += 1
            if txn.state in _PREPARE:
                self._spawn(self._complete_transaction(txn, txn.state is TxnState.PREPARE_COMMIT))
        return installed

    # ================================================================ routing
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def is_coordinator_for(self, transactional_id: str) -> bool:
        return self.partition_for(transactional_id) in self.owned

    def _check_status(self, transactional_id: str | None) -> Errors:
        if not transactional_id:
            return Errors.INVALID_REQUEST
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(transactional_id)
        if p not in self.owned:
            return Errors.NOT_COORDINATOR
        if p in self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        return Errors.NONE

    async def _transit(self, txn: TxnMetadata, rec: TxnRecord) -> Errors:
        """Write the id's next state and apply it once durable; the id is pending (other
        requests answer CONCURRENT_TRANSACTIONS) meanwhile."""
        txn.pending = rec.state
        txn_id = txn.transactional_id
        try:
            if getattr(self.broker, "cluster", None) is None and txn.fresh:
                await self._create_topic()   # one node: the first id creates the topic
            if not txn.key:
                txn.key = encode_txn_key(txn_id)
            await self.store.append(self.partition_for(txn_id), [
                (txn.key, encode_txn_value(rec))])
        except StoreError as e:
            txn.pending = None
            if txn.fresh and self.txns.get(txn_id) is txn:
                del self.txns[txn_id]    # nothing of it reached the log
            log.info("transactional id %s: writing %s failed: %s", txn_id,
                     rec.state.kafka_name, e.error.name)
            return e.error
        txn.pending = None
        if self.txns.get(txn_id) is not txn:
            return Errors.NOT_COORDINATOR   # the partition moved while we wrote
        txn.apply(rec)
        return Errors.NONE

    # ================================================================ InitProducerId
    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected_pid: int = NO_PRODUCER_ID,
                               expected_epoch: int = NO_PRODUCER_EPOCH) -> InitResult:
        """Kafka's handleInitProducerId for a transactional id: a new id gets a producer id
        at epoch 0; a known one has its epoch bumped (a new producer id once the epoch is
        exhausted), which fences older producers. An ongoing transaction is aborted first
        (CONCURRENT_TRANSACTIONS until that is done: the client retries)."""
        err = self._check_status(transactional_id)
        if err is not Errors.NONE:
            return InitResult(err)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return InitResult(Errors.INVALID_TRANSACTION_TIMEOUT)
        expected = expected_pid >= 0
        txn = self.txns.get(transactional_id)
        if txn is None:
            pid = await self.broker.producer_id_manager.generate_producer_id()
            err = self._check_status(transactional_id)   # (we awaited)
            if err is not Errors.NONE:
                return InitResult(err)
            txn = self.txns.get(transactional_id)
            if txn is None:
                txn = self.txns[transactional_id] = TxnMetadata(
                    transactional_id, pid, NO_PRODUCER_EPOCH, timeout_ms, fresh=True)
        if txn.pending is not None:
            return InitResult(Errors.CONCURRENT_TRANSACTIONS)
        if expected and not (txn.producer_epoch == NO_PRODUCER_EPOCH
                             or expected_pid == txn.producer_id
                             or (expected_pid == txn.last_producer_id
                                 and epoch_exhausted(expected_epoch))):
            return InitResult(Errors.PRODUCER_FENCED)
        state = txn.state
        if state in _PREPARE or state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return InitResult(Errors.CONCURRENT_TRANSACTIONS)
        now = now_ms()
        if state is TxnState.ONGOING:
            # Fence the producer of the ongoing transaction and abort it; the client
            # retries and, once the abort completed, gets the next epoch.
            err = await self._fence_and_abort(txn)
            return InitResult(Errors.CONCURRENT_TRANSACTIONS if err is Errors.NONE else err)
        if epoch_exhausted(txn.producer_epoch) and (not expected
                                                    or expected_epoch == txn.producer_epoch):
            new_pid = await self.broker.producer_id_manager.generate_producer_id()
            if txn.pending is not None or self.txns.get(transactional_id) is not txn:
                return InitResult(Errors.CONCURRENT_TRANSACTIONS)
            last_epoch = txn.producer_epoch if expected else NO_PRODUCER_EPOCH
            rec = txn.record(producer_id=new_pid, producer_epoch=0)
        else:
            last_epoch = txn.producer_epoch
            if not expected or txn.producer_epoch == NO_PRODUCER_EPOCH \
                    or expected_epoch == txn.producer_epoch:
                epoch = txn.producer_epoch + 1
            elif expected_epoch == txn.last_producer_epoch:
                # A retry of a bump whose answer the producer never got.
                epoch, last_epoch = txn.producer_epoch, txn.last_producer_epoch
            else:
                return InitResult(Errors.PRODUCER_FENCED)
            rec = txn.record(producer_epoch=epoch)
        rec.timeout_ms = timeout_ms
        rec.state = TxnState.EMPTY
        rec.partitions = set()
        rec.start_ms = -1
        rec.last_update_ms = now
        err = await self._transit(txn, rec)
        if err is not Errors.NONE:
            return InitResult(err)
        txn.last_producer_epoch = last_epoch
        log.info("transactional id %s: producer id %d epoch %d", transactional_id,
                 txn.producer_id, txn.producer_epoch)
        return InitResult(Errors.NONE, txn.producer_id, txn.producer_epoch)

    async def _fence_and_abort(self, txn: TxnMetadata) -> Errors:
        """Kafka's prepareFenceProducerEpoch + endTransaction(ABORT, fromClient=false):
        PrepareAbort under a bumped epoch (the old producer is fenced), then markers."""
        epoch = txn.producer_epoch if txn.producer_epoch >= MAX_EPOCH else txn.producer_epoch + 1
        txn.pending = TxnState.PREPARE_EPOCH_FENCE
        rec = txn.record(producer_epoch=epoch, state=TxnState.PREPARE_ABORT,
                         last_update_ms=now_ms())
        err = await self._transit(txn, rec)
        if err is Errors.NONE:
            txn.last_producer_epoch = NO_PRODUCER_EPOCH
            self._spawn(self._complete_transaction(txn, False))
        return err

    # ================================================================ partitions
    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> tuple[Errors, TxnMetadata | None]:
        err = self._check_status(transactional_id)
        if err is not Errors.NONE:
            return err, None
        txn = self.txns.get(transactional_id)
        if txn is None or txn.fresh or txn.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING, None
        if txn.producer_epoch != producer_epoch:
            return Errors.PRODUCER_FENCED, None
        if txn.pending is not None:
            return Errors.CONCURRENT_TRANSACTIONS, None
        return Errors.NONE, txn

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: set[tuple[str, int]]) -> Errors:
        """Kafka's handleAddPartitionsToTransaction (one error for all the partitions)."""
        err, txn = self._check_producer(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return err
        if txn.state in _PREPARE:
            return Errors.CONCURRENT_TRANSACTIONS
        if txn.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return Errors.INVALID_TXN_STATE
        if txn.state is TxnState.ONGOING and partitions <= txn.partitions:
            return Errors.NONE
        now = now_ms()
        if txn.state is TxnState.ONGOING:
            rec = txn.record(partitions=txn.partitions | partitions, last_update_ms=now)
        else:   # Empty, CompleteCommit, CompleteAbort: a new transaction starts
            rec = txn.record(state=TxnState.ONGOING, partitions=set(partitions),
                             start_ms=now, last_update_ms=now)
        return await self._transit(txn, rec)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], Errors]:
        """Kafka's handleVerifyPartitionsInTransaction (KIP-890 part 1: AddPartitionsToTxn
        verifyOnly, which a partition leader asks before it takes a producer's first
        transactional batch): NONE for each partition of the producer's transaction,
        INVALID_TXN_STATE for the others; one error for all when the id is not known
        here or the producer is not its current one. A write in flight does not matter
        (Kafka neither: partitions leave the transaction only once its markers are
        written)."""
        err = self._check_status(transactional_id)
        if err is Errors.NONE:
            txn = self.txns.get(transactional_id)
            if txn is None or txn.fresh or txn.producer_id != producer_id:
                err = Errors.INVALID_PRODUCER_ID_MAPPING
            elif txn.producer_epoch != producer_epoch:
                err = Errors.PRODUCER_FENCED
            else:
                return {tp: Errors.NONE if tp in txn.partitions else Errors.INVALID_TXN_STATE
                        for tp in partitions}
        return dict.fromkeys(partitions, err)

    # ================================================================ EndTxn
    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool) -> Errors:
        """Kafka's handleEndTransaction: PrepareCommit/PrepareAbort is written, the client
        answered, and the markers go out in the background (then Complete*). A retry of a
        completed end answers NONE; the opposite end of a finished one INVALID_TXN_STATE."""
        err, txn = self._check_producer(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return err
        state = txn.state
        if state is TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            err = await self._transit(txn, txn.record(state=target, last_update_ms=now_ms()))
            if err is Errors.NONE:
                # the client is answered once the markers are written or, when they have
                # to wait (another broker's partition, a retry), while they are
                self._start(self._complete_transaction(txn, commit))
            return err
        if state is TxnState.COMPLETE_COMMIT:
            return Errors.NONE if commit else Errors.INVALID_TXN_STATE
        if state is TxnState.COMPLETE_ABORT:
            return Errors.INVALID_TXN_STATE if commit else Errors.NONE
        if state is TxnState.PREPARE_COMMIT:
            return Errors.CONCURRENT_TRANSACTIONS if commit else Errors.INVALID_TXN_STATE
        if state is TxnState.PREPARE_ABORT:
            return Errors.INVALID_TXN_STATE if commit else Errors.CONCURRENT_TRANSACTIONS
        return Errors.INVALID_TXN_STATE    # Empty, Dead, PrepareEpochFence

    async def _complete_transaction(self, txn: TxnMetadata, commit: bool) -> None:
        """Write the markers to every partition of the transaction (retried with backoff
        until each took it or the partition is gone), then CompleteCommit/CompleteAbort
        (retried likewise). Stops when this broker no longer owns the id."""
        txn_id = txn.transactional_id
        if self._completing.get(txn_id) is txn:
            return
        self._completing[txn_id] = txn
        try:
            partition = self.partition_for(txn_id)
            pending = set(txn.partitions)
            delay = MARKER_BACKOFF[0]
            while pending:
                if self.txns.get(txn_id) is not txn or not self.active:
                    return
                try:
                    results = await self.markers.write(
                        txn.producer_id, txn.producer_epoch, commit,
                        self.coordinator_epoch(partition), sorted(pending))
                except Exception:  # noqa: BLE001 - never give up on a prepared transaction
                    log.exception("transactional id %s: writing markers failed", txn_id)
                    results = {}
                for tp, err in results.items():
                    if err is Errors.NONE:
                        pending.discard(tp)
                    elif err in (Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                 Errors.INVALID_TOPIC_EXCEPTION) \
                            and not self.markers.partition_exists(*tp):
                        pending.discard(tp)    # deleted meanwhile: nothing to mark
                    elif err in (Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED,
                                 Errors.TRANSACTION_COORDINATOR_FENCED):
                        # A newer epoch or coordinator has written there: as Kafka, stop.
                        log.warning("transactional id %s: marker for %s-%d refused: %s",
                                    txn_id, tp[0], tp[1], err.name)
                        pending.discard(tp)
                if pending:
                    why = {results.get(tp, Errors.UNKNOWN_SERVER_ERROR).name for tp in pending}
                    report_limited(log, logging.WARNING, ("txn-markers", txn_id),
                                   "transactional id %s: %s markers not yet written to %s: %s",
                                   txn_id, "COMMIT" if commit else "ABORT",
                                   ", ".join(f"{t}-{q}" for t, q in sorted(pending)),
                                   ", ".join(sorted(why)))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, MARKER_BACKOFF[1])
            target = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            delay = MARKER_BACKOFF[0]
            while self.txns.get(txn_id) is txn and self.active:
                if txn.pending is None:
                    rec = txn.record(state=target, partitions=set(), last_update_ms=now_ms())
                    if await self._transit(txn, rec) is Errors.NONE:
                        return
                await asyncio.sleep(delay)
                delay = min(delay * 2, MARKER_BACKOFF[1])
        finally:
            if self._completing.get(txn_id) is txn:
                del self._completing[txn_id]

    # ================================================================ views
    def describe(self, transactional_id: str) -> tuple[Errors, TxnMetadata | None]:
        err = self._check_status(transactional_id)
        if err is not Errors.NONE:
            return err, None
        txn = self.txns.get(transactional_id)
        if txn is None or txn.fresh or txn.state is TxnState.DEAD:
            return Errors.TRANSACTIONAL_ID_NOT_FOUND, None
        return Errors.NONE, txn

    def list_transactions(self, states: set[TxnState] | None, producer_ids: set[int] | None,
                          min_duration_ms: int = -1) -> tuple[Errors, list[TxnMetadata]]:
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        if self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, []
        now = now_ms()
        out = []
        for txn in self.txns.values():
            if txn.fresh or txn.state is TxnState.DEAD:
                continue
            if states and txn.state not in states:
                continue
            if producer_ids and txn.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (txn.state is not TxnState.ONGOING
                                         or now - txn.start_ms < min_duration_ms):
                continue
            out.append(txn)
        return Errors.NONE, out

    # ================================================================ timers
    async def abort_timed_out_transactions(self, now: int | None = None) -> int:
        """Abort (and fence) every Ongoing transaction past its timeout; returns how many."""
        now = now_ms() if now is None else now
        aborted = 0
        for txn in list(self.txns.values()):
            p = self.partition_for(txn.transactional_id)
            if p not in self.owned or p in self.loading:
                continue
            if txn.state is TxnState.ONGOING and txn.pending is None \
                    and txn.start_ms + txn.timeout_ms < now:
                log.info("transactional id %s: aborting the transaction of producer %d "
                         "epoch %d, past its %d ms timeout", txn.transactional_id,
                         txn.producer_id, txn.producer_epoch, txn.timeout_ms)
                if await self._fence_and_abort(txn) is Errors.NONE:
                    aborted += 1
        return aborted

    async def expire_transactional_ids(self, now: int | None = None) -> int:
        """Remove (tombstone) ids idle past transactional.id.expiration.ms."""
        now = now_ms() if now is None else now
        by_partition: dict[int, list[TxnMetadata]] = {}
        for txn in self.txns.values():
            p = self.partition_for(txn.transactional_id)
            if p not in self.owned or p in self.loading or txn.pending is not None:
                continue
            if txn.state in (TxnState.EMPTY, *_COMPLETE) and not txn.fresh \
                    and txn.last_update_ms + self.expiration_ms <= now:
                by_partition.setdefault(p, []).append(txn)
        removed = 0
        for p, txns in by_partition.items():
            for txn in txns:
                txn.pending = TxnState.DEAD
            try:
                await self.store.append(p, [(encode_txn_key(t.transactional_id), None)
                                            for t in txns])
            except StoreError as e:
                log.warning("expiring transactional ids of %s-%d failed: %s",
                            TXN_STATE_TOPIC, p, e.error.name)
                for txn in txns:
                    txn.pending = None
                continue
            for txn in txns:
                txn.pending = None
                txn.state = TxnState.DEAD
                if self.txns.get(txn.transactional_id) is txn:
                    del self.txns[txn.transactional_id]
                removed += 1
        if removed:
            log.info("removed %d expired transactional id%s", removed, "" if removed == 1 else "s")
        return removed


__all__ = ["TXN_STATE_TOPIC", "InitResult", "TransactionCoordinator", "TxnMetadata"]
