# fastlog/security/authorizer.py — the ACL authorizer: may this principal, from this host,
# do this operation on this resource?
#
# Owns: AclAuthorizer, Kafka's AclAuthorizer decision rules over the ACLs in memory, and
# the CreateAcls / DescribeAcls / DeleteAcls operations on them through an AclStore
# (fastlog/metadata/acl_store.py: the single-node file, or fastlog/zk/acl_store.py:
# Kafka's /kafka-acl znodes). Kafka's rules: a super user (super.users) may do anything;
# otherwise the ACLs that apply to a resource are those of its literal name, of the
# literal "*" of its type and of every PREFIXED pattern its name starts with; an entry
# applies to the principal itself or to "User:*", from its host or from "*"; any applying
# DENY of the operation (or of All) refuses; else an applying ALLOW of the operation (or
# of All; Describe is also allowed by Read, Write, Delete and Alter, DescribeConfigs by
# AlterConfigs) allows; when no ACL at all applies to the resource, the answer is
# allow.everyone.if.no.acl.found (default false).
#
# Decision path: a cache keyed by (resource type, name) holds the ACLs that apply to that
# resource, merged once, grouped by principal; per (principal, host) it keeps one int
# whose bit i says operation i is allowed, so a repeated question is two dict lookups and
# a shift. Prefixed patterns are found by probing the name's prefixes at the lengths that
# prefixed patterns of that type have (a sorted list of lengths), never by scanning ACLs.
# A change to a pattern drops only the cached resources it applies to.
#
# Threads: authorize*() and authorized_operations() are called from the broker's event
# loop (any thread works): a cache hit takes no lock; a miss builds the entry under
# `_lock`. Every change to the ACLs (add/remove from request handlers, load/apply_change
# from the store's watcher thread) updates the maps and drops cache entries under the same
# lock; the entries themselves are immutable. add() and remove() do blocking store I/O
# (serialised by `_admin_lock`, never holding `_lock` while waiting on the store): call
# them from an executor thread, not from the event loop.
"""Kafka's ACL authorizer with a per-resource decision cache."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from fastlog.protocol.errors import Errors

from .acl import (
    ABSENT_VERSION,
    ANY_FILTER,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCreateResult,
    AclDeleteResult,
    AclOperation,
    AclPermissionType,
    AclStoreError,
    AclVersionConflict,
    PatternType,
    ResourcePattern,
    ResourceType,
    VersionedAcls,
    parse_principal,
    validate_binding,
)
from .errors import SecurityConfigError

log = logging.getLogger("fastlog.security.authorizer")

SUPER_USERS_CONFIG = "super.users"
ALLOW_EVERYONE_CONFIG = "allow.everyone.if.no.acl.found"

# Kafka's AclAuthorizer retries a conditional write this many times before giving up.
MAX_UPDATE_RETRIES = 10
# Bounds of the decision cache: resources cached, and (principal, host) pairs per resource.
RESOURCE_CACHE_SIZE = 20_000
PRINCIPAL_HOST_CACHE_SIZE = 1_024

# Plain ints on the decision path (an enum member's attribute lookup costs more than the
# dict probe it feeds).
_LITERAL = int(PatternType.LITERAL)
_PREFIXED = int(PatternType.PREFIXED)
_DENY = int(AclPermissionType.DENY)
_ALL_BIT = 1 << AclOperation.ALL
_DESCRIBE_BIT = 1 << AclOperation.DESCRIBE
_ALTER_CONFIGS_BIT = 1 << AclOperation.ALTER_CONFIGS
_DESCRIBE_CONFIGS_BIT = 1 << AclOperation.DESCRIBE_CONFIGS
_ALL_OPS = sum(1 << op for op in AclOperation if op > AclOperation.ANY)
_DESCRIBE_IMPLIED_BY = sum(1 << op for op in (AclOperation.READ, AclOperation.WRITE,
                                              AclOperation.DELETE, AclOperation.ALTER))


def _allowed_mask(allow: int, deny: int) -> int:
    """Bits of the operations allowed given the bits of the applying ALLOW and DENY
    entries' operations, with Kafka's implications (All, Describe, DescribeConfigs)."""
    if allow & _ALL_BIT:
        allow = _ALL_OPS
    if allow & _DESCRIBE_IMPLIED_BY:
        allow |= _DESCRIBE_BIT
    if allow & _ALTER_CONFIGS_BIT:
        allow |= _DESCRIBE_CONFIGS_BIT
    if deny & _ALL_BIT:
        deny = _ALL_OPS
    return allow & ~deny


def parse_super_users(value: str) -> frozenset[str]:
    """Kafka's super.users: principals separated by ';' ("User:admin;User:broker")."""
    users = set()
    for item in (value or "").split(";"):
        item = item.strip()
        if not item:
            continue
        try:
            parse_principal(item)
        except ValueError:
            raise SecurityConfigError(
                f"{SUPER_USERS_CONFIG} entry {item!r} is not of the form "
                "principalType:principalName") from None
        users.add(item)
    return frozenset(users)


