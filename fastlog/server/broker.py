# fastlog/server/broker.py — BrokerServer: the broker's lifecycle (Kafka's KafkaServer).
#
# Owns: startup and shutdown order of every broker part — data dirs and meta.properties,
# the metadata store, LogManager, ReplicaManager (opening every hosted partition),
# producer-id allocation, the group coordinator, the socket servers (one per listener),
# and the periodic tasks (retention, flush, checkpoints, producer snapshots). Also the
# topic operations that span several parts (create / delete / reconfigure a topic), so
# handlers and the group coordinator call one place.
# Files: none directly — meta.properties, logs and checkpoints through LogManager, topics
# and ids through the metadata store (it only reads meta.properties to learn broker.id).
# Called from: the asyncio API loop that runs the broker (fastlog.cli.server), only.
"""Broker lifecycle and topic operations."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time

from fastlog._net import SocketServer
from fastlog.server.apis import KafkaApis
from fastlog.server.config import KafkaConfig, parse_properties
from fastlog.server.group import GroupCoordinator
from fastlog.server.log import KafkaStorageError, LogConfig, LogManager
from fastlog.server.log.config import TOPIC_CONFIG_KEYS as STORAGE_TOPIC_KEYS
from fastlog.server.metadata import EmbeddedMetadataStore, MetadataError, TopicState
from fastlog.server.producer_state import ProducerIdManager
from fastlog.server.replica_manager import Partition, ReplicaManager

log = logging.getLogger("fastlog.server.broker")

META_PROPERTIES = "meta.properties"
MAX_TOPIC_NAME = 249
# Kafka's producer.id.expiration.check.interval.ms default.
PRODUCER_EXPIRATION_CHECK_MS = 600_000
_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")


class BrokerStartupError(Exception):
    """Startup cannot proceed; the message is one sentence for the operator."""


class BrokerServer:
    def __init__(self, config: KafkaConfig):
        self.config = config
        self.node_id = config.node_id
        self.log_dirs = [os.path.abspath(d) for d in config.log_dirs]
        self.metadata = None
        self.log_manager = None
        self.replica_manager: ReplicaManager | None = None
        self.producer_id_manager: ProducerIdManager | None = None
        self.group_coordinator = None
        self.apis: KafkaApis | None = None
        self.socket_servers: list[SocketServer] = []
        self.advertised_host = ""
        self.advertised_port = 0
        self.bound: list[tuple[str, str, int]] = []
        self._tasks: list[asyncio.Task] = []
        self._log_configs: dict[str, LogConfig] = {}
        self._timestamp_limits: dict[str, tuple[int, int]] = {}  # per topic, from its configs
        self._started = False
        self.stopping = False

    # ------------------------------------------------------------------ startup
    async def startup(self) -> None:
        self._prepare_dirs()
        try:
            self.metadata = EmbeddedMetadataStore(self.log_dirs[0], self.node_id)
        except MetadataError as e:
            raise BrokerStartupError(str(e)) from None
        await self.metadata.start()
        for name in self.metadata.topic_names():
            self._log_configs[name] = self.build_log_config(self.metadata.topic(name).configs)
        try:
            # LogManager checks/writes meta.properties (broker.id, cluster.id) in each dir
            # and recovers the logs (unless the clean-shutdown marker is there).
            self.log_manager = LogManager(
                self.log_dirs, LogConfig.from_broker(self.config), node_id=self.node_id,
                cluster_id=self.metadata.cluster_id, topic_config=self._log_configs.get)
        except KafkaStorageError as e:
            raise BrokerStartupError(str(e)) from None
        self.replica_manager = ReplicaManager(self)
        self.producer_id_manager = ProducerIdManager(self.metadata)
        self._open_partitions()
        # ---- group coordinator hook (issue 5): groups and committed offsets.
        self.group_coordinator = GroupCoordinator(self)
        await self.group_coordinator.startup()
        self.apis = KafkaApis(self)
        loop = asyncio.get_running_loop()
        for _, host, port in self.config.listeners:
            server = SocketServer(
                self.apis.handle, host=host, port=port,
                num_network_threads=self.config["num.network.threads"],
                max_request_size=self.config["socket.request.max.bytes"],
                max_connections=self.config["max.connections"],
                idle_timeout_ms=self.config["connections.max.idle.ms"],
                loop=loop)
            try:
                await server.start()
            except OSError as e:
                await self._stop_servers()
                raise BrokerStartupError(
                    f"cannot listen on {host}:{port}: {e.strerror or e}") from None
            self.socket_servers.append(server)
            self.bound.append(("PLAINTEXT", host, server.port))
        self._set_advertised()
        self._start_periodic_tasks()
        self._started = True
        log.info("broker %d started: %s, data in %s", self.node_id,
                 ", ".join(f"{h}:{p}" for _, h, p in self.bound), ", ".join(self.log_dirs))

    def _prepare_dirs(self) -> None:
        for d in self.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as e:
                raise BrokerStartupError(f"cannot create log dir {d}: {e.strerror or e}") from None
            if not os.access(d, os.W_OK):
                raise BrokerStartupError(f"log dir {d} is not writable")
        stored = None
        for d in self.log_dirs:
            props = _read_properties(os.path.join(d, META_PROPERTIES))
            if props and "broker.id" in props:
                bid = int(props["broker.id"])
                if stored is not None and stored != bid:
                    raise BrokerStartupError(
                        f"log dirs belong to different brokers ({stored} and {bid})")
                stored = bid
        if self.node_id < 0:
            self.node_id = stored if stored is not None else 0
        elif stored is not None and stored != self.node_id:
            raise BrokerStartupError(
                f"broker.id {self.node_id} does not match the id {stored} stored in "
                f"{META_PROPERTIES}; use broker.id={stored} or another log dir")

    def _open_partitions(self) -> None:
        md = self.metadata
        wanted = set()
        for name in md.topic_names():
            state = md.topic(name)
            cfg = self._log_configs[name]
            for p, ps in state.partitions.items():
                if ps.leader == self.node_id:
                    self.replica_manager.make_leader(name, p, cfg, ps.leader_epoch, ps.replicas)
                    wanted.add((name, p))
        # Logs of topics that no longer exist (a deletion interrupted by a crash).
        for lg in list(self.log_manager.all_logs()):
            key = (lg.topic, lg.partition)
            if key not in wanted:
                log.info("deleting orphan log %s-%d", *key)
                self.log_manager.delete_log(*key)

    def _set_advertised(self) -> None:
        adv = self.config.values["advertised.listeners"]
        if adv:
            _, host, port = self.config.advertised_listeners[0]
        else:
            _, host, port = self.bound[0]
        if port == 0:
            port = self.bound[0][2]
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1" if host != "::" else "::1"
        self.advertised_host, self.advertised_port = host, port

    # ------------------------------------------------------------------ periodic tasks
    def _start_periodic_tasks(self) -> None:
        cfg = self.config
        self._every("log-retention", cfg["log.retention.check.interval.ms"],
                    lambda: self.log_manager.cleanup_logs())
        # Kafka's flusher runs every log.flush.scheduler.interval.ms (default: never); we
        # check at least every second so a topic's flush.ms is honoured too. The check is
        # a loop over the logs; fsyncs run on LogManager's I/O worker.
        flush_ms = min(cfg["log.flush.scheduler.interval.ms"], 1000)
        self._every("log-flusher", flush_ms, lambda: self.log_manager.flush_dirty_logs())
        self._every("producer-id-expiration", PRODUCER_EXPIRATION_CHECK_MS,
                    self._expire_producers)
        self._every("recovery-point-checkpoint", cfg["log.flush.offset.checkpoint.interval.ms"],
                    self._checkpoint)
        self._every("log-start-offset-checkpoint",
                    cfg["log.flush.start.offset.checkpoint.interval.ms"],
                    lambda: self.log_manager.checkpoint_log_start_offsets())

    def _expire_producers(self) -> None:
        now = int(time.time() * 1000)
        for p in self.replica_manager.partitions.values():
            p.producer_state.remove_expired(now, self.config["producer.id.expiration.ms"])

    def _checkpoint(self) -> None:
        self.log_manager.checkpoint_recovery_points()
        self.replica_manager.checkpoint_producer_state()

    def _every(self, name: str, interval_ms: int, fn) -> None:
        if interval_ms <= 0:
            return

        async def run():
            while True:
                await asyncio.sleep(interval_ms / 1000.0)
                try:
                    res = fn()
                    if asyncio.iscoroutine(res):
                        await res
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("periodic task %s failed", name)

        self._tasks.append(asyncio.get_running_loop().create_task(run(), name=name))

    # ------------------------------------------------------------------ shutdown
    async def shutdown(self) -> None:
        """Orderly stop: no new requests, wake parked ones, checkpoints, clean marker."""
        if self.stopping:
            return
        self.stopping = True
        log.info("broker %d shutting down", self.node_id)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        if self.replica_manager is not None:
            self.replica_manager.fetch_purgatory.wake_all()
        await self._stop_servers()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        if self.log_manager is not None:
            self.log_manager.shutdown()
        if self.metadata is not None:
            await self.metadata.stop()
        log.info("broker %d shut down cleanly", self.node_id)

    async def _stop_servers(self) -> None:
        for s in self.socket_servers:
            try:
                await s.stop()
            except Exception:  # noqa: BLE001 - keep shutting down
                log.exception("stopping socket server failed")
        self.socket_servers.clear()

    # ------------------------------------------------------------------ topics
    def topic_name_problem(self, name: str) -> str | None:
        """Why `name` cannot be a topic (Kafka's rules), or None."""
        if not name:
            return "Topic name is illegal, it can't be empty"
        if name in (".", ".."):
            return 'Topic name cannot be "." or ".."'
        if len(name) > MAX_TOPIC_NAME:
            return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} "
                    f"characters, topic name: {name}")
        if not _TOPIC_CHARS.match(name):
            return (f'Topic name "{name}" is illegal, it contains a character other than '
                    "ASCII alphanumerics, '.', '_' and '-'")
        if "." in name or "_" in name:
            norm = name.replace(".", "_")
            for other in self.metadata.topic_names():
                if other != name and other.replace(".", "_") == norm:
                    return f"Topic '{name}' collides with existing topic: {other}"
        return None

    def build_log_config(self, overrides: dict[str, str]) -> LogConfig:
        """Storage's view of a topic: broker defaults plus the overrides storage knows
        (the others, e.g. message.timestamp.after.max.ms, are the broker's business)."""
        return LogConfig.from_broker(
            self.config, {k: v for k, v in overrides.items() if k in STORAGE_TOPIC_KEYS})

    def timestamp_limits(self, topic: str) -> tuple[int, int]:
        """(before.max.ms, after.max.ms) for CreateTime validation (KIP-937); the
        deprecated message.timestamp.difference.max.ms caps both when smaller."""
        cached = self._timestamp_limits.get(topic)
        if cached is not None:
            return cached
        props = self.config.topic_defaults()
        state = self.metadata.topic(topic)
        if state is not None:
            for key in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
                        "message.timestamp.difference.max.ms"):
                if key in state.configs:
                    props[key] = int(state.configs[key])
        diff = props["message.timestamp.difference.max.ms"]
        limits = (min(props["message.timestamp.before.max.ms"], diff),
                  min(props["message.timestamp.after.max.ms"], diff))
        self._timestamp_limits[topic] = limits
        return limits

    def log_config(self, topic: str) -> LogConfig:
        cfg = self._log_configs.get(topic)
        if cfg is None:
            cfg = LogConfig.from_broker(self.config)
        return cfg

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str], internal: bool = False) -> TopicState:
        """Create and open a topic (validated by the caller); KeyError if it exists."""
        cfg = self.build_log_config(configs)
        # One node: it is the only replica (handlers refuse a larger replication factor).
        replicas = [[self.node_id] for _ in range(partitions)]
        state = await self.metadata.create_topic(name, partitions, replicas, configs, internal)
        self._log_configs[name] = cfg
        for p, ps in state.partitions.items():
            self.replica_manager.make_leader(name, p, cfg, ps.leader_epoch, ps.replicas)
        log.info("created topic %s with %d partitions%s", name, partitions,
                 f" and configs {configs}" if configs else "")
        return state

    async def create_internal_topic(self, name: str, partitions: int,
                                    configs: dict[str, str]) -> TopicState:
        """For the group coordinator (__consumer_offsets): create once, open, return."""
        state = self.metadata.topic(name)
        if state is not None:
            return state
        return await self.create_topic(name, partitions, 1, dict(configs), internal=True)

    async def delete_topic(self, name: str) -> None:
        state = self.metadata.topic(name)
        if state is None:
            raise KeyError(name)
        await self.metadata.delete_topic(name)
        self._log_configs.pop(name, None)
        self._timestamp_limits.pop(name, None)
        for p in state.partitions:
            self.replica_manager.delete_partition(name, p)
        log.info("deleted topic %s", name)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        cfg = self.build_log_config(configs)
        await self.metadata.set_topic_configs(name, configs)
        self._log_configs[name] = cfg
        self._timestamp_limits.pop(name, None)
        self.replica_manager.update_config(name, cfg)
        log.info("topic %s configs are now %s", name, configs or "the broker defaults")

    def end_offset_for_epoch(self, p: Partition, epoch: int) -> tuple[int, int]:
        """(leader epoch, end offset) for OffsetForLeaderEpoch: the start offset of the
        first epoch above `epoch`, or the log end for the current epoch."""
        if epoch == p.leader_epoch:
            return p.leader_epoch, p.log.log_end_offset
        if epoch > p.leader_epoch:
            return -1, -1
        cache = getattr(p.log, "leader_epoch_cache", None)
        if cache is not None:
            found = cache.end_offset_for(epoch, p.log.log_end_offset)
            if found is not None:
                return found
        return -1, -1


def _read_properties(path: str) -> dict[str, str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise BrokerStartupError(f"cannot read {path}: {e}") from None
    return dict(parse_properties(text))
