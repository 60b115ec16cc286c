# ZkController: the cluster controller of a ZooKeeper-mode cluster, as Kafka's
# KafkaController is. Every broker runs one; the one that wins the /controller election
# (KafkaZkClient.register_controller_and_increment_epoch) is active: it loads the cluster
# state, watches /brokers/ids, /brokers/topics, /admin/delete_topics and
# /isr_change_notification, creates the partition states of new topics, elects leaders from
# the live ISR when brokers leave or return (offline, leader -1, when no ISR member is live
# unless unclean election is allowed), runs preferred-leader and controlled-shutdown
# elections (a stopping broker asks through its ephemeral /admin/controlled_shutdown/<id>,
# answered in place) and the preferred or unclean elections an admin asks for
# (ElectLeaders, elect_leaders), moves leadership off replicas in failed log dirs
# (/log_dir_event_notification, with the replicas in /fastlog/offline_replicas/<id>), and
# deletes topics. Every one of its writes is fenced by its controller epoch;
# a ControllerMovedError makes it resign.
#
# Threading: ZooKeeper watches only enqueue events; one controller thread handles them in
# order (Kafka's ControllerEventManager), so the controller context needs no locks. Public
# methods may be called from any thread: they enqueue a call and wait for its result.
# Listeners (add_listener) run on the controller thread and must hand work off quickly
# (e.g. loop.call_soon_threadsafe); they are independent of the broker's request handling.

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.retry import RetryFailedError

from fastlog.metadata.model import ELECTED, NOT_AVAILABLE, NOT_NEEDED, UNKNOWN_PARTITION
from fastlog.protocol.topics import validate_topic
from fastlog.zk import paths
from fastlog.zk.assignment import assign_replicas
from fastlog.zk.client import (
    ControllerEpoch,
    ControllerMovedError,
    KafkaZkClient,
    TopicPartition,
    UnknownTopicError,
    ZkError,
    generate_cluster_id,
)
from fastlog.zk.paths import NO_LEADER, BrokerInfo, LeaderAndIsr, TopicAssignment

log = logging.getLogger("fastlog.zk.controller")


class NotControllerError(ZkError):
    """The operation needs the active controller and this broker is not it."""


# -- events delivered to listeners ---------------------------------------------------------

@dataclass(frozen=True)
class ControllerElected:
    broker_id: int
    epoch: int


@dataclass(frozen=True)
class ControllerResigned:
    broker_id: int


@dataclass(frozen=True)
class LeadershipChanged:
    """New recorded leadership of some partitions (leader -1: offline)."""
    states: Mapping[TopicPartition, LeaderAndIsr]


@dataclass(frozen=True)
class TopicDeleted:
    topic: str


_SHUTDOWN = object()


def new_partitions_assignment(existing: Mapping[int, list[int]], brokers: Mapping[int, BrokerInfo],
                              total: int, rack_aware: str = "safe") -> dict[int, list[int]]:
    """Replicas for partitions len(existing)..total-1 of a growing topic, as Kafka assigns
    them: like a new topic's, with the existing replication factor, continuing the
    numbering and starting at partition 0's leader (`brokers`: the live ones)."""
    have = len(existing)
    ids = sorted(brokers)
    first = existing.get(0) or next(iter(existing.values()), None) or ids[:1]
    rf = len(first)
    start = next((i for i, b in enumerate(ids) if b >= first[0]), 0)
    return assign_replicas(total - have, rf, {b: brokers[b].rack for b in ids},
                           rack_aware=rack_aware, fixed_start_index=start,
                           start_partition_id=have)


def add_partitions(zk: KafkaZkClient, topic: str, total: int,
                   assignment: Mapping[int, list[int]] | None = None, *,
                   rack_aware: str = "safe") -> dict[int, list[int]]:
    """Grow `topic` to `total` partitions (any broker, any thread; blocking): the new
    partitions' replicas are `assignment` (partition -> brokers, exactly the partitions
    added) or Kafka's default (new_partitions_assignment); /brokers/topics/<t> is rewritten
    conditionally on the version read, and the active controller then creates the new
    partitions' states. Returns the added assignment. UnknownTopicError if the topic does
    not exist, ValueError if `total` adds nothing or `assignment` covers other partitions,
    kazoo's BadVersionError if the assignment changed meanwhile."""
    got = zk.get_topic_assignment_and_version(topic)
    if got is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    current, version = got
    have = len(current.partitions)
    if total <= have:
        raise ValueError(f"topic {topic!r} has {have} partitions; {total} would not add any")
    if assignment is None:
        assignment = new_partitions_assignment(current.partitions, zk.get_all_brokers(), total,
                                               rack_aware)
    if sorted(assignment) != list(range(have, total)):
        raise ValueError(f"assignment must cover partitions {have}..{total - 1}")
    merged = dict(current.partitions)
    merged.update({p: list(r) for p, r in assignment.items()})
    zk.set_topic_assignment(
        TopicAssignment(topic, merged, current.topic_id, current.adding_replicas,
                        current.removing_replicas), version)
    return {p: list(r) for p, r in assignment.items()}


