# fastlog/metadata/acl_store.py — where ACLs are kept: the interface, and the single-node store.
#
# Owns: AclStore, what the ACL authorizer (fastlog/security/authorizer.py) needs from
# durable storage whoever provides it — every resource pattern's entries with a version,
# conditional writes by version, and a callback for every change — implemented by
# FileAclStore here (single node) and ZkAclStore (cluster mode, Kafka's /kafka-acl znodes,
# fastlog/zk/acl_store.py); and FileAclStore, one JSON file `<first log dir>/fastlog-acls.json`
# written atomically (write tmp, fsync, rename, fsync dir) so a crash leaves either the
# old or the new version. Its format: {"version": 1, "resources": [{"resourceType":
# "Topic", "patternType": "LITERAL", "name": "orders", "version": 3, "acls": [<Kafka's
# AclAuthorizer entries: {"principal", "permissionType", "operation", "host"}>]}]}.
# Called from: FileAclStore's methods from any thread (one lock), in practice the
# authorizer's admin calls (an executor thread) and startup; it calls the watch callback
# on the writing thread after each write, outside its lock.
"""The ACL store interface and the single-node JSON-file ACL store."""

from __future__ import annotations

import abc
import json
import os
import threading
from collections.abc import Callable

from fastlog.fileio import atomic_write
from fastlog.security.acl import (
    ABSENT_VERSION,
    AccessControlEntry,
    AclStoreError,
    AclVersionConflict,
    PatternType,
    ResourcePattern,
    ResourceType,
    VersionedAcls,
    entries_to_json,
    entry_from_json,
)

ACL_FILE = "fastlog-acls.json"
FORMAT_VERSION = 1

ChangeCallback = Callable[[ResourcePattern, VersionedAcls], None]


class AclStore(abc.ABC):
    """Durable ACLs: one entry set per resource pattern, each with a version."""

    @abc.abstractmethod
    def load_all(self) -> dict[ResourcePattern, VersionedAcls]:
        """Every stored pattern with its entries and version; AclStoreError when the store
        cannot be read or holds a document Kafka would refuse."""

    @abc.abstractmethod
    def read(self, pattern: ResourcePattern) -> VersionedAcls:
        """The pattern's stored entries (empty and ABSENT_VERSION when none)."""

    @abc.abstractmethod
    def write(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry],
              expected_version: int) -> int:
        """Store `entries` as the pattern's ACLs if its stored version is still
        `expected_version` (ABSENT_VERSION: nothing stored); no entries deletes the pattern.
        Returns the new version (ABSENT_VERSION after a delete); AclVersionConflict when the
        version moved, AclStoreError when the write failed. Every watcher hears of it."""

    def delete(self, pattern: ResourcePattern, expected_version: int) -> None:
        """Remove the pattern's ACLs if its stored version is still `expected_version`."""
        self.write(pattern, frozenset(), expected_version)

    @abc.abstractmethod
    def watch(self, callback: ChangeCallback) -> None:
        """Call `callback(pattern, its current VersionedAcls)` after each change to a
        pattern, from this store or (a shared store) from any other."""

    def close(self) -> None:
        return None


class FileAclStore(AclStore):
    """Single-node store: every pattern in one JSON document, rewritten atomically on each
    write. Versions count the writes of each pattern; one process owns the file."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, ACL_FILE)
        self._lock = threading.Lock()
        self._acls: dict[ResourcePattern, VersionedAcls] = {}
        self._callbacks: list[ChangeCallback] = []
        self._load()

    # ------------------------------------------------------------ persistence
    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            raise AclStoreError(f"cannot read ACL file {self.path}: {e}") from None
        try:
            if doc.get("version") != FORMAT_VERSION:
                raise AclStoreError(
                    f"ACL file {self.path} has unknown version {doc.get('version')!r}")
            for r in doc["resources"]:
                rtype = ResourceType.from_name(r["resourceType"])
                ptype = PatternType.from_name(r["patternType"])
                if rtype == ResourceType.UNKNOWN or ptype == PatternType.UNKNOWN:
                    raise ValueError(f"unknown resource {r['resourceType']!r} {r['patternType']!r}")
                entries = frozenset(entry_from_json(item) for item in r["acls"])
                if entries:
                    self._acls[ResourcePattern(rtype, str(r["name"]), ptype)] = VersionedAcls(
                        entries, int(r["version"]))
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise AclStoreError(f"ACL file {self.path} is malformed ({e})") from None

    def _document(self, acls: dict[ResourcePattern, VersionedAcls]) -> bytes:
        resources = []
        for pattern, (entries, version) in sorted(acls.items()):
            resources.append({"resourceType": pattern.resource_type.kafka_name,
                              "patternType": pattern.pattern_type.name, "name": pattern.name,
                              "version": version, "acls": entries_to_json(entries)})
        return json.dumps({"version": FORMAT_VERSION, "resources": resources},
                          indent=1).encode("utf-8")

    # ------------------------------------------------------------ AclStore
    def load_all(self) -> dict[ResourcePattern, VersionedAcls]:
        with self._lock:
            return dict(self._acls)

    def read(self, pattern: ResourcePattern) -> VersionedAcls:
        with self._lock:
            return self._acls.get(pattern, VersionedAcls(frozenset(), ABSENT_VERSION))

    def write(self, pattern, entries, expected_version):
        pattern = ResourcePattern(*pattern)
        entries = frozenset(entries)
        with self._lock:
            current = self._acls.get(pattern)
            current_version = ABSENT_VERSION if current is None else current.version
            if current_version != expected_version:
                raise AclVersionConflict(f"ACLs of {pattern} are at version {current_version}, "
                                         f"not {expected_version}")
            acls = dict(self._acls)
            if entries:
                result = VersionedAcls(entries, current_version + 1)
                acls[pattern] = result
            else:
                result = VersionedAcls(frozenset(), ABSENT_VERSION)
                acls.pop(pattern, None)
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                atomic_write(self.path, self._document(acls))
            except OSError as e:
                raise AclStoreError(f"cannot write ACL file {self.path}: {e}") from None
            self._acls = acls
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback(pattern, result)
        return result.version

    def watch(self, callback: ChangeCallback) -> None:
        with self._lock:
            self._callbacks.append(callback)

