# fastlog/server/broker.py — BrokerServer: the broker's lifecycle (Kafka's KafkaServer).
#
# Owns: startup and shutdown order of every broker part — data dirs and meta.properties,
# the metadata store, LogManager, ReplicaManager (opening every hosted partition),
# producer-id allocation, the group coordinator, the socket servers (one per listener),
# and the periodic tasks (retention, flush, checkpoints, producer snapshots). Also the
# topic operations that span several parts (create / delete / reconfigure a topic), so
# handlers and the group coordinator call one place.
# Two modes behind one MetadataStore: single node (no zookeeper.connect: the embedded JSON
# store, this broker leads every partition) and cluster mode (zookeeper.connect set:
# fastlog.zk's ZkClusterMember joins the cluster in the order fastlog/zk/__init__.py
# documents; the LeadershipTracker turns recorded leadership into replica-manager role
# changes and group-coordinator elections; SIGTERM first moves leadership off this broker
# — the controlled shutdown described at `_controlled_shutdown`).
# A failed log dir (LogManager's failure channel, any thread) is handled on the loop: its
# partitions go offline, the controller is told (cluster mode); with every dir failed the
# broker stops with exit code 1 (`halted`), as Kafka halts.
# Files: none directly — meta.properties, logs and checkpoints through LogManager, topics
# and ids through the metadata store (it only reads meta.properties to learn broker.id and
# cluster.id).
# With authorizer.class.name set, the ACL authorizer (fastlog/server/authz.py) loads its
# ACLs before the listeners open and follows the store's changes until shutdown.
# Dynamic broker configs (KIP-226, fastlog/server/dynamic_config.py) come from the metadata
# store at startup and after each change (AlterConfigs here, or a notice from another
# broker); apply_dynamic_configs hands them to the logs, the listeners and the cleaner.
# Called from: the asyncio API loop that runs the broker (fastlog.cli.server), only; the
# blocking ZooKeeper steps run in the loop's default executor.
"""Broker lifecycle and topic operations."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import threading
import time

from fastlog._net import ConnectionQuotas, SocketServer
from fastlog.metadata import (
    DEFAULT_BROKER_ENTITY,
    EmbeddedMetadataStore,
    MetadataError,
    PartitionState,
    TopicState,
)
from fastlog.protocol import Errors, KafkaApiError
from fastlog.protocol.topics import topic_name_problem
from fastlog.security import SecurityConfigError, reload_keystore, server_context, tls_warnings
from fastlog.security.acl import AclStoreError
from fastlog.security.quota import ClientQuotas
from fastlog.server.apis import KafkaApis
from fastlog.server.authenticator import build_listener_security
from fastlog.server.authz import build_authorizer
from fastlog.server.config import (
    TLS_PROTOCOLS,
    KafkaConfig,
    http_listener,
    parse_connection_overrides,
    parse_properties,
)
from fastlog.server.dynamic_config import (
    CLEANER_KEYS,
    CONNECTION_KEYS,
    DynamicBrokerConfig,
    DynamicConfigError,
    keystore_listener,
)
from fastlog.server.fetch_session import FetchManager
from fastlog.server.group import GroupCoordinator
from fastlog.server.inter_broker import inter_broker_security
from fastlog.server.log import KafkaStorageError, LogConfig, LogManager
from fastlog.server.log.config import TOPIC_CONFIG_KEYS as STORAGE_TOPIC_KEYS
from fastlog.server.log.segment import READ_MAP_LIMIT, READ_MAPS
from fastlog.server.producer_state import ProducerIdManager
from fastlog.server.replica_manager import Partition, ReplicaManager
from fastlog.server.request_metrics import RequestMetrics
from fastlog.server.topic_stats import BrokerTopicStats
from fastlog.server.txn import TXN_STATE_TOPIC, TransactionCoordinator

log = logging.getLogger("fastlog.server.broker")

META_PROPERTIES = "meta.properties"
GROUP_METADATA_TOPIC = "__consumer_offsets"
# How long a stopping broker waits for the controller to move its leadership away.
CONTROLLED_SHUTDOWN_TIMEOUT_S = 10.0
# How long a stopping broker waits for its ZooKeeper session to close (resigning the
# controller office first when it holds it).
ZK_CLOSE_TIMEOUT_S = 5.0
# Kafka's producer.id.expiration.check.interval.ms default.
PRODUCER_EXPIRATION_CHECK_MS = 600_000


# Open files a hosted partition keeps: its active segment's .log (indexes are mappings
# without a descriptor; reads' mappings of .log files are READ_MAPS.limit at most).
FILES_PER_PARTITION = 1
# Kept free for connections, checkpoints, rolls and ZooKeeper.
SPARE_FILES = 1024
# Partitions one CreateTopics/CreatePartitions may add, whatever the open-file limit says
# (an unlimited one included): Linux caps a process at 2**20 open files (fs.nr_open), and
# each partition keeps FILES_PER_PARTITION of them.
MAX_PARTITIONS_PER_REQUEST = (1 << 20) // FILES_PER_PARTITION
# Kept free of connections (accepts pause first), besides the files already open and the
# read mappings' descriptors: checkpoints, ZooKeeper, the cleaner, rolls.
CONNECTION_SPARE_FILES = 64


def raise_open_file_limit() -> None:
    """Lift the soft open-file limit to the hard one, as servers that hold a file per
    partition do: the distribution's default soft limit (often 1024) is a few hundred
    partitions."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        pass


def size_read_maps() -> None:
    """At most a sixteenth of the open-file limit for the read mappings of .log files
    (each holds a descriptor; segment.READ_MAPS), between 64 and READ_MAP_LIMIT."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return
    if soft != resource.RLIM_INFINITY:
        READ_MAPS.limit = max(64, min(READ_MAP_LIMIT, soft // 16))


def spare_files() -> int | None:
    """Open files this process may still open beyond SPARE_FILES; None when unknown."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return None
        return soft - len(os.listdir("/proc/self/fd")) - SPARE_FILES
    except (OSError, ValueError):
        return None


class BrokerStartupError(Exception):
    """Startup cannot proceed; the message is one sentence for the operator."""


