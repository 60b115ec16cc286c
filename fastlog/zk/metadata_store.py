# ZkMetadataStore: the broker's metadata interface (fastlog/metadata/store.py
# MetadataStore) over Kafka's znodes, for cluster mode (zookeeper.connect set). It keeps an
# in-memory cache of the cluster — live brokers, the controller id, every topic's
# assignment, recorded leader/ISR/leader epoch and config overrides, users' configs (SCRAM
# credentials and quotas, /config/users/<user>), client quotas' configs (/config/clients/<id>,
# /config/users/<user>/clients/<id>), the dynamic configs of this broker and of the
# cluster default (/config/brokers/<id>, /config/brokers/<default>) — fed by ZooKeeper
# watches, so every broker learns leadership changes within one notification (≈10 ms), not
# only the controller. Mutations go to ZooKeeper the way Kafka's admin path writes them
# (/brokers/topics, /config/topics + /config/changes, /admin/delete_topics,
# /latest_producer_id_block, /admin/reassign_partitions for the Admin API's partition
# reassignments); the active controller (fastlog/zk/controller.py) acts on them.
#
# Threading: watch callbacks run on kazoo's callback thread and replace cache entries
# copy-on-write under a lock; reads (topic, topic_names, brokers, controller_id) are plain
# reads of immutable snapshots from any thread (the broker's asyncio loop). The async
# mutations run the blocking ZooKeeper calls in the loop's default executor. Listeners
# (add_listener) are called on kazoo's thread with (kind, name) and must hand off at once.

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.retry import RetryFailedError

from fastlog.metadata import (
    DEFAULT_BROKER_ENTITY,
    PRODUCER_ID_BLOCK_SIZE,
    MetadataStore,
    PartitionState,
    TopicState,
    new_kafka_uuid,
)
from fastlog.metadata.store import reassignment_problem
from fastlog.protocol.topics import INTERNAL_TOPICS
from fastlog.zk import paths
from fastlog.zk.assignment import assign_replicas
from fastlog.zk.client import KafkaZkClient, TopicExistsError, UnknownTopicError
from fastlog.zk.controller import add_partitions, new_partitions_assignment
from fastlog.zk.paths import NO_LEADER, BrokerInfo, TopicAssignment

log = logging.getLogger("fastlog.zk.metadata")


