# fastlog/server/fetch_session.py — incremental fetch sessions (KIP-227; Kafka's
# FetchSession.scala: FetchManager, FetchSessionCache, CachedPartition, the contexts).
#
# Owns: the broker's cache of fetch sessions. A session is the set of partitions one
# fetcher (consumer or follower) reads, with what the fetcher last asked (offset, max
# bytes, leader epoch) and what it was last told (high watermark, log start offset, last
# stable offset) for each. A full fetch (epoch 0) may create one; the response carries
# its id. Each later fetch names the id and the next epoch and carries only the partitions
# whose request changed, plus `forgotten_topics_data`; the broker reads every partition
# of the session and answers only those with records, a changed high watermark, log start
# or last stable offset, a preferred read replica, or an error (Kafka's
# CachedPartition.maybeUpdateResponseData). Session id 0 / epoch -1 is a sessionless fetch
# (every version below 7 is one); epoch -1 with an id closes that session.
# Topic ids (KIP-516, Fetch v13+): the request names topics by id; the caller's `resolve`
# maps an id to the topic's name (None for an id the broker does not know: the fetch loop
# answers UNKNOWN_TOPIC_ID). A session created by such a request keys its partitions by
# (topic id, partition) and remembers each one's name as resolved when it was added (a
# still unknown name is resolved again on each request, Kafka's maybeResolveUnknownName);
# requests of the other kind in it are answered FETCH_SESSION_TOPIC_ID_ERROR. A session
# without ids keys them by (topic name, partition).
# Bounds: `max.incremental.fetch.session.cache.slots` sessions (Kafka's default 1000),
# at most MAX_SESSION_PARTITIONS partitions in one session and MAX_CACHED_PARTITIONS in
# all. When the cache is full a new session takes the place of one that was idle longer
# than the eviction time (Kafka's 120 s), else of the least valuable one it outranks:
# follower (privileged) sessions before consumers', larger before smaller, and only
# sessions older than the eviction time unless the newcomer is a follower — Kafka's
# FetchSessionCache.tryEvict. No session is dropped on a timer; stale ones give way.
# Times are monotonic milliseconds (the caller's clock).
# Called from: KafkaApis.handle_fetch on the broker's asyncio loop only (no locks); the
# metrics collector reads the three counts from the HTTP thread (plain integers).
"""Fetch sessions (KIP-227): the session cache and the per-request fetch contexts."""

from __future__ import annotations

import random
import weakref
from collections import OrderedDict
from typing import NamedTuple

from fastlog.protocol import Errors
from fastlog.protocol.schema import ZERO_UUID

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT_MAX = (1 << 31) - 1
# Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS.
DEFAULT_EVICTION_MS = 120_000
# A session names partitions by the fetcher's say-so (unknown ones too, answered with an
# error each time), so its size and the cache's total are bounded here; a fetcher above
# the bound fetches without a session.
MAX_SESSION_PARTITIONS = 100_000
MAX_CACHED_PARTITIONS = 500_000


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: FINAL stays FINAL, the top wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT_MAX else epoch + 1


