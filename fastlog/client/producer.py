# fastlog/client/producer.py: the asyncio producer.
#
# Owns the record accumulator (one queue of pending records per partition), the choice of
# partition (partitioner.py), batch building (one fastlog._codec call per batch, which
# writes a v2 record batch with CRC-32C and the chosen compression), and a sender task
# that groups ready batches by leader broker into Produce requests, pipelines up to
# max_in_flight requests per broker and handles their answers: success resolves the
# records' handles with base offset + index, a stale-metadata error refreshes metadata and
# re-sends the same batch bytes (same producer id/epoch/sequence, so an idempotent broker
# drops a duplicate), anything else fails the batch's records.
#
# Idempotence (enable_idempotence=True): one InitProducerId at start, then per partition a
# sequence counter starting at 0 that each built batch advances by its record count.
#
# Transactions (transactional_id=...; idempotent, acks=all): start() finds the id's
# transaction coordinator (FindCoordinator key type 1) and gets the producer id and epoch
# from it (InitProducerId, retried while an older transaction of the id is aborted);
# begin_transaction() opens a transaction locally; the sender adds each partition to it
# (AddPartitionsToTxn) before the first batch for that partition goes out, batches are
# marked transactional and Produce carries the id; send_offsets_to_transaction() adds the
# group (AddOffsetsToTxn) and commits the offsets through the group's coordinator
# (TxnOffsetCommit); commit_transaction() flushes and ends it (EndTxn), and
# abort_transaction() ends it the other way. A fenced producer (PRODUCER_FENCED,
# INVALID_PRODUCER_EPOCH: another producer took the id) is unusable from then on; a
# failed send only makes the transaction abortable.
#
# Use from the event loop that created the producer; sync.SyncProducer wraps it for
# threads.

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import itertools
import time

from fastlog import _codec
from fastlog.client import errors
from fastlog.client.cluster import DEFAULT_BOOTSTRAP, Cluster, TopicPartition
from fastlog.client.partitioner import StickyPartitioner, partition_for_key
from fastlog.client.versions import ApiKey

COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_FENCED = frozenset((errors.PRODUCER_FENCED, errors.INVALID_PRODUCER_EPOCH))
# Bytes a record adds beyond key and value inside a batch (length, attributes, deltas,
# header count varints): used only to decide when a batch is full.
_RECORD_OVERHEAD = 12
_BATCH_OVERHEAD = 61
_BLOB = (bytes, bytearray, memoryview)


@dataclasses.dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int
    timestamp: int


def compression_code(name) -> int:
    if isinstance(name, int):
        if name in COMPRESSION.values():
            return name
    elif name is None:
        return 0
    elif str(name).lower() in COMPRESSION:
        return COMPRESSION[str(name).lower()]
    raise errors.FastlogError(
        f"unknown compression '{name}': expected one of {', '.join(COMPRESSION)}")


class _Batch:
    """Records that go out together as one record batch to one partition."""

    __slots__ = ("tp", "records", "size", "future", "created", "data", "count", "base_sequence",
                 "order", "attempts", "first_timestamp")

    def __init__(self, tp: TopicPartition, order: int):
        self.tp = tp
        self.records: list = []
        self.size = _BATCH_OVERHEAD
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.created = time.monotonic()
        self.data: bytes | None = None
        self.count = 0
        self.base_sequence = -1
        self.order = order
        self.attempts = 0
        self.first_timestamp = -1

    def __lt__(self, other: _Batch) -> bool:
        return self.order < other.order


class RecordHandle:
    """What send() returns: await it for the record's RecordMetadata once acknowledged."""

    __slots__ = ("_batch", "_index", "timestamp")

    def __init__(self, batch: _Batch, index: int, timestamp: int):
        self._batch = batch
        self._index = index
        self.timestamp = timestamp

    def done(self) -> bool:
        return self._batch.future.done()

    @property
    def batch_future(self) -> asyncio.Future:
        """The future of this record's whole batch (its base offset): shared by every record
        of the batch, so callers can watch batches rather than records."""
        return self._batch.future

    def result(self) -> RecordMetadata:
        base = self._batch.future.result()
        tp = self._batch.tp
        offset = base + self._index if base >= 0 else -1
        return RecordMetadata(tp.topic, tp.partition, offset, self.timestamp)

    def __await__(self):
        yield from asyncio.shield(self._batch.future).__await__()
        return self.result()