class ZkMetadataStore(MetadataStore):
    def __init__(self, zk: KafkaZkClient, node_id: int, *, wait_timeout: float = 10.0):
        self.zk = zk
        self.node_id = node_id
        self.wait_timeout = wait_timeout
        self.cluster_id = ""
        self.controller_id = -1
        self._lock = threading.Lock()
        self._topics: dict[str, TopicState] = {}
        self._users: dict[str, dict[str, str]] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._clients: dict[tuple, dict[str, str]] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._watched_topics: set[str] = set()
        self._watched_partitions: set[tuple[str, int]] = set()
        self._last_config_change = ""
        self._listeners: list[Callable[[str, object], None]] = []
        self._stopped = False
        self._session_expired = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.start_sync)

    def start_sync(self) -> None:
        """Blocking start: cluster id, then watches that fill the cache (filled on return)."""
        zk = self.zk
        zk.create_top_level_paths()
        self.cluster_id = zk.get_or_create_cluster_id()
        # Config changes seen before we started are already in the configs we read.
        existing = zk.get_config_change_notifications()
        self._last_config_change = existing[-1] if existing else ""
        for user in zk.get_entity_names("users"):
            self._refresh_user(user)
            for client_id in zk.get_user_client_names(user):
                self._refresh_client((user, client_id))
        for client_id in zk.get_entity_names("clients"):
            self._refresh_client((None, client_id))
        for entity in (DEFAULT_BROKER_ENTITY, str(self.node_id)):
            self._refresh_broker_config(entity)
        zk.on_session_lost(self._on_session_lost)
        zk.on_new_session(self._on_new_session)
        kz = zk.kazoo
        kz.DataWatch(paths.CONTROLLER, self._on_controller)
        kz.ChildrenWatch(paths.BROKER_IDS, self._on_brokers)
        kz.ChildrenWatch(paths.BROKER_TOPICS, self._on_topics)
        kz.ChildrenWatch(paths.CONFIG_CHANGES, self._on_config_changes)

    async def stop(self) -> None:
        self._stopped = True

    def add_listener(self, fn: Callable[[str, object], None]) -> None:
        """fn(kind, name): kind is "brokers", "controller", "topic" (name: topic; also on
        deletion), "partition" (name: (topic, partition)), "config" (name: topic), "user"
        (name: user whose config changed), "client" (name: (user or None, client id) of a
        client quota entity whose config changed), "broker-config" (name: "<default>" or
        this broker's id, whose dynamic configs changed) or
        "session" (name: "expired" — leadership recorded here may be stale, stop taking
        writes — or "renewed": registered again, the cache refreshes itself)."""
        self._listeners.append(fn)

    def _notify(self, kind: str, name) -> None:
        for fn in list(self._listeners):
            try:
                fn(kind, name)
            except Exception:
                log.exception("metadata listener failed on %s %r", kind, name)

    # -- session ------------------------------------------------------------------------------

    @property
    def session_expired(self) -> bool:
        """True between the loss of the ZooKeeper session and the next one. Until the
        session expires a disconnected broker may keep leading: the controller moves
        leadership off a broker on its own only once the broker's session has ended
        (deliberate moves, such as preferred-leader elections, show up on reconnection, and
        the new leader epoch fences the old leader at the followers)."""
        return self._session_expired

    def _on_session_lost(self) -> None:
        self._session_expired = True
        self._notify("session", "expired")

    def _on_new_session(self) -> None:
        self._session_expired = False
        self._notify("session", "renewed")

    # -- reads (any thread) ---------------------------------------------------------------

    def topic(self, name: str) -> TopicState | None:
        return self._topics.get(name)

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    def topics(self) -> dict[str, TopicState]:
        return self._topics  # (replaced, never changed: _put_topic and the topic watch)

    def brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers by id (their endpoints and racks, for Metadata responses)."""
        return self._brokers

    def assign_replicas(self, num_partitions: int, replication_factor: int,
                        rack_aware: str = "safe") -> list[list[int]]:
        """Replica lists for a new topic over the live brokers (Kafka's assignment,
        rack-aware when they have racks), in the form create_topic takes."""
        brokers = self._brokers or self.zk.get_all_brokers()
        got = assign_replicas(num_partitions, replication_factor,
                              {b: i.rack for b, i in brokers.items()}, rack_aware=rack_aware)
        return [got[p] for p in range(num_partitions)]

    def assign_new_partitions(self, name: str, total: int) -> list[list[int]]:
        """Replica lists for the partitions that growing topic `name` to `total` adds
        (Kafka's default, see fastlog.zk.controller.new_partitions_assignment), in the form
        add_partitions takes. KeyError if the topic is unknown."""
        t = self._topics[name]
        brokers = self._brokers or self.zk.get_all_brokers()
        got = new_partitions_assignment({p: ps.replicas for p, ps in t.partitions.items()},
                                        brokers, total)
        return [got[p] for p in sorted(got)]

    def partition_leader(self, topic: str, partition: int) -> int:
        t = self._topics.get(topic)
        ps = t.partitions.get(partition) if t else None
        return ps.leader if ps else NO_LEADER

    # -- watch callbacks (kazoo's thread) ------------------------------------------------------

    def _guard(self, fn, *args) -> None:
        """Run a cache refresh; if ZooKeeper is unreachable past the client's read retries,
        try again shortly (the watch that asked for it will not fire again by itself)."""
        if self._stopped:
            return
        try:
            fn(*args)
        except (ConnectionLoss, OperationTimeoutError, SessionExpiredError, RetryFailedError) as e:
            log.info("metadata refresh %s%r deferred: %r", fn.__name__, args, e)
            t = threading.Timer(0.5, self._guard, (fn, *args))
            t.daemon = True
            t.start()

    def _on_controller(self, data, stat, *args):
        if self._stopped:
            return False
        try:
            self.controller_id = paths.decode_controller(data) if data else -1
        except paths.ZkDataError:
            self.controller_id = -1
        self._notify("controller", self.controller_id)
        return None

    def _on_brokers(self, children):
        if self._stopped:
            return False
        self._guard(self._refresh_brokers)
        return None

    def _refresh_brokers(self) -> None:
        self._brokers = self.zk.get_all_brokers()
        self._notify("brokers", None)

    def _on_topics(self, children):
        if self._stopped:
            return False
        current = set(children)
        with self._lock:
            gone = [t for t in self._topics if t not in current]
            if gone:
                topics = dict(self._topics)
                for t in gone:
                    topics.pop(t, None)
                self._topics = topics
            self._watched_topics -= set(gone)
            self._watched_partitions = {tp for tp in self._watched_partitions
                                        if tp[0] in current}
            new = sorted(current - self._watched_topics)
            self._watched_topics |= set(new)
        for t in gone:
            self._notify("topic", t)
        for t in new:
            self.zk.kazoo.DataWatch(paths.topic_path(t), self._topic_watcher(t))

    def _topic_watcher(self, topic: str):
        def on_assignment(data, stat, *args):
            if self._stopped or topic not in self._watched_topics:
                return False  # deleted: stop watching
            if stat is not None:
                self._guard(self._load_topic, topic)
            return None
        return on_assignment

    def _load_topic(self, topic: str) -> None:
        assignment = self.zk.get_topic_assignment(topic)
        if assignment is None:
            return
        configs = self.zk.get_entity_config("topics", topic)
        with self._lock:
            if topic not in self._watched_topics:
                return
            old = self._topics.get(topic)
            parts = {}
            for p, replicas in sorted(assignment.partitions.items()):
                prev = old.partitions.get(p) if old else None
                parts[p] = PartitionState(list(replicas), prev.leader if prev else NO_LEADER,
                                          prev.leader_epoch if prev else 0,
                                          list(prev.isr) if prev else [],
                                          prev.partition_epoch if prev else -1)
            topic_id = assignment.topic_id or (old.topic_id if old else "")
            self._put_topic(TopicState(topic, topic_id, parts, configs,
                                       topic in INTERNAL_TOPICS))
            new_parts = [p for p in parts if (topic, p) not in self._watched_partitions]
            self._watched_partitions |= {(topic, p) for p in new_parts}
        self._notify("topic", topic)
        for p in new_parts:
            self.zk.kazoo.DataWatch(paths.partition_state_path(topic, p),
                                    self._state_watcher(topic, p))

    def _state_watcher(self, topic: str, partition: int):
        def on_state(data, stat, *args):
            if self._stopped or (topic, partition) not in self._watched_partitions:
                return False
            if data is None:
                return None  # not created yet: the watch fires when the controller does
            try:
                st = paths.decode_partition_state(topic, partition, data, stat.version)
            except paths.ZkDataError:
                log.warning("ignoring malformed state of %s-%d", topic, partition, exc_info=True)
                return None
            with self._lock:
                old = self._topics.get(topic)
                if old is None or partition not in old.partitions:
                    return None
                parts = dict(old.partitions)
                parts[partition] = PartitionState(old.partitions[partition].replicas, st.leader,
                                                  st.leader_epoch, list(st.isr), st.zk_version)
                self._put_topic(TopicState(topic, old.topic_id, parts, old.configs, old.internal))
            self._notify("partition", (topic, partition))
            return None
        return on_state

    def _put_topic(self, state: TopicState) -> None:
        # Called with the lock held: replace, never mutate, what readers may hold.
        topics = dict(self._topics)
        topics[state.name] = state
        self._topics = topics

    def _on_config_changes(self, children):
        if self._stopped:
            return False
        self._guard(self._apply_config_changes, children)
        return None

    def _apply_config_changes(self, children) -> None:
        names = sorted(c for c in children if c.startswith(paths.CONFIG_CHANGE_PREFIX)
                       and c > self._last_config_change)
        for name in names:
            try:
                entity = self.zk.read_config_change(name)
            except paths.ZkDataError:
                log.warning("ignoring malformed config change %s", name, exc_info=True)
                entity = None
            self._last_config_change = name
            if entity is None:
                continue
            if entity[0] == "topics":
                self._guard(self._refresh_config, entity[1])
            elif entity[0] == "users":
                self._guard(self._refresh_user, entity[1])
            elif entity[0] == "brokers" and entity[1] in (DEFAULT_BROKER_ENTITY,
                                                          str(self.node_id)):
                self._guard(self._refresh_broker_config, entity[1])
            elif entity[0] == "clients":
                self._guard(self._refresh_client, (None, entity[1]))
            elif entity[0] == "users/clients":
                self._guard(self._refresh_client, entity[1])

    def _refresh_user(self, user: str) -> None:
        self._refresh_entity("_users", "user", user,
                             lambda: self.zk.get_entity_config("users", user))

    def _refresh_broker_config(self, entity: str) -> None:
        self._refresh_entity("_broker_configs", "broker-config", entity,
                             lambda: self.zk.get_entity_config("brokers", entity))

    def _refresh_client(self, entity: tuple) -> None:
        user, client_id = entity
        if user is None:
            self._refresh_entity("_clients", "client", entity,
                                 lambda: self.zk.get_entity_config("clients", client_id))
        else:
            self._refresh_entity("_clients", "client", entity,
                                 lambda: self.zk.get_user_client_config(user, client_id))

    def _refresh_entity(self, attr: str, kind: str, key, read) -> None:
        """Re-read one user's, broker's or client quota entity's config into the cache `attr`
        (copy-on-write) and tell the listeners (`kind`, key)."""
        try:
            config = read()
        except paths.ZkDataError:
            log.warning("ignoring malformed config of %s %r", kind, key, exc_info=True)
            config = {}
        with self._lock:
            table = dict(getattr(self, attr))
            if config:
                table[key] = config
            else:
                table.pop(key, None)
            setattr(self, attr, table)
        self._notify(kind, key)

    def _refresh_config(self, topic: str) -> None:
        configs = self.zk.get_entity_config("topics", topic)
        with self._lock:
            old = self._topics.get(topic)
            if old is None:
                return
            self._put_topic(TopicState(topic, old.topic_id, old.partitions, configs,
                                       old.internal))
        self._notify("config", topic)

    # -- mutations ------------------------------------------------------------------------------

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def create_topic(self, name, partitions, replicas, configs, internal=False):
        """Write the topic (assignment `replicas[p]` for p in range(partitions)); returns its
        state once the controller gave every partition a leader, or after wait_timeout with
        whatever is known (leader -1 where none yet). KeyError if it exists."""
        assignment = TopicAssignment(name, {p: list(replicas[p]) for p in range(partitions)},
                                     new_kafka_uuid())

        def create():
            try:
                self.zk.create_topic(assignment, dict(configs))
            except TopicExistsError:
                raise KeyError(name) from None
        await self._run(create)
        deadline = time.monotonic() + self.wait_timeout
        while time.monotonic() < deadline:
            t = self._topics.get(name)
            if t is not None and len(t.partitions) == partitions and all(
                    ps.leader != NO_LEADER for ps in t.partitions.values()):
                return t
            await asyncio.sleep(0.01)
        return self._topics.get(name) or TopicState(
            name, assignment.topic_id,
            {p: PartitionState(list(r), NO_LEADER, 0, []) for p, r in assignment.partitions.items()},
            dict(configs), internal)

    async def delete_topic(self, name):
        """Ask the controller to delete the topic; returns once it is gone from the cache
        (or after wait_timeout). KeyError if it does not exist."""
        def mark():
            try:
                self.zk.mark_topic_for_deletion(name)
            except UnknownTopicError:
                raise KeyError(name) from None
        await self._run(mark)
        deadline = time.monotonic() + self.wait_timeout
        while name in self._topics and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def set_topic_configs(self, name, configs):
        if name not in self._topics and not await self._run(self.zk.topic_exists, name):
            raise KeyError(name)
        await self._run(self.zk.change_entity_config, "topics", name, dict(configs))
        await self._run(self._refresh_config, name)

    def user_config(self, name):
        return dict(self._users.get(name, {}))

    def user_names(self):
        return sorted(self._users)

    async def set_user_config(self, name, config):
        """Write /config/users/<user> and announce it under /config/changes, as Kafka's
        AdminZkClient does: every broker refreshes the user from the notification."""
        await self._run(self.zk.change_entity_config, "users", name, dict(config))
        await self._run(self._refresh_user, name)

    def broker_config(self, entity):
        return dict(self._broker_configs.get(entity, {}))

    async def set_broker_config(self, entity, config):
        """Write /config/brokers/<entity> and announce it under /config/changes, as Kafka's
        AdminZkClient.changeBrokerConfig does: the broker it names (every broker, for
        <default>) applies it from the notification."""
        await self._run(self.zk.change_entity_config, "brokers", entity, dict(config))
        if entity in (DEFAULT_BROKER_ENTITY, str(self.node_id)):
            await self._run(self._refresh_broker_config, entity)

    async def alter_partition_reassignments(self, changes):
        """Add the moves to /admin/reassign_partitions, where the controller carries them
        out step by step (fastlog.zk.controller); a cancellation (None) moves the partition
        back to the replicas it had before its move began."""
        return await self._run(self._alter_reassignments, dict(changes))

    def _alter_reassignments(self, changes):
        assignments = self.zk.get_topic_assignments({t for t, _ in changes})
        live = set(self._brokers or self.zk.get_all_brokers())
        out, moves = {}, {}
        for (topic, p), target in changes.items():
            a = assignments.get(topic)
            if a is None or p not in a.partitions:
                out[(topic, p)] = ("UNKNOWN_TOPIC_OR_PARTITION",
                                   f"The partition {topic}-{p} does not exist.")
                continue
            current = a.partitions[p]
            adding = a.adding_replicas.get(p, [])
            if target is None:
                if not adding and not a.removing_replicas.get(p):
                    moves[(topic, p)] = None  # cancelled if only planned so far
                    continue
                moves[(topic, p)] = [r for r in current if r not in adding]
                out[(topic, p)] = None
                continue
            problem = reassignment_problem(target, current, live)
            out[(topic, p)] = None if problem is None else ("INVALID_REPLICA_ASSIGNMENT",
                                                            problem)
            if problem is None:
                moves[(topic, p)] = list(target)
        for _ in range(20):  # the controller rewrites the plan as partitions finish
            try:
                data, stat = self.zk.kazoo.get(paths.REASSIGN_PARTITIONS)
                plan, version = paths.decode_reassignment(paths.REASSIGN_PARTITIONS, data), \
                    stat.version
            except NoNodeError:
                plan, version = {}, None
            new = dict(plan)
            for tp, target in moves.items():
                if target is not None:
                    new[tp] = target
                elif tp in plan:
                    # Planned but not begun: dropping it from the plan cancels it.
                    del new[tp]
                    out[tp] = None
                else:
                    out[tp] = ("NO_REASSIGNMENT_IN_PROGRESS",
                               f"No reassignment of {tp[0]}-{tp[1]} is in progress.")
            try:
                if new == plan:
                    pass
                elif version is None:
                    self.zk.kazoo.create(paths.REASSIGN_PARTITIONS,
                                         paths.encode_reassignment(new), makepath=True)
                elif new:
                    self.zk.kazoo.set(paths.REASSIGN_PARTITIONS,
                                      paths.encode_reassignment(new), version)
                else:
                    self.zk.kazoo.delete(paths.REASSIGN_PARTITIONS, version)
                return out
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # changed meanwhile: read it again
        raise RetryFailedError("the reassignment plan kept changing")

    async def list_partition_reassignments(self, partitions=None):
        """Partitions being moved: those whose assignment records replicas being added or
        removed, and those in the plan the controller has not begun yet."""
        return await self._run(self._list_reassignments, partitions)

    def _list_reassignments(self, partitions):
        wanted = None if partitions is None else set(partitions)
        topics = (sorted({t for t, _ in wanted}) if wanted is not None
                  else self.zk.get_all_topics())
        assignments = self.zk.get_topic_assignments(topics)
        try:
            data, _ = self.zk.kazoo.get(paths.REASSIGN_PARTITIONS)
            plan = paths.decode_reassignment(paths.REASSIGN_PARTITIONS, data)
        except (NoNodeError, paths.ZkDataError):
            plan = {}
        out = {}
        for topic, a in assignments.items():
            for p, replicas in a.partitions.items():
                if wanted is not None and (topic, p) not in wanted:
                    continue
                adding = list(a.adding_replicas.get(p, []))
                removing = list(a.removing_replicas.get(p, []))
                target = plan.get((topic, p))
                if not adding and not removing and target is not None and target != replicas:
                    adding = [r for r in target if r not in replicas]
                    removing = [r for r in replicas if r not in target]
                    replicas = replicas + adding
                if adding or removing:
                    out[(topic, p)] = (list(replicas), adding, removing)
        return out

    def client_configs(self):
        return dict(self._clients)

    async def set_client_config(self, user, client_id, config):
        """Write /config/clients/<id> or /config/users/<user>/clients/<id> and announce it
        under /config/changes, as Kafka's AdminZkClient does."""
        if user is None:
            await self._run(self.zk.change_entity_config, "clients", client_id, dict(config))
        else:
            await self._run(self.zk.change_user_client_config, user, client_id, dict(config))
        await self._run(self._refresh_client, (user, client_id))

    async def allocate_producer_ids(self, block_size=PRODUCER_ID_BLOCK_SIZE):
        return await self._run(self.zk.allocate_producer_id_block, self.node_id, block_size)

    async def add_partitions(self, name, new_replicas):
        """Append partitions to topic `name` (their replicas: `new_replicas`, numbered on
        from the current count) through the controller's conditional assignment rewrite;
        returns the topic's state once the controller gave every new partition a leader,
        or after wait_timeout with whatever is known. KeyError if the topic is unknown."""
        t = self._topics.get(name)
        if t is None:
            raise KeyError(name)
        have = len(t.partitions)
        total = have + len(new_replicas)
        assignment = {have + i: list(r) for i, r in enumerate(new_replicas)}

        def write():
            try:
                add_partitions(self.zk, name, total, assignment)
            except UnknownTopicError:
                raise KeyError(name) from None
        await self._run(write)
        deadline = time.monotonic() + self.wait_timeout
        while time.monotonic() < deadline:
            t = self._topics.get(name)
            if t is not None and all(p in t.partitions and t.partitions[p].leader != NO_LEADER
                                     for p in assignment):
                return t
            await asyncio.sleep(0.01)
        return self._topics.get(name)