def check_can_listen(listeners) -> None:
    """Bind (without listening) each listener's address the way SocketServer.start will,
    and let go at once: a port in use stops the broker before it creates anything on disk.
    BrokerStartupError names the first listener that cannot bind."""
    for _, host, port in listeners:
        try:
            family, _, _, _, addr = socket.getaddrinfo(
                host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(addr)
        except OSError as e:
            raise BrokerStartupError(
                f"cannot listen on {host}:{port}: {e.strerror or e}") from None


class BrokerServer:
    def __init__(self, config: KafkaConfig):
        self.config = config
        # The dynamic layers over `config` (KIP-226); they replace config.values live.
        self.dynamic_config = DynamicBrokerConfig(config)
        self.node_id = config.node_id
        self.log_dirs = [os.path.abspath(d) for d in config.log_dirs]
        self.metadata = None
        self.log_manager = None
        self.replica_manager: ReplicaManager | None = None
        self.producer_id_manager: ProducerIdManager | None = None
        self.group_coordinator = None
        self.txn_coordinator = None
        self.apis: KafkaApis | None = None
        self.listener_security = {}   # listener name -> authenticator.ListenerSecurity
        # fastlog.security.authorizer.AclAuthorizer when authorizer.class.name is set
        # (fastlog/server/authz.py), else None: every principal may do everything.
        self.authorizer = None
        self.socket_servers: list[SocketServer] = []
        self.advertised_host = ""
        self.advertised_port = 0
        self.bound: list[tuple[str, str, int]] = []
        self._tasks: list[asyncio.Task] = []
        self._tls_contexts_by_listener: dict = {}  # listener -> its live ssl.SSLContext
        self._pause_restarts: dict[str, asyncio.Event] = {}  # periodic task -> its restart
        self._log_configs: dict[str, LogConfig] = {}
        self._timestamp_limits: dict[str, tuple[int, int]] = {}  # per topic, from its configs
        self._started = False
        self.stopping = False
        # Why the broker stopped itself (every log dir failed), else None; `on_halt` is
        # called then (the command line's stop), and the process exits with code 1.
        self.halted: str | None = None
        self.on_halt = None
        # cluster mode (zookeeper.connect): fastlog.zk.cluster.ZkClusterMember, the
        # LeadershipTracker, and what the group coordinator asked to create lazily.
        self.cluster = None
        self.leadership = None
        self._registered = False
        self._internal_topic_specs: dict[str, tuple[int, dict[str, str]]] = {}
        self._internal_topic_lock = asyncio.Lock()
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        # Counters the hot paths bump (fastlog/server/topic_stats.py, request_metrics.py);
        # with http.listener set, the HTTP endpoint (fastlog/server/http.py) serves them.
        self.topic_stats = BrokerTopicStats()
        self.request_metrics = RequestMetrics()
        # Client quotas in force (fastlog/security/quota.py), from the metadata store at
        # startup and on every change; the request path reads quotas.active first.
        self.quotas = ClientQuotas(config["quota.window.num"],
                                   float(config["quota.window.size.seconds"]))
        # Fetch sessions (KIP-227), fastlog/server/fetch_session.py.
        self.fetch_manager = FetchManager(config["max.incremental.fetch.session.cache.slots"],
                                          config["fastlog.fetch.session.eviction.ms"])
        self.http_server = None
        # fastlog.client ClientSecurity of the connections to other brokers (cluster mode).
        self.inter_broker_security = None

    # ------------------------------------------------------------------ startup
    async def startup(self) -> None:
        tls_contexts = self._tls_contexts_by_listener = self._tls_contexts()
        if self.config["zookeeper.connect"]:
            # How this broker connects to the others (replica fetchers): checked before
            # anything starts, so a missing credential is one sentence at startup.
            self.inter_broker_security = inter_broker_security(self.config)
        check_can_listen(self.config.listeners)
        if self.config["http.listener"]:
            self._start_http(*http_listener(self.config["http.listener"]))
        raise_open_file_limit()
        size_read_maps()
        stored_id = self._prepare_dirs()
        if self.config["zookeeper.connect"]:
            await self._join_cluster(stored_id)
        else:
            try:
                self.metadata = EmbeddedMetadataStore(self.log_dirs[0], self.node_id)
            except MetadataError as e:
                raise BrokerStartupError(str(e)) from None
            await self.metadata.start()
        self._reload_keystores(self._take_dynamic_configs())
        for name in self.metadata.topic_names():
            self._log_configs[name] = self._safe_log_config(name, self.metadata.topic(name).configs)
        self.quotas_changed()
        try:
            # LogManager checks/writes meta.properties (broker.id, cluster.id) in each dir
            # and recovers the logs (unless the clean-shutdown marker is there).
            self.log_manager = LogManager(
                self.log_dirs, LogConfig.from_broker(self.config), node_id=self.node_id,
                cluster_id=self.metadata.cluster_id, topic_config=self._log_configs.get,
                cleaner_enable=self.config["log.cleaner.enable"],
                dedupe_buffer_size=self.config["log.cleaner.dedupe.buffer.size"],
                verification_interval_ms=self.config["fastlog.log.verification.interval.ms"],
                verification_bytes_per_sec=self.config["fastlog.log.verification.bytes.per.sec"],
                recovery_threads_per_data_dir=self.config["num.recovery.threads.per.data.dir"])
        except KafkaStorageError as e:
            raise BrokerStartupError(str(e)) from None
        self._event_loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.log_manager.dir_failure_channel.add_listener(self._log_dir_failed)
        self.replica_manager = ReplicaManager(self)
        self.producer_id_manager = ProducerIdManager(self.metadata)
        if self.cluster is None:
            self._open_partitions()
        else:
            # Cluster mode: the LeadershipTracker opens partitions once registered.
            await self._delete_stray_logs()
        # ---- group coordinator hook (issue 5): groups and committed offsets.
        self.group_coordinator = GroupCoordinator(self)
        await self.group_coordinator.startup()
        # ---- transaction coordinator hook (issue 20): transactional ids.
        self.txn_coordinator = TransactionCoordinator(self)
        await self.txn_coordinator.startup()
        self.listener_security = build_listener_security(self.config, self.metadata)
        try:
            self.authorizer = await _off_loop(
                lambda: build_authorizer(self.config, self.log_dirs, self.cluster), None)
        except (AclStoreError, SecurityConfigError) as e:
            raise BrokerStartupError(f"cannot load the ACLs: {e}") from None
        self.apis = KafkaApis(self)
        loop = asyncio.get_running_loop()
        # max.connections counts every listener's connections; the inter-broker listener
        # accepts at the limit when there are others (Kafka's protected listener)
        quotas = ConnectionQuotas(self.config["max.connections"])
        inter_broker = self.config.inter_broker_listener_name
        for name, host, port in self.config.listeners:
            tls = {"ssl_context": tls_contexts[name]} if name in tls_contexts else {}
            server = SocketServer(
                self.request_metrics.instrument(self.apis.handle, name),
                host=host, port=port, **tls,
                num_network_threads=self.config["num.network.threads"],
                max_request_size=self.config["socket.request.max.bytes"],
                max_connections=self.config.listener_config(name)["max.connections"],
                connection_quotas=quotas,
                protected=name == inter_broker and len(self.config.listeners) > 1,
                idle_timeout_ms=self.config["connections.max.idle.ms"],
                max_connections_per_ip=self.config["max.connections.per.ip"],
                max_connections_per_ip_overrides=parse_connection_overrides(
                    self.config["max.connections.per.ip.overrides"]),
                queued_max_request_bytes=self.config["queued.max.request.bytes"],
                queued_max_requests=self.config["queued.max.requests"],
                receive_timeout_ms=self.config["fastlog.request.receive.timeout.ms"],
                reserved_files=lambda: CONNECTION_SPARE_FILES + READ_MAPS.limit,
                loop=loop)
            try:
                await server.start()
            except OSError as e:
                await self._stop_servers()
                raise BrokerStartupError(
                    f"cannot listen on {host}:{port}: {e.strerror or e}") from None
            self.socket_servers.append(server)
            self.bound.append((name, host, server.port))
        self._set_advertised()
        if self.cluster is not None:
            await self._register_in_cluster()
        self._start_periodic_tasks()
        self._started = True
        log.info("broker %d started: %s, data in %s", self.node_id,
                 ", ".join(f"{h}:{p}" for _, h, p in self.bound), ", ".join(self.log_dirs))

    def _start_http(self, host: str, port: int) -> None:
        """The HTTP endpoint, on its own thread: up before the logs load, so that
        /health/ready can say the broker is starting."""
        from fastlog.server.http import HttpServer
        from fastlog.server.metrics import BrokerMetrics
        server = HttpServer(self, BrokerMetrics(self), host, port)
        try:
            server.start()
        except OSError as e:
            raise BrokerStartupError(
                f"cannot listen on {host}:{port} (http.listener): {e.strerror or e}") from None
        self.http_server = server

    def _tls_contexts(self) -> dict:
        """The ssl.SSLContext of each SSL and SASL_SSL listener, by name, from its resolved
        ssl.* keys (listener.name.<listener>.ssl.* first); a bad keystore, truststore or
        setting is one sentence (SecurityConfigError: the command exits 2)."""
        contexts = {}
        for name, _, _ in self.config.listeners:
            if self.config.listener_security_protocol(name) not in TLS_PROTOCOLS:
                continue
            cfg = self.config.listener_config(name)
            try:
                contexts[name] = server_context(cfg)
            except SecurityConfigError as e:
                raise SecurityConfigError(f"listener {name}: {e}") from None
            for warning in tls_warnings(cfg):
                log.warning("listener %s: %s", name, warning)
        return contexts

    # ------------------------------------------------------------------ cluster mode
    async def _join_cluster(self, stored_id: int | None) -> None:
        """ZooKeeper session, cluster id (checked against every log dir's meta.properties),
        broker id, then the metadata cache; registration waits for the bound listeners."""
        from kazoo.handlers.threading import KazooTimeoutError

        from fastlog.zk.cluster import BrokerIdError, ZkClusterMember
        from fastlog.zk.meta_properties import InconsistentClusterIdError

        connect = self.config["zookeeper.connect"]
        member = ZkClusterMember(self.config, self.log_dirs)
        self.cluster = member

        def join():
            member.connect()
            for d in self.log_dirs:
                props = _read_properties(os.path.join(d, META_PROPERTIES)) or {}
                member.check_log_dir(props.get("cluster.id"), d)
            member.resolve_broker_id([stored_id] if stored_id is not None else [])
            return member.start_metadata()

        try:
            # On a daemon thread (_off_loop): a SIGTERM while ZooKeeper is still being
            # reached stops the broker at once instead of after the connection timeout.
            self.metadata = await _off_loop(join, None)
        except (InconsistentClusterIdError, BrokerIdError, ValueError) as e:
            raise BrokerStartupError(str(e)) from None
        except KazooTimeoutError:
            raise BrokerStartupError(
                f"cannot connect to ZooKeeper at {connect} within "
                f"{member.zk.connection_timeout:g} s") from None
        except Exception as e:  # noqa: BLE001 - one sentence for the operator
            raise BrokerStartupError(f"cannot join the cluster at {connect}: {e!r}") from None
        self.node_id = member.broker_id

    async def _register_in_cluster(self) -> None:
        """Publish /brokers/ids/<id> with the advertised listeners, stand as controller
        candidate, and start following recorded leadership."""
        from fastlog.zk.client import BrokerIdInUseError
        from fastlog.zk.leadership import LeadershipTracker

        loop = asyncio.get_running_loop()
        endpoints = self.advertised_endpoints()
        member = self.cluster

        def register():
            member.register(endpoints)
            member.start_controller()

        try:
            await loop.run_in_executor(None, register)
        except BrokerIdInUseError as e:
            raise BrokerStartupError(str(e)) from None
        except Exception as e:  # noqa: BLE001
            raise BrokerStartupError(f"cannot register broker {self.node_id}: {e!r}") from None
        self._registered = True
        self._event_loop = loop
        self.metadata.add_listener(self._on_metadata_event)
        self.apply_dynamic_configs()  # any change made while this broker was starting
        self.leadership = LeadershipTracker(self.metadata, self.node_id, _ReplicaRoles(self), loop)
        self.leadership.start()

    def advertised_endpoints(self) -> list[tuple[str, str, int]]:
        """(listener, host, port) as clients should reach this broker: advertised.listeners
        (listeners when unset), port 0 replaced by the bound port, a wildcard host by
        loopback."""
        out = []
        bound_ports = {name: port for name, _, port in self.bound}
        for name, host, port in self.config.advertised_listeners:
            if port == 0:
                port = bound_ports.get(name, port)
            if host in ("", "0.0.0.0", "::"):
                host = "127.0.0.1" if host != "::" else "::1"
            out.append((name, host, port))
        return out

    def _on_metadata_event(self, kind: str, name) -> None:
        # kazoo's thread: hand topic config changes to the loop (roles go through the
        # LeadershipTracker).
        if kind in ("config", "broker-config") and not self.stopping:
            handle = (self._topic_config_changed if kind == "config" else
                      lambda _: self.apply_dynamic_configs())
            try:
                self._event_loop.call_soon_threadsafe(handle, name)
            except RuntimeError:  # loop closed while stopping
                pass
        elif kind in ("user", "client") and not self.stopping:
            try:
                self._event_loop.call_soon_threadsafe(self.quotas_changed)
            except RuntimeError:  # loop closed while stopping
                pass

    def quotas_changed(self) -> None:
        """Install the client quotas the metadata store holds now (API loop)."""
        self.quotas.replace_all(self.metadata.quota_configs())

    def _topic_config_changed(self, topic: str) -> None:
        state = self.metadata.topic(topic)
        if state is None or self.replica_manager is None:
            return
        cfg = self._safe_log_config(topic, state.configs)
        self._log_configs[topic] = cfg
        self._timestamp_limits.pop(topic, None)
        self.replica_manager.update_config(topic, cfg)
        log.info("topic %s configs are now %s", topic, state.configs or "the broker defaults")

    async def _delete_stray_logs(self) -> None:
        """Logs of topics deleted while this broker was away, or of partitions it no longer
        replicates (cluster mode, at startup). The cache only nominates them: each one is
        confirmed by reading its topic's assignment from ZooKeeper itself, so a cache still
        filling (ZooKeeper slow) never costs a log."""
        candidates = {}
        for lg in list(self.log_manager.all_logs()):
            state = self.metadata.topic(lg.topic)
            ps = state.partitions.get(lg.partition) if state is not None else None
            if ps is None or self.node_id not in ps.replicas:
                candidates[(lg.topic, lg.partition)] = lg
        if not candidates:
            return
        zk = self.cluster.zk

        def confirmed():
            out = []
            assignments = {}
            for topic, partition in candidates:
                if topic not in assignments:
                    assignments[topic] = zk.get_topic_assignment(topic)
                a = assignments[topic]
                replicas = a.partitions.get(partition) if a is not None else None
                if not replicas or self.node_id not in replicas:
                    out.append((topic, partition))
            return out

        try:
            stray = await asyncio.get_running_loop().run_in_executor(None, confirmed)
        except Exception as e:  # noqa: BLE001 - keep the logs; try at the next start
            log.warning("not deleting stray logs now: %r", e)
            return
        for topic, partition in stray:
            log.info("deleting stray log %s-%d", topic, partition)
            self.log_manager.delete_log(topic, partition)

    def live_brokers(self, listener: str | None = None) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker, this one included. With `listener`
        (the listener a request arrived on) each broker's endpoint of that name, and brokers
        without one are left out, as Kafka does; else each broker's first PLAINTEXT one."""
        own_ep = self.own_endpoint(listener)
        own = None if own_ep is None else (self.node_id, *own_ep, self.config["broker.rack"])
        if self.cluster is None:
            return [own] if own is not None else []
        out = {}
        for bid, info in self.metadata.brokers().items():
            ep = info.endpoint(listener)
            if ep is not None:
                out[bid] = (bid, ep.host, ep.port, info.rack)
        if self.node_id not in out and self._started and own is not None:
            out[self.node_id] = own
        return [out[b] for b in sorted(out)]

    def own_endpoint(self, listener: str | None) -> tuple[str, int] | None:
        if listener is None:
            return self.advertised_host, self.advertised_port
        for name, host, port in self.advertised_endpoints():
            if name == listener:
                return host, port
        return None

    def broker_endpoint(self, node_id: int, listener: str | None = None) -> tuple[str, int]:
        """(host, port) of a live broker (for `listener`, as live_brokers); KeyError if it
        is not live or has no such listener."""
        for bid, host, port, _ in self.live_brokers(listener):
            if bid == node_id:
                return host, port
        raise KeyError(node_id)

    def is_controller(self) -> bool:
        return self.cluster is not None and self.cluster.controller is not None \
            and self.cluster.controller.is_active

    async def elect_leaders(self, unclean: bool, partitions=None
                            ) -> dict[tuple[str, int], str] | None:
        """ElectLeaders on the active controller (this broker): each partition's outcome
        (fastlog.metadata.model's ELECTED, NOT_NEEDED, ...); all partitions when None.
        None when this broker lost the controller office meanwhile. The controller
        thread does the work; the loop only waits for it."""
        from fastlog.zk.controller import NotControllerError

        try:
            return await asyncio.get_running_loop().run_in_executor(
                None, self.cluster.controller.elect_leaders, unclean, partitions)
        except NotControllerError:
            return None

    @property
    def session_expired(self) -> bool:
        """Cluster mode: the ZooKeeper session ended and no new one exists yet."""
        return self.cluster is not None and self.metadata.session_expired

    async def _controlled_shutdown(self) -> None:
        """Move leadership off this broker before it stops (Kafka's controlled shutdown).
        When this broker is the controller it does so itself; otherwise it asks the
        controller through ZooKeeper: an ephemeral /admin/controlled_shutdown/<id> node that
        the active controller watches and answers in place with the partitions this broker
        still leads (fastlog/zk/controller.py). We chose ZooKeeper over Kafka's
        ControlledShutdown request (API key 7) because the request needs no connection to
        the controller's listener, survives a controller change (a new controller answers
        pending requests on election) and dies with this broker's session."""
        if not self._registered or not self.config["controlled.shutdown.enable"]:
            return
        member = self.cluster
        if not member.zk.connected:
            log.warning("controlled shutdown skipped: ZooKeeper is unreachable (the controller "
                        "moves leadership once this broker's session expires)")
            return

        # no follower fetches from here on: the controller takes this broker out of the ISRs
        if self.replica_manager is not None:
            self.replica_manager.stop_following()

        def run():
            remaining = member.controlled_shutdown_local()
            if remaining is None:
                remaining = member.request_controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
            return remaining

        try:
            remaining = await _off_loop(run, CONTROLLED_SHUTDOWN_TIMEOUT_S + 2)
        except Exception as e:  # noqa: BLE001 - a failed controlled shutdown still stops
            log.warning("controlled shutdown failed: %r; stopping anyway", e)
            return
        if remaining is None:
            log.warning("controlled shutdown: no answer from the controller within %g s; "
                        "stopping anyway", CONTROLLED_SHUTDOWN_TIMEOUT_S)
        elif remaining:
            log.info("controlled shutdown: still leading %d partition(s) with no other live "
                     "in-sync replica: %s", len(remaining), sorted(remaining)[:10])
        else:
            log.info("controlled shutdown: leadership moved off broker %d", self.node_id)

    def _prepare_dirs(self) -> int | None:
        """Create the log dirs; return the broker.id stored in their meta.properties."""
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
        if self.config["zookeeper.connect"]:
            return stored  # cluster mode: ZkClusterMember.resolve_broker_id decides
        if self.node_id < 0:
            self.node_id = stored if stored is not None else 0
        elif stored is not None and stored != self.node_id:
            raise BrokerStartupError(
                f"broker.id {self.node_id} does not match the id {stored} stored in "
                f"{META_PROPERTIES}; use broker.id={stored} or another log dir")
        return stored

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
        # Logs no topic claims: a deletion interrupted by a crash, or a metadata file
        # restored from an older copy. Kept aside, not deleted.
        for lg in list(self.log_manager.all_logs()):
            key = (lg.topic, lg.partition)
            if key not in wanted:
                kept = self.log_manager.mark_stray(*key)
                log.warning("log %s-%d belongs to no topic in the metadata: kept as %s "
                            "(remove it by hand if it is not needed)", *key, kept)

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
        if cfg["log.cleaner.enable"]:
            # Read at each pause: log.cleaner.backoff.ms may change live.
            self._every("log-cleaner", lambda: cfg["log.cleaner.backoff.ms"],
                        lambda: self.log_manager.clean_logs())
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

    def _every(self, name: str, interval_ms, fn) -> None:
        """Run fn every interval_ms: an int, or a function read before each pause; then
        _pause_restarts[name].set() starts the pause again with its new value (a dynamic
        config change)."""
        interval = interval_ms if callable(interval_ms) else lambda: interval_ms
        if interval() <= 0:
            return
        restart = self._pause_restarts[name] = asyncio.Event()

        async def run():
            while True:
                restart.clear()
                try:
                    await asyncio.wait_for(restart.wait(), interval() / 1000.0)
                    continue  # the interval changed: pause again, for the new one
                except TimeoutError:
                    pass
                try:
                    res = fn()
                    if asyncio.iscoroutine(res):
                        await res
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("periodic task %s failed", name)

        self._tasks.append(asyncio.get_running_loop().create_task(run(), name=name))

    # ------------------------------------------------------------------ log dir failure
    def _log_dir_failed(self, log_dir: str) -> None:
        """The failure channel's listener (any thread). On the loop thread (an append or a
        roll failed) the dir's partitions refuse requests at once: the loop may serve
        ready sockets before the handling below runs."""
        if threading.get_ident() == self._loop_thread and self.replica_manager is not None:
            self.replica_manager.mark_offline(log_dir)
        self._event_loop.call_soon_threadsafe(self._handle_log_dir_failure, log_dir)

    def _handle_log_dir_failure(self, log_dir: str) -> None:
        """(loop) A log dir failed: its partitions go offline (Kafka's ReplicaManager
        handleLogDirFailure); the controller hears of it; no dir left: stop, exit 1."""
        if self.stopping or self.replica_manager is None:
            return
        self.replica_manager.handle_log_dir_failure(log_dir)
        if not self.log_manager.online_dirs:
            self.halt(f"every log dir has failed ({', '.join(self.log_dirs)}): the broker "
                      f"stops, as Kafka does")
            return
        if self.cluster is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(
                self._propagate_log_dir_event()))

    async def _propagate_log_dir_event(self) -> None:
        """Tell the controller (/log_dir_event_notification, Kafka's znode) so that it
        moves the leadership of this broker's offline replicas to other in-sync ones; the
        replicas themselves go to /fastlog/offline_replicas/<id> first."""
        zk = self.cluster.zk
        offline = [key for key, p in self.replica_manager.partitions.items() if p.offline]

        def tell():
            zk.set_offline_replicas(self.node_id, offline)
            zk.propagate_log_dir_event(self.node_id)
        try:
            await _off_loop(tell, ZK_CLOSE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the partitions stay offline here anyway
            log.warning("cannot tell the controller about the failed log dir: %r", e)

    def halt(self, reason: str) -> None:
        """Stop because the broker cannot go on (one ERROR line, exit code 1)."""
        if self.halted is not None:
            return
        self.halted = reason
        log.error("%s", reason)
        if self.on_halt is not None:
            self.on_halt()

    # ------------------------------------------------------------------ shutdown
    async def shutdown(self) -> None:
        """Orderly stop: no new requests, wake parked ones, checkpoints, clean marker."""
        if self.stopping:
            return
        self.stopping = True
        # A start that failed has already told the operator why, in one sentence.
        say = log.info if self._started else log.debug
        say("broker %d shutting down", self.node_id)
        if self.cluster is not None:
            # While still serving: clients follow the moved leadership to other brokers.
            await self._controlled_shutdown()
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
        if self.leadership is not None:
            self.leadership.stop()
        if self.txn_coordinator is not None:
            await self.txn_coordinator.shutdown()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        if self.log_manager is not None:
            self.log_manager.shutdown()
        if self.authorizer is not None:
            self.authorizer.close()
        if self.metadata is not None:
            await self.metadata.stop()
        if self.cluster is not None:
            # Resigns the controller office if held and closes the session, so the
            # registration goes at once (not after the session timeout).
            try:
                await _off_loop(self.cluster.close, ZK_CLOSE_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - keep shutting down
                log.warning("closing the ZooKeeper session failed: %r", e)
        if self.http_server is not None:
            self.http_server.stop()
        say("broker %d shut down cleanly", self.node_id)

    async def _stop_servers(self) -> None:
        for s in self.socket_servers:
            try:
                await s.stop()
            except Exception:  # noqa: BLE001 - keep shutting down
                log.exception("stopping socket server failed")
        self.socket_servers.clear()

    # ------------------------------------------------------------------ topics
    def topic_name_problem(self, name: str) -> str | None:
        """Why `name` cannot be a topic (Kafka's rules, then no collision with an existing
        topic that differs only in '.' against '_'), or None."""
        problem = topic_name_problem(name)
        if problem is not None:
            return problem
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
            state = self.metadata.topic(topic) if self.metadata is not None else None
            if state is None:
                return LogConfig.from_broker(self.config)
            cfg = self._log_configs[topic] = self._safe_log_config(topic, state.configs)
        return cfg

    def _safe_log_config(self, topic: str, overrides: dict[str, str]) -> LogConfig:
        # Overrides written by another broker or tool may be invalid here: broker defaults.
        try:
            return self.build_log_config(overrides)
        except ValueError as e:
            log.warning("topic %s: ignoring invalid config overrides %s: %s", topic, overrides, e)
            return LogConfig.from_broker(self.config)

    def check_partition_room(self, partitions: int, replication_factor: int = 1) -> None:
        """KafkaApiError(INVALID_PARTITIONS) when this broker could not keep open the files
        of its share of `partitions` new partitions: better refused than half created."""
        live = max(1, len(self.live_brokers()))
        here = -(-partitions * min(replication_factor, live) // live)
        if partitions > MAX_PARTITIONS_PER_REQUEST:
            raise KafkaApiError(
                Errors.INVALID_PARTITIONS,
                f"{partitions} partitions in one request is more than the "
                f"{MAX_PARTITIONS_PER_REQUEST} a broker could open")
        room = spare_files()
        if room is not None and here * FILES_PER_PARTITION > room:
            raise KafkaApiError(
                Errors.INVALID_PARTITIONS,
                f"{here} more partitions on broker {self.node_id} would need "
                f"{here * FILES_PER_PARTITION} open files and it has {max(room, 0)} to "
                f"spare (raise its open-file limit, ulimit -n)")

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str], internal: bool = False,
                           assignment: list[list[int]] | None = None) -> TopicState:
        """Create and open a topic (validated by the caller); KeyError if it exists.
        `assignment`: the replica list of each partition as the client gave it (its first
        replica is the preferred leader), else Kafka's placement."""
        cfg = self.build_log_config(configs)
        if internal:  # (CreateTopics checks before it gets here, validate_only included)
            self.check_partition_room(partitions, replication_factor)
        if self.cluster is not None:
            # The controller elects the leaders (first live replica of each list) and
            # every replica's LeadershipTracker opens its logs.
            replicas = ([list(r) for r in assignment] if assignment is not None
                        else self.metadata.assign_replicas(partitions, replication_factor))
            state = await self.metadata.create_topic(name, partitions, replicas, configs,
                                                     internal)
            self._log_configs[name] = cfg
            log.info("created topic %s with %d partitions, replication factor %d%s", name,
                     partitions, replication_factor, f" and configs {configs}" if configs else "")
            return state
        # One node: it is the only replica (handlers refuse a larger replication factor).
        replicas = [[self.node_id] for _ in range(partitions)]
        state = await self.metadata.create_topic(name, partitions, replicas, configs, internal)
        self._log_configs[name] = cfg
        try:
            await self._lead_new_partitions(state, list(state.partitions), cfg)
        except Exception:
            # All or nothing: a topic whose logs could not all be opened is not kept. (A
            # cancelled request keeps it: its metadata is written and its logs are led
            # once made, or loaded at the next start.)
            await self.delete_topic(name)
            raise
        log.info("created topic %s with %d partitions%s", name, partitions,
                 f" and configs {configs}" if configs else "")
        return state

    async def _lead_new_partitions(self, state: TopicState, partitions, cfg) -> None:
        """One node: make the logs of these new partitions of the topic all at once, off
        the loop and on disk before this returns (LogManager.create_logs), then lead them.
        They are led once made even if the caller is cancelled meanwhile (the metadata
        names them already); not if the topic was deleted meanwhile."""
        loop = asyncio.get_running_loop()
        lm = self.log_manager
        name = state.name
        fut = lm.create_logs(name, {p: state.partitions[p].leader_epoch for p in partitions},
                             cfg)
        led = loop.create_future()

        def lead() -> None:
            try:
                lm.take_created(name, fut)
                current = self.metadata.topic(name)
                for p in partitions:
                    if current is None or current.topic_id != state.topic_id:
                        lm.delete_log(name, p)  # deleted while its logs were being made
                        continue
                    ps = state.partitions[p]
                    self.replica_manager.make_leader(name, p, cfg, ps.leader_epoch,
                                                     ps.replicas)
            except BaseException as e:
                if led.done():
                    log.error("topic %s: opening its new partitions failed: %s", name, e)
                else:
                    led.set_exception(e)
                return
            if not led.done():
                led.set_result(None)

        fut.add_done_callback(lambda _: loop.call_soon_threadsafe(lead))
        await led

    async def create_internal_topic(self, name: str, partitions: int,
                                    configs: dict[str, str]) -> TopicState:
        """For the coordinators (__consumer_offsets, __transaction_state): create once,
        open, return."""
        state = self.metadata.topic(name)
        if state is not None:
            return state
        if self.cluster is not None:
            # Cluster mode creates it on first use (FindCoordinator), as Kafka does, so the
            # partitions spread over the brokers that are up by then, not the first one.
            self._internal_topic_specs[name] = (partitions, dict(configs))
            return None
        try:
            return await self.create_topic(name, partitions, 1, dict(configs), internal=True)
        except KafkaApiError as e:  # (at startup: the configured partition count)
            raise BrokerStartupError(f"cannot create {name}: {e.message}") from None

    async def ensure_internal_topic(self, name: str) -> TopicState | None:
        """Cluster mode: create an internal topic a coordinator asked for, with
        offsets.topic.replication.factor (transaction.state.log.replication.factor for
        __transaction_state) replicas; None while fewer brokers are live (Kafka answers
        COORDINATOR_NOT_AVAILABLE then)."""
        state = self.metadata.topic(name)
        if state is not None or name not in self._internal_topic_specs:
            return state
        async with self._internal_topic_lock:
            state = self.metadata.topic(name)
            if state is not None:
                return state
            partitions, configs = self._internal_topic_specs[name]
            rf_key = ("transaction.state.log.replication.factor" if name == TXN_STATE_TOPIC
                      else "offsets.topic.replication.factor")
            rf = int(self.config[rf_key])
            live = len(self.live_brokers())
            if live < rf:
                log.info("not creating %s yet: %d live broker(s), %s is %d", name, live,
                         rf_key, rf)
                return None
            try:
                return await self.create_topic(name, partitions, rf, configs, internal=True)
            except KeyError:  # another broker created it meanwhile
                return self.metadata.topic(name)

    async def delete_topic(self, name: str) -> None:
        state = self.metadata.topic(name)
        if state is None:
            raise KeyError(name)
        await self._metadata_write(self.metadata.delete_topic, name)
        self._log_configs.pop(name, None)
        self._timestamp_limits.pop(name, None)
        self.topic_stats.remove_topic(name)
        if self.cluster is None:
            # (cluster mode: the controller deletes it; every replica's LeadershipTracker
            # then stops and deletes its logs)
            for p in state.partitions:
                self.replica_manager.delete_partition(name, p)
        log.info("deleted topic %s", name)

    async def _metadata_write(self, fn, *args):
        """A metadata change a full disk must not refuse (it is how space comes back):
        on ENOSPC, once more after the log dirs' space reserve is released."""
        try:
            return await fn(*args)
        except OSError as e:
            if e.errno != errno.ENOSPC or not self.log_manager.release_space_reserve():
                raise
        return await fn(*args)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        cfg = self.build_log_config(configs)
        await self._metadata_write(self.metadata.set_topic_configs, name, configs)
        self._log_configs[name] = cfg
        self._timestamp_limits.pop(name, None)
        self.replica_manager.update_config(name, cfg)
        log.info("topic %s configs are now %s", name, configs or "the broker defaults")

    # ------------------------------------------------------------------ dynamic broker configs
    def _take_dynamic_configs(self) -> set[str]:
        """Take the stored dynamic layers (this broker's and the cluster default) into
        the configuration; returns the keys whose value changed."""
        changed = self.dynamic_config.update(
            self.metadata.broker_config(DEFAULT_BROKER_ENTITY),
            self.metadata.broker_config(str(self.node_id)))
        if changed:
            # Names only: a value may be a secret.
            log.info("dynamic broker configs changed: %s", ", ".join(sorted(changed)))
        return changed

    def _reload_keystores(self, changed) -> None:
        """Read again the keystore of each TLS listener named in `changed` (keys or
        listener names) into its live context; a keystore that cannot be loaded leaves
        the listener with the one it has."""
        listeners = {keystore_listener(k) or k for k in changed}
        for name, ctx in self._tls_contexts_by_listener.items():
            if name not in listeners:
                continue
            cfg = self.config.listener_config(name)
            try:
                reload_keystore(ctx, cfg)
            except SecurityConfigError as e:
                log.warning("listener %s keeps its keystore: %s", name, e)
                continue
            log.info("listener %s: keystore reloaded from %s", name,
                     cfg.get("ssl.keystore.location"))

    def apply_dynamic_configs(self, reload_keystores=()) -> None:
        """Take the stored dynamic layers and apply what changed live: topic logs follow
        the log.* defaults they inherit, listeners the connection limits and their
        keystores (those of `reload_keystores` too, a file replaced at the same path)."""
        if self.replica_manager is None or self.stopping:
            return
        changed = self._take_dynamic_configs()
        self._reload_keystores(changed | set(reload_keystores))
        if changed & CLEANER_KEYS and self.log_manager.cleaner is not None:
            self.log_manager.cleaner.dedupe_buffer_size = \
                self.config["log.cleaner.dedupe.buffer.size"]
            if "log.cleaner.backoff.ms" in changed and "log-cleaner" in self._pause_restarts:
                self._pause_restarts["log-cleaner"].set()
        if {k for k in changed if keystore_listener(k) is None} - CONNECTION_KEYS - CLEANER_KEYS:
            self.log_manager.default_config = LogConfig.from_broker(self.config)
            self._timestamp_limits.clear()
            for name in self.metadata.topic_names():
                state = self.metadata.topic(name)
                if state is None:
                    continue
                cfg = self._safe_log_config(name, state.configs)
                if cfg != self._log_configs.get(name):
                    self._log_configs[name] = cfg
                    self.replica_manager.update_config(name, cfg)
        if changed & CONNECTION_KEYS:
            v = self.config.values
            for (name, _, _), server in zip(self.bound, self.socket_servers, strict=False):
                server.set_connection_limits(
                    self.config.listener_config(name)["max.connections"],
                    v["max.connections.per.ip"],
                    parse_connection_overrides(v["max.connections.per.ip.overrides"]))
            if self.socket_servers:
                self.socket_servers[0].quotas.set_max_connections(v["max.connections"])

    async def alter_broker_configs(self, entity: str, configs: dict[str, str],
                                   validate_only: bool = False) -> None:
        """Replace the dynamic configs of `entity` (this broker's id, or "<default>"):
        KafkaApiError(INVALID_REQUEST) with Kafka's sentence when a key is not dynamic or
        the result is invalid; else stored (every broker told, in a cluster) and applied."""
        try:
            self.dynamic_config.validate(configs, entity != DEFAULT_BROKER_ENTITY)
        except DynamicConfigError as e:
            raise KafkaApiError(Errors.INVALID_REQUEST, str(e)) from None
        if validate_only:
            return
        await self._metadata_write(self.metadata.set_broker_config, entity, configs)
        # Kafka reads a keystore again when its location is set, even to the same path.
        self.apply_dynamic_configs({k for k in configs if keystore_listener(k)})

    async def create_partitions(self, name: str, total: int,
                                assignments: list[list[int]] | None = None,
                                validate_only: bool = False) -> TopicState:
        """Grow topic `name` to `total` partitions (Kafka's CreatePartitions): the new
        partitions' replicas are `assignments` (one broker list per added partition) or the
        default (this node alone in single-node mode; Kafka's placement over the live
        brokers in cluster mode). Existing partitions keep their data; new ones start
        empty at offset 0. KafkaApiError (UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS,
        INVALID_REPLICA_ASSIGNMENT) when refused; with validate_only nothing changes."""
        state = self.metadata.topic(name)
        if state is None:
            raise KafkaApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                f"The topic '{name}' does not exist.")
        have = len(state.partitions)
        if total < have:
            raise KafkaApiError(Errors.INVALID_PARTITIONS,
                                f"Topic currently has {have} partitions, which is higher "
                                f"than the requested {total}.")
        if total == have:
            raise KafkaApiError(Errors.INVALID_PARTITIONS, f"Topic already has {have} partitions.")
        # Bound the work before doing it: the count is the client's, and a replica list per
        # new partition is built below (2**31-1 of them used to exhaust the memory).
        self.check_partition_room(total - have, state.replication_factor)
        single_node = isinstance(self.metadata, EmbeddedMetadataStore)
        if assignments is None:
            replicas = ([[self.node_id] for _ in range(total - have)] if single_node
                        else self.metadata.assign_new_partitions(name, total))
        else:
            live = {self.node_id} if single_node else set(self.metadata.brokers())
            replicas = [list(r) for r in assignments]
            _check_new_assignment(replicas, total - have, state.replication_factor, live)
        if validate_only:
            return state
        new_state = await self.metadata.add_partitions(name, replicas)
        if single_node:
            # (cluster mode: the controller elects the new partitions' leaders and every
            # replica's LeadershipTracker opens their logs)
            await self._lead_new_partitions(new_state, range(have, total),
                                            self.log_config(name))
        log.info("topic %s grew from %d to %d partitions", name, have, total)
        return new_state

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