class _PartitionState:
    __slots__ = ("open", "ready", "in_flight", "next_sequence")

    def __init__(self) -> None:
        self.open: _Batch | None = None
        self.ready: list[_Batch] = []  # built batches waiting to be sent, in order
        self.in_flight = 0
        self.next_sequence = 0


class Producer:
    """Asyncio Kafka producer. Start with `await start()` or `async with Producer(...)`."""

    def __init__(self, bootstrap_servers=DEFAULT_BOOTSTRAP, *, client_id: str = "fastlog-producer",
                 acks=1, compression=None, linger_ms: float = 5, batch_size: int = 16384,
                 max_request_size: int = 1048576, max_in_flight: int = 5,
                 enable_idempotence: bool = False, request_timeout_ms: int = 30000,
                 delivery_timeout_ms: int = 120000, max_buffered_bytes: int = 64 << 20,
                 allow_auto_create_topics: bool = True, cluster: Cluster | None = None,
                 security=None,
                 on_delivery_error=None, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60000):
        if acks in ("all", -1, "-1"):
            acks = -1
        try:
            acks = int(acks)
        except (TypeError, ValueError):
            acks = 99
        if acks not in (-1, 0, 1):
            raise errors.FastlogError("acks must be 0, 1 or all")
        if transactional_id is not None and acks != -1:
            raise errors.FastlogError("a transactional producer needs acks=all")
        enable_idempotence = enable_idempotence or transactional_id is not None
        if enable_idempotence and acks != -1:
            raise errors.FastlogError("an idempotent producer needs acks=all")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._in_txn = False
        self._txn_partitions: set[TopicPartition] = set()   # added to the open transaction
        self._txn_groups: set[str] = set()
        self._txn_error: Exception | None = None   # a send failed: only abort may follow
        self.acks = acks
        self.compression = compression_code(compression)
        self.linger = max(0.0, linger_ms / 1000.0)
        self.batch_size = max(1, batch_size)
        self.max_request_size = max_request_size
        self.max_in_flight = max(1, max_in_flight)
        self.idempotent = enable_idempotence
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.max_buffered_bytes = max_buffered_bytes
        self.allow_auto_create = allow_auto_create_topics
        # Called as on_delivery_error(topic_partition, exception) once per failed batch, for
        # callers that do not keep every record's handle (e.g. the console producer).
        self.on_delivery_error = on_delivery_error
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster(bootstrap_servers, client_id=client_id,
                                          request_timeout_ms=request_timeout_ms,
                                          security=security)
        self.producer_id = -1
        self.producer_epoch = -1
        self._sticky = StickyPartitioner()
        # topic -> (expiry, [TopicPartition], [_PartitionState]) indexed by partition: the
        # per-record path finds its queue without hashing anything but the topic name.
        self._topic_partitions: dict[str, tuple] = {}
        self._partitions: dict[TopicPartition, _PartitionState] = collections.defaultdict(
            _PartitionState)
        self._order = itertools.count()
        self._wake: asyncio.Event | None = None
        self._sender: asyncio.Task | None = None
        self._inflight_tasks: set[asyncio.Task] = set()
        # Batches the sender took off `ready` but has not yet handed to a request task (it
        # may be awaiting a leader lookup or a connection): flush() must wait for them too.
        self._dispatching: list[_Batch] = []
        self._buffered = 0
        self._space: asyncio.Event | None = None
        self._flushing = 0
        self._closed = False
        self._started = False
        self._fatal: Exception | None = None

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def start(self) -> None:
        if self._started:
            return
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        await self.cluster.refresh_metadata([])
        if self.transactional_id is not None:
            resp = await self._txn_request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": self.transactional_id,
                "transaction_timeout_ms": self.transaction_timeout_ms,
                "producer_id": -1, "producer_epoch": -1}, "InitProducerId")
            self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        elif self.idempotent:
            await self._init_producer_id()
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())
        self._started = True

    async def _init_producer_id(self) -> None:
        async def attempt():
            conn = await self.cluster.bootstrap_connection()
            resp = await conn.request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1})
            errors.raise_for(resp.error_code, "InitProducerId")
            return resp
        resp = await self.cluster.retry(attempt, what="InitProducerId")
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch

    # -- accumulating -----------------------------------------------------------------

    async def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                   partition: int | None = None, headers=None,
                   timestamp_ms: int | None = None) -> RecordHandle:
        """Queue one record; the returned handle resolves when the broker acknowledged it."""
        if self._closed or self._fatal is not None or not self._started:
            await self._check_usable()
        if self.transactional_id is not None and not self._in_txn:
            raise errors.FastlogError("a transactional producer sends inside a transaction: "
                                      "call begin_transaction() first")
        tps = self._topic_partitions.get(topic)
        if tps is None or time.monotonic() > tps[0]:
            tps = await self._load_topic(topic)
        states = tps[2]
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, len(states))
            else:
                partition = self._sticky.partition(topic, len(states))
        elif not 0 <= partition < len(states):
            raise errors.UnknownTopic(topic, partition)
        state = states[partition]
        if not isinstance(value, _BLOB) and value is not None or \
                not isinstance(key, _BLOB) and key is not None:
            raise TypeError("record key and value must be bytes-like or None")
        size = (len(key) if key else 0) + (len(value) if value else 0) + _RECORD_OVERHEAD
        if headers:
            for k, v in headers:
                if not isinstance(k, str) or not isinstance(v, _BLOB) and v is not None:
                    raise TypeError("record headers must be (str, bytes-like or None) pairs")
                size += len(k) + (len(v) if v else 0) + 4
        if self._buffered + size > self.max_buffered_bytes:
            await self._wait_for_space(size)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        batch = state.open
        if batch is not None and batch.records and batch.size + size > self.batch_size:
            self._close_batch(state)
            self._wake.set()
            batch = None
            closed = True
        else:
            closed = False
        if batch is None:
            batch = state.open = _Batch(tps[1][partition], next(self._order))
            if self.linger > 0:
                asyncio.get_running_loop().call_later(self.linger, self._wake.set)
        index = len(batch.records)
        batch.records.append((timestamp_ms, key, value, headers or ()))
        batch.size += size
        self._buffered += size
        handle = RecordHandle(batch, index, timestamp_ms)
        if batch.size >= self.batch_size or self.linger == 0:
            self._close_batch(state)
            self._wake.set()
            closed = True
        if closed:
            # Let the sender and the connections run once per batch, so a caller that
            # never yields still gets its batches sent as they fill (and answers read).
            await asyncio.sleep(0)
        return handle

    async def _check_usable(self) -> None:
        if self._closed:
            raise errors.FastlogError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        if not self._started:
            await self.start()

    async def _wait_for_space(self, size: int) -> None:
        """Block the caller while max_buffered_bytes are queued (backpressure)."""
        while self._buffered + size > self.max_buffered_bytes and self._buffered > 0:
            if self._fatal is not None:
                raise self._fatal
            self._space.clear()
            self._flushing += 1  # send what is open now rather than after linger
            self._wake.set()
            try:
                await self._space.wait()
            finally:
                self._flushing -= 1

    async def _load_topic(self, topic: str):
        """(expiry, [TopicPartition per partition]) for topic, from (fresh) metadata."""
        info = await self.cluster.topic(topic, allow_auto_create=self.allow_auto_create,
                                        refresh=topic in self._topic_partitions)
        n = max(info.partitions) + 1
        tps = [TopicPartition(topic, p) for p in range(n)]
        entry = (time.monotonic() + self.cluster.metadata_max_age, tps,
                 [self._partitions[tp] for tp in tps])
        self._topic_partitions[topic] = entry
        return entry

    async def send_batch(self, topic: str, partition: int, records) -> asyncio.Future:
        """Send prepared records [(timestamp_ms, key, value, headers)] as one record batch.

        The lean path for bulk writers (perf harness, Spark): one compiled call builds the
        batch. Returns a future of the batch's base offset (-1 with acks=0).
        """
        await self._check_usable()
        if self.transactional_id is not None and not self._in_txn:
            raise errors.FastlogError("a transactional producer sends inside a transaction: "
                                      "call begin_transaction() first")
        tps = self._topic_partitions.get(topic)
        if tps is None or time.monotonic() > tps[0]:
            tps = await self._load_topic(topic)
        if not 0 <= partition < len(tps[1]):
            raise errors.UnknownTopic(topic, partition)
        if self._buffered > self.max_buffered_bytes:
            await self._wait_for_space(0)
        state = self._partitions[tps[1][partition]]
        if state.open is not None:
            self._close_batch(state)
        batch = state.open = _Batch(tps[1][partition], next(self._order))
        batch.records = records if isinstance(records, list) else list(records)
        self._buffered += batch.size
        self._close_batch(state)
        self._wake.set()
        return batch.future

    async def send_and_wait(self, topic: str, value=None, key=None, **kw) -> RecordMetadata:
        handle = await self.send(topic, value, key, **kw)
        await self.flush_partition_soon()
        return await handle

    async def flush_partition_soon(self) -> None:
        self._wake.set()

    def _close_batch(self, state: _PartitionState) -> None:
        """Turn the open batch of a partition into record-batch bytes, ready to send."""
        batch = state.open
        state.open = None
        if batch is None or not batch.records:
            return
        batch.count = len(batch.records)
        if self.idempotent:
            batch.base_sequence = state.next_sequence
            state.next_sequence = (state.next_sequence + batch.count) & 0x7FFFFFFF
        try:
            batch.data = build_batch(batch.records, self.compression, self.producer_id,
                                     self.producer_epoch, batch.base_sequence,
                                     self.transactional_id is not None)
        except Exception as exc:  # noqa: BLE001 - e.g. a codec library missing: fail these records
            batch.data = None
            failure = errors.FastlogError(f"cannot build a record batch: {exc}")
        else:
            failure = None
            if len(batch.data) > self.max_request_size:
                failure = errors.FastlogError(
                    f"a record batch for {batch.tp} is {len(batch.data)} bytes, more than "
                    f"max_request_size ({self.max_request_size})")
        if failure is not None:
            if self.idempotent:  # this was the newest batch: give its sequence numbers back
                state.next_sequence = batch.base_sequence
            self._fail_batch(batch, failure)
            return
        batch.first_timestamp = batch.records[0][0]
        self._buffered -= batch.size
        batch.size = len(batch.data)
        self._buffered += batch.size
        batch.records = None  # the bytes are all we keep
        state.ready.append(batch)
        info = self.cluster.topics.get(batch.tp.topic)
        if info is not None:
            self._sticky.next_batch(batch.tp.topic, len(info.partitions))

    # -- sending ----------------------------------------------------------------------

    async def _send_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                await self._drain_ready()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to every waiting record
            self._fatal = exc if isinstance(exc, errors.FastlogError) else \
                errors.FastlogError(f"producer stopped: {exc}")
            self._fail_all(self._fatal)

    async def _drain_ready(self) -> None:
        now = time.monotonic()
        for state in list(self._partitions.values()):
            b = state.open
            if b is not None and (self._flushing or now - b.created >= self.linger):
                self._close_batch(state)
        by_node: dict[int, list[tuple[int, _Batch]]] = collections.defaultdict(list)
        for tp, state in list(self._partitions.items()):
            taken = 0
            while state.ready and state.in_flight < self.max_in_flight:
                if self.idempotent and state.in_flight and state.ready[0].attempts:
                    break  # a retried batch goes alone, after its predecessors settled
                try:
                    leader = await self.cluster.leader_for(tp)
                except errors.FastlogError as exc:
                    if not self._retry_later(state.ready[0], exc):
                        self._fail_batch(state.ready.pop(0), exc)
                        continue
                    break
                batch = state.ready.pop(0)
                state.in_flight += 1
                self._dispatching.append(batch)
                by_node[leader].append((taken, batch))
                taken += 1
        if self.transactional_id is not None and by_node and \
                not await self._add_to_transaction(by_node):
            return
        for node, rounds in by_node.items():
            # The k-th batch of every partition goes in the k-th request (stable sort).
            rounds.sort(key=lambda item: item[0])
            # Connect here, once, so every request task below writes without suspending,
            # in creation order (tasks that waited for a connection woke after newer
            # ones and sent a partition's batches out of order).
            try:
                conn = await self.cluster.connection(node)
            except Exception:  # noqa: BLE001 - each request retries and reports the failure
                conn = None
            for request_batches in self._split_requests([b for _, b in rounds]):
                task = asyncio.get_running_loop().create_task(
                    self._produce(node, request_batches, conn))
                self._inflight_tasks.add(task)
                task.add_done_callback(self._inflight_tasks.discard)
                for b in request_batches:
                    self._dispatching.remove(b)

    def _split_requests(self, batches: list[_Batch]):
        """Requests of at most max_request_size bytes, each with one batch per partition
        (Kafka answers per partition, so two batches of one partition need two requests;
        they go out in order on the same connection)."""
        chunk, size, seen = [], 0, set()
        for b in batches:
            if chunk and (size + b.size > self.max_request_size or b.tp in seen):
                yield chunk
                chunk, size, seen = [], 0, set()
            chunk.append(b)
            seen.add(b.tp)
            size += b.size
        if chunk:
            yield chunk

    async def _produce(self, node: int, batches: list[_Batch], conn=None) -> None:
        topics: dict[str, list] = collections.defaultdict(list)
        for b in batches:
            topics[b.tp.topic].append({"index": b.tp.partition, "records": b.data})
            b.attempts += 1
        request = {
            "transactional_id": self.transactional_id, "acks": self.acks,
            "timeout_ms": self.request_timeout_ms,
            "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()],
        }
        try:
            if conn is None or not conn.connected:
                conn = await self.cluster.connection(node)
            fut = conn.submit(ApiKey.PRODUCE, request, expect_response=self.acks != 0)
            await conn.drain()
            resp = await conn.wait(fut)
        except errors.FastlogError as exc:
            for b in batches:
                self._settle(b, exc)
            self._after_response()
            return
        if resp is None:  # acks=0: nothing comes back, offsets are unknown
            for b in batches:
                self._settle(b, None, -1)
            self._after_response()
            return
        results = {}
        for t in resp.responses:
            for p in t.partition_responses:
                results[(t.name, p.index)] = p
        for b in batches:
            p = results.get((b.tp.topic, b.tp.partition))
            if p is None:
                self._settle(b, errors.ProtocolMismatch(
                    f"the broker's Produce answer has no partition {b.tp}"))
            elif p.error_code == 0:
                self._settle(b, None, p.base_offset)
            elif p.error_code == errors.DUPLICATE_SEQUENCE_NUMBER:
                self._settle(b, None, p.base_offset if p.base_offset >= 0 else -1)
            else:
                msg = getattr(p, "error_message", None)
                self._settle(b, errors.KafkaError(p.error_code, f"produce to {b.tp}", msg))
        self._after_response()

    def _after_response(self) -> None:
        self._space.set()
        self._wake.set()

    def _settle(self, batch: _Batch, exc: Exception | None, base_offset: int = -1) -> None:
        state = self._partitions[batch.tp]
        state.in_flight -= 1
        if exc is None:
            self._buffered -= batch.size
            if not batch.future.done():
                batch.future.set_result(base_offset)
            return
        if self._retry_later(batch, exc):
            bisect.insort(state.ready, batch)
            if isinstance(exc, errors.KafkaError) and exc.code in errors.STALE_METADATA or \
                    not isinstance(exc, errors.KafkaError):
                self.cluster.topics.pop(batch.tp.topic, None)  # refreshed on next leader_for
            asyncio.get_running_loop().call_later(self.cluster.backoff(batch.attempts - 1),
                                                  self._wake.set)
            return
        self._fail_batch(batch, exc)

    def _retry_later(self, batch: _Batch, exc: Exception) -> bool:
        if time.monotonic() - batch.created > self.delivery_timeout:
            return False
        if isinstance(exc, errors.KafkaError):
            if exc.code == errors.OUT_OF_ORDER_SEQUENCE_NUMBER and self.idempotent:
                return batch.attempts < 10  # an earlier batch is being retried
            return exc.retriable
        if isinstance(exc, errors.UnknownTopic):
            return False
        return isinstance(exc, errors.BrokerUnavailable | errors.ClientTimeout)

    def _fail_batch(self, batch: _Batch, exc: Exception) -> None:
        if self._in_txn and self._txn_error is None:
            self._txn_error = exc
        self._buffered -= batch.size
        if not batch.future.done():
            batch.future.set_exception(exc)
            batch.future.exception()  # retrieved: handles re-raise it on await
            if self.on_delivery_error is not None:
                self.on_delivery_error(batch.tp, exc)

    def _fail_all(self, exc: Exception) -> None:
        for state in self._partitions.values():
            if state.open is not None:
                self._fail_batch(state.open, exc)
                state.open = None
            for b in state.ready:
                self._fail_batch(b, exc)
            state.ready.clear()
        for b in self._dispatching:
            self._fail_batch(b, exc)
        self._dispatching.clear()

    # -- transactions -----------------------------------------------------------------

    async def begin_transaction(self) -> None:
        await self._check_usable()
        if self.transactional_id is None:
            raise errors.FastlogError("begin_transaction() needs a transactional_id")
        if self._in_txn:
            raise errors.FastlogError("a transaction is already open")
        self._in_txn = True
        self._txn_error = None
        self._txn_partitions.clear()
        self._txn_groups.clear()

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int],
                                          group_id: str) -> None:
        """Commit a consumer group's offsets as part of the open transaction: visible to
        the group only if the transaction commits."""
        self._check_txn_open()
        if group_id not in self._txn_groups:
            await self._txn_request(ApiKey.ADD_OFFSETS_TO_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "group_id": group_id},
                "AddOffsetsToTxn")
            self._txn_groups.add(group_id)
        topics: dict[str, list] = collections.defaultdict(list)
        for tp, offset in offsets.items():
            topics[tp.topic].append({"partition_index": tp.partition,
                                     "committed_offset": offset,
                                     "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"transactional_id": self.transactional_id, "group_id": group_id,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        async def attempt():
            conn = await self.cluster.connection(
                await self.cluster.find_coordinator(group_id, 0))
            resp = await conn.request(ApiKey.TXN_OFFSET_COMMIT, body)
            for t in resp.topics:
                for p in t.partitions:
                    self._raise_txn(p.error_code, f"TxnOffsetCommit of {t.name}-"
                                                  f"{p.partition_index}")
        await self.cluster.retry(attempt, what="TxnOffsetCommit")

    async def commit_transaction(self) -> None:
        """Send everything of the transaction, then commit it. Raises (and leaves the
        transaction open for abort_transaction()) when a record of it failed."""
        self._check_txn_open()
        try:
            await self.flush()
        except errors.FastlogError as exc:
            self._txn_error = self._txn_error or exc
        if self._txn_error is not None:
            raise errors.FastlogError(
                f"the transaction cannot commit, abort it: {self._txn_error}")
        await self._end_transaction(True)

    async def abort_transaction(self) -> None:
        """End the open transaction without its records and offsets (records already
        written stay in the log, skipped by read_committed consumers)."""
        self._check_txn_open()
        try:
            await self.flush()
        except errors.FastlogError:
            pass   # aborted anyway
        await self._end_transaction(False)

    async def _end_transaction(self, commit: bool) -> None:
        if self._txn_partitions or self._txn_groups:   # else the coordinator has nothing
            await self._txn_request(ApiKey.END_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "committed": commit}, "EndTxn")
        self._in_txn = False
        self._txn_error = None
        self._txn_partitions.clear()
        self._txn_groups.clear()

    def _check_txn_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self.transactional_id is None or not self._in_txn:
            raise errors.FastlogError("no transaction is open: call begin_transaction() first")

    def _raise_txn(self, code: int, context: str) -> None:
        """Raise for an error code of a transaction API; fencing makes the producer
        unusable (another producer of the same transactional id took over)."""
        if code in _FENCED:
            self._fatal = errors.KafkaError(code, f"{context}: the producer was fenced")
            raise self._fatal
        errors.raise_for(code, context)

    async def _txn_request(self, api: int, body: dict, what: str):
        """One request to the transaction coordinator, retried (with a fresh coordinator
        after NOT_COORDINATOR) while the answer is retriable (CONCURRENT_TRANSACTIONS,
        COORDINATOR_LOAD_IN_PROGRESS, ...)."""
        async def attempt():
            node = await self.cluster.find_coordinator(self.transactional_id, 1)
            resp = await (await self.cluster.connection(node)).request(api, body)
            self._raise_txn(resp.error_code, what)
            return resp
        return await self.cluster.retry(attempt, what=what)

    async def _add_to_transaction(self, by_node) -> bool:
        """AddPartitionsToTxn for the partitions of these batches not yet in the
        transaction; False (the batches failed) when that was refused."""
        new = {b.tp for rounds in by_node.values() for _, b in rounds} - self._txn_partitions
        if not new:
            return True
        topics: dict[str, list[int]] = collections.defaultdict(list)
        for tp in new:
            topics[tp.topic].append(tp.partition)
        body = {"v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps}
                                        for t, ps in topics.items()]}

        async def attempt():
            node = await self.cluster.find_coordinator(self.transactional_id, 1)
            resp = await (await self.cluster.connection(node)).request(
                ApiKey.ADD_PARTITIONS_TO_TXN, body)
            for t in resp.results_by_topic_v3_and_below:
                for r in t.results_by_partition:
                    if r.partition_error_code != errors.OPERATION_NOT_ATTEMPTED:
                        self._raise_txn(r.partition_error_code,
                                        f"AddPartitionsToTxn of {t.name}-{r.partition_index}")
        try:
            await self.cluster.retry(attempt, what="AddPartitionsToTxn")
        except errors.FastlogError as exc:
            for rounds in by_node.values():
                for _, b in rounds:
                    self._dispatching.remove(b)
                    self._partitions[b.tp].in_flight -= 1
                    self._fail_batch(b, exc)
            return False
        self._txn_partitions.update(new)
        return True

    # -- flushing and closing ---------------------------------------------------------

    def _pending_futures(self) -> list[asyncio.Future]:
        futs = []
        for state in self._partitions.values():
            if state.open is not None:
                futs.append(state.open.future)
            futs.extend(b.future for b in state.ready)
        futs.extend(b.future for b in self._dispatching)
        for task in self._inflight_tasks:
            futs.append(task)
        return futs

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far and wait until each record is acknowledged or failed."""
        if not self._started:
            return
        if self._fatal is not None:
            raise self._fatal
        self._flushing += 1
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                futs = [f for f in self._pending_futures() if not f.done()]
                if not futs:
                    return
                self._wake.set()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise errors.ClientTimeout("flush did not complete in time")
                await asyncio.wait(futs, timeout=left)
        finally:
            self._flushing -= 1

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            if self._started and self._fatal is None:
                await self.flush(timeout)
        finally:
            self._closed = True
            if self._sender is not None:
                self._sender.cancel()
                try:
                    await self._sender
                except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing
                    pass
            for task in list(self._inflight_tasks):
                task.cancel()
            self._fail_all(errors.FastlogError("the producer is closed"))
            if self._own_cluster:
                await self.cluster.close()


def build_batch(records, compression: int, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, is_transactional: bool = False) -> bytes:
    """One v2 record batch (base offset 0) from [(timestamp_ms, key, value, headers)].

    A single compiled call encodes every record, compresses and computes the CRC.
    """
    return _codec.build_batch(records, compression=compression, producer_id=producer_id,
                              producer_epoch=producer_epoch, base_sequence=base_sequence,
                              is_transactional=is_transactional)
