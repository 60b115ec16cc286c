"""MarkerWriter: how the transaction coordinator's COMMIT/ABORT markers reach partitions.

A marker is (producer id, producer epoch, committed, coordinator epoch, partitions), as
Kafka's TxnMarkerEntry. ``write`` sends one to each listed partition's leader and returns
an ``Errors`` per partition:

* partitions this broker leads (all of them on one node) go through the replica manager,
  ``ReplicaManager.append_txn_markers([marker])`` (the log side writes the control batch,
  moves the last stable offset and the .txnindex). A marker on a ``__consumer_offsets``
  partition then tells the group coordinator to make the producer's pending transactional
  offsets visible (commit) or drop them (abort);
* partitions another broker leads (cluster mode) get a WriteTxnMarkers request (v1) over
  the inter-broker listener, one connection per leader, secured as the replica fetchers'
  (``broker.inter_broker_security``); the leader's handler does the same as above.

A partition with no known leader, or whose leader cannot be reached, answers a retriable
code (NOT_LEADER_OR_FOLLOWER, COORDINATOR_NOT_AVAILABLE): the coordinator retries.
Event-loop thread only.
"""

from __future__ import annotations

import logging
from typing import Any

from fastlog.logs import report_limited
from fastlog.protocol import ApiKey
from fastlog.protocol.errors import Errors
from fastlog.server.group.coordinator import _maybe_await
from fastlog.server.group.offsets import GROUP_METADATA_TOPIC

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1


def _errors(code: Any) -> Errors:
    if isinstance(code, Errors):
        return code
    try:
        return Errors(int(code))
    except (TypeError, ValueError):
        return Errors.UNKNOWN_SERVER_ERROR


def complete_group_offsets(broker: Any, producer_id: int, partitions, committed: bool) -> None:
    """After a marker reached __consumer_offsets partitions: the group coordinator makes
    the producer's pending transactional offsets there visible or drops them (Kafka's
    GroupCoordinator.scheduleHandleTxnCompletion). The WriteTxnMarkers handler calls this
    for the partitions it wrote, as the local path below does."""
    gc = getattr(broker, "group_coordinator", None)
    offsets = [p for t, p in partitions if t == GROUP_METADATA_TOPIC]
    if gc is not None and offsets:
        gc.complete_txn_offsets(producer_id, offsets, committed)


