# ZkClusterMember: one broker's membership of a ZooKeeper-mode cluster, wired in the order
# Kafka's KafkaServer starts it: connect (creating the chroot and Kafka's persistent
# paths), read or create the cluster id, check each log dir's meta.properties cluster.id,
# settle the broker id (configured, stored in meta.properties, or generated through
# /brokers/seqid), then — once the listeners are bound — register /brokers/ids/<id>, start
# the metadata cache (ZkMetadataStore, the broker's MetadataStore) and the controller
# candidate (ZkController). A stopping broker that is not the controller asks for its
# controlled shutdown through /admin/controlled_shutdown/<id> (request_controlled_shutdown). The session's credentials are kept in the first log dir
# (`zk-session`, mode 0600) so that after a crash the restarted broker recognises and
# ends its previous session instead of failing on its own stale registration.
#
# Reads KafkaConfig keys: zookeeper.connect, zookeeper.session.timeout.ms,
# zookeeper.connection.timeout.ms, broker.id/node.id, broker.rack,
# reserved.broker.max.id, broker.id.generation.enable, unclean.leader.election.enable,
# delete.topic.enable, auto.leader.rebalance.enable,
# leader.imbalance.check.interval.seconds, leader.imbalance.per.broker.percentage.
# Called from: the broker's startup/shutdown code; the blocking methods must run outside
# the asyncio loop (the async wrappers use the default executor).

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable

from kazoo.exceptions import NoNodeError

from fastlog.zk import paths
from fastlog.zk.client import KafkaZkClient, load_session, save_session
from fastlog.zk.controller import ZkController
from fastlog.zk.meta_properties import check_cluster_id
from fastlog.zk.metadata_store import ZkMetadataStore
from fastlog.zk.paths import BrokerInfo, EndPoint

log = logging.getLogger("fastlog.zk.cluster")

SESSION_FILE = "zk-session"
_PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}


class BrokerIdError(Exception):
    """The broker id cannot be settled (conflicting sources); one sentence."""


