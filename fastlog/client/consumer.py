# fastlog/client/consumer.py: the asyncio consumer (manual assignment).
#
# Owns, per assigned partition, two positions: the fetch position (next offset to ask the
# broker for) and the consumed position (next offset handed to the caller). A fetcher
# task keeps one Fetch in flight per leader broker and starts the next one as soon as an
# answer arrives, so the broker works while the caller processes records (fetch
# pipelining); decoded results wait in a bounded buffer. Each partition's record bytes are
# decoded by one fastlog._codec call per fetch answer (batch headers, CRC check,
# decompression and records all in compiled code) -- no per-record parsing in Python.
# read_committed: the broker stops the answer at the last stable offset and lists the
# aborted transactions in it, whose batches isolation.drop_aborted removes.
#
# Offsets: seek(), seek_to_beginning/end(), offsets_for_times() (ListOffsets by time),
# auto_offset_reset when a position is unknown or out of range, else the group's
# committed offset when a group_id is set. Group membership is an extension point:
# subscribe() installs group.GroupMembership, and any object with the same three
# coroutines -- ensure_active() (join/rejoin, then assign() the consumer), commit(offsets)
# and close() -- can be passed as `group=` instead. Without a membership, commit() and
# committed() use OffsetCommit/OffsetFetch with generation -1 (a "simple" group).
#
# Use from the event loop that created it; sync.SyncConsumer wraps it for threads.

from __future__ import annotations

import asyncio
import bisect
import collections
import operator
import time

from fastlog import _codec
from fastlog.client import errors
from fastlog.client.admin import EARLIEST, LATEST, Admin, OffsetAndTimestamp
from fastlog.client.cluster import DEFAULT_BOOTSTRAP, Cluster, TopicPartition
from fastlog.client.isolation import drop_aborted
from fastlog.client.versions import ApiKey

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_OFFSET = operator.attrgetter("offset")


