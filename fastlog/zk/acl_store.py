# fastlog/zk/acl_store.py — ACLs in ZooKeeper, on Kafka's AclAuthorizer layout.
#
# Owns: ZkAclStore, the AclStore (fastlog/metadata/acl_store.py) of cluster mode, and its
# znodes, exactly where Kafka's AclAuthorizer keeps them so Kafka's tools and ours share them:
#   /kafka-acl/<ResourceType>/<name>                      LITERAL patterns ("*" included)
#   /kafka-acl-extended/prefixed/<ResourceType>/<name>    PREFIXED patterns
# each holding {"version":1,"acls":[{"principal","permissionType","operation","host"}]}
# (fastlog/security/acl.py), <ResourceType> one of Topic Group Cluster TransactionalId
# DelegationToken User; a resource's znode version fences conditional updates (create when
# absent, set/delete at the version read). After each change the writer adds a persistent
# sequential notification, which every broker's listener reads to re-read that resource:
#   /kafka-acl-changes/acl_changes_<10-digit seq>           data "<ResourceType>:<name>"
#   /kafka-acl-extended-changes/acl_changes_<10-digit seq>  data {"version":1,
#       "resourceType":"<ResourceType>","name":"<name>","patternType":"PREFIXED"}
# Notifications older than 15 minutes are deleted by whichever listener sees them (Kafka's
# ZkNodeChangeNotificationListener); a listener starting up processes every one still there.
# Threads: load_all/read/write block on ZooKeeper and may be called from any thread except
# kazoo's callback thread. The kazoo child watches only wake the store's own listener
# thread ("acl-change-listener"), which reads the changed resources and calls the watch
# callbacks; close() stops it.
"""Kafka's /kafka-acl znodes and ACL change notifications, over kazoo."""

from __future__ import annotations

import json
import logging
import threading
import time

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from fastlog.metadata.acl_store import AclStore, ChangeCallback
from fastlog.security.acl import (
    ABSENT_VERSION,
    CONCRETE_RESOURCE_TYPES,
    AclStoreError,
    AclVersionConflict,
    PatternType,
    ResourcePattern,
    ResourceType,
    VersionedAcls,
    acls_from_json,
    acls_to_json,
)

log = logging.getLogger("fastlog.zk.acl")

LITERAL_ACL_ROOT = "/kafka-acl"
PREFIXED_ACL_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_S = 15 * 60
EXTENDED_CHANGE_VERSION = 1
# The listener thread also wakes this often on its own (a missed watch costs at most this).
LISTENER_POLL_S = 30.0


def acl_root(pattern_type: PatternType) -> str:
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_ROOT
    if pattern_type == PatternType.PREFIXED:
        return PREFIXED_ACL_ROOT
    raise ValueError(f"no ACL znodes for pattern type {pattern_type!r}")


def resource_path(pattern: ResourcePattern) -> str:
    return f"{acl_root(pattern.pattern_type)}/{pattern.resource_type.kafka_name}/{pattern.name}"


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(notification directory, data) announcing a change to `pattern`'s ACLs."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.kafka_name}:{pattern.name}".encode()
    event = {"version": EXTENDED_CHANGE_VERSION, "resourceType": pattern.resource_type.kafka_name,
             "name": pattern.name, "patternType": pattern.pattern_type.name}
    return EXTENDED_CHANGES, json.dumps(event, separators=(",", ":")).encode()


