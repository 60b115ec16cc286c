# fastlog/server/replica_manager.py — the partitions this broker hosts (Kafka's ReplicaManager).
#
# Owns: one `Partition` (fastlog/server/partition.py) per hosted (topic, partition) and
# their gauges kept as they change (`counts`, partition.PartitionCounts), the
# fetch and produce purgatories, the replica fetchers (fastlog/server/replica_fetcher.py),
# the periodic ISR check and each log dir's `replication-offset-checkpoint` (Kafka's
# format: high watermarks of replicated partitions). `append_to_partition` validates a
# client record set with the codec (Kafka's error codes), checks producer sequences,
# appends once and wakes parked fetches (`append_inline`: with check_produce's checks, in
# one step, for a batch that needs no waiting; `leader_produce`, fastlog/server/
# _leader_produce.pyx: a Produce request's everyday partition in one compiled step);
# `completion` is what the answer still waits for
# (a flush.messages fsync; with acks=all on a replicated partition, the ISR having the
# batch). `append_records` does both for several partitions. `read_partition` reads file
# regions (never copies record bytes); a follower's fetch moves its known position, the
# high watermark and the ISR; a read_committed consumer's stops at the last stable offset
# and lists the aborted transactions from the txn indexes.
# Transactions (KIP-98): `append_txn_markers` (WriteTxnMarkers, the transaction
# coordinator) appends COMMIT/ABORT control batches and ends the producer's transaction in
# producer state; an abort goes into the segment's .txnindex (also when a follower
# appends the marker or a load replays it; producer snapshots list the segments holding
# aborts, so that a lost .txnindex is rebuilt at load). `has_ongoing_txn` and
# `last_stable_offset` answer from producer state.
# Single node (no ZooKeeper): partitions come from make_leader, this broker leads alone
# and the high watermark is the log end after every append. Cluster mode: the role
# handler calls become_leader / become_follower / stop_replica / session_changed; ISR
# changes go to the partition's state znode, conditional on our leader epoch and the
# znode version, from the default executor (kazoo calls block).
# A failed log dir (LogManager's failure channel) takes its partitions offline here:
# handle_log_dir_failure stops their fetchers, answers their parked requests and marks
# them `offline`; produce, fetch, ListOffsets and DeleteRecords then answer
# KAFKA_STORAGE_ERROR for them, and nothing periodic touches them.
# AlterReplicaLogDirs moves a partition to another log dir while it serves (alter_log_dir:
# a task copies its batches into a future log there, then swaps it in; see _move_log).
# Called from: the broker's asyncio API loop only (handlers, group coordinator, role
# handler, fetchers); it touches files only for producer snapshots and the HW checkpoint.
# Its verification pool (num.io.threads) writes batches of OFF_LOOP_WRITE_BYTES or more
# (Log's write-behind; published back on the loop); large batches are checked in niced
# worker processes (fastlog/server/check_processes.py), on that pool when those cannot run.
"""Hosted partitions: append with validation and idempotence, fetch with long polling."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import os
import time

from fastlog import _codec
from fastlog.logs import report_limited
from fastlog.protocol.errors import Errors
from fastlog.server._leader_produce import LeaderProduce
from fastlog.server.check_processes import CheckProcesses
from fastlog.server.log import KafkaStorageError, OffsetOutOfRangeError, RecordBatchTooLargeError
from fastlog.server.log.checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
)
from fastlog.server.log.txn_index import AbortedTxn
from fastlog.server.partition import NO_LEADER, Partition, PartitionCounts
from fastlog.server.producer_state import (
    NO_PRODUCER_ID,
    BatchMetadata,
    ProducerStateError,
    ProducerStateManager,
    list_snapshots,
)
from fastlog.server.purgatory import Purgatory

log = logging.getLogger("fastlog.server.replica_manager")

COMPRESSION_ZSTD = 4
# Produce checks run on the request loop only while their work is bounded (about a
# millisecond): records of at most INLINE_CHECK_BYTES that decompress to at most
# INLINE_DECOMPRESS_BYTES (less for gzip, the slow codec to inflate). Anything larger (a
# big batch, or a small one that inflates: up to DEFAULT_DECOMPRESS_LIMIT, 64 MiB) is
# checked off the loop, in worker processes of lower priority (CheckProcesses: at most
# num.io.threads of them, and no more than the cores), so the other connections are
# served meanwhile. librdkafka's lz4 requests (tens of KiB, a few hundred
# KiB decompressed) stay inline, where a thread hand-off would cost more than the work.
INLINE_CHECK_BYTES = 1 << 20
INLINE_DECOMPRESS_BYTES = 1 << 20
INLINE_GZIP_BYTES = 256 << 10
# A batch of at least OFF_LOOP_WRITE_BYTES is written by the same pool (as Kafka's I/O
# threads write the log): Log.append stamps it and places it on the loop, the pwrite runs
# with the GIL released, and the append is published (log end, high watermark, producer
# state) when the write is done; later appends to the partition wait for that (Log's
# write-behind). Below it, a thread hand-off would cost more than the write: librdkafka's
# ordinary requests (100-byte records, linger 5 ms: 180-300 KB) cost 0.18 against 0.24 us
# of broker CPU per record written inline rather than behind (perf/README.md).
OFF_LOOP_WRITE_BYTES = 512 << 10
# A topic whose compression.type is not the producer's codec stores batches compressed
# again: on the pool, too, above this size.
INLINE_RECOMPRESS_BYTES = 64 << 10
COMPRESSION_GZIP = 1
# Where a v2 batch header keeps the low byte of its attributes (the codec's three bits).
_ATTRIBUTES_LOW_BYTE = 22
# ... its magic byte, and the attributes' transactional bit
_MAGIC_BYTE = 16
_ATTR_TRANSACTIONAL = 0x10
# Record bytes read per step when replaying the log tail into producer state.
_REPLAY_CHUNK = 1 << 20
# Moving a partition to another log dir: bytes copied per step on the loop, and flushes
# of the copy in the background before the swap flushes the rest on the loop.
MOVE_CHUNK_BYTES = 1 << 20
MOVE_FLUSH_ROUNDS = 5


# (an enum member read from its class costs a lookup: the everyday append's result)
_NONE = Errors.NONE


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(slots=True)
class PartitionResult:
    """Outcome of one partition's append (what the Produce response needs)."""

    error: Errors = Errors.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: list | tuple = ()
    flush_future: object = None
    # acks=all: the offset the high watermark must reach before the answer (exclusive)
    required_offset: int = -1
    # A write-behind append (Log's PendingAppend) that completion() waits for
    pending: object = None


@dataclasses.dataclass
class FetchPartitionResult:
    error: Errors = Errors.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    regions: list | None = None
    size: int = 0
    preferred_read_replica: int = -1
    # read_committed: (producer_id, first_offset) of the aborted transactions overlapping
    # the records returned (Kafka's abortedTransactions), else None
    aborted_transactions: list | None = None


__all__ = ["FetchPartitionResult", "Partition", "PartitionResult", "ReplicaManager",
           "ReplicationError", "codec_error_code"]


# Codec exception -> Kafka error code for a client record set (order matters: subclasses first).
_CODEC_ERRORS: list[tuple[type, Errors]] = [
    (_codec.CorruptRecordError, Errors.CORRUPT_MESSAGE),
    (_codec.RecordTooLargeError, Errors.MESSAGE_TOO_LARGE),
    (_codec.UnsupportedCodecError, Errors.UNSUPPORTED_COMPRESSION_TYPE),
    (_codec.DecompressionLimitError, Errors.INVALID_RECORD),
    (_codec.InvalidMagicError, Errors.INVALID_RECORD),
    (_codec.InvalidRecordError, Errors.INVALID_RECORD),
    (_codec.TruncatedError, Errors.CORRUPT_MESSAGE),
    (_codec.CodecError, Errors.CORRUPT_MESSAGE),
]


@dataclasses.dataclass(slots=True)
class Recompressed:
    """check_produce's answer for a batch it already stored under the topic's codec, off
    the loop: the new record bytes and their batch header."""
    records: bytearray
    batches: list


class ReplicationError(Exception):
    """An internal append that the ISR did not take; `error_code` is Kafka's code."""

    def __init__(self, code: Errors, message: str):
        super().__init__(message)
        self.error_code = int(code)


def _structure_problem(batches) -> str | None:
    """Why a client's (header-checked) batches may not be appended, or None: Kafka's rules
    that need no look at the records."""
    if len(batches) != 1:
        return "a produce request must carry one batch per partition"
    b = batches[0]
    if b.is_control:
        return "clients may not send control batches"
    if b.producer_id != NO_PRODUCER_ID and b.base_sequence < 0:
        return "an idempotent batch needs a base sequence"
    return None


def is_transactional_records(records) -> bool:
    """Whether a Produce record set starts with a transactional v2 batch (magic byte and
    the attributes' low byte; a Produce request carries one batch per partition)."""
    return (records is not None and len(records) > _ATTRIBUTES_LOW_BYTE
            and records[_MAGIC_BYTE] == 2
            and records[_ATTRIBUTES_LOW_BYTE] & _ATTR_TRANSACTIONAL != 0)


