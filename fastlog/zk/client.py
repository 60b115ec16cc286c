# KafkaZkClient: every read and write fastlog makes in ZooKeeper, on Kafka's layout
# (fastlog/zk/paths.py), over one kazoo session. It owns the session: registration of this
# broker's ephemeral /brokers/ids/<id> (re-created on a new session after expiry), the
# cluster id, broker-id generation through /brokers/seqid, controller election through the
# ephemeral /controller plus a conditional increment of /controller_epoch, and the controller's
# writes, each fenced by a CheckOp on /controller_epoch's znode version inside one multi-op
# so that a controller that lost its office (a zombie) changes nothing.
#
# Thread-safety: the methods are blocking and may be called from any thread except kazoo's
# own callback thread (watch callbacks must hand work to another thread; see controller.py).
# The state listener runs on kazoo's connection thread and only spawns work.

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.retry import KazooRetry

from fastlog.fileio import atomic_write
from fastlog.protocol.topics import validate_topic
from fastlog.zk import paths
from fastlog.zk.paths import BrokerInfo, LeaderAndIsr, TopicAssignment

log = logging.getLogger("fastlog.zk")

TopicPartition = tuple[str, int]


class ZkError(Exception):
    """A ZooKeeper operation could not be carried out as asked."""


class BrokerIdInUseError(ZkError):
    """Another live session holds /brokers/ids/<id>: a second broker with the same broker.id."""


class ControllerMovedError(ZkError):
    """A controller write was refused: /controller_epoch moved on, this broker is no longer
    the controller (or never was)."""


class TopicExistsError(ZkError):
    pass


class UnknownTopicError(ZkError):
    pass


@dataclass(frozen=True)
class ControllerEpoch:
    """The office a controller holds: its epoch and the /controller_epoch znode version
    that fences each of its writes."""
    epoch: int
    zk_version: int


class _TxFailed(Exception):
    def __init__(self, index: int, error: Exception):
        super().__init__(f"operation {index} failed: {error!r}")
        self.index = index
        self.error = error