def _cfg(config, key, default=None):
    try:
        value = config[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


class ZkClusterMember:
    def __init__(self, config, log_dirs: Iterable[str] | None = None):
        self.config = config
        connect = _cfg(config, "zookeeper.connect")
        if not connect:
            raise ValueError("zookeeper.connect is not set: the broker runs on its embedded store")
        session_ms = int(_cfg(config, "zookeeper.session.timeout.ms", 18000))
        conn_ms = int(_cfg(config, "zookeeper.connection.timeout.ms", session_ms))
        self.log_dirs = list(log_dirs if log_dirs is not None else
                             getattr(config, "log_dirs", []) or [])
        self.zk = KafkaZkClient(connect, session_timeout=session_ms / 1000.0,
                                connection_timeout=conn_ms / 1000.0)
        self.broker_id = -1
        self.cluster_id = ""
        self.rack = _cfg(config, "broker.rack")
        self.store: ZkMetadataStore | None = None
        self.controller: ZkController | None = None
        self.broker_epoch = -1

    # -- startup, step by step ---------------------------------------------------------------

    def connect(self) -> str:
        """Open the session, create Kafka's persistent paths, get or create the cluster id."""
        self.zk.start()
        self.zk.create_top_level_paths()
        self.cluster_id = self.zk.get_or_create_cluster_id()
        return self.cluster_id

    def check_log_dir(self, meta_cluster_id: str | None, log_dir: str | None = None) -> str:
        """Refuse a log dir whose meta.properties names another cluster."""
        return check_cluster_id(meta_cluster_id, self.cluster_id, log_dir)

    def resolve_broker_id(self, stored_ids: Iterable[int] = ()) -> int:
        """The broker id: configured, else the one meta.properties holds, else generated
        through /brokers/seqid (above reserved.broker.max.id) when generation is enabled."""
        configured = int(_cfg(self.config, "broker.id", -1))
        if configured < 0:
            configured = int(_cfg(self.config, "node.id", -1))
        stored = set(stored_ids)
        if len(stored) > 1:
            raise BrokerIdError(f"log dirs hold different broker ids {sorted(stored)}")
        reserved = int(_cfg(self.config, "reserved.broker.max.id", 1000))
        if configured >= 0:
            if configured > reserved:
                raise BrokerIdError(f"broker.id {configured} is above reserved.broker.max.id "
                                    f"{reserved}, the range of generated ids")
            if stored and stored != {configured}:
                raise BrokerIdError(f"broker.id {configured} does not match the id "
                                    f"{stored.pop()} stored in meta.properties")
            self.broker_id = configured
        elif stored:
            self.broker_id = stored.pop()
        elif _cfg(self.config, "broker.id.generation.enable", True):
            self.broker_id = self.zk.generate_broker_id(reserved)
        else:
            raise BrokerIdError("broker.id is not set and broker.id.generation.enable=false")
        return self.broker_id

    def register(self, endpoints: Iterable[tuple[str, str, int]]) -> int:
        """Register /brokers/ids/<id> with the advertised (listener, host, port) endpoints,
        ending our own previous session first if it still holds the node. Returns the
        broker epoch."""
        eps = tuple(EndPoint(name, host, int(port), name if name in _PROTOCOLS else "PLAINTEXT")
                    for name, host, port in endpoints)
        info = BrokerInfo(self.broker_id, eps, rack=self.rack)
        path = self._session_path()
        previous = load_session(path) if path else None
        self.broker_epoch = self.zk.register_broker(info, previous_session=previous)
        if path:
            self._save_session(path)
            self.zk.on_new_session(lambda: self._save_session(path))
        return self.broker_epoch

    def start_metadata(self) -> ZkMetadataStore:
        self.store = ZkMetadataStore(self.zk, self.broker_id)
        self.store.start_sync()
        return self.store

    def start_controller(self, listener: Callable | None = None) -> ZkController:
        interval = None
        if _cfg(self.config, "auto.leader.rebalance.enable", True):
            interval = float(_cfg(self.config, "leader.imbalance.check.interval.seconds", 300))
        self.controller = ZkController(
            self.zk, self.broker_id,
            unclean_leader_election=self._unclean_for_topic,
            delete_topic_enable=bool(_cfg(self.config, "delete.topic.enable", True)),
            auto_leader_rebalance_interval=interval,
            leader_imbalance_percentage=int(
                _cfg(self.config, "leader.imbalance.per.broker.percentage", 10)))
        if listener is not None:
            self.controller.add_listener(listener)
        return self.controller.start()

    def _unclean_for_topic(self, topic: str) -> bool:
        # A topic-level override wins over the broker default, as in Kafka.
        t = self.store.topic(topic) if self.store else None
        raw = t.configs.get("unclean.leader.election.enable") if t else None
        if raw is not None:
            return str(raw).strip().lower() == "true"
        return bool(_cfg(self.config, "unclean.leader.election.enable", False))

    # -- shutdown ------------------------------------------------------------------------------

    def controlled_shutdown_local(self) -> set | None:
        """When this broker is the controller, move leadership off it; returns the
        partitions it still leads, or None when another broker is the controller (the
        broker then asks that one: request_controlled_shutdown)."""
        if self.controller is None or not self.controller.is_active:
            return None
        return self.controller.controlled_shutdown(self.broker_id)

    def request_controlled_shutdown(self, timeout: float) -> set | None:
        """Ask the active controller (another broker) to move leadership off this one:
        create the ephemeral /admin/controlled_shutdown/<id> and wait for the controller's
        answer in it. Returns the partitions still led here, or None after `timeout`."""
        kz = self.zk.kazoo
        path = paths.controlled_shutdown_path(self.broker_id)
        try:
            kz.delete(path)  # our own earlier, unanswered request
        except NoNodeError:
            pass
        kz.create(path, paths.encode_controlled_shutdown(self.broker_epoch), ephemeral=True,
                  makepath=True)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                data, _ = kz.get(path)
                _, remaining = paths.decode_controlled_shutdown(data)
                if remaining is not None:
                    return remaining
                time.sleep(0.05)
            return None
        finally:
            try:
                kz.delete(path)
            except Exception:  # noqa: BLE001 - it goes with the session anyway
                pass

    def close(self) -> None:
        """Resign if controller, end the session (registration goes), forget it on disk."""
        if self.controller is not None:
            # Resigning needs ZooKeeper; without it the office goes with the session.
            self.controller.stop(resign=self.zk.connected)
        self.zk.close()
        path = self._session_path()
        if path:
            try:
                os.unlink(path)
            except OSError:
                pass

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    # -- session file ------------------------------------------------------------------------------

    def _session_path(self) -> str | None:
        return os.path.join(self.log_dirs[0], SESSION_FILE) if self.log_dirs else None

    def _save_session(self, path: str) -> None:
        creds = self.zk.session_credentials()
        if creds is None:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            save_session(path, creds)
        except OSError as e:
            log.warning("cannot save ZooKeeper session to %s: %s", path, e)