def check_records(records, max_bytes: int, allow_zstd: bool, decompress_limit: int,
                  off_loop: bool = False, require_keys: bool = False):
    """All of Kafka's checks of one partition's client record set, cheapest first: headers,
    sizes and CRCs; the one-batch rule; then the records (decompressed, capped at
    decompress_limit; with require_keys — a compacted topic — each has a key, checked in
    the same walk). The batch headers when they pass, else the CodecError or the rule's
    sentence. Any thread; off_loop: the walk over the records releases the GIL."""
    try:
        batches = _codec.validate_record_set(records, max_batch_size=max_bytes,
                                             allow_zstd=allow_zstd)
        problem = _structure_problem(batches)
        if problem is not None:
            return problem
        _codec.verify_batch_records(records, batches[0], decompress_limit, off_loop,
                                    require_keys)
    except _codec.CodecError as e:
        return e
    return batches


def _check_on_loop(cfg, records, api_version: int):
    """check_records on the loop for a record set small enough for that (a cap on what
    it may decompress there, lower for gzip); None when it is for the pool."""
    if len(records) > INLINE_CHECK_BYTES:
        return None
    gzip = (len(records) > _ATTRIBUTES_LOW_BYTE
            and records[_ATTRIBUTES_LOW_BYTE] & 0x07 == COMPRESSION_GZIP)
    return check_records(records, cfg.max_message_bytes, api_version >= 7,
                         INLINE_GZIP_BYTES if gzip else INLINE_DECOMPRESS_BYTES, False,
                         cfg.compact)


def _recompress_off_loop(cfg, checked, records) -> bool:
    """Whether checked batch headers are of a batch large enough to be compressed again
    (the topic's compression.type is not the producer's codec) on the pool."""
    return (type(checked) is list and cfg.target_codec is not None
            and cfg.target_codec != checked[0].compression
            and len(records) > INLINE_RECOMPRESS_BYTES)


def codec_error_code(exc: Exception) -> Errors:
    for cls, code in _CODEC_ERRORS:
        if isinstance(exc, cls):
            return code
    return Errors.UNKNOWN_SERVER_ERROR