class CachedPartition:
    """One partition of a session: the fetcher's last request for it (the attribute names
    of a request's FetchPartition, so the fetch loop reads either) and the figures it was
    last answered."""

    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "partition_max_bytes",
                 "current_leader_epoch", "last_fetched_epoch", "log_start_offset",
                 "high_watermark",
                 "local_log_start_offset", "last_stable_offset", "read_from")

    def __init__(self, topic: str | None, fp, topic_id: bytes = ZERO_UUID):
        self.topic = topic
        self.topic_id = topic_id
        self.partition = fp.partition
        self.high_watermark = -1
        self.local_log_start_offset = -1
        self.last_stable_offset = -1
        self.update_request_params(fp)

    def update_request_params(self, fp) -> None:
        # (weak reference to the Partition, its leader epoch) of the last read answered
        # without an error (weak: an idle session must not keep a deleted log's files
        # open); None until then or after the fetcher changed what it asks (see `quiet`)
        self.read_from = None
        self.fetch_offset = fp.fetch_offset
        self.partition_max_bytes = fp.partition_max_bytes
        self.current_leader_epoch = fp.current_leader_epoch
        self.last_fetched_epoch = fp.last_fetched_epoch
        self.log_start_offset = fp.log_start_offset

    def maybe_update_response_data(self, entry: dict, update: bool) -> bool:
        """Whether an incremental response must carry this partition's `entry` (a fetch
        response PartitionData dict); with `update`, remember what it tells."""
        must = _records_size(entry["records"]) > 0 or entry["preferred_read_replica"] >= 0
        if self.high_watermark != entry["high_watermark"]:
            must = True
            if update:
                self.high_watermark = entry["high_watermark"]
        if self.local_log_start_offset != entry["log_start_offset"]:
            must = True
            if update:
                self.local_log_start_offset = entry["log_start_offset"]
        if self.last_stable_offset != entry["last_stable_offset"]:
            must = True
            if update:
                self.last_stable_offset = entry["last_stable_offset"]
        if entry["error_code"] != Errors.NONE:
            # sent every time; -1 makes the partition's first good answer go out too
            must = True
            if update:
                self.high_watermark = -1
        if update and (entry["error_code"] != Errors.NONE or entry["preferred_read_replica"] >= 0):
            self.read_from = None
        return must

    def quiet(self, p) -> bool:
        """Whether a consumer's read of this partition (hosted as `p`, or None) would be
        answered with nothing new: the same replica at the same leader epoch as the last
        good answer, the fetch offset at the high watermark, and the high watermark, last
        stable offset (which equals it then) and log start as last answered. Such a
        partition is not read; anything else is, as Kafka reads every session partition."""
        read_from = self.read_from
        if read_from is None or p is None or p is not read_from[0]() or p.offline:
            return False
        log_ = p.log
        hw = log_.high_watermark
        return (p.leader_epoch == read_from[1] and self.fetch_offset == hw
                and self.high_watermark == hw and self.last_stable_offset == hw
                and self.local_log_start_offset == log_.log_start_offset)


def _records_size(records) -> int:
    if type(records) is tuple:  # (file regions, size), as the fetch loop builds them
        return records[1]
    return len(records) if records else 0


class FetchTopic(NamedTuple):
    """The fetch loop's view of one topic to read: `topic` and its `partitions` (request
    FetchPartitions or CachedPartitions), as a request's FetchTopic; `topic_id` is what a
    v13+ request named it by (`topic` None: an id the broker does not know)."""
    topic: str | None
    partitions: list
    topic_id: bytes = ZERO_UUID


def request_topics(request, version: int, resolve) -> list:
    """The topics a Fetch request names: its own up to v12, else FetchTopics of the names
    `resolve` (topic id -> name or None) gives their ids."""
    if version < 13:
        return request.topics
    return [FetchTopic(resolve(t.topic_id), t.partitions, t.topic_id) for t in request.topics]


def _key(topic, partition: int, uses_topic_ids: bool) -> tuple:
    return (topic.topic_id if uses_topic_ids else topic.topic, partition)


class FetchSession:
    __slots__ = ("id", "privileged", "uses_topic_ids", "partitions", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "evictable_by_all", "evictable_by_privileged")

    def __init__(self, session_id: int, privileged: bool, partitions: dict, now_ms: int,
                 uses_topic_ids: bool = False):
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        # (topic name or id, partition) -> CachedPartition, in the order partitions are
        # read; one that returned records moves to the end, so a small response budget
        # rotates
        self.partitions: dict[tuple, CachedPartition] = partitions
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, topics, forgotten, resolve=None) -> None:
        """An incremental request: add or update its partitions, drop the forgotten; with
        topic ids, names still unknown are resolved again (`resolve`)."""
        parts = self.partitions
        ids = self.uses_topic_ids
        for t in topics:
            for fp in t.partitions:
                key = _key(t, fp.partition, ids)
                cp = parts.get(key)
                if cp is None:
                    parts[key] = CachedPartition(t.topic, fp, t.topic_id if ids else ZERO_UUID)
                else:
                    cp.update_request_params(fp)
        for ft in forgotten:
            for p in ft.partitions:
                parts.pop(_key(ft, p, ids), None)
        if ids and resolve is not None:
            for cp in parts.values():
                if cp.topic is None:
                    cp.topic = resolve(cp.topic_id)

    def fetch_topics(self) -> list[FetchTopic]:
        topics: list[FetchTopic] = []
        for cp in self.partitions.values():
            if (not topics or topics[-1].topic != cp.topic
                    or topics[-1].topic_id != cp.topic_id):
                topics.append(FetchTopic(cp.topic, [], cp.topic_id))
            topics[-1].partitions.append(cp)
        return topics