class _ReplicaRoles:
    """The LeadershipTracker's handler (fastlog.zk.leadership.ReplicaRoleHandler): recorded
    leadership -> ReplicaManager roles, and __consumer_offsets (__transaction_state)
    leadership -> the group (transaction) coordinator's elections. Runs on the broker
    loop."""

    def __init__(self, broker: BrokerServer):
        self.broker = broker

    def become_leader(self, topic: str, partition: int, state: PartitionState) -> None:
        b = self.broker
        b.replica_manager.become_leader(topic, partition, state.leader_epoch, list(state.isr),
                                        list(state.replicas), state.partition_epoch)
        if topic == GROUP_METADATA_TOPIC and b.group_coordinator is not None:
            b.group_coordinator.on_elected(partition)
        if topic == TXN_STATE_TOPIC and b.txn_coordinator is not None:
            b.txn_coordinator.on_elected(partition)

    def become_follower(self, topic: str, partition: int, state: PartitionState) -> None:
        b = self.broker
        if topic == GROUP_METADATA_TOPIC and b.group_coordinator is not None:
            b.group_coordinator.on_resigned(partition)
        if topic == TXN_STATE_TOPIC and b.txn_coordinator is not None:
            b.txn_coordinator.on_resigned(partition)
        b.replica_manager.become_follower(topic, partition, state.leader, state.leader_epoch,
                                          list(state.replicas))

    def stop_replica(self, topic: str, partition: int, delete: bool) -> None:
        b = self.broker
        if topic == GROUP_METADATA_TOPIC and b.group_coordinator is not None:
            b.group_coordinator.on_resigned(partition)
        if topic == TXN_STATE_TOPIC and b.txn_coordinator is not None:
            b.txn_coordinator.on_resigned(partition)
        b.replica_manager.stop_replica(topic, partition, delete)
        if delete:
            b._log_configs.pop(topic, None)
            b._timestamp_limits.pop(topic, None)
            b.topic_stats.remove_topic(topic)

    def session_changed(self, expired: bool) -> None:
        log.warning("ZooKeeper session %s", "expired: refusing writes until a new one"
                    if expired else "renewed")
        self.broker.replica_manager.session_changed(expired)


