# fastlog/server/replica_fetcher.py — followers copy their leaders' logs (Kafka's
# ReplicaFetcherManager / ReplicaFetcherThread / AbstractFetcherThread).
#
# Owns: the fetcher tasks of this broker. Each follower partition is given to one fetcher,
# chosen by (leader id, a stable hash of the partition modulo num.replica.fetchers), so a
# leader is asked for all of its partitions in a few batched requests. A fetcher keeps one
# connection (fastlog.client BrokerConnection, secured as the inter-broker listener is:
# fastlog/server/inter_broker.py) to its leader and loops:
#   1. partitions that just got a new leader or epoch truncate first: OffsetForLeaderEpoch
#      (v3, as replica) with our latest epoch; the answer (epoch, end offset) gives the
#      point where both logs agree (KIP-101, and KIP-279's repeated asking when the leader
#      answers an older epoch than we asked for) — never the high watermark alone;
#   2. Fetch (v11, replica_id = our broker id, current_leader_epoch fencing) from each
#      partition's log end; the answer's batches are appended byte for byte with their
#      offsets and epochs (ReplicaManager.append_as_follower), and the leader's high
#      watermark is taken over. The fetches use a fetch session (KIP-227, Kafka's
#      FetchSessionHandler): after a full fetch that created one, each request carries
#      only the partitions whose offset, epoch or log start changed and the ones no longer
#      fetched, and the answer only partitions with news.
# Errors back one partition off (replica.fetch.backoff.ms) or, for the connection, the
# whole fetcher. Runs entirely on the broker's asyncio loop (tasks); no threads.
"""Replica fetchers: truncation by leader epoch, then fetching from the leader."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import zlib

from fastlog import _codec
from fastlog.client import errors as client_errors
from fastlog.client.connection import BrokerConnection
from fastlog.protocol import ApiKey, Errors
from fastlog.server.fetch_session import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from fastlog.server.log import KafkaStorageError

log = logging.getLogger("fastlog.server.replica_fetcher")

OFFSET_FOR_LEADER_EPOCH_VERSION = 3
FETCH_VERSION = 11
# KIP-279 asks again with an older epoch while the logs disagree; epochs are few, but bound it.
MAX_EPOCH_ROUNDS = 64
# Fetch answer size cap across partitions (Kafka's replica.fetch.response.max.bytes).
RESPONSE_MAX_BYTES = 10 * 1024 * 1024


@dataclasses.dataclass
class FetchState:
    partition: object              # the Partition being followed
    leader_epoch: int
    truncating: bool = True        # must agree with the leader before fetching
    query_epoch: int | None = None  # KIP-279: the next epoch to ask about (None: our latest)
    epoch_rounds: int = 0
    backoff_until: float = 0.0


class FetchSessionHandler:
    """The follower's side of one fetch session with its leader (Kafka's
    FetchSessionHandler): what the leader's session holds, and the next request's id and
    epoch. `build` then `handle` (or `reset`) once per request."""

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict[tuple[str, int], tuple] = {}  # what the session holds, per partition
        self._wanted: dict[tuple[str, int], dict] = {}

    def build(self, wanted: dict[tuple[str, int], dict]) -> tuple[dict, list]:
        """(partitions to send by key, forgotten (topic, partitions) pairs) for a fetch of
        `wanted` (key -> the partition's request fields)."""
        self._wanted = wanted
        if self.epoch == INITIAL_EPOCH:
            return wanted, []
        send = {k: v for k, v in wanted.items() if self.sent.get(k) != tuple(v.values())}
        gone: dict[str, list[int]] = {}
        for topic, partition in self.sent.keys() - wanted.keys():
            gone.setdefault(topic, []).append(partition)
        return send, list(gone.items())

    def handle(self, error_code: int, session_id: int) -> bool:
        """Take the answer's top-level fields; False for a session error (the next fetch
        is a full one)."""
        if error_code in (Errors.FETCH_SESSION_ID_NOT_FOUND, Errors.INVALID_FETCH_SESSION_EPOCH):
            self.reset()
            return False
        if self.epoch != INITIAL_EPOCH and session_id != self.session_id:
            self.reset()  # the leader closed the session: this answer was still whole
            return True
        if session_id == INVALID_SESSION_ID:
            self.session_id, self.epoch, self.sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
            return True
        self.session_id = session_id
        self.epoch = next_epoch(self.epoch)
        self.sent = {k: tuple(v.values()) for k, v in self._wanted.items()}
        return True

    def reset(self) -> None:
        """Start over with a full fetch, which closes the old session at the leader."""
        self.epoch = INITIAL_EPOCH
        self.sent = {}


class ReplicaFetcherManager:
    """All fetchers of one broker (see the module comment)."""

    def __init__(self, replica_manager):
        self.rm = replica_manager
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._owner: dict[tuple[str, int], tuple[int, int]] = {}

    def _num_fetchers(self) -> int:
        return max(1, int(self.rm._cfg("num.replica.fetchers", 1)))

    def has(self, key) -> bool:
        return key in self._owner

    def add_partition(self, p, leader_id: int, leader_epoch: int) -> None:
        """Follow `p` from `leader_id` at `leader_epoch`, truncating first."""
        self.remove_partition(p.key)
        index = (zlib.crc32(p.topic.encode()) + p.partition) % self._num_fetchers()
        fid = (leader_id, index)
        f = self.fetchers.get(fid)
        if f is None:
            f = self.fetchers[fid] = ReplicaFetcher(self, leader_id, index)
            f.start()
        f.add(p, leader_epoch)
        self._owner[p.key] = fid

    def remove_partition(self, key) -> None:
        fid = self._owner.pop(key, None)
        if fid is None:
            return
        f = self.fetchers.get(fid)
        if f is None:
            return
        f.remove(key)
        if not f.states:
            del self.fetchers[fid]
            f.stop()

    def shutdown(self) -> None:
        for f in self.fetchers.values():
            f.stop()
        self.fetchers.clear()
        self._owner.clear()


class ReplicaFetcher:
    """One fetch loop towards one leader for a set of partitions."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, index: int):
        self.manager = manager
        self.rm = manager.rm
        self.leader_id = leader_id
        self.index = index
        self.states: dict[tuple[str, int], FetchState] = {}
        self.conn: BrokerConnection | None = None
        self._task: asyncio.Task | None = None
        self._wakeup = asyncio.Event()
        self._stopped = False
        self._last_error = ""
        self._rotation = 0
        self.session = FetchSessionHandler()

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.leader_id}, index={self.index})"

    # ------------------------------------------------------------------ membership
    def add(self, p, leader_epoch: int) -> None:
        self.states[p.key] = FetchState(p, leader_epoch)
        self._wakeup.set()

    def remove(self, key) -> None:
        self.states.pop(key, None)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.leader_id}-{self.index}")

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
        conn, self.conn = self.conn, None
        if conn is not None:
            conn._fail(client_errors.BrokerUnavailable("fetcher stopped"))

    # ------------------------------------------------------------------ loop
    def _backoff_s(self) -> float:
        return max(int(self.rm._cfg("replica.fetch.backoff.ms", 1000)), 10) / 1000.0

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped:
            if not self.states:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                conn = await self._connection()
                if conn is None:
                    await asyncio.sleep(self._backoff_s())
                    continue
                now = loop.time()
                if any(s.truncating and s.backoff_until <= now for s in self.states.values()):
                    await self._truncate(conn)
                ready = [s for s in self.states.values()
                         if not s.truncating and s.backoff_until <= loop.time()]
                if ready:
                    await self._fetch(conn, ready)
                else:
                    # Everything is backing off or truncating: wait for a change or a while.
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), self._backoff_s())
                    except TimeoutError:
                        pass
            except asyncio.CancelledError:
                raise
            except (client_errors.FastlogError, OSError) as e:
                self._note(f"leader {self.leader_id} unreachable: {e}")
                await self._close()
                await asyncio.sleep(self._backoff_s())
            except Exception:
                log.exception("%r failed; retrying", self)
                await self._close()
                await asyncio.sleep(self._backoff_s())
        await self._close()

    def _note(self, text: str) -> None:
        # one log line per distinct problem, not one per retry
        if text != self._last_error:
            self._last_error = text
            log.warning("%r: %s", self, text)

    async def _connection(self) -> BrokerConnection | None:
        if self.conn is not None and self.conn.connected:
            return self.conn
        await self._close()
        ep = self.rm.broker_endpoint(self.leader_id)
        if ep is None:
            self._note(f"leader {self.leader_id} is not a live broker")
            return None
        conn = BrokerConnection(
            ep[0], ep[1], client_id=f"fastlog-replica-fetcher-{self.rm.node_id}",
            node_id=self.leader_id,
            request_timeout_ms=int(self.rm._cfg("replica.socket.timeout.ms", 30000)),
            security=getattr(self.rm.broker, "inter_broker_security", None))
        await conn.connect()
        self.conn = conn
        if self._last_error:
            log.info("%r: connected to %s:%d", self, ep[0], ep[1])
            self._last_error = ""
        return conn

    async def _close(self) -> None:
        self.session.reset()
        conn, self.conn = self.conn, None
        if conn is not None:
            await conn.close()

    def _current(self, key, st: FetchState) -> bool:
        """Still ours, same epoch, same partition object (not moved meanwhile)."""
        cur = self.states.get(key)
        return cur is st and self.rm.partitions.get(key) is st.partition

    def _back_off(self, st: FetchState) -> None:
        st.backoff_until = asyncio.get_running_loop().time() + self._backoff_s()

    # ------------------------------------------------------------------ truncation
    async def _truncate(self, conn: BrokerConnection) -> None:
        now = asyncio.get_running_loop().time()
        asks: dict[tuple[str, int], tuple[FetchState, int]] = {}
        for key, st in list(self.states.items()):
            if not st.truncating or st.backoff_until > now:
                continue
            p = st.partition
            cache = p.log.leader_epoch_cache
            epoch = st.query_epoch if st.query_epoch is not None else cache.latest_epoch
            if epoch < 0:
                if p.log.log_end_offset > p.high_watermark:
                    # history without epochs (or none): the old rule, the high watermark
                    self.rm.truncate_as_follower(p, p.high_watermark, "no leader epochs")
                st.truncating = False
                continue
            asks[key] = (st, epoch)
        if not asks:
            return
        topics: dict[str, list] = {}
        for (topic, part), (st, epoch) in asks.items():
            topics.setdefault(topic, []).append({
                "partition": part, "current_leader_epoch": st.leader_epoch,
                "leader_epoch": epoch})
        req = {"replica_id": self.rm.node_id,
               "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        resp = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, req,
                                  version=OFFSET_FOR_LEADER_EPOCH_VERSION)
        for t in resp.topics:
            for r in t.partitions:
                key = (t.topic, r.partition)
                entry = asks.get(key)
                if entry is None:
                    continue
                st, asked = entry
                if not self._current(key, st):
                    continue
                if r.error_code != Errors.NONE:
                    self._note(f"OffsetForLeaderEpoch {key}: {Errors(r.error_code).name}")
                    self._back_off(st)
                    continue
                self._apply_epoch_answer(st, asked, r.leader_epoch, r.end_offset)

    def _apply_epoch_answer(self, st: FetchState, asked: int, leader_epoch: int,
                            end_offset: int) -> None:
        p = st.partition
        log_ = p.log
        leo = log_.log_end_offset
        if leader_epoch < 0 or end_offset < 0:
            # The leader knows nothing of that epoch: fall back to the high watermark.
            target = min(p.high_watermark, leo)
        elif leader_epoch == asked:
            target = min(end_offset, leo)
        else:
            # KIP-279: the leader's latest epoch at or below ours is older; if we have that
            # epoch too, both logs agree up to the smaller of the two ends of it, otherwise
            # ask again about the largest epoch we have below it.
            mine, my_end = log_.leader_epoch_cache.end_offset_for(leader_epoch, leo)
            if mine == leader_epoch:
                target = min(end_offset, my_end, leo)
            elif mine >= 0 and st.epoch_rounds < MAX_EPOCH_ROUNDS:
                st.query_epoch = mine
                st.epoch_rounds += 1
                return
            else:
                target = min(end_offset, leo)
        if target < leo:
            self.rm.truncate_as_follower(
                p, target, f"leader {self.leader_id} epoch {leader_epoch} ends at {end_offset}")
        st.truncating = False
        st.query_epoch = None
        st.epoch_rounds = 0

    # ------------------------------------------------------------------ fetch
    async def _fetch(self, conn: BrokerConnection, ready: list[FetchState]) -> None:
        rm = self.rm
        max_part = int(rm._cfg("replica.fetch.max.bytes", 1048576))
        wait_ms = int(rm._cfg("replica.fetch.wait.max.ms", 500))
        asked: dict[tuple[str, int], tuple[FetchState, int]] = {}
        wanted: dict[tuple[str, int], dict] = {}
        # Rotate the order: only the first partition of an answer is sure to get a whole
        # batch however large, so none may stay last forever (within a session the leader
        # moves partitions that answered records to the end).
        self._rotation = (self._rotation + 1) % max(1, len(ready))
        ready = ready[self._rotation:] + ready[:self._rotation]
        for st in ready:
            p = st.partition
            offset = p.log.log_end_offset
            asked[p.key] = (st, offset)
            wanted[p.key] = {
                "partition": p.partition, "current_leader_epoch": st.leader_epoch,
                "fetch_offset": offset, "log_start_offset": p.log.log_start_offset,
                "partition_max_bytes": max_part}
        send, forgotten = self.session.build(wanted)
        topics: dict[str, list] = {}
        for (topic, _), fields in send.items():
            topics.setdefault(topic, []).append(fields)
        req = {"replica_id": rm.node_id, "max_wait_ms": wait_ms,
               "min_bytes": int(rm._cfg("replica.fetch.min.bytes", 1)),
               "max_bytes": RESPONSE_MAX_BYTES, "isolation_level": 0,
               "session_id": self.session.session_id, "session_epoch": self.session.epoch,
               "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
               "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten],
               "rack_id": ""}
        timeout = conn.request_timeout + wait_ms / 1000.0
        try:
            resp = await conn.request(ApiKey.FETCH, req, version=FETCH_VERSION, timeout=timeout)
        except BaseException:
            self.session.reset()  # the leader may or may not have taken this epoch
            raise
        if not self.session.handle(getattr(resp, "error_code", 0), resp.session_id):
            self._note(f"fetch session answered {Errors(resp.error_code).name}; "
                       "starting a new one")
            return
        if getattr(resp, "error_code", 0):
            raise client_errors.BrokerUnavailable(
                f"fetch answered {Errors(resp.error_code).name}")
        for t in resp.responses:
            for r in t.partitions:
                key = (t.topic, r.partition_index)
                entry = asked.get(key)
                if entry is None:
                    continue
                st, offset = entry
                if not self._current(key, st) or st.truncating:
                    continue
                p = st.partition
                if p.log.log_end_offset != offset:
                    continue  # truncated or appended meanwhile: this answer is stale
                self._handle_partition(st, offset, r)

    def _handle_partition(self, st: FetchState, offset: int, r) -> None:
        p = st.partition
        code = r.error_code
        if code == Errors.NONE:
            try:
                self.rm.append_as_follower(p, r.records, r.high_watermark)
            except (_codec.CodecError, ValueError, KafkaStorageError, OSError) as e:
                # a damaged answer or a disk problem: nothing was appended; try again later
                self._note(f"{p}: cannot append the leader's data at {offset}: {e}")
                self._back_off(st)
            return
        if code == Errors.OFFSET_OUT_OF_RANGE:
            leader_start = r.log_start_offset
            if 0 <= offset < leader_start:
                # The leader deleted what we would fetch next: start over at its log start.
                log.info("%s: fetch offset %d is below the leader's log start %d; "
                         "restarting the log there", p, offset, leader_start)
                self.rm.truncate_as_follower(p, leader_start, "below the leader's log start",
                                             fully=True)
            else:
                # Above the leader's end: our history diverged, agree on epochs again.
                st.truncating = True
            return
        self._note(f"{p}: fetch answered {Errors(code).name}")
        if code in (Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH,
                    Errors.NOT_LEADER_OR_FOLLOWER):
            st.truncating = True  # once the roles settle, agree on the epoch again
        self._back_off(st)