class FetchSessionCache:
    """The broker's sessions (Kafka's FetchSessionCacheShard, one shard)."""

    def __init__(self, max_entries: int, eviction_ms: int = DEFAULT_EVICTION_MS):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        # session id -> session, least recently used first
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.num_partitions = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_session_id(self) -> int:
        for _ in range(1000):
            sid = random.randint(1, _INT_MAX)
            if sid not in self.sessions:
                return sid
        raise RuntimeError("no free fetch session id")  # unreachable with <= 2^31 slots

    def maybe_create_session(self, now_ms: int, privileged: bool,
                             partitions: dict[tuple, CachedPartition],
                             uses_topic_ids: bool = False) -> int:
        """A new session of `partitions` when there is room (or one may be evicted): its
        id, else INVALID_SESSION_ID."""
        size = len(partitions)
        if (size == 0 or size > MAX_SESSION_PARTITIONS
                or self.num_partitions + size > MAX_CACHED_PARTITIONS):
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, partitions, now_ms,
                               uses_topic_ids)
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        lru = next(iter(self.sessions.values()))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            victim = lru
        else:
            flag = "evictable_by_privileged" if privileged else "evictable_by_all"
            candidates = [s for s in self.sessions.values() if getattr(s, flag)]
            if not candidates:
                return False
            victim = min(candidates, key=FetchSession.evictable_key)
            if (privileged, size, 0) < victim.evictable_key():
                return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.num_partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """A use of `session`: last used now, its size recounted (Kafka's touch)."""
        session.last_used_ms = now_ms
        self.sessions.move_to_end(session.id)
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.num_partitions += session.cached_size
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = old or not session.privileged
        session.evictable_by_all = old


class FetchContext:
    """What one Fetch request reads (`topics`) and how its answer is shaped (`respond`).
    Sessionless: the request's partitions, every one answered, no session."""

    error = Errors.NONE

    def __init__(self, topics):
        self.topics = topics
        self.quiet: dict[str, int] = {}  # partitions not read, by topic (IncrementalFetchContext)

    def watch_keys(self) -> list[tuple[str, int]]:
        """The partitions whose appends wake this request when it waits."""
        return [(t.topic, fp.partition) for t in self.topics if t.topic is not None
                for fp in t.partitions]

    def to_read(self, partitions: dict, refused: set, consumer: bool) -> list:
        """The topics to read now (each wait round asks again): `topics`."""
        return self.topics

    def respond(self, responses: list) -> tuple[int, int, list]:
        """(error code, session id, topic responses) of the answer, from the responses
        of every partition in `topics` (the same order)."""
        return Errors.NONE, INVALID_SESSION_ID, responses


class SessionErrorContext(FetchContext):
    def __init__(self, error: int):
        super().__init__([])
        self.error = error

    def respond(self, responses):
        return self.error, INVALID_SESSION_ID, []


class FullFetchContext(FetchContext):
    """Epoch 0: every partition answered; a session of them is created if there is room."""

    def __init__(self, cache: FetchSessionCache, topics, privileged: bool, now_ms: int,
                 uses_topic_ids: bool = False):
        super().__init__(topics)
        self._cache = cache
        self._privileged = privileged
        self._now_ms = now_ms
        self._ids = uses_topic_ids

    def respond(self, responses):
        parts: dict[tuple, CachedPartition] = {}
        ids = self._ids
        for t, tr in zip(self.topics, responses, strict=True):
            for fp, entry in zip(t.partitions, tr["partitions"], strict=True):
                if len(parts) >= MAX_SESSION_PARTITIONS:
                    return Errors.NONE, INVALID_SESSION_ID, responses
                cp = CachedPartition(t.topic, fp, t.topic_id if ids else ZERO_UUID)
                cp.maybe_update_response_data(entry, True)
                parts[_key(t, fp.partition, ids)] = cp
        sid = self._cache.maybe_create_session(self._now_ms, self._privileged, parts, ids)
        return Errors.NONE, sid, responses


