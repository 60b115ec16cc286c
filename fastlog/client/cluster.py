# fastlog/client/cluster.py: what the client knows about the cluster, and its connections.
#
# Owns the bootstrap (try each "host:port" until one answers), the metadata cache (brokers,
# controller, and per topic the partitions with their leaders, from Metadata responses),
# one BrokerConnection per broker node, and the retry policy shared by producer, consumer
# and admin: a request that fails with a stale-metadata error (NOT_LEADER_OR_FOLLOWER,
# UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...) or a lost connection refreshes
# metadata and is retried with exponential backoff until its deadline.
#
# Runs on one asyncio event loop; not thread-safe (the sync wrappers own a private loop).

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

from fastlog.client import errors
from fastlog.client.connection import BrokerConnection
from fastlog.client.security import ClientSecurity
from fastlog.client.versions import ApiKey

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


@dataclasses.dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclasses.dataclass(slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    error_code: int = 0


@dataclasses.dataclass(slots=True)
class TopicInfo:
    name: str
    partitions: dict[int, PartitionInfo]
    internal: bool = False
    error_code: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def parse_bootstrap(servers) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' or a list of such strings -> [(host, port), ...]."""
    if isinstance(servers, str):
        servers = [servers]
    out = []
    for item in servers:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            host, sep, port = part.rpartition(":")
            if not sep:
                host, port = part, "9092"
            host = host.strip("[]") or "127.0.0.1"
            try:
                port_no = int(port)
            except ValueError:
                port_no = -1
            if not 0 < port_no < 65536:
                raise errors.FastlogError(f"bad bootstrap server '{part}': expected HOST:PORT")
            out.append((host, port_no))
    if not out:
        raise errors.FastlogError("no bootstrap server given")
    return out


class Cluster:
    """Connections and metadata for one client (producer, consumer or admin)."""

    def __init__(self, bootstrap_servers=DEFAULT_BOOTSTRAP, *, client_id: str = "fastlog",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 metadata_max_age_ms: int = 300000, security=None):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        # client settings (security.protocol, sasl.*) or a parsed ClientSecurity
        self.security = (security if isinstance(security, ClientSecurity)
                         else ClientSecurity.from_config(security))
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.retry_backoff_max = retry_backoff_max_ms / 1000.0
        self.metadata_max_age = metadata_max_age_ms / 1000.0
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._metadata_time = 0.0
        self._metadata_lock: asyncio.Lock | None = None
        self._closed = False

    # -- connections ------------------------------------------------------------------

    def _new_connection(self, host, port, node_id=None) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.client_id, node_id=node_id,
                                request_timeout_ms=self.request_timeout_ms,
                                connect_timeout_ms=self.connect_timeout_ms,
                                security=self.security)

    async def bootstrap_connection(self) -> BrokerConnection:
        """Any live connection: a known broker's, else the first bootstrap server that answers."""
        for conn in self._conns.values():
            if conn.connected:
                return conn
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        last: Exception | None = None
        candidates = [(b.host, b.port) for b in self.brokers.values()] + self.bootstrap
        for host, port in candidates:
            conn = self._new_connection(host, port)
            try:
                await conn.connect()
            except errors.FastlogError as exc:
                last = exc
                continue
            self._bootstrap_conn = conn
            return conn
        if len(candidates) == 1 and last is not None:
            raise last
        where = ", ".join(f"{h}:{p}" for h, p in candidates)
        raise errors.BrokerUnavailable(f"cannot connect to any broker ({where}): {last}")

    async def connection(self, node_id: int) -> BrokerConnection:
        """The connection to broker node_id, opened on first use and reopened after a loss."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        broker = self.brokers.get(node_id)
        if broker is None:
            await self.refresh_metadata()
            broker = self.brokers.get(node_id)
            if broker is None:
                raise errors.BrokerUnavailable(f"broker {node_id} is not in the cluster metadata")
        fut = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = fut
        try:
            conn = self._new_connection(broker.host, broker.port, node_id)
            await conn.connect()
            old = self._conns.get(node_id)
            if old is not None:
                await old.close()
            self._conns[node_id] = conn
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: a waiter may not exist
            raise
        finally:
            del self._connecting[node_id]

    async def controller_connection(self) -> BrokerConnection:
        if self.controller_id < 0 or self.controller_id not in self.brokers:
            await self.refresh_metadata()
        if self.controller_id >= 0 and self.controller_id in self.brokers:
            return await self.connection(self.controller_id)
        return await self.bootstrap_connection()

    # -- metadata ---------------------------------------------------------------------

    async def refresh_metadata(self, topics: list[str] | None = None, *,
                               allow_auto_create: bool = False) -> None:
        """Ask one broker for metadata about topics (None: all topics) and update the cache."""
        if self._metadata_lock is None:
            self._metadata_lock = asyncio.Lock()
        async with self._metadata_lock:
            conn = await self.bootstrap_connection()
            request = {
                "topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_auto_create,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }
            resp = await conn.request(ApiKey.METADATA, request)
            self._apply_metadata(resp, full=topics is None)

    def _apply_metadata(self, resp, full: bool) -> None:
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, getattr(b, "rack", None))
                        for b in resp.brokers}
        self.controller_id = getattr(resp, "controller_id", -1)
        self.cluster_id = getattr(resp, "cluster_id", None)
        seen = set()
        for t in resp.topics:
            seen.add(t.name)
            if t.error_code and t.error_code != errors.LEADER_NOT_AVAILABLE:
                self.topics.pop(t.name, None)
                continue
            parts = {}
            for p in t.partitions:
                parts[p.partition_index] = PartitionInfo(
                    p.partition_index, p.leader_id, getattr(p, "leader_epoch", -1),
                    list(p.replica_nodes), list(p.isr_nodes),
                    list(getattr(p, "offline_replicas", ()) or ()), p.error_code)
            self.topics[t.name] = TopicInfo(t.name, parts, getattr(t, "is_internal", False),
                                            t.error_code)
        if full:
            for name in list(self.topics):
                if name not in seen:
                    del self.topics[name]
        for node_id in list(self._conns):
            if node_id not in self.brokers:
                conn = self._conns.pop(node_id)
                asyncio.get_running_loop().create_task(conn.close())
        self._metadata_time = time.monotonic()

    async def topic(self, name: str, *, allow_auto_create: bool = False,
                    refresh: bool = False) -> TopicInfo:
        """Metadata of one topic with at least one partition (UnknownTopic if absent)."""
        info = self.topics.get(name)
        if info is not None and not refresh and info.partitions and \
                time.monotonic() - self._metadata_time < self.metadata_max_age:
            return info
        await self.refresh_metadata([name], allow_auto_create=allow_auto_create)
        info = self.topics.get(name)
        if info is None or not info.partitions:
            raise errors.UnknownTopic(name)
        return info

    async def partitions_for(self, topic: str, **kw) -> list[int]:
        return sorted((await self.topic(topic, **kw)).partitions)

    async def leader_for(self, tp: TopicPartition, *, refresh: bool = False) -> int:
        info = await self.topic(tp.topic, refresh=refresh)
        p = info.partitions.get(tp.partition)
        if p is None:
            raise errors.UnknownTopic(tp.topic, tp.partition)
        if p.leader < 0:
            raise errors.KafkaError(errors.LEADER_NOT_AVAILABLE, f"partition {tp}")
        return p.leader

    async def leader_connection(self, tp: TopicPartition, *, refresh=False) -> BrokerConnection:
        return await self.connection(await self.leader_for(tp, refresh=refresh))

    # -- retries ----------------------------------------------------------------------

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter, capped at retry_backoff_max."""
        base = min(self.retry_backoff * (2 ** attempt), self.retry_backoff_max)
        return base * (0.8 + 0.4 * random.random())

    async def retry(self, operation, *, deadline_s: float | None = None, what: str = ""):
        """Run `await operation()` until it succeeds or fails for a non-retriable reason.

        Retriable: KafkaError.retriable, BrokerUnavailable, ClientTimeout. Before each retry
        the metadata is refreshed when the error says it is stale.
        """
        deadline = time.monotonic() + (self.request_timeout_ms / 1000.0
                                       if deadline_s is None else deadline_s)
        attempt = 0
        while True:
            try:
                return await operation()
            except (errors.KafkaError, errors.BrokerUnavailable, errors.ClientTimeout) as exc:
                retriable = not isinstance(exc, errors.KafkaError) or exc.retriable
                delay = self.backoff(attempt)
                if not retriable or time.monotonic() + delay > deadline:
                    raise
                attempt += 1
                await asyncio.sleep(delay)
                if not isinstance(exc, errors.KafkaError) or exc.code in errors.STALE_METADATA:
                    try:
                        await self.refresh_metadata(list(self.topics) or None)
                    except errors.FastlogError:
                        pass  # the next attempt reports the real problem

    async def find_coordinator(self, key: str, key_type: int = 0) -> int:
        """The node id of the coordinator of a group (key_type 0) or a transactional id
        (1), as FindCoordinator answers it (retried while it is not available)."""
        what = "group" if key_type == 0 else "transactional id"

        async def attempt():
            conn = await self.bootstrap_connection()
            resp = await conn.request(ApiKey.FIND_COORDINATOR, {"key": key,
                                                               "key_type": key_type})
            errors.raise_for(resp.error_code, f"find coordinator of {what} '{key}'",
                             getattr(resp, "error_message", None))
            return resp.node_id

        node = await self.retry(attempt, what="FindCoordinator")
        if node not in self.brokers:
            await self.refresh_metadata([])
        return node

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        for conn in conns:
            await conn.close()