class _ResourceAcls:
    """The ACLs that apply to one resource (literal, wildcard and prefixed, merged),
    grouped by principal, and the allowed-operation bits computed per (principal, host)."""

    __slots__ = ("empty", "by_principal", "masks")

    def __init__(self, entries: list[AccessControlEntry]):
        self.empty = not entries
        by_principal: dict[str, list[AccessControlEntry]] = {}
        for e in entries:
            by_principal.setdefault(e.principal, []).append(e)
        self.by_principal = by_principal
        self.masks: dict[tuple[str, str], int] = {}

    def mask(self, principal: str, host: str) -> int:
        allow = deny = 0
        applying = self.by_principal.get(principal, [])
        if principal != WILDCARD_PRINCIPAL:
            applying = applying + self.by_principal.get(WILDCARD_PRINCIPAL, [])
        for e in applying:
            if e.host == host or e.host == WILDCARD_HOST:
                if e.permission_type == _DENY:
                    deny |= 1 << e.operation
                else:
                    allow |= 1 << e.operation
        mask = _allowed_mask(allow, deny)
        masks = self.masks
        if len(masks) >= PRINCIPAL_HOST_CACHE_SIZE:
            masks.clear()
        masks[(principal, host)] = mask
        return mask


class AclAuthorizer:
    """Kafka's AclAuthorizer over an optional AclStore (None: ACLs live in memory only)."""

    def __init__(self, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False, store=None):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self.store = store
        self._lock = threading.Lock()
        self._admin_lock = threading.Lock()
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._versions: dict[ResourcePattern, int] = {}
        # resource type -> {prefix length: number of PREFIXED patterns of that length}
        self._prefix_lengths: dict[int, dict[int, int]] = {}
        self._sorted_lengths: dict[int, list[int]] = {}
        # insertion-ordered so the oldest entry goes first when full (O(1), unlike a
        # plain dict's first key after many deletions)
        self._cache: OrderedDict[tuple[int, str], _ResourceAcls] = OrderedDict()

    @classmethod
    def from_config(cls, config: Mapping[str, str], store=None) -> AclAuthorizer:
        """An authorizer from Kafka's keys super.users and allow.everyone.if.no.acl.found;
        SecurityConfigError for a value Kafka would refuse."""
        raw = str(config.get(ALLOW_EVERYONE_CONFIG, "false")).strip().lower()
        if raw not in ("true", "false"):
            raise SecurityConfigError(f"{ALLOW_EVERYONE_CONFIG} must be true or false, not {raw!r}")
        return cls(parse_super_users(config.get(SUPER_USERS_CONFIG, "")), raw == "true", store)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Load every stored ACL, then follow the store's changes (made by this or any
        other broker). Blocking: call at startup, before serving requests."""
        if self.store is None:
            return
        self.load(self.store.load_all())
        self.store.watch(self.apply_change)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    # ------------------------------------------------------------------ decisions
    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        """May `principal` (e.g. "User:alice") connected from `host` (the client's IP
        address as text) do `operation` on the resource (`resource_type`, `name`)?"""
        if principal in self.super_users:
            return True
        acls = self._cache.get((resource_type, name))
        if acls is None:
            acls = self._build(resource_type, name)
        if acls.empty:
            return self.allow_everyone_if_no_acl_found
        mask = acls.masks.get((principal, host))
        if mask is None:
            mask = acls.mask(principal, host)
        return (mask >> operation) & 1 == 1

    def authorize_batch(self, principal: str, host: str,
                        actions: Iterable[tuple[int, int, str]]) -> list[bool]:
        """authorize() for each (operation, resource_type, name), in order."""
        if principal in self.super_users:
            return [True for _ in actions]
        return [self.authorize(principal, host, op, rtype, name) for op, rtype, name in actions]

    def authorized_operations(self, principal: str, host: str, resource_type: int,
                              name: str) -> int:
        """Kafka's include_*_authorized_operations bit field: bit i set when the principal
        may do operation i on the resource, over the operations its type supports."""
        field = 0
        for op in SUPPORTED_OPERATIONS.get(ResourceType.from_code(resource_type), ()):
            if self.authorize(principal, host, op, resource_type, name):
                field |= 1 << op
        return field

    def _build(self, resource_type: int, name: str) -> _ResourceAcls:
        with self._lock:
            key = (resource_type, name)
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            # Keys are probed as plain tuples: equal to, and hashed as, the ResourcePatterns.
            acls = self._acls
            entries: list[AccessControlEntry] = []
            entries.extend(acls.get((resource_type, name, _LITERAL), ()))
            if name != WILDCARD_RESOURCE:
                entries.extend(acls.get((resource_type, WILDCARD_RESOURCE, _LITERAL), ()))
            for length in self._sorted_lengths.get(resource_type, ()):
                if length > len(name):
                    break
                entries.extend(acls.get((resource_type, name[:length], _PREFIXED), ()))
            built = _ResourceAcls(entries)
            cache = self._cache
            if len(cache) >= RESOURCE_CACHE_SIZE:
                cache.popitem(last=False)  # the oldest entry
            cache[key] = built
            return built

    # ------------------------------------------------------------------ state changes
    def load(self, acls: Mapping[ResourcePattern, VersionedAcls]) -> None:
        """Replace every ACL with `acls` (AclStore.load_all())."""
        with self._lock:
            self._acls = {}
            self._versions = {}
            self._prefix_lengths = {}
            self._sorted_lengths = {}
            self._cache = OrderedDict()
            for pattern, (entries, version) in acls.items():
                self._set_locked(pattern, frozenset(entries), version)

    def apply_change(self, pattern: ResourcePattern, acls: VersionedAcls) -> None:
        """The store says `pattern` now has `acls` (its watcher callback)."""
        with self._lock:
            self._set_locked(pattern, frozenset(acls.entries), acls.version)

    def _set_locked(self, pattern: ResourcePattern, entries: frozenset, version: int) -> None:
        existed = pattern in self._acls
        if entries:
            self._acls[pattern] = entries
            self._versions[pattern] = version
        else:
            self._acls.pop(pattern, None)
            self._versions.pop(pattern, None)
        rtype, name, ptype = pattern
        if ptype == PatternType.PREFIXED and existed != bool(entries):
            counts = self._prefix_lengths.setdefault(rtype, {})
            counts[len(name)] = counts.get(len(name), 0) + (1 if entries else -1)
            if counts[len(name)] <= 0:
                del counts[len(name)]
            self._sorted_lengths[rtype] = sorted(counts)
        self._invalidate_locked(pattern)

    def _invalidate_locked(self, pattern: ResourcePattern) -> None:
        rtype, name, ptype = pattern
        cache = self._cache
        if ptype == PatternType.LITERAL and name != WILDCARD_RESOURCE:
            cache.pop((rtype, name), None)
            return
        if ptype == PatternType.LITERAL:
            stale = [k for k in cache if k[0] == rtype]
        else:
            stale = [k for k in cache if k[0] == rtype and k[1].startswith(name)]
        for k in stale:
            del cache[k]

    # ------------------------------------------------------------------ CreateAcls
    def add(self, bindings: Iterable[AclBinding]) -> list[AclCreateResult]:
        """CreateAcls: store each binding; one result per binding, in order (INVALID_REQUEST
        with Kafka's message for a binding it refuses). Blocking on the store."""
        bindings = list(bindings)
        results = [AclCreateResult()] * len(bindings)
        groups: dict[ResourcePattern, list[tuple[int, AccessControlEntry]]] = {}
        for i, binding in enumerate(bindings):
            message = validate_binding(binding)
            if message is not None:
                results[i] = AclCreateResult(Errors.INVALID_REQUEST, message)
            else:
                pattern = ResourcePattern(*binding.pattern)
                groups.setdefault(pattern, []).append((i, AccessControlEntry(*binding.entry)))
        with self._admin_lock:
            for pattern, items in groups.items():
                added = frozenset(e for _, e in items)
                try:
                    self._update(pattern, lambda current, added=added: current | added)
                except AclStoreError as e:
                    log.warning("Failed to create ACLs for %s: %s", pattern, e)
                    for i, _ in items:
                        results[i] = AclCreateResult(Errors.UNKNOWN_SERVER_ERROR,
                                                     f"Failed to update ACLs for {pattern}: {e}")
        return results

    # ------------------------------------------------------------------ DeleteAcls
    def remove(self, filters: Iterable[AclBindingFilter]) -> list[AclDeleteResult]:
        """DeleteAcls: delete every ACL a filter matches; one result per filter listing the
        bindings it deleted (a binding matched by several filters is listed under the first,
        as in Kafka). A filter with an unknown code gets INVALID_REQUEST. Blocking."""
        filters = list(filters)
        errors: dict[int, str] = {}
        for i, f in enumerate(filters):
            message = f.validation_error()
            if message is not None:
                errors[i] = message
        valid = [(i, f) for i, f in enumerate(filters) if i not in errors]
        deleted: dict[AclBinding, int] = {}
        failed: dict[AclBinding, str] = {}
        with self._admin_lock:
            with self._lock:
                patterns = list(self._acls)
            for pattern in patterns:
                matching = [(i, f) for i, f in valid if f.pattern.matches(pattern)]
                if not matching:
                    continue
                being_deleted: list[tuple[AclBinding, int]] = []

                def without_matches(current, pattern=pattern, matching=matching,
                                    being_deleted=being_deleted):
                    being_deleted.clear()  # a retry starts again from the re-read ACLs
                    kept = set()
                    for entry in current:
                        for i, f in matching:
                            if f.entry.matches(entry):
                                being_deleted.append((AclBinding(pattern, entry), i))
                                break
                        else:
                            kept.add(entry)
                    return frozenset(kept)

                try:
                    self._update(pattern, without_matches)
                except AclStoreError as e:
                    log.warning("Failed to delete ACLs of %s: %s", pattern, e)
                    for binding, _ in being_deleted:
                        failed[binding] = f"Failed to update ACLs for {pattern}: {e}"
                for binding, i in being_deleted:
                    deleted.setdefault(binding, i)
        per_filter: dict[int, list] = {}
        for binding, i in sorted(deleted.items()):
            message = failed.get(binding)
            error = Errors.NONE if message is None else Errors.UNKNOWN_SERVER_ERROR
            per_filter.setdefault(i, []).append((binding, error, message))
        return [AclDeleteResult(Errors.INVALID_REQUEST, errors[i]) if i in errors
                else AclDeleteResult(matching=tuple(per_filter.get(i, ())))
                for i in range(len(filters))]

    # ------------------------------------------------------------------ DescribeAcls
    def list(self, acl_filter: AclBindingFilter = ANY_FILTER) -> list[AclBinding]:
        """DescribeAcls: every stored binding the filter matches, sorted."""
        with self._lock:
            items = list(self._acls.items())
        return sorted(AclBinding(pattern, entry)
                      for pattern, entries in items if acl_filter.pattern.matches(pattern)
                      for entry in entries if acl_filter.entry.matches(entry))

    # ------------------------------------------------------------------ writes
    def _update(self, pattern: ResourcePattern, change) -> frozenset:
        """Apply `change` (current entries -> new entries) to the pattern's stored ACLs with
        conditional writes: on a version conflict re-read the store and apply it again."""
        with self._lock:
            current = self._acls.get(pattern, frozenset())
            version = self._versions.get(pattern, ABSENT_VERSION)
        for attempt in range(MAX_UPDATE_RETRIES):
            if attempt and self.store is not None:
                current, version = self.store.read(pattern)
            new = frozenset(change(current))
            if new == current:
                if attempt:
                    self.apply_change(pattern, VersionedAcls(current, version))
                return current
            if self.store is None:
                new_version = version + 1 if new else ABSENT_VERSION
            else:
                try:
                    new_version = self.store.write(pattern, new, version)
                except AclVersionConflict:
                    continue
            self.apply_change(pattern, VersionedAcls(new, new_version))
            return new
        raise AclStoreError(f"gave up after {MAX_UPDATE_RETRIES} conflicting concurrent updates")