class ReplicaManager:
    """Every partition hosted here (see the module comment). In single-node mode (no
    ZooKeeper) partitions come from `make_leader` and behave as before replication; in
    cluster mode the broker's role handler calls become_leader / become_follower /
    stop_replica / session_changed on the loop, and this class runs the replica fetchers,
    the ISR checks and the high-watermark checkpoint."""

    def __init__(self, broker):
        self.broker = broker
        self.partitions: dict[tuple[str, int], Partition] = {}
        # the gauges over `partitions`, kept as they change (partition.PartitionCounts):
        # every insertion into `partitions` goes with counts.host, every removal with drop
        self.counts = PartitionCounts()
        self.fetch_purgatory = Purgatory("Fetch")
        self.produce_purgatory = Purgatory("Produce")
        self.fetcher_manager = None  # ReplicaFetcherManager, made on the first follower role
        # set by stop_following (controlled shutdown): follower roles no longer fetch
        self._following_stopped = False
        self._tasks: list[asyncio.Task] = []
        self._hw_checkpoint: dict[tuple[str, int], int] | None = None
        self._stopped = False
        self._cluster_tasks_started = False
        self._verifier: concurrent.futures.ThreadPoolExecutor | None = None
        self._check_processes = CheckProcesses(
            min(int(self._cfg("num.io.threads", 8)), os.cpu_count() or 1))
        # Counters for operators and tests (Kafka's IsrShrinksPerSec, IsrExpandsPerSec ...).
        self.metrics = {
            "isr_shrinks": 0, "isr_expands": 0, "isr_update_failures": 0,
            "fenced_leaderships": 0, "follower_truncations": 0,
            # records removed below a follower's high watermark: committed data lost, which
            # only an unclean leader election (or a lost disk) can cause
            "unclean_truncated_records": 0,
        }
        # A Produce request's everyday partition in one compiled step (KafkaApis.handle)
        self.leader_produce = LeaderProduce(
            self, PartitionResult, BatchMetadata, Errors.NONE, INLINE_CHECK_BYTES,
            INLINE_DECOMPRESS_BYTES, INLINE_GZIP_BYTES, OFF_LOOP_WRITE_BYTES)

    @property
    def node_id(self) -> int:
        return self.broker.node_id

    def _cfg(self, key: str, default):
        try:
            value = self.broker.config.get(key, default)
        except AttributeError:
            return default
        return default if value is None else value

    # ------------------------------------------------------------------ partitions
    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def get_log(self, topic: str, partition: int):
        p = self.partitions.get((topic, partition))
        return p.log if p is not None else None

    def make_leader(self, topic: str, partition: int, log_config, leader_epoch: int,
                    replicas: list[int]) -> Partition:
        """Single node: open (or create) the partition's log and lead it alone."""
        p = self.partitions.get((topic, partition))
        if p is not None:
            p.leader_epoch = leader_epoch
            return p
        log_ = self.broker.log_manager.get_or_create_log(topic, partition, log_config)
        p = Partition(topic, partition, log_, leader_epoch, replicas)
        self._load_producer_state(p)
        self.partitions[p.key] = p
        self.leader_produce.hosted_changed()
        self.counts.host(p)
        self._resume_move(p)
        return p

    def rebuild_counts(self) -> None:
        """(loop thread) Counts made anew from every hosted partition (the metrics scrape
        found the kept ones differ from a walk: a change that missed its recount)."""
        counts = PartitionCounts()
        for p in list(self.partitions.values()):
            counts.host(p)
        self.counts = counts

    def delete_partition(self, topic: str, partition: int) -> None:
        self._stop_fetching((topic, partition))
        p = self.partitions.pop((topic, partition), None)
        self.leader_produce.hosted_changed()
        if p is not None:
            self.counts.drop(p)
        self.fetch_purgatory.check_and_complete((topic, partition))
        self.produce_purgatory.check_and_complete((topic, partition))
        # (also a log whose partition was already stopped without deletion)
        if p is not None or self.broker.log_manager.get_log(topic, partition) is not None:
            self.broker.log_manager.delete_log(topic, partition)

    # ------------------------------------------------------------------ moving between log dirs
    def alter_log_dir(self, topic: str, partition: int, log_dir: str) -> Errors:
        """AlterReplicaLogDirs for one partition (Kafka's alterReplicaLogDirs): start
        moving it into `log_dir` (a future log there catches up with the current one in
        the background, then takes over), or stop a move when `log_dir` is where it is."""
        lm = self.broker.log_manager
        dest = os.path.abspath(log_dir)
        if dest not in lm.log_dirs:
            return Errors.LOG_DIR_NOT_FOUND
        p = self.partitions.get((topic, partition))
        if lm.dir_failure_channel.is_offline(dest) or (p is not None and p.offline):
            return Errors.KAFKA_STORAGE_ERROR
        if p is None:
            return Errors.REPLICA_NOT_AVAILABLE
        if lm.log_dir_of(topic, partition) == dest:
            lm.abort_future_log(topic, partition)
            return Errors.NONE
        if lm.dir_failure_channel.offline:
            # (as Kafka: no future log while a dir is offline, so that none is made twice)
            return Errors.KAFKA_STORAGE_ERROR
        before = lm.future_log(topic, partition)
        try:
            future = lm.create_future_log(topic, partition, dest)
        except OSError as e:
            log.warning("%s: cannot start moving to %s: %s", p, dest, e)
            return Errors.KAFKA_STORAGE_ERROR
        if before is None or before[0] is not future:
            log.info("%s: moving from %s to %s", p, lm.log_dir_of(topic, partition), dest)
            self._spawn(self._move_log(p, future))
        return Errors.NONE

    def _resume_move(self, p: Partition) -> None:
        """A move between log dirs that a restart interrupted (its future log was loaded
        again by the LogManager) goes on once the partition is hosted, as Kafka's
        ReplicaAlterLogDirsManager resumes it."""
        entry = self.broker.log_manager.future_log(p.topic, p.partition)
        if entry is not None:
            log.info("%s: resuming the move to %s at offset %d", p, entry[1],
                     entry[0].log_end_offset)
            self._spawn(self._move_log(p, entry[0]))

    async def _move_log(self, p: Partition, future) -> None:
        """Copy the partition's batches into its future log (Kafka's
        ReplicaAlterLogDirsThread, here a task on the loop copying MOVE_CHUNK_BYTES at a
        time), following truncations and the log start; once level and flushed, swap."""
        lm = self.broker.log_manager
        key = p.key
        flush_rounds = 0
        try:
            while True:
                entry = lm.future_log(*key)
                if entry is None or entry[0] is not future:
                    return  # stopped, or another destination asked for
                if self.partitions.get(key) is not p or p.offline or self._stopped:
                    lm.abort_future_log(*key)
                    return
                current = p.log
                if future.log_end_offset > current.log_end_offset:
                    future.truncate_to(current.log_end_offset)
                if future.log_end_offset < current.log_start_offset:
                    # the copy begins at the batch holding the log start (or at the start
                    # of an empty log)
                    first = current.read(current.log_start_offset, 1).first_batch_offset
                    start = first if first >= 0 else current.log_start_offset
                    if future.log_end_offset != start:
                        future.truncate_fully_and_start_at(start)
                if future.log_end_offset == current.log_end_offset:
                    if future.unflushed_messages > 0 and flush_rounds < MOVE_FLUSH_ROUNDS:
                        flush_rounds += 1
                        await asyncio.wrap_future(future.flush_async())
                        continue
                    future.flush()  # what arrived during the last round, if anything
                    self._promote_future(p, current)
                    return
                info = current.read(max(future.log_end_offset, current.log_start_offset),
                                    MOVE_CHUNK_BYTES)
                data = b"".join(r.read() for r in info.regions)
                batches = _codec.scan_batches(data, verify_crc=True).batches
                if not batches:
                    raise KafkaStorageError(f"no batch at offset {future.log_end_offset}")
                future.append(data, batches, p.leader_epoch, assign_offsets=False)
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a failed move leaves the partition as it was
            report_limited(log, logging.WARNING, ("move", key), "%s: moving to another log "
                           "dir failed, stopped: %s", p, e)
            lm.abort_future_log(*key)

    def _promote_future(self, p: Partition, current) -> None:
        """The swap (loop thread, no await): the future log takes over with the current
        one's high watermark and log start offset."""
        new = self.broker.log_manager.promote_future_log(p.topic, p.partition)
        new.hw_follows_leo = current.hw_follows_leo
        new.update_high_watermark(current.high_watermark)
        if current.log_start_offset > new.log_start_offset:
            new.delete_records_before(current.log_start_offset)
        p.log = new
        log.info("%s: now in %s", p, os.path.dirname(new.dir))

    def is_offline(self, topic: str, partition: int) -> bool:
        """True when this broker's replica of the partition is in a failed log dir."""
        p = self.partitions.get((topic, partition))
        if p is not None:
            return p.offline
        return self.broker.log_manager.offline_dir_of(topic, partition) is not None

    def mark_offline(self, log_dir: str) -> None:
        """(loop thread) The partitions in `log_dir` refuse requests from now on; only
        flags change here, so any caller may be part way through the partitions."""
        lm = self.broker.log_manager
        for p in self.partitions.values():
            if lm.log_dir_of(p.topic, p.partition) == log_dir:
                p.offline = True
                p.recount()

    def handle_log_dir_failure(self, log_dir: str) -> list[tuple[str, int]]:
        """(loop thread) Take the partitions of a failed log dir offline here, then in the
        LogManager (which releases their files); the partitions that went offline."""
        keys = self.broker.log_manager.handle_log_dir_failure(log_dir)
        for key in keys:
            self._stop_fetching(key)
            p = self.partitions.get(key)
            if p is not None:
                p.offline = True
                p.recount()
                self._wake(key)
        return keys

    def update_config(self, topic: str, log_config) -> None:
        for (t, _), p in self.partitions.items():
            if t == topic:
                p.log.update_config(log_config)

    # ------------------------------------------------------------------ roles (cluster mode)
    def is_leader(self, topic: str, partition: int) -> bool:
        """True when this broker leads the partition and may take writes for it."""
        p = self.partitions.get((topic, partition))
        return p is not None and p.can_accept_writes

    def leader_for(self, topic: str, partition: int) -> int:
        """The partition's leader as this broker knows it, -1 when unknown or offline."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return NO_LEADER
        return p.leader_id if p.leader_id is not None else NO_LEADER

    def high_watermark_pending(self, p: Partition) -> bool:
        """A new leader whose high watermark has not yet reached the log end it had when
        its epoch began: its HW may be below what the previous leader had shown, so the
        latest offset is not answered yet (Kafka's OFFSET_NOT_AVAILABLE; consumers never
        see the high watermark go backwards)."""
        return p.replicated and p.is_leader and p.high_watermark < p.leader_epoch_start_offset

    def _hosted(self, topic: str, partition: int, leader_epoch: int,
                replicas: list[int]) -> Partition:
        """The partition in cluster mode, opened (log, checkpointed high watermark,
        producer state) on first use."""
        key = (topic, partition)
        p = self.partitions.get(key)
        if p is not None and p.local_id is not None:
            return p
        if p is None:
            log_ = self.broker.log_manager.get_or_create_log(
                topic, partition, self.broker.log_config(topic))
            p = Partition(topic, partition, log_, leader_epoch, replicas, local_id=self.node_id)
            self._load_producer_state(p)
            self.partitions[key] = p
            self.leader_produce.hosted_changed()
            self.counts.host(p)
            self._resume_move(p)
        else:  # opened in single-node style before the cluster roles arrived
            p.local_id = self.node_id
            p.leader_id = NO_LEADER
            p.recount()
        log_ = p.log
        # Loading left the high watermark at the log end (single-node rule); a replica only
        # trusts what it checkpointed, since the tail may never have been committed.
        log_.hw_follows_leo = False
        hw = self._checkpointed_hw().get(key, 0)
        log_.high_watermark = max(log_.log_start_offset, min(hw, log_.log_end_offset))
        log_.note_figures()
        self._start_cluster_tasks()
        return p

    def become_leader(self, topic: str, partition: int, leader_epoch, isr=None, replicas=None,
                      partition_epoch: int = -1) -> Partition:
        """Lead the partition from `leader_epoch` on, with the given ISR and replicas;
        `partition_epoch` is the state znode's version (-1: read it when needed). The third
        argument may also be a PartitionState (fastlog.zk.leadership's handler call)."""
        if not isinstance(leader_epoch, int):
            st = leader_epoch
            leader_epoch, isr, replicas = st.leader_epoch, list(st.isr), list(st.replicas)
            partition_epoch = getattr(st, "zk_version", getattr(st, "partition_epoch", -1))
        replicas = list(replicas or [self.node_id])
        if self.is_offline(topic, partition):
            return self._stay_offline(topic, partition, "lead")
        p = self._hosted(topic, partition, leader_epoch, replicas)
        self._stop_fetching(p.key)
        old_epoch = p.leader_epoch
        isr_before = list(p.isr)
        changed = p.make_leader(leader_epoch, list(isr or [self.node_id]), replicas,
                                partition_epoch, _now_ms())
        if (not changed and p.replicated and self._zk() is not None
                and any(b not in p.isr for b in isr_before)):
            # Replicas removed within the epoch (a reassignment completed): ZooKeeper's ISR
            # may still name them (an expansion written while the old replica list was all
            # we knew), and nothing else would ever take them out: write the narrowed ISR.
            self._spawn(self._update_isr(p, list(p.isr), "replicas removed"))
        if changed:
            log.info("%s: leader at epoch %d (was %d), ISR %s, replicas %s, log end %d, "
                     "high watermark %d", p, leader_epoch, old_epoch, p.isr, p.replicas,
                     p.log.log_end_offset, p.high_watermark)
        p.maybe_increment_high_watermark()
        self._wake(p.key)
        return p

    def become_follower(self, topic: str, partition: int, leader_id, leader_epoch=None,
                        replicas=None) -> Partition:
        """Follow `leader_id` (-1: offline, nobody to fetch from) at `leader_epoch`. Parked
        acks=all produces of this partition fail with NOT_LEADER_OR_FOLLOWER; the fetcher
        truncates the log (OffsetForLeaderEpoch) before it fetches again. The third
        argument may also be a PartitionState."""
        if not isinstance(leader_id, int):
            st = leader_id
            leader_id, leader_epoch, replicas = st.leader, st.leader_epoch, list(st.replicas)
        replicas = list(replicas or [])
        if self.is_offline(topic, partition):
            return self._stay_offline(topic, partition, "follow")
        p = self._hosted(topic, partition, leader_epoch, replicas)
        was_leader = p.is_leader
        changed = p.make_follower(leader_id, leader_epoch, replicas)
        if changed:
            log.info("%s: follower of %d at epoch %d%s, log end %d, high watermark %d", p,
                     leader_id, leader_epoch, " (was leader)" if was_leader else "",
                     p.log.log_end_offset, p.high_watermark)
        self._wake(p.key)
        if leader_id < 0 or leader_id == self.node_id or self._following_stopped:
            self._stop_fetching(p.key)
        elif changed or self.fetcher_manager is None or not self.fetcher_manager.has(p.key):
            self._fetchers().add_partition(p, leader_id, leader_epoch)
        return p

    def _stay_offline(self, topic: str, partition: int, role: str) -> Partition | None:
        """A role for a replica in a failed log dir: it neither leads nor fetches (the
        controller moves leadership off it once it hears of the failure)."""
        key = (topic, partition)
        self._stop_fetching(key)
        p = self.partitions.get(key)
        if p is not None:
            p.offline = True
            p.recount()
        self._wake(key)
        log.info("%s-%d: told to %s, but its log dir has failed: it stays offline",
                 topic, partition, role)
        return p

    def stop_replica(self, topic: str, partition: int, delete: bool) -> None:
        """No longer a replica here: stop fetching and serving; remove the log if `delete`."""
        key = (topic, partition)
        self._stop_fetching(key)
        if not delete:
            # A replica moved off this broker (reassignment) goes too, as in Kafka; only a
            # partition whose metadata still lists us (or is unknown) keeps its log.
            state = self.broker.metadata.topic(topic) if self.broker.metadata else None
            ps = state.partitions.get(partition) if state is not None else None
            delete = ps is not None and self.node_id not in ps.replicas and \
                self.node_id >= 0 and bool(ps.replicas)
        if delete:
            self.delete_partition(topic, partition)
            return
        p = self.partitions.pop(key, None)
        self.leader_produce.hosted_changed()
        self._wake(key)
        if p is not None:
            self.counts.drop(p)
            log.info("%s: no longer a replica here (log kept)", p)

    def session_changed(self, expired: bool) -> None:
        """ZooKeeper session lost: leadership recorded here may be stale, so stop taking
        writes and acknowledging them until ZooKeeper confirms us again (the periodic ISR
        check re-reads the state) or a new role arrives."""
        if not expired:
            return
        for p in self.partitions.values():
            if p.replicated and p.is_leader and not p.fenced:
                p.fenced = True
                self.metrics["fenced_leaderships"] += 1
                self._wake(p.key)
        log.warning("ZooKeeper session expired: not accepting writes until leadership is "
                    "confirmed again")

    def _wake(self, key) -> None:
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)

    def _fetchers(self):
        if self.fetcher_manager is None:
            from fastlog.server.replica_fetcher import ReplicaFetcherManager
            self.fetcher_manager = ReplicaFetcherManager(self)
        return self.fetcher_manager

    def _stop_fetching(self, key) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partition(key)

    def stop_following(self) -> None:
        """A broker about to ask for its controlled shutdown stops replicating, as Kafka's
        controller has it do (StopReplica): every follower stops fetching, and so does each
        partition that becomes a follower here later (those it led). A replica that kept
        fetching caught up again and its leader added it back to the ISR the controller had
        just shrunk for the shutdown, so the broker left the ISR only when the leader next
        saw it lag (replica.lag.time.max.ms later), holding acks=all produces meanwhile."""
        self._following_stopped = True
        if self.fetcher_manager is not None:
            self.fetcher_manager.shutdown()

    def broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) of a live broker from the metadata cache, for follower fetches."""
        brokers_fn = getattr(self.broker.metadata, "brokers", None)
        info = brokers_fn().get(broker_id) if brokers_fn is not None else None
        if info is None:
            return None
        if not hasattr(info, "endpoint"):
            return None
        # Followers fetch through inter.broker.listener.name (else the default endpoint).
        inter = getattr(self.broker.config, "inter_broker_listener_name", None)
        ep = (info.endpoint(inter) if inter else None) or info.endpoint()
        if ep is None:
            return None
        return ep.host, ep.port

    # ------------------------------------------------------------------ follower appends
    def append_as_follower(self, p: Partition, data, leader_hw: int) -> int:
        """Append the leader's batches byte for byte (their offsets and epochs kept), replay
        them into producer state, and follow the leader's high watermark. Returns the
        number of bytes appended; raises codec/storage errors for the fetcher to handle."""
        appended = 0
        if data is not None and len(data):
            scan = _codec.scan_batches(data, verify_crc=True)
            batches = scan.batches
            if scan.error is not None and not batches and \
                    not isinstance(scan.error, _codec.TruncatedError):
                raise scan.error  # damaged data from the leader: nothing appended
            # (a batch cut short by the size limit comes whole in a later fetch)
            if batches:
                buf = data if scan.valid_end == len(data) else memoryview(data)[:scan.valid_end]
                info = p.log.append(buf, batches, p.leader_epoch, assign_offsets=False)
                ps = p.producer_state
                for b in batches:
                    if b.compression == COMPRESSION_ZSTD:
                        p.has_zstd = True
                    self._index_txn(p, ps.load_batch(buf, b))
                ps.update_map_end_offset(info.last_offset + 1)
                appended = scan.valid_end
                self.broker.topic_stats.all_topics.replication_bytes_in += appended
        before = p.high_watermark
        p.update_follower_high_watermark(leader_hw)
        if p.high_watermark != before:
            self.fetch_purgatory.check_and_complete(p.key)
        return appended

    def truncate_as_follower(self, p: Partition, offset: int, why: str,
                             fully: bool = False) -> None:
        """Remove everything at or after `offset`; producer state is rebuilt without it.
        fully: drop the whole log and restart it, empty, at `offset` (the leader's log
        start moved past our end)."""
        log_ = p.log
        if fully:
            log_.truncate_fully_and_start_at(offset)
            for _, path in list_snapshots(log_.dir):
                _unlink_quietly(path)
            p.producer_state = ProducerStateManager(p.topic, p.partition)
            p.snapshot_offset = -1
            self._load_producer_state(p)
            return
        if offset >= log_.log_end_offset:
            return
        hw = log_.high_watermark
        if offset < hw:
            lost = hw - offset
            self.metrics["unclean_truncated_records"] += lost
            log.warning("%s: truncating to %d BELOW the high watermark %d (%s): %d committed "
                        "records are gone from this replica; only an unclean leader election "
                        "does this", p, offset, hw, why, lost)
        else:
            log.info("%s: truncating from %d to %d (%s)", p, log_.log_end_offset, offset, why)
        self.metrics["follower_truncations"] += 1
        log_.truncate_to(offset)
        # Snapshots of the removed history must not be loaded after a restart.
        for snap_offset, path in list_snapshots(log_.dir):
            if snap_offset > log_.log_end_offset:
                _unlink_quietly(path)
        p.producer_state = ProducerStateManager(p.topic, p.partition)
        p.snapshot_offset = -1
        self._load_producer_state(p)

    # ------------------------------------------------------------------ ISR (leader side)
    def _on_follower_fetch(self, p: Partition, replica_id: int, fetch_offset: int) -> None:
        if fetch_offset > p.log.log_end_offset:
            return  # a diverged follower: it truncates before it counts
        p.update_follower_fetch(replica_id, fetch_offset, _now_ms())
        if p.maybe_increment_high_watermark():
            self._wake(p.key)
        if not p.isr_update_in_flight and not p.fenced:
            joining = p.expand_candidates()
            if joining:
                new_isr = p.isr + [b for b in p.replicas if b in joining]
                self._spawn(self._update_isr(p, new_isr, f"{joining} caught up"))

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def _zk(self):
        return getattr(self.broker.metadata, "zk", None)

    async def _update_isr(self, p: Partition, new_isr: list[int], why: str) -> bool:
        """Write the new ISR to the state znode, conditional on the znode's version and on
        our leader epoch still being the recorded one; announce it under
        /isr_change_notification. A failed condition means another leader exists: fenced."""
        if p.isr_update_in_flight:
            return False
        p.isr_update_in_flight = True
        epoch = p.leader_epoch
        zk = self._zk()
        loop = asyncio.get_running_loop()
        try:
            if zk is None:
                version = p.partition_epoch + 1  # no ZooKeeper (in-process tests): local only
            else:
                version = await loop.run_in_executor(
                    None, _write_isr, zk, p.topic, p.partition, self.node_id, epoch,
                    tuple(new_isr))
        except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: retry next round
            self.metrics["isr_update_failures"] += 1
            log.warning("%s: ISR update to %s failed: %s", p, new_isr, e)
            return False
        finally:
            p.isr_update_in_flight = False
        if self.partitions.get(p.key) is not p or not p.is_leader or p.leader_epoch != epoch:
            return False  # the role changed while we wrote
        if version is None:
            p.fenced = True
            self.metrics["fenced_leaderships"] += 1
            log.warning("%s: ISR update refused: ZooKeeper records another leader or epoch "
                        "than our %d; no longer accepting writes", p, epoch)
            self._wake(p.key)
            return False
        old = p.isr
        p.isr = list(new_isr)
        p.recount()
        p.partition_epoch = version
        self.metrics["isr_expands" if len(new_isr) > len(old) else "isr_shrinks"] += 1
        log.info("%s: ISR %s -> %s (%s), partition epoch %d", p, old, p.isr, why, version)
        p.maybe_increment_high_watermark()
        self._wake(p.key)
        if zk is not None:
            try:
                await loop.run_in_executor(None, zk.propagate_isr_changes, [p.key])
            except Exception as e:  # noqa: BLE001 - the controller re-reads states anyway
                log.warning("%s: cannot announce the ISR change: %s", p, e)
        return True

    async def check_isr(self) -> None:
        """One round of Kafka's maybeShrinkIsr: drop followers that have not caught up
        within replica.lag.time.max.ms; re-validate fenced leaderships against ZooKeeper."""
        now = _now_ms()
        lag = int(self._cfg("replica.lag.time.max.ms", 30000))
        for p in list(self.partitions.values()):
            if not p.replicated or not p.is_leader or p.isr_update_in_flight or p.offline:
                continue
            if p.fenced:
                await self._revalidate(p)
                continue
            out = p.out_of_sync_replicas(now, lag)
            if out:
                new_isr = [b for b in p.isr if b not in out]
                await self._update_isr(p, new_isr, f"{out} lagged more than {lag} ms")

    async def _revalidate(self, p: Partition) -> None:
        zk = self._zk()
        if zk is None or getattr(self.broker.metadata, "session_expired", False):
            return
        epoch = p.leader_epoch
        try:
            st = await asyncio.get_running_loop().run_in_executor(
                None, zk.get_partition_state, p.topic, p.partition)
        except Exception:  # noqa: BLE001 - still unreachable
            return
        if (st is not None and st.leader == self.node_id and st.leader_epoch == epoch
                and p.leader_epoch == epoch and p.is_leader and p.fenced):
            p.fenced = False
            p.isr = [b for b in st.isr if b in p.replicas] or [self.node_id]
            p.recount()
            p.partition_epoch = st.zk_version
            log.info("%s: leadership at epoch %d confirmed by ZooKeeper again", p, epoch)
            self._wake(p.key)

    def _start_cluster_tasks(self) -> None:
        """The ISR check (every replica.lag.time.max.ms / 2, as Kafka) and the
        high-watermark checkpoint, as broker periodic tasks (cancelled at its shutdown)."""
        if self._stopped or self._cluster_tasks_started:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (offline tools): nothing periodic
        self._cluster_tasks_started = True
        lag = int(self._cfg("replica.lag.time.max.ms", 30000))
        hw_ms = int(self._cfg("replica.high.watermark.checkpoint.interval.ms", 5000))
        self.broker._every("isr-expiration", max(lag // 2, 50), self.check_isr)
        self.broker._every("highwatermark-checkpoint", max(hw_ms, 100),
                           self.checkpoint_high_watermarks)

    # ------------------------------------------------------------------ HW checkpoint
    def _checkpointed_hw(self) -> dict[tuple[str, int], int]:
        if self._hw_checkpoint is None:
            merged: dict[tuple[str, int], int] = {}
            for d in getattr(self.broker.log_manager, "log_dirs", []):
                try:
                    merged.update(OffsetCheckpointFile(
                        os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).read())
                except (CorruptCheckpointError, OSError) as e:
                    log.warning("%s: ignoring unreadable %s: %s", d,
                                REPLICATION_OFFSET_CHECKPOINT, e)
            self._hw_checkpoint = merged
        return self._hw_checkpoint

    def checkpoint_high_watermarks(self, sync: bool = False):
        """Write each log dir's replication-offset-checkpoint (on the I/O worker unless
        sync) with the high watermarks of the replicated partitions."""
        lm = self.broker.log_manager
        by_dir: dict[str, dict] = {d: {} for d in lm.online_dirs}
        for key, p in self.partitions.items():
            if not p.replicated or p.offline:
                continue
            d = lm.log_dir_of(*key)
            if d in by_dir:
                by_dir[d][key] = p.high_watermark
        if not any(by_dir.values()) and self._hw_checkpoint is None:
            return None

        def write():
            for d, offsets in by_dir.items():
                try:
                    OffsetCheckpointFile(
                        os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).write(offsets)
                except OSError as e:
                    if not lm.dir_failure_channel.report(
                            d, f"writing {REPLICATION_OFFSET_CHECKPOINT}", e):
                        raise

        if sync:
            write()
            return None
        return lm.scheduler.submit(write)

    # ------------------------------------------------------------------ producer state
    def _load_producer_state(self, p: Partition) -> None:
        """Snapshot at or below the log end, then replay the batches after it."""
        ps = p.producer_state
        leo = p.log.log_end_offset
        start = ps.load_latest_snapshot(p.log.dir, leo)
        if ps.txn_index_bases:   # (a lost .txnindex of these is rebuilt; replay covers the rest)
            p.log.check_txn_indexes(ps.txn_index_bases)
        offset = max(start, p.log.log_start_offset)
        steps = 0
        while offset < leo:
            try:
                info = p.log.read(offset, _REPLAY_CHUNK, min_one_batch=True)
            except (OffsetOutOfRangeError, KafkaStorageError):  # (a corrupt range: verifier)
                break
            if not info.regions:
                break
            data = b"".join(bytes(r.read()) for r in info.regions)
            scan = _codec.scan_batches(data, verify_crc=False)
            batches = scan.batches
            if scan.error is not None and not batches:
                log.warning("%s: stopping producer-state replay at %d: %s", p, offset, scan.error)
                break
            last = offset
            for b in batches:
                if b.compression == COMPRESSION_ZSTD:
                    p.has_zstd = True
                if b.last_offset < offset:
                    continue
                self._index_txn(p, ps.load_batch(data, b))
                last = b.last_offset + 1
            if last <= offset:
                break
            offset = last
            steps += 1
        ps.update_map_end_offset(leo)
        if steps:
            log.debug("%s: producer state rebuilt from %d batch reads", p, steps)

    def checkpoint_producer_state(self, sync: bool = False) -> None:
        """Write a producer snapshot for every partition whose state moved since the last
        one (periodic, and at shutdown with sync=True), so a restart replays only the log
        tail after it. The state is encoded here; the fsync'ed write runs on LogManager's
        I/O worker unless sync."""
        jobs = []
        for p in self.partitions.values():
            ps = p.producer_state
            if not ps.producers or ps.map_end_offset == p.snapshot_offset or p.offline:
                continue
            p.snapshot_offset = ps.map_end_offset
            jobs.append((p, ps.snapshot_job(p.log.dir, p.log.txn_index_bases())))
        if not jobs:
            return

        def write_all():
            for p, job in jobs:
                try:
                    job()
                except OSError as e:
                    if not p.log.report_failure("writing a producer snapshot", e):
                        log.warning("%s: cannot write producer snapshot: %s", p, e)

        if sync:
            write_all()
        else:
            self.broker.log_manager.scheduler.submit(write_all)

    # ------------------------------------------------------------------ produce
    # ------------------------------------------------------------------ produce
    async def append_records(self, entries, *, acks: int, api_version: int,
                             timeout_ms: int = 0, in_place: bool = False
                             ) -> dict[tuple[str, int], PartitionResult]:
        """Append client record sets. `entries` is an iterable of (topic, partition, records)
        where records is a (zero-copy) memoryview of the request frame or None. in_place:
        the caller owns writable `records` until this returns and lets the leader stamp
        offsets into them (no copy); otherwise each record set is copied first. With
        acks=all on replicated partitions the answer waits (produce purgatory) until the
        high watermark passes the batch, i.e. every ISR member has it, or timeout_ms."""
        results: dict[tuple[str, int], PartitionResult] = {}
        for topic, partition, records in entries:
            checked = await self.check_produce(topic, partition, records, api_version)
            results[(topic, partition)] = self.append_to_partition(
                topic, partition, records, acks, api_version, in_place, checked,
                write_behind=True)
        wait = self.completion(results, acks, timeout_ms)
        if wait is not None:
            await wait
        return results

    def append_to_partition(self, topic: str, partition: int, records, acks: int,
                            api_version: int, in_place: bool = False,
                            checked=None, write_behind: bool = False) -> PartitionResult:
        """One partition's part of append_records, up to the append itself: its result
        is final unless completion() says there is something to wait for. `checked` is
        what check_produce answered for these records (checked here when None).
        write_behind: a large batch may be written off the loop (OFF_LOOP_WRITE_BYTES);
        the caller then awaits completion() before `records` may change."""
        if acks not in (0, 1, -1):
            return PartitionResult(Errors.INVALID_REQUIRED_ACKS)
        p = self.partitions.get((topic, partition))
        if p is None:
            return PartitionResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if p.offline:
            return PartitionResult(Errors.KAFKA_STORAGE_ERROR,
                                   error_message=f"{p} is in an offline log dir")
        return self._append_one(p, records, acks, api_version, in_place, checked,
                                write_behind)

    def completion(self, results: dict, acks: int, timeout_ms: int):
        """None when the append results are final, else an awaitable that completes them:
        flush.messages asked for an fsync (the ack waits for it; it runs on LogManager's
        I/O worker, so the loop keeps serving meanwhile), or acks=all on a replicated
        partition (the ack waits for the ISR). A write-behind append is always waited for
        (acks=0 too: the request's bytes are being written)."""
        flushes = None
        written = None
        replicated = False
        # A plain loop (no comprehension frames): this runs once per produce request.
        for key, r in results.items():
            if r.pending is not None:
                if written is None:
                    written = []
                written.append(r)
            if r.flush_future is not None and acks != 0:
                if flushes is None:
                    flushes = []
                flushes.append(r.flush_future)
            if (acks == -1 and not replicated and r.error == Errors.NONE
                    and (p := self.partitions.get(key)) is not None and p.replicated):
                replicated = True
        if flushes is None and not replicated and written is None:
            return None
        return self._complete(results, flushes, timeout_ms if replicated else None,
                              written, acks)

    async def _complete(self, results: dict, flushes: list | None, timeout_ms: int | None,
                        written: list | None = None, acks: int = 1) -> None:
        if written:
            flushes = await self._written(written, acks, flushes)
        if flushes:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in flushes),
                                 return_exceptions=True)
        if timeout_ms is not None:
            await self._wait_for_replication(results, timeout_ms)

    async def _written(self, results: list, acks: int, flushes: list | None) -> list | None:
        """Wait for the write-behind appends of one request (PartitionResults with
        `pending`) and publish them: an error becomes KAFKA_STORAGE_ERROR, a flush that
        flush.messages asked for joins `flushes` (returned). The request's bytes must
        outlive the writes: cancelled, this waits for them on the spot."""
        for r in results:
            pending = r.pending
            try:
                await self._settled(pending.log, pending)
            except asyncio.CancelledError:
                for other in results:
                    if (other.pending is not None
                            and other.pending.log.pending_append is other.pending):
                        other.pending.log.settle()
                raise
            r.pending = None
            if pending.error is not None:
                e = pending.error
                report_limited(log, logging.ERROR, ("append", pending.log.dir),
                               "%s: append failed: %s", pending.log, e)
                r.error, r.base_offset = Errors.KAFKA_STORAGE_ERROR, -1
                r.error_message = str(e)
            elif pending.info.flush_future is not None:
                r.flush_future = pending.info.flush_future
                if acks != 0:
                    flushes = (flushes or []) + [r.flush_future]
        return flushes

    @staticmethod
    async def _settled(log_, pending=None) -> None:
        """Wait until the write-behind append `pending` of `log_` (by default whichever
        is in flight, until none is) is written, and publish it (Log.settle)."""
        while (current := log_.pending_append) is not None:
            if pending is not None and current is not pending:
                return  # published already (a later change to the log settled it)
            with contextlib.suppress(Exception):  # the append's own error: settle() keeps it
                await asyncio.shield(asyncio.wrap_future(current.written))
            if log_.pending_append is current:
                log_.settle()
            if pending is not None:
                return

    async def _wait_for_replication(self, results: dict, timeout_ms: int) -> None:
        """Kafka's DelayedProduce: complete each partition once its high watermark reaches
        the end of what we appended (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank
        below min.insync.replicas meanwhile), fail it if leadership moved, and answer
        REQUEST_TIMED_OUT for whatever is still short at timeout_ms."""
        pending = {}
        for key, r in results.items():
            p = self.partitions.get(key)
            if r.error == Errors.NONE and r.required_offset > 0 and p is not None and p.replicated:
                pending[key] = (p, r, p.follower_transitions)
        if not pending:
            return
        if self._cfg("fastlog.debug.ack.before.replication", False):
            return  # test-only switch: acknowledge before replication (loses data on failover)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000.0
        while True:
            for key, (p, r, transitions) in list(pending.items()):
                # A new epoch with us still leading (the controller dropped a dead follower)
                # keeps the batch; having stopped leading in between may have truncated it.
                if (self.partitions.get(key) is not p or not p.is_leader or p.fenced
                        or p.follower_transitions != transitions):
                    r.error, r.base_offset = Errors.NOT_LEADER_OR_FOLLOWER, -1
                    r.error_message = "leadership moved before the batch was replicated"
                    del pending[key]
                elif p.high_watermark >= r.required_offset:
                    min_isr = self.broker.log_config(p.topic).min_insync_replicas
                    if len(p.isr) < min_isr:
                        r.error = Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                        r.error_message = (f"written, but the ISR {p.isr} is smaller than "
                                           f"min.insync.replicas {min_isr}")
                    del pending[key]
            if not pending:
                return
            remaining = deadline - loop.time()
            if remaining <= 0 or self._stopped or getattr(self.broker, "stopping", False):
                for _, r, _ in pending.values():
                    r.error, r.base_offset = Errors.REQUEST_TIMED_OUT, -1
                    r.error_message = "the in-sync replicas did not all get the batch in time"
                return
            await self.produce_purgatory.wait(list(pending), remaining)

    async def check_produce(self, topic: str, partition: int, records, api_version: int):
        """check_records for one partition of a Produce request, on the loop while that is
        cheap, else on the verification pool; the answer goes to append_to_partition as
        `checked` (a large batch that the topic's compression.type stores under another
        codec comes back Recompressed). None when there is nothing to check here (no such
        partition, no records): the append answers that itself. `records` must stay
        unchanged until the append (the request frame does, until the handler returns).
        An earlier write-behind append to the partition is published before this returns,
        so the append that follows comes after it."""
        p = self.partitions.get((topic, partition))
        if records is None or len(records) == 0 or p is None:
            return None
        cfg = self.broker.log_config(topic)
        checked = _check_on_loop(cfg, records, api_version)
        if checked is None or isinstance(checked, _codec.DecompressionLimitError):
            checked = await self._check_processes.check(
                self._verify_pool(), check_records, records, cfg.max_message_bytes,
                api_version >= 7, _codec.DEFAULT_DECOMPRESS_LIMIT, True, cfg.compact)
        if _recompress_off_loop(cfg, checked, records):
            # The topic's compression.type differs from the producer's codec: compressing
            # a large batch again is CPU work for the pool too.
            try:
                out = await asyncio.get_running_loop().run_in_executor(
                    self._verify_pool(), _codec.recompress_batch, records, checked[0],
                    cfg.target_codec, cfg.target_level)
                checked = Recompressed(out, [_codec.read_batch_header(out)])
            except _codec.CodecError as e:
                checked = e
        if p.log is not None and p.log.pending_append is not None:
            await self._settled(p.log)
        return checked

    def append_inline(self, topic: str, partition: int, records, acks: int,
                      api_version: int) -> PartitionResult | None:
        """check_produce and append_to_partition (in place, write-behind) in one step for
        a client record set that needs no waiting before its append: a partition here
        with its log and no write-behind append in flight, records checked on the loop
        (small enough, not over a decompression cap) and not to be compressed again off
        the loop. The same result as those two; None when any of that does not hold (the
        caller then takes them, awaited). Producing over many partitions, this is every
        request: one lookup of the partition and its config, no coroutine."""
        p = self.partitions.get((topic, partition))
        if (p is None or p.offline or records is None or len(records) == 0
                or acks not in (0, 1, -1)):
            return None
        log_ = p.log
        if log_ is None or log_.pending_append is not None:
            return None
        cfg = self.broker.log_config(topic)
        checked = _check_on_loop(cfg, records, api_version)
        if (checked is None or isinstance(checked, _codec.DecompressionLimitError)
                or _recompress_off_loop(cfg, checked, records)):
            return None
        return self._append_one(p, records, acks, api_version, True, checked, True, cfg)

    def _verify_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._verifier is None:
            self._verifier = concurrent.futures.ThreadPoolExecutor(
                max_workers=int(self._cfg("num.io.threads", 8)),
                thread_name_prefix="fastlog-verify")
        return self._verifier

    def _append_one(self, p: Partition, records, acks: int, api_version: int,
                    in_place: bool = False, checked=None,
                    write_behind: bool = False, topic_cfg=None) -> PartitionResult:
        if not p.can_accept_writes:
            return PartitionResult(Errors.NOT_LEADER_OR_FOLLOWER,
                                   error_message=f"broker {self.node_id} does not lead "
                                                 f"{p.topic}-{p.partition}")
        if topic_cfg is None:
            topic_cfg = self.broker.log_config(p.topic)
        if acks == -1 and len(p.isr) < topic_cfg.min_insync_replicas:
            return PartitionResult(
                Errors.NOT_ENOUGH_REPLICAS,
                error_message=f"{len(p.isr)} in-sync replicas, min.insync.replicas is "
                              f"{topic_cfg.min_insync_replicas}")
        if records is None or len(records) == 0:
            return PartitionResult(Errors.NONE, -1, -1, p.log.log_start_offset)
        if checked is None:
            checked = check_records(records, topic_cfg.max_message_bytes, api_version >= 7,
                                    _codec.DEFAULT_DECOMPRESS_LIMIT,
                                    require_keys=topic_cfg.compact)
        recompressed = None
        if type(checked) is not list:   # (the batch headers when every check passed)
            if isinstance(checked, str):
                return PartitionResult(Errors.INVALID_RECORD, error_message=checked)
            if isinstance(checked, _codec.MissingKeyError):
                # Kafka's LogValidator: the whole batch is refused, the record named.
                message = (f"Compacted topic cannot accept message without key in topic "
                           f"partition {p.topic}-{p.partition}.")
                report_limited(log, logging.INFO, ("nokey", p.key), "%s: %s", p, message)
                return PartitionResult(
                    Errors.INVALID_RECORD, error_message=message,
                    record_errors=[{"batch_index": checked.record_index,
                                    "batch_index_error_message": message}],
                    log_start_offset=p.log.log_start_offset)
            if isinstance(checked, _codec.CodecError):
                code = codec_error_code(checked)
                log.info("%s: rejected produce v%d: %s (%s)", p, api_version, checked,
                         code.name)
                return PartitionResult(code, error_message=str(checked))
            recompressed, checked = checked, checked.batches   # Recompressed
        batches = checked
        b = batches[0]
        now = _now_ms()
        if not topic_cfg.log_append_time:
            before_max, after_max = self.broker.timestamp_limits(p.topic)
            if (b.max_timestamp >= 0 and b.max_timestamp - now > after_max) or (
                    0 <= b.first_timestamp < now - before_max):
                return PartitionResult(
                    Errors.INVALID_TIMESTAMP,
                    record_errors=[{"batch_index": 0, "batch_index_error_message": None}],
                    error_message=f"batch timestamps {b.first_timestamp}..{b.max_timestamp} "
                                  f"are outside [now - {before_max}, now + {after_max}] ms")
        idempotent = b.producer_id != NO_PRODUCER_ID
        if idempotent:
            try:
                dup = p.producer_state.check(b.producer_id, b.producer_epoch,
                                             b.base_sequence, b.record_count,
                                             b.is_transactional)
            except ProducerStateError as e:
                return PartitionResult(Errors[e.code], error_message=str(e),
                                       log_start_offset=p.log.log_start_offset)
            if dup is not None:
                # A retried batch already in the log: answer with its original offset.
                return PartitionResult(Errors.NONE, dup.first_offset, -1,
                                       p.log.log_start_offset,
                                       required_offset=dup.last_offset + 1)
        codec = topic_cfg.target_codec
        if recompressed is not None:
            records = recompressed.records
            in_place = True
        elif codec is not None and codec != b.compression:
            # The topic's compression.type is not the producer's codec: the records are
            # stored under the topic's, in a new buffer (as Kafka's LogValidator does).
            try:
                records = _codec.recompress_batch(records, b, codec, topic_cfg.target_level)
                batches = [_codec.read_batch_header(records)]
            except _codec.CodecError as e:
                log.info("%s: cannot store the batch as %s: %s", p, topic_cfg.compression_type, e)
                return PartitionResult(codec_error_code(e), error_message=str(e))
            b = batches[0]
            in_place = True
        # The request frame is reused only after the handler returns, and Log.append writes
        # the batch out before that: stamp it there (a 150 KB copy per request saved).
        # Other callers' buffers are copied exactly once.
        if in_place and type(records) is not memoryview:
            records = memoryview(records)
        buf = records if in_place and not records.readonly else bytearray(records)
        if topic_cfg.log_append_time:
            # One clock read for the stamped bytes and the reported log_append_time.
            _codec.stamp_log_append_time(buf, batches, now)
        try:
            info = p.log.append(buf, batches, p.leader_epoch, now_ms=now,
                                write_executor=self._verify_pool() if write_behind and len(
                                    buf) >= OFF_LOOP_WRITE_BYTES else None)
        except RecordBatchTooLargeError as e:
            return PartitionResult(Errors.MESSAGE_TOO_LARGE, error_message=str(e))
        except (OSError, KafkaStorageError) as e:
            return self._storage_error(p, e)
        if info.pending is not None:
            # Written off the loop: the rest happens when the append is published.
            info.pending.on_written = functools.partial(self._appended, p, b, idempotent)
            return PartitionResult(Errors.NONE, info.first_offset, info.log_append_time,
                                   p.log.log_start_offset, pending=info.pending,
                                   required_offset=info.last_offset + 1)
        self._appended(p, b, idempotent, info)
        return PartitionResult(_NONE, info.first_offset, info.log_append_time,
                               p.log.log_start_offset, flush_future=info.flush_future,
                               required_offset=info.last_offset + 1)

    def _storage_error(self, p: Partition, e: Exception) -> PartitionResult:
        """A client append that failed to write (also LeaderProduce's): Kafka marks the
        log dir offline; we answer the retriable storage error."""
        report_limited(log, logging.ERROR, ("append", p.key), "%s: append failed: %s", p, e)
        return PartitionResult(Errors.KAFKA_STORAGE_ERROR, error_message=str(e))

    def _appended(self, p: Partition, b, idempotent: bool, info) -> None:
        """A client batch `b` is in the log (published): producer state, high watermark,
        parked requests."""
        if b.compression == COMPRESSION_ZSTD:
            p.has_zstd = True
        if idempotent:
            p.producer_state.update(b.producer_id, b.producer_epoch, b.base_sequence,
                                    b.record_count, info.first_offset, info.last_offset,
                                    b.max_timestamp, b.is_transactional)
        p.producer_state.update_map_end_offset(info.last_offset + 1)
        self._after_append(p)

    def _after_append(self, p: Partition) -> None:
        # Single node, or an ISR of one: the high watermark follows the log end at once
        # (the compiled leader append has moved it already: then nothing is asked);
        # otherwise it waits for the followers' fetches.
        log_ = p.log
        if ((p.local_id is not None or log_.high_watermark != log_.log_end_offset)
                and p.maybe_increment_high_watermark() and self.produce_purgatory.watchers):
            self.produce_purgatory.check_and_complete(p.key)
        # Followers parked on this partition read up to the log end: wake them too
        # (most appends have nobody parked anywhere: no lookup then).
        if self.fetch_purgatory.watchers:
            self.fetch_purgatory.check_and_complete(p.key)

    async def append_internal(self, topic: str, partition: int, record_set: bytearray):
        """Append broker-built batches (group coordinator: __consumer_offsets). Validates
        structure, assigns offsets, advances the high watermark; on a replicated partition
        it returns only once the ISR has the batches (acks=all, offsets.commit.timeout.ms).
        Raises KeyError for an unknown partition, ReplicationError (with a Kafka
        error_code) when not leading, the ISR is too small or replication times out,
        codec errors for bad input."""
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KeyError(f"{topic}-{partition} is not hosted here")
        if p.offline:
            raise ReplicationError(Errors.KAFKA_STORAGE_ERROR, f"{p} is in an offline log dir")
        if not p.can_accept_writes:
            raise ReplicationError(Errors.NOT_LEADER_OR_FOLLOWER, f"{p} is not led here")
        min_isr = self.broker.log_config(topic).min_insync_replicas
        if p.replicated and len(p.isr) < min_isr:
            raise ReplicationError(Errors.NOT_ENOUGH_REPLICAS,
                                   f"{p}: ISR {p.isr} below min.insync.replicas {min_isr}")
        batches = _codec.validate_record_set(record_set, verify_records=False)
        if not batches:
            raise ValueError("empty record set")
        info = p.log.append(record_set, batches, p.leader_epoch)
        self._after_append(p)
        if info.flush_future is not None:
            await asyncio.wrap_future(info.flush_future)
        if p.replicated:
            r = PartitionResult(Errors.NONE, info.first_offset,
                                required_offset=info.last_offset + 1)
            await self._wait_for_replication(
                {p.key: r}, int(self._cfg("offsets.commit.timeout.ms", 5000)))
            if r.error != Errors.NONE:
                raise ReplicationError(r.error, r.error_message or r.error.name)
        return info

    # ------------------------------------------------------------------ transactions
    async def append_txn_markers(self, markers, timeout_ms: int | None = None
                                 ) -> list[dict[tuple[str, int], Errors]]:
        """Write transaction markers (WriteTxnMarkers; the transaction coordinator).
        `markers`: (producer_id, producer_epoch, committed, coordinator_epoch,
        [(topic, partition), ...]) each. On every listed partition this broker leads, a
        control batch (one COMMIT or ABORT record carrying the coordinator epoch) is
        appended and ends the producer's transaction there; an ABORT goes into the
        aborted-transaction index. Returns, per marker in order, {(topic, partition):
        Errors}: NONE once the ISR has the marker (acks=all, at most timeout_ms,
        request.timeout.ms by default), else INVALID_REQUEST (no producer id or epoch),
        UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, REQUEST_TIMED_OUT."""
        out: list[dict[tuple[str, int], Errors]] = []
        waits: dict[tuple[str, int], PartitionResult] = {}
        for producer_id, epoch, committed, coordinator_epoch, partitions in markers:
            errors = {}
            for topic, partition in partitions:
                r = self._append_marker(topic, partition, producer_id, epoch, bool(committed),
                                        coordinator_epoch)
                errors[(topic, partition)] = r
                if r.error == Errors.NONE:
                    waits[(topic, partition)] = r   # the later marker covers the earlier
            out.append(errors)
        if waits:
            if timeout_ms is None:
                timeout_ms = int(self._cfg("request.timeout.ms", 30000))
            done = self.completion(waits, -1, timeout_ms)
            if done is not None:
                await done
        return [{key: (waits[key].error if r.error == Errors.NONE else r.error)
                 for key, r in errors.items()} for errors in out]

    def _append_marker(self, topic: str, partition: int, producer_id: int, epoch: int,
                       committed: bool, coordinator_epoch: int) -> PartitionResult:
        if producer_id < 0 or epoch < 0:
            return PartitionResult(Errors.INVALID_REQUEST,
                                   error_message="a marker needs a producer id and epoch")
        p = self.partitions.get((topic, partition))
        if p is None:
            return PartitionResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if p.offline:
            return PartitionResult(Errors.KAFKA_STORAGE_ERROR)
        if not p.can_accept_writes:
            return PartitionResult(Errors.NOT_LEADER_OR_FOLLOWER)
        min_isr = self.broker.log_config(topic).min_insync_replicas
        if p.replicated and len(p.isr) < min_isr:
            return PartitionResult(Errors.NOT_ENOUGH_REPLICAS)
        ps = p.producer_state
        try:
            ps.check_marker(producer_id, epoch, coordinator_epoch)
        except ProducerStateError as e:
            log.info("%s: refused a %s marker: %s", p, "COMMIT" if committed else "ABORT", e)
            return PartitionResult(Errors[e.code], error_message=str(e))
        now = _now_ms()
        buf = bytearray(_codec.build_control_batch(
            committed, producer_id, epoch, 0, now, coordinator_epoch=coordinator_epoch,
            partition_leader_epoch=p.leader_epoch))
        batches = _codec.scan_batches(buf, verify_crc=False).batches
        try:
            info = p.log.append(buf, batches, p.leader_epoch, now_ms=now)
            ps.update_map_end_offset(info.last_offset + 1)
            self._index_txn(p, ps.complete_txn(producer_id, epoch, committed, coordinator_epoch,
                                               info.first_offset, now))
        except (OSError, KafkaStorageError) as e:
            report_limited(log, logging.ERROR, ("append", p.key), "%s: marker append failed: %s",
                           p, e)
            return PartitionResult(Errors.KAFKA_STORAGE_ERROR, error_message=str(e))
        self._after_append(p)
        return PartitionResult(Errors.NONE, info.first_offset, -1, p.log.log_start_offset,
                               flush_future=info.flush_future,
                               required_offset=info.last_offset + 1)

    @staticmethod
    def _index_txn(p: Partition, completed) -> None:
        """An aborted transaction goes into the txn index of its marker's segment (the
        leader's append, a follower's, or a replay: an entry already there is kept)."""
        if completed is not None and completed.aborted:
            p.log.append_aborted_txn(AbortedTxn(completed.producer_id, completed.first_offset,
                                                completed.last_offset,
                                                completed.last_stable_offset))

    def has_ongoing_txn(self, topic: str, partition: int, producer_id: int) -> bool:
        """Whether the producer has an open transaction (data without a marker yet) on
        this broker's replica of the partition (False when it is not hosted here)."""
        p = self.partitions.get((topic, partition))
        return p is not None and p.producer_state.has_ongoing_txn(producer_id)

    def last_stable_offset(self, p: Partition) -> int:
        """Kafka's LSO: read_committed consumers read below it (never below the log start,
        which DeleteRecords may have moved past an open transaction's first offset)."""
        return max(p.log.log_start_offset,
                   p.producer_state.last_stable_offset(p.high_watermark))

    # ------------------------------------------------------------------ fetch
    def check_replica_fetch(self, p: Partition, replica_id: int) -> Errors:
        """Whether `replica_id` may fetch `p` as a follower: only another replica of the
        partition that is a registered broker of this cluster, from its leader. A client
        that claims a replica id would otherwise read past the high watermark and move it
        (CVE-2018-1288)."""
        if replica_id == self.node_id or replica_id not in p.replicas or not p.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER
        brokers_fn = getattr(self.broker.metadata, "brokers", None)
        if brokers_fn is not None and p.replicated and replica_id not in brokers_fn():
            log.warning("%s: refusing a replica fetch from %d, which is not a registered "
                        "broker", p, replica_id)
            return Errors.NOT_LEADER_OR_FOLLOWER
        return Errors.NONE

    # ------------------------------------------------------------------ follower reads
    def _rack_aware(self) -> bool:
        sel = self._cfg("replica.selector.class", None)
        return bool(sel) and str(sel).endswith("RackAwareReplicaSelector")

    def follower_read_partition(self, topic: str, partition: int) -> Partition | None:
        """KIP-392: with a rack-aware replica selector a follower serves consumers (below
        its own high watermark); the partition when this broker may, else None."""
        p = self.partitions.get((topic, partition))
        if p is None or not self._rack_aware() or not p.replicated or p.is_leader \
                or p.leader_id < 0:
            return None
        return p

    def preferred_read_replica(self, p: Partition, client_rack: str | None) -> int:
        """The in-sync follower in the consumer's rack (Fetch v11 preferred_read_replica)
        when the leader is not in that rack itself; -1 to keep reading from the leader."""
        if not client_rack or not self._rack_aware() or not p.replicated or not p.is_leader:
            return -1
        if self._cfg("broker.rack", None) == client_rack:
            return -1
        brokers_fn = getattr(self.broker.metadata, "brokers", None)
        brokers = brokers_fn() if brokers_fn is not None else {}
        for b in p.isr:
            info = brokers.get(b)
            if b != self.node_id and info is not None and getattr(info, "rack", None) == client_rack:
                return b
        return -1

    def read_partition(self, p: Partition, fetch_offset: int, max_bytes: int, *,
                       min_one_batch: bool, from_follower: bool, api_version: int,
                       replica_id: int | None = None,
                       client_rack: str | None = None,
                       read_committed: bool = False) -> FetchPartitionResult:
        """Regions of `p` from fetch_offset: up to the log end for a follower, the high
        watermark for a consumer, the last stable offset for a read_committed one (with
        the aborted transactions among what it returns, from the txn indexes)."""
        log_ = p.log
        if p.offline:
            return FetchPartitionResult(Errors.KAFKA_STORAGE_ERROR)
        if from_follower and replica_id is not None:
            err = self.check_replica_fetch(p, replica_id)
            if err != Errors.NONE:
                return FetchPartitionResult(err)
            if p.replicated:
                self._on_follower_fetch(p, replica_id, fetch_offset)
        elif not from_follower and not p.is_leader:
            if self.follower_read_partition(p.topic, p.partition) is not p:
                return FetchPartitionResult(Errors.NOT_LEADER_OR_FOLLOWER)
            if fetch_offset > log_.log_end_offset:
                # a consumer ahead of this follower (it read from the leader before): not
                # out of range, just not here yet
                return FetchPartitionResult(Errors.OFFSET_NOT_AVAILABLE)
        elif not from_follower and client_rack and api_version >= 11:
            preferred = self.preferred_read_replica(p, client_rack)
            if preferred >= 0:
                hw = log_.high_watermark
                return FetchPartitionResult(Errors.NONE, hw, self.last_stable_offset(p),
                                            log_.log_start_offset,
                                            preferred_read_replica=preferred)
        hw = log_.high_watermark
        lso = self.last_stable_offset(p)
        res = FetchPartitionResult(Errors.NONE, hw, lso, log_.log_start_offset)
        if api_version < 10 and (p.has_zstd or p.log.config.compression_type == "zstd"):
            res.error = Errors.UNSUPPORTED_COMPRESSION_TYPE
            return res
        # Consumers see up to the high watermark (read_committed: the last stable offset)
        # only; followers up to the log end.
        limit = log_.log_end_offset if from_follower else (lso if read_committed else hw)
        if fetch_offset == limit and fetch_offset >= log_.log_start_offset:
            return res
        if fetch_offset > limit and fetch_offset <= log_.log_end_offset:
            return res  # above the high watermark but in the log: nothing visible yet
        try:
            info = log_.read(fetch_offset, max_bytes, min_one_batch=min_one_batch,
                             **self._hw_bound(log_, limit))
        except OffsetOutOfRangeError:
            res.error = Errors.OFFSET_OUT_OF_RANGE
            return res
        except KafkaStorageError as e:  # a range the verifier found corrupt
            report_limited(log, logging.ERROR, ("read", p.key), "%s: fetch at offset %d "
                           "refused: %s", p, fetch_offset, e)
            res.error = Errors.KAFKA_STORAGE_ERROR
            return res
        res.regions = info.regions
        res.size = info.size
        if read_committed and not from_follower and info.regions:
            res.aborted_transactions = [
                (t.producer_id, t.first_offset)
                for t in log_.collect_aborted_txns(fetch_offset, info.upper_bound_offset)]
        return res

    @staticmethod
    def _hw_bound(log_, limit: int) -> dict:
        if limit >= log_.log_end_offset:
            return {}
        return {"max_position": limit}

    def wake_fetchers(self, topic: str, partition: int) -> None:
        self.fetch_purgatory.check_and_complete((topic, partition))

    # ------------------------------------------------------------------ other APIs
    def delete_records(self, topic: str, partition: int, offset: int) -> tuple[Errors, int]:
        p = self.partitions.get((topic, partition))
        if p is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, -1
        if p.offline:
            return Errors.KAFKA_STORAGE_ERROR, -1
        log_ = p.log
        target = log_.high_watermark if offset == -1 else offset
        if target < 0 or target > log_.high_watermark:
            return Errors.OFFSET_OUT_OF_RANGE, -1
        try:
            log_.delete_records_before(target)
        except OffsetOutOfRangeError:
            return Errors.OFFSET_OUT_OF_RANGE, -1
        self.fetch_purgatory.check_and_complete(p.key)
        return Errors.NONE, log_.log_start_offset

    def shutdown(self) -> None:
        self._stopped = True
        self._check_processes.close()
        if self._verifier is not None:
            self._verifier.shutdown(wait=False, cancel_futures=True)
        for t in list(self._tasks):
            t.cancel()
        self._tasks.clear()
        if self.fetcher_manager is not None:
            self.fetcher_manager.shutdown()
        self.checkpoint_producer_state(sync=True)
        try:
            self.checkpoint_high_watermarks(sync=True)
        except OSError as e:
            log.warning("cannot write %s: %s", REPLICATION_OFFSET_CHECKPOINT, e)
        self.fetch_purgatory.wake_all()
        self.produce_purgatory.wake_all()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_isr(zk, topic: str, partition: int, leader: int, leader_epoch: int,
               isr: tuple[int, ...]) -> int | None:
    """(ZooKeeper thread) Set the partition's ISR if ZooKeeper still records `leader` at
    `leader_epoch`, conditional on the znode version just read; the new version, or None
    when another leader or epoch is recorded or the znode moved meanwhile."""
    from fastlog.zk.paths import LeaderAndIsr

    cur = zk.get_partition_state(topic, partition)
    if cur is None or cur.leader != leader or cur.leader_epoch != leader_epoch:
        return None
    new = LeaderAndIsr(cur.leader, cur.leader_epoch, tuple(isr), cur.controller_epoch,
                       cur.zk_version, cur.leader_recovery_state)
    return zk.conditional_update_partition_state(topic, partition, new)