class ZkController:
    def __init__(self, zk: KafkaZkClient, broker_id: int, *,
                 unclean_leader_election: bool | Callable[[str], bool] = False,
                 delete_topic_enable: bool = True,
                 auto_leader_rebalance_interval: float | None = None,
                 leader_imbalance_percentage: int = 10):
        self.zk = zk
        self.broker_id = broker_id
        self._unclean = unclean_leader_election
        self.delete_topic_enable = delete_topic_enable
        self._rebalance_interval = auto_leader_rebalance_interval
        self._imbalance_pct = leader_imbalance_percentage
        self._events: queue.Queue = queue.Queue()
        self._listeners: list[Callable] = []
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        # office
        self.epoch: ControllerEpoch | None = None
        # controller context: only meaningful while active, only touched by the thread
        self._live: dict[int, BrokerInfo] = {}
        self._assignments: dict[str, TopicAssignment] = {}
        self._states: dict[TopicPartition, LeaderAndIsr] = {}
        self._shutting_down: set[int] = set()
        self._bounced: set[int] = set()
        # replicas in failed log dirs, by broker (Kafka's replicasOnOfflineDirs): they may
        # neither lead nor stay in the ISR until their broker restarts
        self._offline: dict[int, set[TopicPartition]] = {}
        self._topic_watched: set[str] = set()  # topics whose assignment znode we watch
        self._cs_children_watched = False
        self._failover_done = False

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.epoch is not None

    def add_listener(self, fn: Callable) -> None:
        self._listeners.append(fn)

    def start(self) -> ZkController:
        """Start the event thread and watches; the election runs right away."""
        self.zk.create_top_level_paths()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"zk-controller-{self.broker_id}")
        self._thread.start()
        kz = self.zk.kazoo
        self.zk.on_session_lost(lambda: self._events.put(("session_lost",)))
        self.zk.on_new_session(lambda: self._events.put(("new_session",)))
        kz.DataWatch(paths.CONTROLLER, self._watch("controller_change"))
        kz.ChildrenWatch(paths.BROKER_IDS, self._watch("broker_change"))
        kz.ChildrenWatch(paths.BROKER_TOPICS, self._watch("topic_change"))
        kz.ChildrenWatch(paths.DELETE_TOPICS, self._watch("topic_deletion"))
        kz.ChildrenWatch(paths.ISR_CHANGE_NOTIFICATION, self._watch("isr_change"))
        kz.ChildrenWatch(paths.LOG_DIR_EVENT_NOTIFICATION, self._watch("log_dir_event"))
        kz.DataWatch(paths.PREFERRED_REPLICA_ELECTION, self._watch("preferred_replica_election"))
        kz.DataWatch(paths.REASSIGN_PARTITIONS, self._watch("partition_reassignment"))
        # Not among Kafka's persistent paths: the first request creates it, so watch for that.
        kz.DataWatch(paths.CONTROLLED_SHUTDOWN, self._on_controlled_shutdown_parent)
        if self._rebalance_interval:
            threading.Thread(target=self._rebalance_timer, daemon=True,
                             name=f"zk-controller-rebalance-{self.broker_id}").start()
        return self

    def stop(self, resign: bool = True) -> None:
        """Stop handling events; give up the office if held (another broker takes over)."""
        if self._thread is None:
            return
        self._events.put(("resign",) if resign else ("noop",))
        self._events.put(_SHUTDOWN)
        self._stopped.set()
        self._thread.join(10)
        self._thread = None

    def _watch(self, kind: str):
        def fire(*_args):
            if self._stopped.is_set():
                return False
            self._events.put((kind,))
            return None
        return fire

    def _on_controlled_shutdown_parent(self, data, stat, *args):
        # kazoo's thread. A children watch on a missing node ends at once: start one when
        # the parent exists (again).
        if self._stopped.is_set():
            return False
        if stat is None:
            self._cs_children_watched = False
        elif not self._cs_children_watched:
            self._cs_children_watched = True
            self.zk.kazoo.ChildrenWatch(paths.CONTROLLED_SHUTDOWN,
                                        self._watch("controlled_shutdown_request"))
        return None

    def _rebalance_timer(self) -> None:
        while not self._stopped.wait(self._rebalance_interval):
            self._events.put(("auto_rebalance",))

    def _call(self, fn, *args, timeout: float = 30.0):
        """Run fn(*args) on the controller thread and return its result."""
        fut: Future = Future()
        self._events.put(("call", fn, args, fut))
        return fut.result(timeout)

    def _emit(self, event) -> None:
        for fn in list(self._listeners):
            try:
                fn(event)
            except Exception:
                log.exception("controller listener %r failed on %r", fn, event)

    # -- the event loop -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            ev = self._events.get()
            if ev is _SHUTDOWN:
                return
            kind = ev[0]
            try:
                if kind == "call":
                    _, fn, args, fut = ev
                    if fut.set_running_or_notify_cancel():
                        try:
                            fut.set_result(fn(*args))
                        except ControllerMovedError as e:
                            fut.set_exception(e)
                            raise
                        except BaseException as e:
                            fut.set_exception(e)
                    continue
                handler = getattr(self, f"_on_{kind}", None)
                if handler is not None:
                    handler(*ev[1:])
            except ControllerMovedError:
                log.info("broker %d: controller moved, resigning", self.broker_id)
                self._resign_locally()
                self._events.put(("controller_change",))
            except (ConnectionLoss, SessionExpiredError, OperationTimeoutError,
                    RetryFailedError) as e:
                # ZooKeeper unreachable: try again once it is back (watches re-fire then too).
                log.info("broker %d: controller event %s interrupted: %r", self.broker_id, kind, e)
                if not self._stopped.is_set():
                    time.sleep(0.2)
                    self._events.put(ev if kind != "call" else ("noop",))
            except Exception:
                log.exception("broker %d: controller event %s failed", self.broker_id, kind)

    def _on_noop(self) -> None:
        pass

    def _on_new_session(self) -> None:
        # Our registration is back, on the new session. An election that ran before it (the
        # /controller watch fires as soon as the session is up) read /brokers/ids without
        # us, and the re-armed children watch may have found the same ids as before the
        # expiry and stayed silent (kazoo calls nobody then): read the live brokers again.
        if self.epoch is not None and self._failover_done:
            self._on_broker_change()
        else:
            self._on_controller_change()

    def _on_session_lost(self) -> None:
        # Our /controller went with the session; a new session re-runs the election. This
        # event may also arrive after an election on the new session already succeeded (it
        # is put from another thread): look again, which takes a /controller of ours up.
        self._resign_locally()
        self._events.put(("controller_change",))

    def _on_resign(self) -> None:
        if self.epoch is not None:
            self.zk.resign_controller(self.epoch)
            self._resign_locally()

    def _resign_locally(self) -> None:
        if self.epoch is not None:
            self.epoch = None
            self._live, self._assignments, self._states = {}, {}, {}
            self._shutting_down = set()
            self._emit(ControllerResigned(self.broker_id))

    def _on_controller_change(self) -> None:
        if self._stopped.is_set():
            return
        got = self.zk.exists(paths.CONTROLLER)
        if got is not None:
            if got.ephemeralOwner == self.zk.session_id:
                # Ours: an election whose answer was lost (ConnectionLoss after the commit),
                # a session_lost handled after the new session's election, or a failover
                # interrupted by ZooKeeper: only the holder of /controller moves the epoch,
                # so the recorded one is ours. Take the office up and (re)load the state.
                if self.epoch is None:
                    current = self.zk.get_controller_epoch()
                    if current is None:
                        return
                    self.epoch = current
                    self._failover_done = False
                    log.info("broker %d is the controller (an office its session holds), "
                             "epoch %d", self.broker_id, current.epoch)
                if not self._failover_done:
                    self._on_controller_failover()
            elif self.epoch is not None:
                self._resign_locally()  # someone else holds the office now
            return
        if self.epoch is not None:
            self._resign_locally()
        won = self.zk.register_controller_and_increment_epoch(self.broker_id)
        if won is not None:
            self.epoch = won
            self._failover_done = False
            log.info("broker %d is the controller, epoch %d", self.broker_id, won.epoch)
            self._on_controller_failover()

    # -- becoming the controller -------------------------------------------------------------

    def _on_controller_failover(self) -> None:
        """Load the cluster state and bring every partition to a consistent leadership."""
        self.zk.ensure_feature_node()
        self.zk.get_or_create_cluster_id(generate_cluster_id())
        self._live = self.zk.get_all_brokers()
        topics = self.zk.get_all_topics()
        self._assignments = self.zk.get_topic_assignments(topics)
        tps = [(t, p) for t, a in self._assignments.items() for p in a.partitions]
        self._states = self.zk.get_partition_states(tps)
        self._watch_topics(topics)
        self._emit(ControllerElected(self.broker_id, self.epoch.epoch))
        self._on_topic_deletion()
        self._initialize_new_partitions()
        self._offline = {b: got for b in self._live if (got := self.zk.get_offline_replicas(b))}
        self._elect_and_shrink()
        self._on_isr_change()
        self._on_log_dir_event()
        self._on_controlled_shutdown_request()
        self._on_partition_reassignment()
        self._failover_done = True

    # -- event handlers (active controller only) --------------------------------------------------

    def _on_broker_change(self) -> None:
        if self.epoch is None:
            return
        before = self._live
        self._live = self.zk.get_all_brokers()
        gone, came = set(before) - set(self._live), set(self._live) - set(before)
        # Same id, new registration: it restarted (maybe losing unflushed records), so it
        # first counts as failed (leadership and ISR membership move off it), then as new.
        bounced = {b for b in set(before) & set(self._live)
                   if before[b].epoch != self._live[b].epoch}
        self._shutting_down &= set(self._live)
        self._shutting_down -= bounced  # a restarted broker is no longer shutting down
        for b in gone | bounced:   # its dirs are checked again when it comes back
            self._offline.pop(b, None)
        if gone or came or bounced:
            log.info("controller %d: brokers left %s, joined %s, restarted %s", self.broker_id,
                     sorted(gone), sorted(came), sorted(bounced))
        if bounced:
            self._bounced = bounced
            try:
                self._elect_and_shrink()
            finally:
                self._bounced = set()
        self._initialize_new_partitions()
        self._elect_and_shrink()

    def _on_topic_change(self) -> None:
        if self.epoch is None:
            return
        topics = self.zk.get_all_topics()
        new = topics - set(self._assignments)
        for t in set(self._assignments) - topics:
            self._forget_topic(t)
        self._watch_topics(new)
        self._initialize_new_partitions(refresh=new)

    def _watch_topics(self, topics) -> None:
        # Partitions added to an existing topic change its assignment znode's data, not the
        # children of /brokers/topics: watch each topic (Kafka's partition modifications).
        for topic in sorted(set(topics) - self._topic_watched):
            self._topic_watched.add(topic)

            def fire(data, stat, *args, topic=topic):
                if self._stopped.is_set():
                    return False
                if stat is None:
                    self._events.put(("topic_watch_gone", topic))
                    return False
                self._events.put(("partition_modification", topic))
                return None
            self.zk.kazoo.DataWatch(paths.topic_path(topic), fire)

    def _on_topic_watch_gone(self, topic: str) -> None:
        self._topic_watched.discard(topic)

    def _on_partition_modification(self, topic: str) -> None:
        if self.epoch is None or topic not in self._assignments:
            return
        a = self.zk.get_topic_assignment(topic)
        if a is None or a.partitions == self._assignments[topic].partitions:
            return
        self._assignments[topic] = a
        self._initialize_new_partitions()

    def _on_topic_deletion(self) -> None:
        if self.epoch is None:
            return
        for topic in self.zk.get_topics_marked_for_deletion():
            if not self.delete_topic_enable or topic not in self._assignments:
                if not self.delete_topic_enable:
                    log.warning("topic %s marked for deletion but delete.topic.enable=false",
                                topic)
                self.zk.delete_topic_deletion_flag(self.epoch, topic)
                continue
            self.zk.delete_topic_znodes(self.epoch, topic)
            self._forget_topic(topic)
            self._emit(TopicDeleted(topic))

    def _forget_topic(self, topic: str) -> None:
        self._assignments.pop(topic, None)
        for tp in [tp for tp in self._states if tp[0] == topic]:
            del self._states[tp]

    def _on_isr_change(self) -> None:
        """Leaders changed ISRs in ZooKeeper: refresh those partitions, drop the notices."""
        if self.epoch is None:
            return
        names = self.zk.get_isr_change_notifications()
        if not names:
            return
        tps = set()
        for n in names:
            tps.update(self.zk.read_isr_change_notification(n))
        fresh = self.zk.get_partition_states([tp for tp in tps if tp[0] in self._assignments])
        self._states.update(fresh)
        self.zk.delete_isr_change_notifications(self.epoch, names)
        if fresh:
            self._emit(LeadershipChanged(dict(fresh)))
            self._on_partition_reassignment()  # new replicas may have joined the ISR

    def _on_log_dir_event(self) -> None:
        """A broker's log dir failed (/log_dir_event_notification): read which of its
        replicas are offline (its /fastlog/offline_replicas/<id>), move leadership of
        those it led to other in-sync replicas and drop it from their ISRs, then delete
        the notices (Kafka's LogDirEventNotificationHandler)."""
        if self.epoch is None:
            return
        names = self.zk.get_log_dir_event_notifications()
        if not names:
            return
        brokers = set()
        for n in names:
            event = self.zk.read_log_dir_event(n)
            if event is not None and event[1] == paths.LOG_DIR_FAILURE_EVENT:
                brokers.add(event[0])
        for b in sorted(brokers & set(self._live)):
            self._offline[b] = self.zk.get_offline_replicas(b)
            log.info("controller %d: broker %d has %d replicas in failed log dirs",
                     self.broker_id, b, len(self._offline[b]))
        self.zk.delete_log_dir_event_notifications(self.epoch, names)
        self._elect_and_shrink()

    def _on_preferred_replica_election(self) -> None:
        """An admin tool asked for preferred leaders (/admin/preferred_replica_election,
        {"version":1,"partitions":[{"topic","partition"}]}): elect them, drop the request."""
        if self.epoch is None:
            return
        requested = self.zk.get_preferred_replica_election()
        if requested is None:
            return
        self._preferred_election([tp for tp in requested if tp in self._states])
        self.zk.delete_preferred_replica_election(self.epoch)

    def _on_controlled_shutdown_request(self) -> None:
        """Stopping brokers asked (ephemeral /admin/controlled_shutdown/<id>): move their
        leadership away and answer each request in place with what they still lead."""
        if self.epoch is None:
            return
        kz = self.zk.kazoo
        try:
            children = kz.get_children(paths.CONTROLLED_SHUTDOWN)
        except NoNodeError:
            return
        for child in sorted(children):
            try:
                broker_id = int(child)
            except ValueError:
                continue
            path = paths.controlled_shutdown_path(broker_id)
            try:
                data, stat = kz.get(path)
                epoch, answered = paths.decode_controlled_shutdown(data)
            except NoNodeError:
                continue
            except paths.ZkDataError:
                log.warning("ignoring malformed request %s", path)
                continue
            if answered is not None:
                continue
            remaining = self._controlled_shutdown(broker_id)
            log.info("controller %d: controlled shutdown of broker %d, %d partition(s) still "
                     "led by it", self.broker_id, broker_id, len(remaining))
            try:
                kz.set(path, paths.encode_controlled_shutdown(epoch, remaining), stat.version)
            except (NoNodeError, BadVersionError):
                pass  # the broker went (or asked again): nothing to answer

    def _on_partition_reassignment(self) -> None:
        """Move replicas as /admin/reassign_partitions asks (Kafka's ZooKeeper-era
        reassignment): first the assignment grows to old + new replicas (the new ones
        start following and the leader adds them to the ISR once caught up); when every
        target replica is in the ISR, a leader among the targets is elected with the ISR
        cut to the targets (new leader epoch), the assignment becomes the targets (the
        removed replicas stop and delete their logs), and the partition leaves the plan.
        Called on the znode's changes and on every ISR change."""
        if self.epoch is None:
            return
        try:
            data, stat = self.zk.kazoo.get(paths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            plan = paths.decode_reassignment(paths.REASSIGN_PARTITIONS, data)
        except paths.ZkDataError:
            log.warning("ignoring a malformed reassignment plan", exc_info=True)
            self.zk.kazoo.delete(paths.REASSIGN_PARTITIONS)
            return
        remaining = {}
        for tp, target in plan.items():
            if self._reassign_step(tp, list(target)):
                remaining[tp] = target
        if remaining == plan:
            return
        # Conditional on the version read: the Admin API may have added moves meanwhile
        # (the watch brings that change here again).
        try:
            if remaining:
                self.zk.kazoo.set(paths.REASSIGN_PARTITIONS,
                                  paths.encode_reassignment(remaining), stat.version)
            else:
                self.zk.kazoo.delete(paths.REASSIGN_PARTITIONS, stat.version)
                log.info("controller %d: partition reassignment complete", self.broker_id)
        except (BadVersionError, NoNodeError):
            pass

    def _reassign_step(self, tp: TopicPartition, target: list[int]) -> bool:
        """Advance one partition's move; True while it is still in progress."""
        a = self._assignments.get(tp[0])
        if (a is None or tp[1] not in a.partitions or not target
                or len(set(target)) != len(target)):
            log.warning("dropping reassignment of %s-%d to %s: no such partition or a bad "
                        "replica list", tp[0], tp[1], target)
            return False
        current = list(a.partitions[tp[1]])
        if current == target:
            if a.adding_replicas.get(tp[1]) or a.removing_replicas.get(tp[1]):
                self._set_replicas(tp, target)  # a cancelled move that had only begun
            return False
        if any(r not in current for r in target):
            self._set_replicas(tp, current + [r for r in target if r not in current],
                               adding=[r for r in target if r not in current],
                               removing=[r for r in current if r not in target])
            return True
        st = self._states.get(tp)
        if st is None or any(r not in st.isr for r in target):
            return True  # the new replicas are catching up
        if st.leader in target and self._eligible_for(tp, st.leader):
            leader = st.leader
        else:
            leader = next((r for r in target if r in st.isr and self._eligible_for(tp, r)),
                          None)
        if leader is None:
            return True
        isr = [leader] + [b for b in st.isr if b in target and b != leader]
        if st.leader != leader or list(st.isr) != isr:
            written = self._write_states({tp: st.new_leader_and_isr(leader, isr,
                                                                    self.epoch.epoch)},
                                         lambda _tp, _st: None)
            if tp not in written:
                return True
        self._set_replicas(tp, target)
        log.info("controller %d: %s-%d reassigned from %s to %s", self.broker_id, tp[0], tp[1],
                 current, target)
        return False

    def _set_replicas(self, tp: TopicPartition, replicas: list[int],
                      adding=(), removing=()) -> None:
        got = self.zk.get_topic_assignment_and_version(tp[0])
        if got is None:
            return
        a, version = got
        parts = dict(a.partitions)
        parts[tp[1]] = list(replicas)
        add, rem = dict(a.adding_replicas), dict(a.removing_replicas)
        add.pop(tp[1], None)
        rem.pop(tp[1], None)
        if adding:
            add[tp[1]] = list(adding)
        if removing:
            rem[tp[1]] = list(removing)
        new = TopicAssignment(tp[0], parts, a.topic_id, add, rem)
        self.zk.set_topic_assignment(new, version)
        self._assignments[tp[0]] = new

    def _on_auto_rebalance(self) -> None:
        if self.epoch is None:
            return
        # Kafka: a broker whose preferred partitions are led elsewhere for more than
        # leader.imbalance.per.broker.percentage of them gets them back.
        preferred: dict[int, list[TopicPartition]] = {}
        for tp in self._states:
            replicas = self._replicas(tp)
            if replicas:
                preferred.setdefault(replicas[0], []).append(tp)
        todo = []
        for broker, tps in preferred.items():
            if broker not in self._live or broker in self._shutting_down:
                continue
            off = [tp for tp in tps if self._states[tp].leader != broker]
            if off and 100 * len(off) / len(tps) > self._imbalance_pct:
                todo.extend(off)
        if todo:
            self._preferred_election(todo)

    # -- elections ---------------------------------------------------------------------------------

    def _replicas(self, tp: TopicPartition) -> list[int]:
        a = self._assignments.get(tp[0])
        return list(a.partitions.get(tp[1], ())) if a else []

    def _unclean_allowed(self, topic: str) -> bool:
        if callable(self._unclean):
            return bool(self._unclean(topic))
        return bool(self._unclean)

    def _eligible(self, broker: int) -> bool:
        return (broker in self._live and broker not in self._shutting_down
                and broker not in self._bounced)

    def _eligible_for(self, tp: TopicPartition, broker: int) -> bool:
        """_eligible, and the broker's replica of tp is not in a failed log dir."""
        return self._eligible(broker) and tp not in self._offline.get(broker, ())

    def _initialize_new_partitions(self, refresh=()) -> None:
        """Create leader/ISR for partitions that have none yet (new topics, added partitions):
        leader = first live replica, ISR = live replicas. A partition none of whose replicas
        is live waits for one (Kafka leaves it in NewPartition)."""
        if refresh:
            self._assignments.update(self.zk.get_topic_assignments(refresh))
        new_states = {}
        for topic, a in self._assignments.items():
            for p, replicas in a.partitions.items():
                if (topic, p) in self._states:
                    continue
                live = [r for r in replicas if self._eligible(r)]
                if not live:
                    continue
                new_states[(topic, p)] = LeaderAndIsr(live[0], paths.INITIAL_LEADER_EPOCH,
                                                      tuple(live), self.epoch.epoch)
        if not new_states:
            return
        done, failed = self.zk.create_partition_states(self.epoch, new_states)
        if failed:
            # Already there (a previous controller got that far): take what ZooKeeper has.
            done.update(self.zk.get_partition_states(list(failed)))
        self._states.update(done)
        self._emit(LeadershipChanged(done))

    def _decide(self, tp: TopicPartition, st: LeaderAndIsr) -> LeaderAndIsr | None:
        """The state `tp` should move to given the live brokers, or None to leave it."""
        replicas = self._replicas(tp)
        live_isr = [b for b in st.isr if self._eligible_for(tp, b)]
        ep = self.epoch.epoch
        if st.leader != NO_LEADER and self._eligible_for(tp, st.leader):
            if len(live_isr) == len(st.isr):
                return None
            # a follower left: drop it from the ISR, the leader stays
            return st.new_leader_and_isr(st.leader, live_isr, ep)
        # the leader is gone (or the partition is offline): the first live ISR member in
        # assignment order leads (Kafka's offline-partition election)
        candidates = [r for r in replicas if r in live_isr]
        if candidates:
            leader = candidates[0]
            return st.new_leader_and_isr(leader, [leader] + [b for b in live_isr if b != leader],
                                         ep)
        if self._unclean_allowed(tp[0]):
            live = [r for r in replicas if self._eligible_for(tp, r)]
            if live:
                log.warning("unclean leader election for %s-%d: %d leads without being in the "
                            "ISR %s; acknowledged records may be lost", tp[0], tp[1], live[0],
                            list(st.isr))
                return st.new_leader_and_isr(live[0], [live[0]], ep)
        if st.leader == NO_LEADER:
            return None
        # offline until an ISR member returns; the ISR is kept as the record of who may lead
        return st.new_leader_and_isr(NO_LEADER, st.isr, ep)

    def _elect_and_shrink(self, only=None) -> dict[TopicPartition, LeaderAndIsr]:
        changes = {}
        for tp, st in self._states.items():
            if only is not None and tp not in only:
                continue
            new = self._decide(tp, st)
            if new is not None:
                changes[tp] = new
        return self._write_states(changes, self._decide)

    def _write_states(self, changes, redecide) -> dict[TopicPartition, LeaderAndIsr]:
        """Write decided states; a partition whose znode moved meanwhile (a leader changed
        its ISR) is re-read and decided again, a bounded number of times."""
        written: dict[TopicPartition, LeaderAndIsr] = {}
        for _ in range(5):
            if not changes:
                break
            done, failed = self.zk.update_leader_and_isr(self.epoch, changes)
            self._states.update(done)
            written.update(done)
            retry = [tp for tp, e in failed.items() if isinstance(e, BadVersionError)]
            for tp, e in failed.items():
                if isinstance(e, NoNodeError):
                    self._states.pop(tp, None)
            fresh = self.zk.get_partition_states(retry)
            self._states.update(fresh)
            changes = {}
            for tp, st in fresh.items():
                new = redecide(tp, st)
                if new is not None:
                    changes[tp] = new
        if written:
            self._emit(LeadershipChanged(dict(written)))
        return written

    def _preferred_decision(self, tp: TopicPartition, st: LeaderAndIsr) -> LeaderAndIsr | None:
        """The first replica leads when live and in the ISR (None: leave the partition)."""
        replicas = self._replicas(tp)
        if not replicas:
            return None
        pref = replicas[0]
        if st.leader == pref or pref not in st.isr or not self._eligible_for(tp, pref):
            return None
        return st.new_leader_and_isr(pref, st.isr, self.epoch.epoch)

    def _unclean_decision(self, tp: TopicPartition, st: LeaderAndIsr) -> LeaderAndIsr | None:
        """A partition without a live leader gets one: a live ISR member if there is one,
        else any live replica (acknowledged records may be lost). None: leave it."""
        if st.leader != NO_LEADER and self._eligible_for(tp, st.leader):
            return None
        live = [r for r in self._replicas(tp) if self._eligible_for(tp, r)]
        in_isr = [r for r in live if r in st.isr]
        if in_isr:
            leader = in_isr[0]
            return st.new_leader_and_isr(leader, [leader] + [b for b in in_isr if b != leader],
                                         self.epoch.epoch)
        if not live:
            return None
        log.warning("unclean leader election for %s-%d asked for: %d leads without being in "
                    "the ISR %s; acknowledged records may be lost", tp[0], tp[1], live[0],
                    list(st.isr))
        return st.new_leader_and_isr(live[0], [live[0]], self.epoch.epoch)

    def _preferred_election(self, tps) -> dict[TopicPartition, LeaderAndIsr]:
        return self._elect(tps, self._preferred_decision)

    def _elect(self, tps, decide) -> dict[TopicPartition, LeaderAndIsr]:
        changes = {}
        for tp in tps:
            st = self._states.get(tp)
            new = decide(tp, st) if st else None
            if new is not None:
                changes[tp] = new
        return self._write_states(changes, decide)

    def _admin_election(self, unclean: bool, tps) -> dict[TopicPartition, str]:
        """Kafka's ReplicaLeaderElection asked by an admin: each partition's outcome,
        ELECTED, NOT_NEEDED (the preferred replica leads already; for unclean, a live
        leader does), NOT_AVAILABLE (no replica may lead) or UNKNOWN_PARTITION."""
        decide = self._unclean_decision if unclean else self._preferred_decision
        known = [tp for tp in tps if tp in self._states]
        # The leaders change ISRs themselves and the controller hears of it a moment
        # later (/isr_change_notification): decide on what ZooKeeper holds now.
        self._states.update(self.zk.get_partition_states(known))
        written = self._elect(known, decide)
        out = {}
        for tp in tps:
            st = self._states.get(tp)
            if st is None:
                out[tp] = UNKNOWN_PARTITION
            elif tp in written:
                out[tp] = ELECTED
            elif unclean:
                out[tp] = (NOT_NEEDED if st.leader != NO_LEADER
                           and self._eligible_for(tp, st.leader) else NOT_AVAILABLE)
            else:
                replicas = self._replicas(tp)
                out[tp] = NOT_NEEDED if replicas and st.leader == replicas[0] else NOT_AVAILABLE
        return out

    # -- public operations ---------------------------------------------------------------------------

    def _require_active(self):
        if self.epoch is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")

    def elect_preferred_leaders(self, partitions=None) -> dict[TopicPartition, LeaderAndIsr]:
        """Move leadership back to each partition's first replica where it is live and in
        the ISR (all partitions when `partitions` is None). Active controller only."""
        def run():
            self._require_active()
            return self._preferred_election(
                list(self._states) if partitions is None else list(partitions))
        return self._call(run)

    def elect_leaders(self, unclean: bool, partitions=None) -> dict[TopicPartition, str]:
        """ElectLeaders: a preferred (or unclean) election of these partitions (all when
        None); each one's outcome (see _admin_election). Active controller only."""
        def run():
            self._require_active()
            return self._admin_election(
                unclean, list(self._states) if partitions is None else list(partitions))
        return self._call(run)

    def controlled_shutdown(self, broker_id: int) -> set[TopicPartition]:
        """Move leadership off `broker_id` before it stops, and take it out of ISRs where
        others remain. Returns the partitions it still leads (no other live ISR member):
        the broker may retry or stop anyway. Active controller only."""
        def run():
            self._require_active()
            return self._controlled_shutdown(broker_id)
        return self._call(run)

    def _controlled_shutdown(self, broker_id: int) -> set[TopicPartition]:
        if broker_id not in self._live:
            return set()
        self._shutting_down.add(broker_id)
        involved = {tp for tp, st in self._states.items() if broker_id in st.isr}

        def decide(tp, st):
            if broker_id not in st.isr:
                return None
            if st.leader == broker_id:
                others = [r for r in self._replicas(tp)
                          if r in st.isr and r != broker_id and self._eligible_for(tp, r)]
                if not others:
                    return None  # stays leader until it really goes
                leader = others[0]
                return st.new_leader_and_isr(
                    leader, [leader] + [b for b in st.isr if b not in (leader, broker_id)],
                    self.epoch.epoch)
            if len(st.isr) > 1:
                return st.new_leader_and_isr(
                    st.leader, [b for b in st.isr if b != broker_id], self.epoch.epoch)
            return None
        changes = {tp: d for tp in involved if (d := decide(tp, self._states[tp]))}
        self._write_states(changes, decide)
        return {tp for tp, st in self._states.items() if st.leader == broker_id}

    def create_topic(self, topic: str, num_partitions: int, replication_factor: int,
                     config: dict[str, str] | None = None, *,
                     assignment: dict[int, list[int]] | None = None,
                     topic_id: str | None = None, rack_aware: str = "safe",
                     wait: float = 10.0) -> dict[int, LeaderAndIsr]:
        """Create a topic from any broker: assignment over the live brokers (rack-aware when
        they have racks) unless given, written to /brokers/topics/<t> with its config; the
        active controller (this one or another) then writes the initial partition states.
        Waits up to `wait` seconds for them and returns partition -> state."""
        validate_topic(topic)
        if assignment is None:
            brokers = self.zk.get_all_brokers()
            assignment = assign_replicas(num_partitions, replication_factor,
                                         {b: i.rack for b, i in brokers.items()},
                                         rack_aware=rack_aware)
        self.zk.create_topic(TopicAssignment(topic, dict(assignment), topic_id), config)
        return self.wait_for_partition_states(topic, len(assignment), wait)

    def create_partitions(self, topic: str, total: int,
                          assignment: dict[int, list[int]] | None = None, *,
                          rack_aware: str = "safe", wait: float = 10.0
                          ) -> dict[int, LeaderAndIsr]:
        """Grow `topic` to `total` partitions from any broker (Kafka's CreatePartitions,
        see add_partitions); waits up to `wait` seconds for the controller to create the
        new partitions' states and returns partition -> state."""
        add_partitions(self.zk, topic, total, assignment, rack_aware=rack_aware)
        return self.wait_for_partition_states(topic, total, wait)

    def wait_for_partition_states(self, topic: str, num_partitions: int, timeout: float
                                  ) -> dict[int, LeaderAndIsr]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.zk.get_partition_states([(topic, p) for p in range(num_partitions)])
            if len(got) == num_partitions or time.monotonic() >= deadline:
                return {p: st for (_, p), st in got.items()}
            time.sleep(0.02)

    def delete_topic(self, topic: str) -> None:
        """Ask for deletion (/admin/delete_topics/<t>); the active controller carries it out."""
        if not self.zk.topic_exists(topic):
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        self.zk.mark_topic_for_deletion(topic)

    def snapshot(self) -> dict[TopicPartition, LeaderAndIsr]:
        """The active controller's view of all partition states (tests, diagnostics)."""
        return self._call(lambda: dict(self._states))

    def live_brokers(self) -> list[int]:
        return self._call(lambda: sorted(self._live))