def _check_new_assignment(replicas: list[list[int]], added: int, replication_factor: int,
                          live: set[int]) -> None:
    """Refuse (INVALID_REPLICA_ASSIGNMENT, Kafka's sentences) an explicit assignment for
    `added` new partitions that is the wrong size, repeats or names unknown brokers, or
    changes the topic's replication factor."""
    if len(replicas) != added:
        raise KafkaApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                            f"Increasing the number of partitions by {added} but "
                            f"{len(replicas)} assignments provided.")
    for r in replicas:
        if not r:
            raise KafkaApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                "Empty replica assignment for a new partition.")
        if len(set(r)) != len(r):
            raise KafkaApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                f"Duplicate brokers not allowed in replica assignment: {r}.")
        unknown = sorted(set(r) - live)
        if unknown:
            raise KafkaApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                f"Unknown broker(s) in replica assignment: {unknown}.")
        if len(r) != replication_factor:
            raise KafkaApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                f"Inconsistent replication factor between partitions: the topic "
                                f"has {replication_factor} replicas per partition, {r} has {len(r)}.")


async def _off_loop(fn, timeout: float | None):
    """Run a blocking ZooKeeper step (of the join, or of the shutdown) on a daemon thread,
    waiting at most `timeout` seconds (None: the step's own bounds). Not the loop's default
    executor: a kazoo call queued while ZooKeeper is unreachable never returns, and the
    executor's threads are joined at exit, so one stuck call there would keep a SIGTERMed
    broker from ever exiting."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(result, error):
        if not fut.done():
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)

    def run():
        try:
            result, error = fn(), None
        except Exception as e:  # noqa: BLE001 - handed to the awaiting coroutine
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is gone: nobody waits any more
            pass

    threading.Thread(target=run, daemon=True, name=f"broker-{fn.__name__}").start()
    return await asyncio.wait_for(fut, timeout)


def _read_properties(path: str) -> dict[str, str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise BrokerStartupError(f"cannot read {path}: {e}") from None
    return dict(parse_properties(text))