def generate_cluster_id() -> str:
    """22 URL-safe base64 characters of a random UUID, as Kafka's cluster ids are."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def split_connect(connect: str) -> tuple[str, str]:
    """'h1:2181,h2:2181/chroot' -> ('h1:2181,h2:2181', '/chroot'); chroot '' when absent."""
    if "/" in connect:
        hosts, chroot = connect.split("/", 1)
        chroot = "/" + chroot.rstrip("/")
        return hosts, "" if chroot == "/" else chroot
    return connect, ""


def save_session(path: str, credentials: tuple[int, bytes]) -> None:
    """Persist a session's (id, password) so a restarted broker can recognise the ephemeral
    nodes of its previous incarnation and end that session (see register_broker)."""
    sid, password = credentials
    # The password lets anyone take over the session: readable by its owner only.
    atomic_write(path, f"{sid:x} {password.hex()}\n".encode(), mode=0o600)


def load_session(path: str) -> tuple[int, bytes] | None:
    try:
        with open(path) as f:
            sid, password = f.read(200).split()
        return int(sid, 16), bytes.fromhex(password)
    except (OSError, ValueError):
        return None


class KafkaZkClient:
    """One ZooKeeper session used the way a Kafka broker uses it."""

    def __init__(self, connect: str, *, session_timeout: float = 18.0,
                 connection_timeout: float = 15.0, read_only: bool = False):
        self.connect = connect
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout = session_timeout
        self.connection_timeout = connection_timeout
        # Quick reconnects (≈1 s after ZooKeeper is back instead of kazoo's ≈2.5 s default);
        # kazoo's watch recipes retry their reads through a reconnect (default: once).
        retry = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}
        self._kz = KazooClient(
            hosts=connect, timeout=session_timeout, read_only=read_only,
            connection_retry=retry, command_retry={**retry, "deadline": session_timeout},
        )
        # Reads are retried through connection losses for up to a session timeout (ZooKeeper
        # restarting, a leader change in the ensemble); writes are not, their callers decide.
        self._retry = KazooRetry(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5,
                                 deadline=session_timeout, ignore_expire=True)
        self._lock = threading.Lock()
        self._broker_info: BrokerInfo | None = None
        self._session_lost = False
        self._new_session_handlers: list[Callable[[], None]] = []
        self._session_lost_handlers: list[Callable[[], None]] = []
        self.broker_epoch = -1
        self._kz.add_listener(self._on_state)

    # -- session -----------------------------------------------------------------------

    @property
    def kazoo(self) -> KazooClient:
        return self._kz

    @property
    def session_id(self) -> int | None:
        cid = self._kz.client_id
        return cid[0] if cid else None

    def session_credentials(self) -> tuple[int, bytes] | None:
        return self._kz.client_id

    @property
    def connected(self) -> bool:
        return self._kz.connected

    def start(self) -> KafkaZkClient:
        if self.chroot:
            # Kafka creates a missing chroot; kazoo would only warn and then fail every call.
            root = KazooClient(hosts=self.hosts, timeout=self.session_timeout)
            root.start(timeout=self.connection_timeout)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
        self._kz.start(timeout=self.connection_timeout)
        return self

    def close(self) -> None:
        """Close the session: ZooKeeper deletes its ephemerals (registration, /controller)."""
        self._broker_info = None
        try:
            self._kz.stop()
        finally:
            self._kz.close()

    def on_new_session(self, handler: Callable[[], None]) -> None:
        """Call `handler` (on a worker thread) after a new session replaced an expired one,
        after this broker's registration was re-created."""
        self._new_session_handlers.append(handler)

    def on_session_lost(self, handler: Callable[[], None]) -> None:
        """Call `handler` (on a worker thread) when the session expired."""
        self._session_lost_handlers.append(handler)

    def _on_state(self, state) -> None:
        # Runs on kazoo's connection thread: never block here.
        if state == KazooState.LOST:
            self._session_lost = True
            for h in list(self._session_lost_handlers):
                self._kz.handler.spawn(self._run_handler, h)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._kz.handler.spawn(self._reinitialize)

    def _run_handler(self, handler) -> None:
        try:
            handler()
        except Exception:
            log.exception("ZooKeeper session handler %r failed", handler)

    def _reinitialize(self) -> None:
        info = self._broker_info
        if info is not None:
            for attempt in range(50):
                try:
                    self.register_broker(info)
                    log.info("re-registered broker %d after session expiry", info.id)
                    break
                except BrokerIdInUseError:
                    log.error("broker %d lost its registration to another session", info.id,
                              exc_info=True)
                    break
                except (ConnectionLoss, OperationTimeoutError, SessionExpiredError):
                    time.sleep(min(0.1 * (attempt + 1), 1.0))
        for h in list(self._new_session_handlers):
            self._run_handler(h)

    # -- helpers -------------------------------------------------------------------------

    def _commit(self, tx) -> list:
        results = tx.commit()
        for i, r in enumerate(results):
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise _TxFailed(i, r)
        return results

    def _read(self, fn, *args, **kwargs):
        """Run a read, retrying connection losses (each call gets its own retry state)."""
        return self._retry.copy()(fn, *args, **kwargs)

    def _get_or_none(self, path: str, watch=None):
        try:
            return self._read(self._kz.get, path, watch=watch)
        except NoNodeError:
            return None

    def _children_or_empty(self, path: str, watch=None) -> list[str]:
        try:
            return self._read(self._kz.get_children, path, watch=watch)
        except NoNodeError:
            return []

    def exists(self, path: str):
        return self._read(self._kz.exists, path)

    def create_top_level_paths(self) -> None:
        """Create the persistent paths Kafka's brokers make sure exist at startup."""
        for p in paths.PERSISTENT_PATHS:
            self._kz.ensure_path(p)

    # -- cluster id and broker id --------------------------------------------------------

    def get_cluster_id(self) -> str | None:
        got = self._get_or_none(paths.CLUSTER_ID)
        return paths.decode_cluster_id(got[0]) if got else None

    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """The cluster id in /cluster/id; the first broker to ask creates it."""
        existing = self.get_cluster_id()
        if existing is not None:
            return existing
        proposed = proposed or generate_cluster_id()
        try:
            self._kz.create(paths.CLUSTER_ID, paths.encode_cluster_id(proposed), makepath=True)
            return proposed
        except NodeExistsError:
            return self.get_cluster_id()

    def generate_broker_id(self, reserved_broker_max_id: int = paths.RESERVED_BROKER_MAX_ID) -> int:
        """A cluster-unique broker id: /brokers/seqid's data version after an unconditional
        write, above reserved.broker.max.id (so configured ids never collide with it)."""
        for _ in range(3):
            try:
                stat = self._kz.set(paths.BROKER_SEQID, b"")
                return stat.version + reserved_broker_max_id
            except NoNodeError:
                try:
                    self._kz.create(paths.BROKER_SEQID, b"", makepath=True)
                except NodeExistsError:
                    pass
        raise ZkError(f"could not generate a broker id through {paths.BROKER_SEQID}")

    # -- broker registration ---------------------------------------------------------------

    def register_broker(self, info: BrokerInfo,
                        previous_session: tuple[int, bytes] | None = None) -> int:
        """Create this broker's ephemeral /brokers/ids/<id> and return the broker epoch (the
        node's czxid). A node held by this very session is kept (re-written). A node held by
        `previous_session` (the credentials a restarted broker saved before; see save_session)
        is the stale registration of our own previous process: that session is ended, which
        deletes the node, and the registration proceeds. Any other owner is a second broker
        with the same id: BrokerIdInUseError."""
        path = paths.broker_id_path(info.id)
        data = paths.encode_broker(info)
        ended_previous = False
        for _ in range(20):
            tx = self._kz.transaction()
            tx.create(path, b"", ephemeral=True)
            tx.set_data(path, data, 0)
            try:
                self._commit(tx)
                break
            except _TxFailed as e:
                if isinstance(e.error, NoNodeError):
                    self._kz.ensure_path(paths.BROKER_IDS)
                    continue
                if not isinstance(e.error, NodeExistsError):
                    raise e.error from None
            stat = self.exists(path)
            if stat is None:
                continue  # its owner went away meanwhile
            owner = stat.ephemeralOwner
            if owner == self.session_id:
                self._kz.set(path, data)
                break
            if previous_session and owner == previous_session[0] and not ended_previous:
                log.info("broker %d: ending our previous session 0x%x that still holds %s",
                         info.id, owner, path)
                self._end_session(previous_session)
                ended_previous = True
                self._wait_gone(path, timeout=self.session_timeout + 2)
                continue
            holder = self._describe_broker(info.id)
            raise BrokerIdInUseError(
                f"broker.id {info.id} is already registered in ZooKeeper ({path}, "
                f"session 0x{owner:x}{holder}): another broker with this id is running; "
                "give each broker its own broker.id")
        else:
            raise ZkError(f"could not register {path}")
        stat = self.exists(path)
        self._broker_info = info
        self.broker_epoch = stat.czxid if stat else -1
        return self.broker_epoch

    def deregister_broker(self) -> None:
        info, self._broker_info = self._broker_info, None
        if info is not None:
            try:
                self._kz.delete(paths.broker_id_path(info.id))
            except NoNodeError:
                pass

    def _describe_broker(self, broker_id: int) -> str:
        try:
            got = self._get_or_none(paths.broker_id_path(broker_id))
            if got:
                ep = paths.decode_broker(broker_id, got[0]).endpoint()
                if ep:
                    return f", at {ep.host}:{ep.port}"
        except Exception:
            pass
        return ""

    def _end_session(self, credentials: tuple[int, bytes]) -> None:
        # Attaching to a session with its id and password and closing it is the one way to end
        # a live session on the server (its ephemerals go with it).
        clone = KazooClient(hosts=self.connect, client_id=credentials, timeout=self.session_timeout)
        try:
            clone.start(timeout=self.connection_timeout)
            clone.stop()
        except Exception as e:
            log.info("ending previous session 0x%x: %r", credentials[0], e)
        finally:
            clone.close()

    def _wait_gone(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.exists(path) is not None and time.monotonic() < deadline:
            time.sleep(0.02)

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        got = self._get_or_none(paths.broker_id_path(broker_id))
        return paths.decode_broker(broker_id, got[0], got[1].czxid) if got else None

    def get_broker_ids(self, watch=None) -> list[int]:
        return sorted(int(c) for c in self._children_or_empty(paths.BROKER_IDS, watch)
                      if c.lstrip("-").isdigit())

    def get_all_brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers, read in one pipelined round of requests."""
        return self._read(self._get_all_brokers)

    def _get_all_brokers(self) -> dict[int, BrokerInfo]:
        ids = self.get_broker_ids()
        pending = [(i, self._kz.get_async(paths.broker_id_path(i))) for i in ids]
        out = {}
        for i, res in pending:
            try:
                data, stat = res.get()
            except NoNodeError:
                continue
            try:
                out[i] = paths.decode_broker(i, data, stat.czxid)
            except paths.ZkDataError:
                log.warning("ignoring malformed registration of broker %d", i, exc_info=True)
        return out

    # -- controller election ------------------------------------------------------------------

    def get_controller_id(self, watch=None) -> int | None:
        got = self._get_or_none(paths.CONTROLLER, watch)
        if not got:
            return None
        try:
            return paths.decode_controller(got[0])
        except paths.ZkDataError:
            log.warning("malformed %s", paths.CONTROLLER, exc_info=True)
            return None

    def get_controller_epoch(self) -> ControllerEpoch | None:
        got = self._get_or_none(paths.CONTROLLER_EPOCH)
        if not got:
            return None
        return ControllerEpoch(paths.decode_controller_epoch(got[0]), got[1].version)

    def register_controller_and_increment_epoch(self, broker_id: int) -> ControllerEpoch | None:
        """Try to become the controller: one multi-op creates the ephemeral /controller and
        sets /controller_epoch to epoch + 1 conditionally on the version just read. Returns
        the new office, or None when another broker is (or just became) the controller."""
        for _ in range(10):
            current = self.get_controller_epoch()
            if current is None:
                try:
                    self._kz.create(paths.CONTROLLER_EPOCH,
                                    paths.encode_controller_epoch(paths.INITIAL_CONTROLLER_EPOCH))
                except NodeExistsError:
                    pass
                continue
            new_epoch = current.epoch + 1
            tx = self._kz.transaction()
            tx.create(paths.CONTROLLER, paths.encode_controller(broker_id), ephemeral=True)
            tx.set_data(paths.CONTROLLER_EPOCH, paths.encode_controller_epoch(new_epoch),
                        current.zk_version)
            try:
                results = self._commit(tx)
                return ControllerEpoch(new_epoch, results[1].version)
            except _TxFailed as e:
                if isinstance(e.error, NodeExistsError):
                    # Ours already when a retried request had gone through before.
                    got = self._get_or_none(paths.CONTROLLER)
                    if got and got[1].ephemeralOwner == self.session_id:
                        mine = self.get_controller_epoch()
                        if mine is not None and mine.epoch == new_epoch:
                            return mine
                    return None
                if isinstance(e.error, BadVersionError):
                    continue  # the epoch moved between our read and our write: read again
                raise e.error from None
        return None

    def resign_controller(self, epoch: ControllerEpoch) -> None:
        """Give up the office (delete /controller), only if it is still ours."""
        try:
            self._fenced(epoch, lambda tx: tx.delete(paths.CONTROLLER))
        except (ControllerMovedError, _TxFailed):
            pass  # not ours any more, or already gone

    def _fenced(self, epoch: ControllerEpoch, build: Callable) -> list:
        """Commit the operations `build(tx)` adds, only if /controller_epoch is still at the
        version that made us controller. Returns the results of the operations after the check."""
        tx = self._kz.transaction()
        tx.check(paths.CONTROLLER_EPOCH, epoch.zk_version)
        build(tx)
        try:
            return self._commit(tx)[1:]
        except _TxFailed as e:
            if e.index == 0:
                raise ControllerMovedError(
                    f"controller epoch {epoch.epoch} (znode version {epoch.zk_version}) is "
                    "stale: another broker is the controller now") from None
            raise _TxFailed(e.index - 1, e.error) from None

    def _fenced_async(self, epoch: ControllerEpoch, build: Callable):
        tx = self._kz.transaction()
        tx.check(paths.CONTROLLER_EPOCH, epoch.zk_version)
        build(tx)
        return tx.commit_async()

    @staticmethod
    def _tx_result(async_result) -> tuple[list | None, int, Exception | None]:
        """(results, failed index, error) of a fenced async transaction."""
        results = async_result.get()
        for i, r in enumerate(results):
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                return None, i, r
        return results, -1, None

    def ensure_feature_node(self) -> None:
        if self.exists(paths.FEATURE) is None:
            try:
                self._kz.create(paths.FEATURE, paths.encode_feature())
            except NodeExistsError:
                pass

    # -- topics -------------------------------------------------------------------------------

    def get_all_topics(self, watch=None) -> set[str]:
        return set(self._children_or_empty(paths.BROKER_TOPICS, watch))

    def topic_exists(self, topic: str) -> bool:
        return self.exists(paths.topic_path(topic)) is not None

    def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        got = self._get_or_none(paths.topic_path(topic))
        return paths.decode_topic(topic, got[0]) if got else None

    def get_topic_assignment_and_version(self, topic: str
                                         ) -> tuple[TopicAssignment, int] | None:
        """The assignment with its znode version, for a conditional rewrite."""
        got = self._get_or_none(paths.topic_path(topic))
        return (paths.decode_topic(topic, got[0]), got[1].version) if got else None

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        return self._read(self._get_topic_assignments, list(topics))

    def _get_topic_assignments(self, topics: list[str]) -> dict[str, TopicAssignment]:
        pending = [(t, self._kz.get_async(paths.topic_path(t))) for t in topics]
        out = {}
        for t, res in pending:
            try:
                data, _ = res.get()
            except NoNodeError:
                continue
            try:
                out[t] = paths.decode_topic(t, data)
            except paths.ZkDataError:
                log.warning("ignoring malformed assignment of topic %s", t, exc_info=True)
        return out

    def create_topic(self, assignment: TopicAssignment, config: dict[str, str] | None = None
                     ) -> None:
        """Write a new topic the way Kafka's admin path does: its config znode first, then
        /brokers/topics/<t>, which the controller watches to create the partition states."""
        topic = validate_topic(assignment.topic)
        if self.exists(paths.delete_topic_path(topic)) is not None:
            raise TopicExistsError(f"topic {topic!r} is marked for deletion")
        if self.topic_exists(topic):
            raise TopicExistsError(f"topic {topic!r} already exists")
        self.set_entity_config("topics", topic, config or {})
        try:
            self._kz.create(paths.topic_path(topic), paths.encode_topic(assignment),
                            makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"topic {topic!r} already exists") from None

    def set_topic_assignment(self, assignment: TopicAssignment, expected_version: int = -1) -> int:
        """Rewrite a topic's assignment (partition additions); returns the new znode version."""
        try:
            return self._kz.set(paths.topic_path(assignment.topic),
                                paths.encode_topic(assignment), expected_version).version
        except NoNodeError:
            raise UnknownTopicError(f"topic {assignment.topic!r} does not exist") from None

    # -- partition state --------------------------------------------------------------------------

    def get_partition_state(self, topic: str, partition: int, watch=None) -> LeaderAndIsr | None:
        got = self._get_or_none(paths.partition_state_path(topic, partition), watch)
        if not got:
            return None
        return paths.decode_partition_state(topic, partition, got[0], got[1].version)

    def get_partition_states(self, partitions: Iterable[TopicPartition]
                             ) -> dict[TopicPartition, LeaderAndIsr]:
        """Partition states, read in one pipelined round; absent ones are left out."""
        return self._read(self._get_partition_states, list(partitions))

    def _get_partition_states(self, partitions: list[TopicPartition]
                              ) -> dict[TopicPartition, LeaderAndIsr]:
        pending = [(tp, self._kz.get_async(paths.partition_state_path(*tp))) for tp in partitions]
        out = {}
        for tp, res in pending:
            try:
                data, stat = res.get()
            except NoNodeError:
                continue
            try:
                out[tp] = paths.decode_partition_state(tp[0], tp[1], data, stat.version)
            except paths.ZkDataError:
                log.warning("ignoring malformed state of %s-%d", *tp, exc_info=True)
        return out

    def create_partition_states(self, epoch: ControllerEpoch,
                                states: dict[TopicPartition, LeaderAndIsr]
                                ) -> tuple[dict[TopicPartition, LeaderAndIsr],
                                           dict[TopicPartition, Exception]]:
        """Create the state znodes of new partitions, each fenced by the controller epoch.
        Returns (created states with zk_version 0, failures such as NodeExistsError)."""
        for topic, partition in states:
            self._kz.ensure_path(paths.topic_partition_path(topic, partition))
        pending = [
            (tp, st, self._fenced_async(
                epoch, lambda tx, tp=tp, st=st: tx.create(paths.partition_state_path(*tp),
                                                          paths.encode_partition_state(st))))
            for tp, st in states.items()
        ]
        return self._collect(epoch, pending, lambda st, result: 0)

    def update_leader_and_isr(self, epoch: ControllerEpoch,
                              states: dict[TopicPartition, LeaderAndIsr]
                              ) -> tuple[dict[TopicPartition, LeaderAndIsr],
                                         dict[TopicPartition, Exception]]:
        """Controller write of new partition states, each conditional on its `zk_version`
        (the state the decision was made from) and fenced by the controller epoch. Returns
        (written states carrying their new zk_version, failures: BadVersionError when the
        leader changed the ISR meanwhile, NoNodeError for a deleted partition)."""
        pending = [
            (tp, st, self._fenced_async(
                epoch, lambda tx, tp=tp, st=st: tx.set_data(paths.partition_state_path(*tp),
                                                            paths.encode_partition_state(st),
                                                            st.zk_version)))
            for tp, st in states.items()
        ]
        return self._collect(epoch, pending, lambda st, result: result.version)

    def _collect(self, epoch, pending, new_version):
        done, failed = {}, {}
        moved = False
        for tp, st, res in pending:
            results, index, error = self._tx_result(res)
            if results is not None:
                done[tp] = LeaderAndIsr(st.leader, st.leader_epoch, st.isr, st.controller_epoch,
                                        new_version(st, results[1]), st.leader_recovery_state)
            elif index == 0:
                moved = True
            else:
                failed[tp] = error
        if moved:
            raise ControllerMovedError(
                f"controller epoch {epoch.epoch} is stale: another broker is the controller now")
        return done, failed

    def conditional_update_partition_state(self, topic: str, partition: int,
                                           state: LeaderAndIsr) -> int | None:
        """A partition leader's own ISR change (Kafka's ZooKeeper-mode ISR shrink/expand):
        written only if the state znode is still at `state.zk_version`. Returns the new
        version, or None when the state moved on (re-read it; a new leader may exist)."""
        try:
            return self._kz.set(paths.partition_state_path(topic, partition),
                                paths.encode_partition_state(state), state.zk_version).version
        except (BadVersionError, NoNodeError):
            return None

    def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> str:
        """Tell the controller that ISRs changed (/isr_change_notification/isr_change_N)."""
        return self._kz.create(f"{paths.ISR_CHANGE_NOTIFICATION}/{paths.ISR_CHANGE_PREFIX}",
                               paths.encode_partition_list(partitions), sequence=True,
                               makepath=True)

    def propagate_log_dir_event(self, broker_id: int) -> str:
        """Tell the controller that a log dir of `broker_id` failed
        (/log_dir_event_notification/log_dir_event_N, Kafka's payload)."""
        return self._kz.create(
            f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{paths.LOG_DIR_EVENT_PREFIX}",
            paths.encode_log_dir_event(broker_id), sequence=True, makepath=True)

    def get_log_dir_event_notifications(self, watch=None) -> list[str]:
        return self._notifications(paths.LOG_DIR_EVENT_NOTIFICATION,
                                   paths.LOG_DIR_EVENT_PREFIX, watch)

    def read_log_dir_event(self, name: str) -> tuple[int, int] | None:
        """(broker id, event) of one notification; None if it is gone."""
        path = f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}"
        got = self._get_or_none(path)
        return paths.decode_log_dir_event(path, got[0]) if got else None

    def delete_log_dir_event_notifications(self, epoch: ControllerEpoch,
                                           names: Iterable[str]) -> None:
        self._delete_notifications(epoch, paths.LOG_DIR_EVENT_NOTIFICATION, names)

    def set_offline_replicas(self, broker_id: int, partitions: Iterable[TopicPartition]
                             ) -> None:
        """Publish this broker's replicas in failed log dirs (ephemeral: a restarted
        broker, whose dirs are checked again, starts with none)."""
        path = f"{paths.OFFLINE_REPLICAS}/{int(broker_id)}"
        data = paths.encode_partition_list(partitions)
        try:
            self._kz.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            self._kz.set(path, data)

    def get_offline_replicas(self, broker_id: int) -> set[TopicPartition]:
        path = f"{paths.OFFLINE_REPLICAS}/{int(broker_id)}"
        got = self._get_or_none(path)
        return set(paths.decode_partition_list(path, got[0])) if got else set()

    def get_isr_change_notifications(self, watch=None) -> list[str]:
        return self._notifications(paths.ISR_CHANGE_NOTIFICATION, paths.ISR_CHANGE_PREFIX,
                                   watch)

    def read_isr_change_notification(self, name: str) -> list[TopicPartition]:
        path = f"{paths.ISR_CHANGE_NOTIFICATION}/{name}"
        got = self._get_or_none(path)
        return paths.decode_partition_list(path, got[0]) if got else []

    def delete_isr_change_notifications(self, epoch: ControllerEpoch, names: Iterable[str]
                                        ) -> None:
        self._delete_notifications(epoch, paths.ISR_CHANGE_NOTIFICATION, names)

    def _notifications(self, parent: str, prefix: str, watch=None) -> list[str]:
        """The sequential notice znodes under `parent`, oldest first."""
        return sorted(c for c in self._children_or_empty(parent, watch)
                      if c.startswith(prefix))

    def _delete_notifications(self, epoch: ControllerEpoch, parent: str,
                              names: Iterable[str]) -> None:
        """Delete handled notices, fenced by the controller epoch (one already gone, or a
        deposed controller's delete, is skipped)."""
        for name in names:
            try:
                self._fenced(epoch, lambda tx, n=name: tx.delete(f"{parent}/{n}"))
            except _TxFailed:
                pass

    def request_preferred_replica_election(self, partitions: Iterable[TopicPartition]) -> None:
        """Admin: ask the controller to move leadership back to the preferred replicas."""
        self._kz.create(paths.PREFERRED_REPLICA_ELECTION,
                        paths.encode_partition_list(partitions), makepath=True)

    def get_preferred_replica_election(self) -> list[TopicPartition] | None:
        got = self._get_or_none(paths.PREFERRED_REPLICA_ELECTION)
        if got is None:
            return None
        try:
            return paths.decode_partition_list(paths.PREFERRED_REPLICA_ELECTION, got[0])
        except paths.ZkDataError:
            log.warning("malformed preferred replica election request", exc_info=True)
            return []

    def delete_preferred_replica_election(self, epoch: ControllerEpoch) -> None:
        try:
            self._fenced(epoch, lambda tx: tx.delete(paths.PREFERRED_REPLICA_ELECTION))
        except _TxFailed:
            pass

    # -- topic deletion -----------------------------------------------------------------------

    def mark_topic_for_deletion(self, topic: str) -> None:
        """Ask the controller to delete `topic` (/admin/delete_topics/<t>, null data)."""
        if not self.topic_exists(topic):
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        try:
            self._kz.create(paths.delete_topic_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def get_topics_marked_for_deletion(self, watch=None) -> list[str]:
        return sorted(self._children_or_empty(paths.DELETE_TOPICS, watch))

    def delete_topic_znodes(self, epoch: ControllerEpoch, topic: str) -> None:
        """Controller: remove a topic's assignment, partition states, config and deletion flag
        in one fenced multi-op (leaves first: ZooKeeper deletes only childless nodes)."""
        for _ in range(5):
            doomed = self._subtree(paths.topic_path(topic))
            if self.exists(paths.config_entity_path("topics", topic)) is not None:
                doomed.append(paths.config_entity_path("topics", topic))
            if self.exists(paths.delete_topic_path(topic)) is not None:
                doomed.append(paths.delete_topic_path(topic))
            if not doomed:
                return

            def build(tx, doomed=doomed):
                for p in doomed:
                    tx.delete(p)
            try:
                self._fenced(epoch, build)
                return
            except _TxFailed as e:
                if not isinstance(e.error, (NoNodeError, NotEmptyError)):
                    raise e.error from None
                # the tree changed under us: look again
        raise ZkError(f"could not delete the znodes of topic {topic!r}")

    def delete_topic_deletion_flag(self, epoch: ControllerEpoch, topic: str) -> None:
        """Controller: drop a deletion request it will not carry out."""
        try:
            self._fenced(epoch, lambda tx: tx.delete(paths.delete_topic_path(topic)))
        except _TxFailed:
            pass  # already gone

    def _subtree(self, root: str) -> list[str]:
        """All nodes under and including `root`, children before parents."""
        out: list[str] = []

        def walk(p):
            for c in self._children_or_empty(p):
                walk(f"{p}/{c}")
            out.append(p)
        if self.exists(root) is not None:
            walk(root)
        return out

    # -- producer ids ---------------------------------------------------------------------------

    def allocate_producer_id_block(self, broker_id: int, block_size: int) -> tuple[int, int]:
        """Reserve the next `block_size` producer ids cluster-wide (Kafka's conditional update
        of /latest_producer_id_block); returns (first, count)."""
        if block_size <= 0:
            raise ValueError(f"block size must be positive, got {block_size}")
        for _ in range(50):
            got = self._get_or_none(paths.LATEST_PRODUCER_ID_BLOCK)
            if got is None:
                self._kz.ensure_path(paths.LATEST_PRODUCER_ID_BLOCK)
                continue
            data, stat = got
            last = paths.decode_producer_id_block(data)
            first = 0 if last is None else last[1] + 1
            try:
                self._kz.set(paths.LATEST_PRODUCER_ID_BLOCK,
                             paths.encode_producer_id_block(broker_id, first,
                                                            first + block_size - 1),
                             stat.version)
                return first, block_size
            except BadVersionError:
                continue  # another broker took a block meanwhile
        raise ZkError("could not allocate a producer id block: too much contention")

    # -- configs ---------------------------------------------------------------------------------

    def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        return self._config_at(paths.config_entity_path(entity_type, name))

    def _config_at(self, path: str) -> dict[str, str]:
        got = self._get_or_none(path)
        return paths.decode_entity_config(path, got[0]) if got else {}

    def set_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        self._set_config_at(paths.config_entity_path(entity_type, name), config)

    def _set_config_at(self, path: str, config: dict[str, str]) -> None:
        data = paths.encode_entity_config(config)
        try:
            self._kz.set(path, data)
        except NoNodeError:
            try:
                self._kz.create(path, data, makepath=True)
            except NodeExistsError:
                self._kz.set(path, data)

    def change_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> str:
        """Replace an entity's config and announce it (/config/changes/config_change_N), as
        Kafka's AdminZkClient.changeConfigs does; every broker applies it from the notice."""
        self.set_entity_config(entity_type, name, config)
        return self._announce_config(
            f"{entity_type}/{paths.config_entity_name(entity_type, name)}")

    def _announce_config(self, entity: str) -> str:
        return self._kz.create(f"{paths.CONFIG_CHANGES}/{paths.CONFIG_CHANGE_PREFIX}",
                               paths.encode_config_change(entity),
                               sequence=True, makepath=True)

    def get_user_client_config(self, user: str, client_id: str) -> dict[str, str]:
        """The config of /config/users/<user>/clients/<client id> (a user + client-id
        quota; either may be "<default>")."""
        return self._config_at(f"{paths.CONFIG}/{paths.user_client_entity(user, client_id)}")

    def change_user_client_config(self, user: str, client_id: str,
                                  config: dict[str, str]) -> str:
        """Replace /config/users/<user>/clients/<client id> and announce it, as Kafka's
        AdminZkClient.changeUserOrUserClientIdConfig."""
        entity = paths.user_client_entity(user, client_id)
        self._set_config_at(f"{paths.CONFIG}/{entity}", config)
        return self._announce_config(entity)

    def get_user_client_names(self, user: str) -> list[str]:
        """The client ids with a config under /config/users/<user>/clients (desanitized)."""
        children = self._children_or_empty(
            f"{paths.CONFIG}/users/{paths.config_entity_name('users', user)}/clients")
        return sorted(paths.desanitize(c) for c in children)

    def get_entity_names(self, entity_type: str) -> list[str]:
        """The entities that have a config node under /config/<type> (user and client ids
        desanitized)."""
        children = self._children_or_empty(f"{paths.CONFIG}/{entity_type}")
        if entity_type not in paths.SANITIZED_TYPES:
            return sorted(children)
        return sorted(paths.desanitize(c) for c in children)

    def get_config_change_notifications(self, watch=None) -> list[str]:
        return sorted(c for c in self._children_or_empty(paths.CONFIG_CHANGES, watch)
                      if c.startswith(paths.CONFIG_CHANGE_PREFIX))

    def read_config_change(self, name: str) -> tuple[str, object] | None:
        """(entity type, entity name) a notification names, or None if it is gone; a
        user + client-id entity is ("users/clients", (user, client id))."""
        path = f"{paths.CONFIG_CHANGES}/{name}"
        got = self._get_or_none(path)
        if not got:
            return None
        entity_type, entity_name = paths.decode_config_change(path, got[0]).split("/", 1)
        user, sep, client_id = entity_name.partition("/clients/")
        if entity_type == "users" and sep:
            return "users/clients", (paths.desanitize(user), paths.desanitize(client_id))
        if entity_type in paths.SANITIZED_TYPES:
            entity_name = paths.desanitize(entity_name)
        return entity_type, entity_name