class IncrementalFetchContext(FetchContext):
    """Every partition of the session is read; only those with news are answered."""

    def __init__(self, session: FetchSession):
        super().__init__(session.fetch_topics())
        self._session = session
        self._epoch = session.epoch
        self._read = self.topics

    def to_read(self, partitions, refused, consumer):
        """The session's partitions but the quiet ones (CachedPartition.quiet), when the
        fetcher is a consumer not asking for a rack's replica; `partitions` is the replica
        manager's map of hosted partitions."""
        if not consumer:
            self._read = self.topics
            return self.topics
        read: list[FetchTopic] = []
        quiet: dict[str, int] = {}
        for t in self.topics:
            if t.topic in refused or t.topic is None:
                read.append(t)
                continue
            parts = []
            for cp in t.partitions:
                p = partitions.get((cp.topic, cp.partition))
                if cp.quiet(p):
                    quiet[cp.topic] = quiet.get(cp.topic, 0) + 1
                else:
                    cp.read_from = None if p is None else (weakref.ref(p), p.leader_epoch)
                    parts.append(cp)
            if parts:
                read.append(FetchTopic(t.topic, parts, t.topic_id))
        self.quiet = quiet
        self._read = read
        return read

    def respond(self, responses):
        session = self._session
        if session.epoch != self._epoch:
            # a later request of the same session arrived while this one waited
            return Errors.INVALID_FETCH_SESSION_EPOCH, session.id, []
        out = []
        moved = []
        for t, tr in zip(self._read, responses, strict=True):
            kept = []
            for cp, entry in zip(t.partitions, tr["partitions"], strict=True):
                if cp.maybe_update_response_data(entry, True):
                    kept.append(entry)
                    if _records_size(entry["records"]) > 0:
                        moved.append(_key(cp, cp.partition, session.uses_topic_ids))
            if kept:
                out.append({**tr, "partitions": kept})
        parts = session.partitions
        for key in moved:
            cp = parts.pop(key, None)
            if cp is not None:
                parts[key] = cp
        return Errors.NONE, session.id, out


class FetchManager:
    """Kafka's FetchManager: the context of each Fetch request, from its session id and
    epoch."""

    def __init__(self, max_entries: int, eviction_ms: int = DEFAULT_EVICTION_MS):
        self.cache = FetchSessionCache(max_entries, eviction_ms)

    def new_context(self, request, privileged: bool, now_ms: int, version: int = 12,
                    resolve=None) -> FetchContext:
        """`version`: the request's; from 13 it names topics by id, which `resolve`
        (topic id -> name, or None when unknown) turns into names."""
        session_id, epoch = request.session_id, request.session_epoch
        ids = version >= 13
        topics = request_topics(request, version, resolve)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return FetchContext(topics)
            return FullFetchContext(self.cache, topics, privileged, now_ms, ids)
        session = self.cache.get(session_id)
        if session is None:
            return SessionErrorContext(Errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionErrorContext(Errors.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != ids:
            # Kafka's FetchManager: a session keeps the kind of topic naming it began with
            return SessionErrorContext(Errors.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(topics, request.forgotten_topics_data, resolve)
        size = len(session.partitions)
        if size == 0:
            self.cache.remove(session_id)
            return FetchContext(topics)
        if (size > MAX_SESSION_PARTITIONS
                or self.cache.num_partitions - session.cached_size + size > MAX_CACHED_PARTITIONS):
            self.cache.remove(session_id)
            return SessionErrorContext(Errors.FETCH_SESSION_ID_NOT_FOUND)
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session)