class Consumer:
    """Asyncio consumer over explicitly assigned partitions."""

    def __init__(self, bootstrap_servers=DEFAULT_BOOTSTRAP, *, client_id: str = "fastlog-consumer",
                 group_id: str | None = None, group=None,
                 auto_offset_reset: str = "earliest", fetch_max_wait_ms: int = 500,
                 fetch_min_bytes: int = 1, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576,
                 isolation_level: str | int = "read_uncommitted", check_crcs: bool = True,
                 max_buffered_fetches: int = 4, request_timeout_ms: int = 30000,
                 cluster: Cluster | None = None, security=None):
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise errors.FastlogError("auto_offset_reset must be earliest, latest or none")
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster(bootstrap_servers, client_id=client_id,
                                          request_timeout_ms=request_timeout_ms,
                                          security=security)
        self.admin = Admin(cluster=self.cluster, request_timeout_ms=request_timeout_ms)
        self.group_id = group_id
        self.group = group
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        if isinstance(isolation_level, str):
            isolation_level = READ_COMMITTED if isolation_level == "read_committed" \
                else READ_UNCOMMITTED
        self.isolation_level = isolation_level
        self.check_crcs = check_crcs
        self.max_buffered_fetches = max(1, max_buffered_fetches)
        self._assigned: list[TopicPartition] = []
        self._fetch_pos: dict[TopicPartition, int] = {}
        self._pos: dict[TopicPartition, int] = {}
        self._epoch: dict[TopicPartition, int] = collections.defaultdict(int)
        self._paused: set[TopicPartition] = set()
        self._high_watermark: dict[TopicPartition, int] = {}
        self._buffer: collections.deque = collections.deque()
        # Errors for the caller, raised by the next getmany(); bounded so a partition that
        # keeps failing while nobody polls cannot grow it without limit.
        self._errors: collections.deque = collections.deque(maxlen=16)
        self._data = asyncio.Event()
        self._room = asyncio.Event()
        self._kick = asyncio.Event()
        self._fetcher: asyncio.Task | None = None
        self._started = False
        self._closed = False

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def start(self) -> None:
        if self._started:
            return
        await self.cluster.refresh_metadata([])
        self._started = True

    # -- assignment and positions -----------------------------------------------------

    def assign(self, partitions) -> None:
        """Consume exactly these partitions (TopicPartition or (topic, partition) pairs)."""
        tps = [tp if isinstance(tp, TopicPartition) else TopicPartition(*tp) for tp in partitions]
        gone = set(self._assigned) - set(tps)
        for tp in gone:
            self._fetch_pos.pop(tp, None)
            self._pos.pop(tp, None)
            self._epoch[tp] += 1
        self._assigned = list(dict.fromkeys(tps))
        self._kick.set()

    async def assign_topic(self, topic: str) -> list[TopicPartition]:
        """Assign every partition of topic (UnknownTopic if it does not exist)."""
        await self.start()
        tps = [TopicPartition(topic, p) for p in await self.cluster.partitions_for(topic)]
        self.assign(self._assigned + [tp for tp in tps if tp not in self._assigned])
        return tps

    async def subscribe(self, topics, group_id: str | None = None, **group_options) -> None:
        """Join consumer group group_id (or the constructor's) for these topics.

        Partitions are assigned by the group (range or roundrobin) and follow rebalances;
        positions start at the group's committed offsets, else auto_offset_reset; offsets
        are committed every auto_commit_interval_ms (None: only by commit()).
        """
        from fastlog.client.group import GroupMembership

        group_id = group_id or self.group_id
        if not group_id:
            raise errors.FastlogError("subscribe needs a group_id")
        if isinstance(topics, str):
            topics = [topics]
        await self.start()
        for t in topics:
            await self.cluster.topic(t)  # UnknownTopic now rather than an empty assignment
        if self.group is not None:
            await self.group.close()
        self.group_id = group_id
        self.group = GroupMembership(self, group_id, topics, **group_options)
        await self.group.ensure_active()

    def consumed_offsets(self) -> dict[TopicPartition, int]:
        """The next offset to hand out, per assigned partition with a known position."""
        return {tp: self._pos[tp] for tp in self._assigned if tp in self._pos}

    def wake(self) -> None:
        """Make a waiting getmany() return early (e.g. a rebalance is due)."""
        self._data.set()

    def assignment(self) -> list[TopicPartition]:
        return list(self._assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Next record handed out for tp is at offset (or the first one after it)."""
        if tp not in self._assigned:
            raise errors.FastlogError(f"partition {tp} is not assigned")
        self._epoch[tp] += 1
        self._fetch_pos[tp] = self._pos[tp] = offset
        self._kick.set()

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._seek_to(EARLIEST, tps or self._assigned)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._seek_to(LATEST, tps or self._assigned)

    async def _seek_to(self, spec: int, tps) -> None:
        await self.start()
        offsets = await self.admin.list_offsets({tp: spec for tp in tps},
                                                isolation_level=self.isolation_level)
        for tp, ot in offsets.items():
            self.seek(tp, ot.offset)

    async def position(self, tp: TopicPartition) -> int:
        """Offset of the next record this consumer will hand out for tp."""
        if tp not in self._pos:
            await self._reset_positions([tp])
        return self._pos[tp]

    def highwater(self, tp: TopicPartition) -> int | None:
        """High watermark seen in the last fetch answer for tp (None before any)."""
        return self._high_watermark.get(tp)

    def pause(self, *tps: TopicPartition) -> None:
        self._paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._paused.difference_update(tps)
        self._kick.set()

    async def beginning_offsets(self, tps) -> dict[TopicPartition, int]:
        await self.start()
        return {tp: o.offset for tp, o in (await self.admin.list_offsets(
            {tp: EARLIEST for tp in tps})).items()}

    async def end_offsets(self, tps) -> dict[TopicPartition, int]:
        await self.start()
        return {tp: o.offset for tp, o in (await self.admin.list_offsets(
            {tp: LATEST for tp in tps}, isolation_level=self.isolation_level)).items()}

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """First offset whose timestamp is >= the given ms timestamp, per partition."""
        await self.start()
        found = await self.admin.list_offsets(timestamps, isolation_level=self.isolation_level)
        return {tp: (o if o.offset >= 0 else None) for tp, o in found.items()}

    async def _reset_positions(self, tps) -> None:
        if self.group_id is not None:
            committed = await self.admin.fetch_offsets(self.group_id, list(tps))
            for tp, (offset, _meta) in committed.items():
                self._fetch_pos[tp] = self._pos[tp] = offset
            tps = [tp for tp in tps if tp not in committed]
        if not tps:
            return
        if self.auto_offset_reset == "none":
            raise errors.FastlogError(
                f"no position for {', '.join(map(str, tps))} and auto_offset_reset is none")
        spec = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        offsets = await self.admin.list_offsets({tp: spec for tp in tps},
                                                isolation_level=self.isolation_level)
        for tp, ot in offsets.items():
            if tp in self._assigned and tp not in self._pos:
                self._fetch_pos[tp] = self._pos[tp] = ot.offset

    # -- committing (simple groups; a group coordinator plugs in through `group`) ----

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit offsets (default: the consumed positions of all assigned partitions)."""
        if offsets is None:
            offsets = self.consumed_offsets()
        if self.group is not None:
            await self.group.commit(offsets)
            return
        if self.group_id is None:
            raise errors.FastlogError("commit needs a group_id")
        await self.admin.commit_offsets(self.group_id, offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        if self.group_id is None:
            raise errors.FastlogError("committed needs a group_id")
        found = await self.admin.fetch_offsets(self.group_id, [tp])
        return found[tp][0] if tp in found else None

    # -- fetching ---------------------------------------------------------------------

    async def getmany(self, timeout_ms: float = 0, max_records: int | None = None
                      ) -> dict[TopicPartition, list]:
        """Records that arrived, per partition, waiting up to timeout_ms for some.

        Each record is the codec's record object (offset, timestamp, key, value, headers).
        """
        await self._ensure_fetching()
        deadline = time.monotonic() + timeout_ms / 1000.0
        out: dict[TopicPartition, list] = {}
        count = 0
        while True:
            if self.group is not None:
                await self.group.ensure_active()
            self._raise_pending_error()
            while self._buffer and (max_records is None or count < max_records):
                # start: how many of records earlier calls already handed out (a fetch
                # answer is drained by index, never re-sliced, so getone() stays O(1)).
                tp, epoch, records, start, next_pos = self._buffer[0]
                if epoch != self._epoch[tp] or tp not in self._pos:
                    self._buffer.popleft()
                    continue
                if max_records is not None and count + len(records) - start > max_records:
                    end = start + max_records - count
                    self._buffer[0] = (tp, epoch, records, end, next_pos)
                    out.setdefault(tp, []).extend(records[start:end])
                    self._pos[tp] = records[end - 1].offset + 1
                    count = max_records
                    break
                self._buffer.popleft()
                if len(records) > start:
                    out.setdefault(tp, []).extend(records[start:] if start else records)
                    count += len(records) - start
                self._pos[tp] = next_pos
            if not self._buffer or len(self._buffer) < self.max_buffered_fetches:
                self._room.set()
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            self._data.clear()
            try:
                await asyncio.wait_for(self._data.wait(), left)
            except TimeoutError:
                pass

    async def getone(self, timeout_ms: float | None = None):
        """The next record (with .topic/.partition via the returned pair) or None on timeout."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
        while True:
            left = 1000.0 if deadline is None else max(0.0, (deadline - time.monotonic()) * 1000)
            batch = await self.getmany(left, max_records=1)
            for tp, records in batch.items():
                return tp, records[0]
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def __aiter__(self):
        return self._iterate()

    async def _iterate(self):
        while not self._closed:
            for tp, records in (await self.getmany(1000)).items():
                for r in records:
                    yield tp, r

    def _raise_pending_error(self) -> None:
        if self._errors:
            raise self._errors.popleft()

    async def _ensure_fetching(self) -> None:
        if self._closed:
            raise errors.FastlogError("the consumer is closed")
        await self.start()
        if self._fetcher is None or self._fetcher.done():
            self._fetcher = asyncio.get_running_loop().create_task(self._fetch_loop())

    async def _fetch_loop(self) -> None:
        in_flight: dict[int, asyncio.Task] = {}
        attempt = 0
        try:
            while not self._closed:
                missing = [tp for tp in self._assigned if tp not in self._fetch_pos]
                if missing:
                    try:
                        await self._reset_positions(missing)
                    except errors.FastlogError as exc:
                        self._retry_or_report(exc)
                        await asyncio.sleep(self.cluster.backoff(attempt))
                        attempt += 1
                        continue
                if len(self._buffer) >= self.max_buffered_fetches:
                    self._room.clear()
                    await self._room.wait()
                    continue
                try:
                    plan = await self._plan(in_flight)
                except errors.FastlogError as exc:
                    self._retry_or_report(exc)
                    await asyncio.sleep(self.cluster.backoff(attempt))
                    attempt += 1
                    continue
                for node, tps in plan.items():
                    in_flight[node] = asyncio.get_running_loop().create_task(
                        self._fetch_from(node, tps))
                if not in_flight:
                    self._kick.clear()
                    await self._kick.wait()
                    continue
                kick = asyncio.ensure_future(self._kick.wait())
                done, _ = await asyncio.wait([*in_flight.values(), kick],
                                             return_when=asyncio.FIRST_COMPLETED)
                kick.cancel()
                self._kick.clear()
                for node, task in list(in_flight.items()):
                    if task.done():
                        del in_flight[node]
                        exc = task.exception()
                        if exc is not None:
                            if isinstance(exc, errors.FastlogError):
                                await asyncio.sleep(self.cluster.backoff(attempt))
                                attempt += 1
                                self._retry_or_report(exc)
                            else:
                                self._report(errors.FastlogError(
                                    f"fetch failed: {type(exc).__name__}: {exc}"))
                                return
                        else:
                            attempt = 0
        finally:
            for task in in_flight.values():
                task.cancel()

    async def _plan(self, in_flight) -> dict[int, list[TopicPartition]]:
        """Partitions to fetch now, grouped by leader, skipping brokers already asked."""
        plan: dict[int, list[TopicPartition]] = collections.defaultdict(list)
        for tp in self._assigned:
            if tp in self._paused or tp not in self._fetch_pos:
                continue
            leader = await self.cluster.leader_for(tp)
            if leader not in in_flight:
                plan[leader].append(tp)
        return plan

    async def _fetch_from(self, node: int, tps: list[TopicPartition]) -> None:
        conn = await self.cluster.connection(node)
        # A seek or reassignment while connecting may have dropped some positions.
        asked = {tp: (self._fetch_pos[tp], self._epoch[tp]) for tp in tps
                 if tp in self._fetch_pos}
        if not asked:
            return
        topics = collections.defaultdict(list)
        for tp, (offset, _epoch) in asked.items():
            topics[tp.topic].append({
                "partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": self.max_partition_fetch_bytes})
        request = {
            "replica_id": -1, "max_wait_ms": self.fetch_max_wait_ms,
            "min_bytes": self.fetch_min_bytes, "max_bytes": self.fetch_max_bytes,
            "isolation_level": self.isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": "",
        }
        timeout = self.cluster.request_timeout_ms / 1000.0 + self.fetch_max_wait_ms / 1000.0
        resp = await conn.request(ApiKey.FETCH, request, timeout=timeout)
        errors.raise_for(getattr(resp, "error_code", 0), f"fetch from broker {node}")
        got_data = False
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                if tp not in asked:
                    continue
                offset, epoch = asked[tp]
                if epoch != self._epoch[tp] or self._fetch_pos.get(tp) != offset:
                    continue  # seeked or unassigned meanwhile: this answer is stale
                if p.error_code:
                    self._partition_error(tp, p.error_code, offset)
                    continue
                self._high_watermark[tp] = p.high_watermark
                try:
                    records, next_pos = decode_records(
                        p.records, offset, self.check_crcs,
                        getattr(p, "aborted_transactions", None)
                        if self.isolation_level == READ_COMMITTED else None)
                except _codec.CodecError as exc:
                    self._report(errors.ProtocolMismatch(
                        f"bad record data for {tp} at offset {offset}: {exc}"))
                    continue
                if next_pos > offset:
                    self._fetch_pos[tp] = next_pos
                    self._buffer.append((tp, epoch, records, 0, next_pos))
                    got_data = True
        if got_data:
            self._data.set()

    def _partition_error(self, tp: TopicPartition, code: int, offset: int) -> None:
        if code == errors.OFFSET_OUT_OF_RANGE and self.auto_offset_reset != "none":
            self._fetch_pos.pop(tp, None)
            self._pos.pop(tp, None)
            self._epoch[tp] += 1
            self._kick.set()
            return
        exc = errors.KafkaError(code, f"fetch {tp} at offset {offset}")
        if exc.code in errors.STALE_METADATA:
            self.cluster.topics.pop(tp.topic, None)
            raise exc  # retried by the fetch loop after a metadata refresh
        self._report(exc)

    def _retry_or_report(self, exc: errors.FastlogError) -> None:
        if isinstance(exc, errors.KafkaError):
            retriable = exc.retriable
        else:
            retriable = isinstance(exc, errors.BrokerUnavailable | errors.ClientTimeout)
        if retriable:
            # The leader may have moved (or the broker restarted elsewhere): look again.
            for tp in self._assigned:
                self.cluster.topics.pop(tp.topic, None)
        if not retriable or isinstance(exc, errors.UnknownTopic):
            self._report(exc)

    def _report(self, exc: Exception) -> None:
        self._errors.append(exc)
        self._data.set()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.group is not None:
            try:
                await self.group.close()
            except errors.FastlogError:
                pass
        if self._fetcher is not None:
            self._fetcher.cancel()
            try:
                await self._fetcher
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                pass
        if self._own_cluster:
            await self.cluster.close()


def decode_records(buf, fetch_offset: int, check_crcs: bool = True,
                   aborted_transactions=None):
    """(records at or after fetch_offset, next fetch position) from a fetch answer's bytes.

    One compiled call decodes every complete batch in buf; a trailing partial batch (the
    broker cut the answer at max bytes) is left for the next fetch. Control batches
    (transaction markers) count for the position but yield no records; so do the batches
    of aborted_transactions (a read_committed answer's list; isolation.drop_aborted).
    """
    if not buf:
        return [], fetch_offset
    # Two compiled passes: headers only (for the position after the last complete batch,
    # which also steps over control batches), then every record.
    scan = _codec.scan_batches(buf, verify_crc=False)
    if not scan.batches:
        if scan.error is not None and not isinstance(scan.error, _codec.TruncatedError):
            raise errors.ProtocolMismatch(f"bad record batch in fetch answer: {scan.error}")
        return [], fetch_offset
    next_offset = scan.batches[-1].next_offset
    buf = drop_aborted(buf, scan.batches, aborted_transactions)
    records = _codec.read_records(buf, verify_crc=check_crcs)
    if records and records[0].offset < fetch_offset:
        # A batch may start below the offset asked for; skip what was already consumed.
        records = records[bisect.bisect_left(records, fetch_offset, key=_OFFSET):]
    return records, max(next_offset, fetch_offset)