class MarkerWriter:
    """See the module comment."""

    def __init__(self, broker: Any):
        self.broker = broker
        self._conns: dict[int, Any] = {}
        self._missing_logged = False

    def partition_exists(self, topic: str, partition: int) -> bool:
        md = getattr(self.broker, "metadata", None)
        try:
            state = md.topic(topic)
        except Exception:  # noqa: BLE001 - no metadata: assume it is there, retry
            return True
        return state is not None and partition in state.partitions

    def _leader(self, topic: str, partition: int) -> int | None:
        """None: this broker leads it (or one node); else the leader's id (-1: none)."""
        if getattr(self.broker, "cluster", None) is None:
            return None
        rm = self.broker.replica_manager
        if rm.is_leader(topic, partition):
            return None
        try:
            return int(self.broker.metadata.topic(topic).partitions[partition].leader)
        except Exception:  # noqa: BLE001 - unknown topology: no leader now
            return -1

    async def write(self, producer_id: int, producer_epoch: int, committed: bool,
                    coordinator_epoch: int, partitions: list[tuple[str, int]]
                    ) -> dict[tuple[str, int], Errors]:
        local: list[tuple[str, int]] = []
        remote: dict[int, list[tuple[str, int]]] = {}
        out: dict[tuple[str, int], Errors] = {}
        for tp in partitions:
            leader = self._leader(*tp)
            if leader is None:
                local.append(tp)
            elif leader < 0:
                out[tp] = Errors.NOT_LEADER_OR_FOLLOWER
            else:
                remote.setdefault(leader, []).append(tp)
        marker = (producer_id, producer_epoch, committed, coordinator_epoch, local)
        if local:
            out.update(await self._write_local(marker))
        for leader, tps in remote.items():
            out.update(await self._write_remote(leader, (producer_id, producer_epoch,
                                                         committed, coordinator_epoch, tps)))
        return out

    async def _write_local(self, marker) -> dict[tuple[str, int], Errors]:
        producer_id, _, committed, _, partitions = marker
        append = getattr(self.broker.replica_manager, "append_txn_markers", None)
        if append is None:
            if not self._missing_logged:
                self._missing_logged = True
                log.error("this broker's log cannot take transaction markers: transactions "
                          "stay in PrepareCommit/PrepareAbort")
            return dict.fromkeys(partitions, Errors.UNKNOWN_SERVER_ERROR)
        try:
            got = await _maybe_await(append([marker]))
        except Exception:
            log.exception("writing transaction markers for producer %d failed", producer_id)
            return dict.fromkeys(partitions, Errors.UNKNOWN_SERVER_ERROR)
        if isinstance(got, (list, tuple)):   # one result per marker
            got = got[0] if got else {}
        result = {tp: _errors(got.get(tp, Errors.UNKNOWN_SERVER_ERROR)) for tp in partitions}
        complete_group_offsets(self.broker, producer_id,
                               [tp for tp, e in result.items() if e is Errors.NONE], committed)
        return result

    async def _write_remote(self, leader: int, marker) -> dict[tuple[str, int], Errors]:
        producer_id, producer_epoch, committed, coordinator_epoch, partitions = marker
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        try:
            resp = await self.request(leader, ApiKey.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch,
                "transaction_result": committed,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                "coordinator_epoch": coordinator_epoch}]}, WRITE_TXN_MARKERS_VERSION)
        except LookupError:
            return dict.fromkeys(partitions, Errors.NOT_LEADER_OR_FOLLOWER)
        except Exception:  # noqa: BLE001 - unreachable leader: retried later
            return dict.fromkeys(partitions, Errors.COORDINATOR_NOT_AVAILABLE)
        out = dict.fromkeys(partitions, Errors.UNKNOWN_SERVER_ERROR)
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    if (t.name, p.partition_index) in out:
                        out[(t.name, p.partition_index)] = _errors(p.error_code)
        return out

    async def request(self, node: int, api_key: int, body: dict, version: int,
                      timeout: float | None = None):
        """One request to another broker over the inter-broker listener, on this writer's
        connection to it (opened on first use, secured as the replica fetchers'; also
        the partition leaders' channel to transaction coordinators, verification.py).
        LookupError when the broker's endpoint is unknown, ProtocolMismatch when it does
        not serve that version; a failed connection is dropped (the next request opens a
        new one) and its error raised."""
        from fastlog.client.connection import BrokerConnection
        from fastlog.client.errors import ProtocolMismatch

        conn = self._conns.get(node)
        try:
            if conn is None or not conn.connected:
                ep = self.broker.replica_manager.broker_endpoint(node)
                if ep is None:
                    raise LookupError(f"no endpoint known for broker {node}")
                conn = BrokerConnection(
                    ep[0], ep[1], client_id=f"fastlog-txn-markers-{self.broker.node_id}",
                    node_id=node, security=getattr(self.broker, "inter_broker_security",
                                                   None))
                await conn.connect()
                self._conns[node] = conn
            lo, hi = (conn.broker_versions or {}).get(api_key, (version, version))
            if not lo <= version <= hi:
                raise ProtocolMismatch(f"broker {node} serves {ApiKey(api_key).name} "
                                       f"v{lo}-{hi}, not v{version}")
            return await conn.request(api_key, body, version=version, timeout=timeout)
        except (LookupError, ProtocolMismatch):
            raise
        except Exception as e:
            report_limited(log, logging.INFO, ("txn-broker-request", node),
                           "%s to broker %d failed: %s", ApiKey(api_key).name, node, e)
            if self._conns.get(node) is conn:
                del self._conns[node]
            if conn is not None:
                await conn.close()
            raise

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            await conn.close()