def decode_change(directory: str, data: bytes | None) -> ResourcePattern:
    """The pattern a notification names (either spelling of the resource type, "Topic" or
    "TOPIC"); ValueError for one that does not parse."""
    text = (data or b"").decode("utf-8", "replace")
    if directory == LITERAL_CHANGES:
        if ":" not in text:
            raise ValueError(f"expected ResourceType:ResourceName, got {text!r}")
        type_name, name = text.split(":", 1)
        pattern_type = PatternType.LITERAL
    else:
        try:
            event = json.loads(text)
            if event["version"] != EXTENDED_CHANGE_VERSION:
                raise ValueError(f"unknown version {event['version']!r}")
            type_name, name = event["resourceType"], event["name"]
            pattern_type = PatternType.from_name(event["patternType"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed extended ACL change {text!r}: {e}") from None
        if pattern_type != PatternType.PREFIXED or not isinstance(name, str):
            raise ValueError(f"malformed extended ACL change {text!r}")
    resource_type = ResourceType.from_name(type_name)
    if resource_type not in CONCRETE_RESOURCE_TYPES:
        raise ValueError(f"unknown resource type {type_name!r}")
    return ResourcePattern(resource_type, name, pattern_type)


def _sequence(child: str) -> int:
    try:
        return int(child[len(CHANGE_PREFIX):]) if child.startswith(CHANGE_PREFIX) else -1
    except ValueError:
        return -1


class ZkAclStore(AclStore):
    """ACLs in Kafka's znodes through a started kazoo client (the broker's session, e.g.
    KafkaZkClient.kazoo, or one of its own; its chroot is the cluster's)."""

    def __init__(self, kazoo_client, *, change_expiration_s: float = CHANGE_EXPIRATION_S):
        self._kz = kazoo_client
        self.change_expiration_s = change_expiration_s
        self._callbacks: list[ChangeCallback] = []
        self._last_change = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}
        # creation times (s) of the notifications seen, for purging the expired ones
        self._ctimes: dict[str, dict[str, float]] = {LITERAL_CHANGES: {}, EXTENDED_CHANGES: {}}
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._create_paths()

    def _call(self, fn, *args, **kwargs):
        """A ZooKeeper call retried through connection losses (kazoo's command retry); a
        failure other than the ones callers handle becomes AclStoreError."""
        try:
            return self._kz.retry(fn, *args, **kwargs)
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise
        except KazooException as e:
            raise AclStoreError(f"ZooKeeper: {e!r}") from None

    def _create_paths(self) -> None:
        dirs = [LITERAL_CHANGES, EXTENDED_CHANGES]
        for root in (LITERAL_ACL_ROOT, PREFIXED_ACL_ROOT):
            dirs += [f"{root}/{t.kafka_name}" for t in sorted(CONCRETE_RESOURCE_TYPES)]
        for path in dirs:
            self._call(self._kz.ensure_path, path)

    # ------------------------------------------------------------ reads
    def load_all(self) -> dict[ResourcePattern, VersionedAcls]:
        result = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            root = acl_root(pattern_type)
            for type_name in self._children(root):
                resource_type = ResourceType.from_name(type_name)
                if resource_type not in CONCRETE_RESOURCE_TYPES:
                    log.warning("ignoring ACLs under %s/%s: unknown resource type", root, type_name)
                    continue
                for name in self._children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    acls = self.read(pattern)
                    if acls.entries:
                        result[pattern] = acls
        return result

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._call(self._kz.get_children, path))
        except NoNodeError:
            return []

    def read(self, pattern: ResourcePattern) -> VersionedAcls:
        path = resource_path(pattern)
        try:
            data, stat = self._call(self._kz.get, path)
        except NoNodeError:
            return VersionedAcls(frozenset(), ABSENT_VERSION)
        try:
            return VersionedAcls(acls_from_json(data), stat.version)
        except ValueError as e:
            raise AclStoreError(f"{path}: {e}") from None

    # ------------------------------------------------------------ writes
    def write(self, pattern, entries, expected_version):
        pattern = ResourcePattern(*pattern)
        path = resource_path(pattern)
        kz = self._kz
        try:
            if not entries:
                if expected_version == ABSENT_VERSION:
                    if self._call(kz.exists, path) is not None:
                        raise AclVersionConflict(f"{path} exists")
                    return ABSENT_VERSION
                self._call(kz.delete, path, version=expected_version)
                new_version = ABSENT_VERSION
            elif expected_version == ABSENT_VERSION:
                self._call(kz.create, path, acls_to_json(entries), makepath=True)
                new_version = 0
            else:
                new_version = self._call(kz.set, path, acls_to_json(entries),
                                         version=expected_version).version
        except (BadVersionError, NodeExistsError, NoNodeError) as e:
            # A retried call whose first attempt went through also lands here; the caller
            # re-reads and finds its change already made.
            raise AclVersionConflict(
                f"{path} is not at version {expected_version} ({type(e).__name__})") from None
        directory, data = encode_change(pattern)
        try:
            self._call(kz.create, f"{directory}/{CHANGE_PREFIX}", data, sequence=True)
        except (AclStoreError, KazooException) as e:
            log.error("ACLs of %s written but the change notification failed (%r): other "
                      "brokers see them on their next restart", pattern, e)
        return new_version

    # ------------------------------------------------------------ change listener
    def watch(self, callback: ChangeCallback) -> None:
        self._callbacks.append(callback)
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="acl-change-listener", daemon=True)
        self._thread.start()
        for directory in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._kz.ChildrenWatch(directory, self._on_children)

    def _on_children(self, _children):
        # kazoo's callback thread: only wake the listener (returning False ends the watch).
        if self._stopped.is_set():
            return False
        self._wake.set()
        return None

    def close(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        self._wake.set()  # process what is already there
        while not self._stopped.is_set():
            self._wake.wait(LISTENER_POLL_S)
            self._wake.clear()
            if self._stopped.is_set():
                return
            for directory in (LITERAL_CHANGES, EXTENDED_CHANGES):
                try:
                    self._process(directory)
                except Exception:
                    # ZooKeeper unreachable for longer than the retries: the notifications
                    # stay, the next wake (a watch, or the poll) processes them.
                    log.warning("could not process ACL changes in %s", directory, exc_info=True)

    def _process(self, directory: str) -> None:
        children = sorted((_sequence(c), c) for c in self._children(directory) if _sequence(c) >= 0)
        now = time.time()
        ctimes = self._ctimes[directory]
        for gone in set(ctimes) - {c for _, c in children}:
            del ctimes[gone]
        for seq, child in children:
            if self._stopped.is_set():
                return
            path = f"{directory}/{child}"
            if seq > self._last_change[directory] or child not in ctimes:
                try:
                    data, stat = self._call(self._kz.get, path)
                except NoNodeError:
                    continue  # purged by another broker
                ctimes[child] = stat.ctime / 1000.0
                if seq > self._last_change[directory]:
                    self._apply(directory, path, data)
                    self._last_change[directory] = seq
            if ctimes[child] < now - self.change_expiration_s:
                try:
                    self._call(self._kz.delete, path)
                except NoNodeError:
                    pass
                ctimes.pop(child, None)

    def _apply(self, directory: str, path: str, data: bytes | None) -> None:
        try:
            pattern = decode_change(directory, data)
        except ValueError as e:
            log.warning("ignoring ACL change notification %s: %s", path, e)
            return
        try:
            acls = self.read(pattern)
        except AclStoreError as e:
            log.error("ACLs of %s changed but cannot be read (%s): keeping the previous ones",
                      pattern, e)
            return
        for callback in list(self._callbacks):
            try:
                callback(pattern, acls)
            except Exception:
                log.exception("ACL change callback failed for %s", pattern)
