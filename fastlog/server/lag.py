# fastlog/server/lag.py — RemoteHighWatermarks: the high watermarks of partitions this
# broker does not host, so that the consumer lag it exports covers every partition of the
# groups it coordinates (kafka-exporter's kafka_consumergroup_lag), not only the local ones.
#
# Owns: a fastlog.client Cluster connected through this broker's own inter-broker listener
# (with the inter-broker credentials), and a cache {(topic, partition): high watermark}
# refreshed by ListOffsets (LATEST, read_uncommitted: the high watermark) sent to each
# partition's leader, one request per leader, at most once per REFRESH_INTERVAL_S and
# bounded by REFRESH_TIMEOUT_S. A partition whose leader does not answer keeps no entry
# (its lag is left out rather than guessed).
# Called from: the HTTP endpoint's thread and loop only (fastlog/server/http.py awaits
# `refresh` before a scrape when it is `due`); the collector reads `get` on that thread.
# Never on the broker's request loop.
"""High watermarks of partitions led elsewhere, for cluster-wide consumer lag."""

from __future__ import annotations

import asyncio
import logging
import time

from fastlog.client import errors
from fastlog.client.cluster import Cluster
from fastlog.protocol.api_keys import ApiKey

log = logging.getLogger("fastlog.server.lag")

REFRESH_INTERVAL_S = 5.0
REFRESH_TIMEOUT_S = 3.0
LATEST = -1


def lag_partitions(broker) -> set[tuple[str, int]]:
    """The partitions with a committed offset in a group this broker coordinates that
    this broker does not host (their high watermark must come from their leader)."""
    parts = broker.replica_manager.partitions if broker.replica_manager is not None else {}
    wanted = set()
    for g in list(broker.group_coordinator.groups.values()):
        for key in list(g.offsets):
            if key not in parts:
                wanted.add(key)
    return wanted


class RemoteHighWatermarks:
    """See the module comment."""

    def __init__(self, broker):
        self.broker = broker
        self._cluster: Cluster | None = None
        self._values: dict[tuple[str, int], int] = {}
        self._refreshed = 0.0

    def get(self, topic: str, partition: int) -> int | None:
        return self._values.get((topic, partition))

    def _bootstrap(self) -> str | None:
        name = self.broker.config.inter_broker_listener_name
        for listener, host, port in self.broker.bound:
            if listener == name:
                return f"{host if host not in ('', '0.0.0.0', '::') else '127.0.0.1'}:{port}"
        return None

    def due(self) -> bool:
        """Whether `refresh` would ask the leaders now (cluster mode, the cache older than
        REFRESH_INTERVAL_S): when not, a scrape need not wait for it."""
        return (self.broker.cluster is not None
                and time.monotonic() - self._refreshed >= REFRESH_INTERVAL_S)

    async def refresh(self) -> None:
        """Refresh the cache when it is older than REFRESH_INTERVAL_S (cluster mode only)."""
        if not self.due():
            return
        self._refreshed = time.monotonic()
        wanted = lag_partitions(self.broker)
        if not wanted:
            self._values = {}
            return
        try:
            self._values = await asyncio.wait_for(self._fetch(wanted), REFRESH_TIMEOUT_S)
        except (TimeoutError, OSError, errors.FastlogError) as e:
            log.debug("high watermarks for consumer lag not refreshed: %r", e)
        except Exception:  # noqa: BLE001 - a scrape must not fail on a peer's answer
            log.warning("high watermarks for consumer lag not refreshed", exc_info=True)

    async def _fetch(self, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if self._cluster is None:
            address = self._bootstrap()
            if address is None:
                return {}
            self._cluster = Cluster([address], client_id=f"broker-{self.broker.node_id}-lag",
                                    request_timeout_ms=int(REFRESH_TIMEOUT_S * 1000),
                                    security=self.broker.inter_broker_security)
        cluster = self._cluster
        await cluster.refresh_metadata(sorted({t for t, _ in wanted}))
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, index in wanted:
            info = cluster.topics.get(topic)
            p = info.partitions.get(index) if info is not None else None
            if p is None or p.leader < 0:
                continue
            by_leader.setdefault(p.leader, {}).setdefault(topic, []).append(index)
        values: dict[tuple[str, int], int] = {}

        async def ask(node: int, topics: dict[str, list[int]]) -> None:
            conn = await cluster.connection(node)
            resp = await conn.request(ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": [
                    {"partition_index": i, "current_leader_epoch": -1, "timestamp": LATEST}
                    for i in sorted(indexes)]} for t, indexes in sorted(topics.items())]})
            for t in resp.topics:
                for p in t.partitions:
                    if not p.error_code:
                        values[(t.name, p.partition_index)] = p.offset

        results = await asyncio.gather(*(ask(n, tps) for n, tps in by_leader.items()),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                log.debug("a leader did not answer ListOffsets for consumer lag: %r", r)
        return values

    async def close(self) -> None:
        if self._cluster is not None:
            await self._cluster.close()
            self._cluster = None

