# fastlog/security/acl.py — Kafka's ACL model: what an ACL is, how a filter matches it,
# what CreateAcls accepts, and the JSON form ACLs are stored in.
#
# Owns: the enums with Kafka's codes and names (ResourceType, PatternType, AclOperation,
# AclPermissionType: the int8 codes of the CreateAcls/DescribeAcls/DeleteAcls wire fields,
# the PascalCase names of the ZooKeeper layout such as "TransactionalId", "DescribeConfigs",
# "Allow"); ResourcePattern, AccessControlEntry and AclBinding (a concrete ACL) and their
# filters (AclBindingFilter: Kafka's match rules for DescribeAcls and DeleteAcls, including
# the MATCH pattern type); validate_binding (the per-binding INVALID_REQUEST checks of
# CreateAcls); the per-binding results of CreateAcls and DeleteAcls; and the JSON document
# of Kafka's AclAuthorizer, one per resource pattern:
#   {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
#                         "operation":"Read","host":"*"}]}
# Pure values and functions: immutable objects, no I/O, usable from any thread. Used by
# the authorizer (fastlog/security/authorizer.py), the ACL stores (fastlog/metadata/
# acl_store.py, fastlog/zk/acl_store.py) and the request handlers.
"""Kafka's ACL model: resource patterns, entries, bindings, filters and their JSON form."""

from __future__ import annotations

import enum
import json
from typing import NamedTuple

from fastlog.protocol.errors import Errors

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
# The one name a Cluster resource may have (Kafka's Resource.CLUSTER_NAME).
CLUSTER_NAME = "kafka-cluster"
ACL_JSON_VERSION = 1


def _pascal(name: str) -> str:
    """'TRANSACTIONAL_ID' -> 'TransactionalId' (Kafka's SecurityUtils.toPascalCase)."""
    return "".join(part.capitalize() for part in name.split("_"))


class _KafkaEnum(enum.IntEnum):
    """An enum whose members carry Kafka's wire code (the value) and Kafka's name."""

    @property
    def kafka_name(self) -> str:
        """The PascalCase name Kafka writes in ZooKeeper and in its tools ("ClusterAction")."""
        return _pascal(self.name)

    @classmethod
    def from_code(cls, code: int):
        """The member for a wire code; UNKNOWN for a code Kafka does not define (as
        Kafka's fromCode does, so the request can be refused per binding)."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN  # type: ignore[attr-defined]

    @classmethod
    def from_name(cls, name: str):
        """The member for Kafka's name in either spelling ("TransactionalId",
        "TRANSACTIONAL_ID", case-insensitive); UNKNOWN if none."""
        key = str(name).replace("_", "").upper()
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        return cls.UNKNOWN  # type: ignore[attr-defined]


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The operations that mean something for each resource type (Kafka's
# AclEntry.supportedOperations): the bits an include_*_authorized_operations answer may set.
_O = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                           _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}
del _O

# Concrete values: what a stored ACL may hold (filters may also use ANY / MATCH).
CONCRETE_RESOURCE_TYPES = frozenset(SUPPORTED_OPERATIONS)
CONCRETE_PATTERN_TYPES = frozenset((PatternType.LITERAL, PatternType.PREFIXED))
CONCRETE_OPERATIONS = frozenset(op for op in AclOperation if op > AclOperation.ANY)
CONCRETE_PERMISSIONS = frozenset((AclPermissionType.DENY, AclPermissionType.ALLOW))


def parse_principal(principal: str) -> tuple[str, str]:
    """'User:alice' -> ('User', 'alice'), as Kafka's SecurityUtils.parseKafkaPrincipal:
    ValueError for an empty string or one without a ':'."""
    if not isinstance(principal, str) or ":" not in principal:
        raise ValueError("expected a string in format principalType:principalName "
                         f"but got {principal!r}")
    kind, name = principal.split(":", 1)
    return kind, name


class ResourcePattern(NamedTuple):
    """A concrete resource pattern: (type, name, LITERAL or PREFIXED). A LITERAL name "*"
    matches every resource of its type."""
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.pattern_type.name}:{self.name}"


class AccessControlEntry(NamedTuple):
    """Who (principal, "User:*" for anyone) may or may not (permission) do what
    (operation) from where (host: an exact IP address, "*" for anywhere)."""
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


class AclBinding(NamedTuple):
    pattern: ResourcePattern
    entry: AccessControlEntry


class ResourcePatternFilter(NamedTuple):
    """Matches resource patterns: resource_type ANY matches all types, name None all
    names, pattern_type ANY both pattern types with the exact name, MATCH every pattern
    that would apply to a resource called `name` (the literal name, the "*" wildcard,
    and the prefixes of `name`)."""
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        pt = self.pattern_type
        if pt != PatternType.ANY and pt != PatternType.MATCH and pt != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if pt == PatternType.ANY or pt == pattern.pattern_type:
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # MATCH
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    def unknown_field(self) -> str | None:
        if self.resource_type == ResourceType.UNKNOWN:
            return "resource type"
        if self.pattern_type == PatternType.UNKNOWN:
            return "pattern type"
        return None


class AccessControlEntryFilter(NamedTuple):
    """Matches entries: None (principal, host) and ANY (operation, permission) match all;
    any other value matches exactly (no wildcard expansion, as in Kafka)."""
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return (self.permission_type == AclPermissionType.ANY
                or self.permission_type == entry.permission_type)

    def unknown_field(self) -> str | None:
        if self.operation == AclOperation.UNKNOWN:
            return "operation"
        if self.permission_type == AclPermissionType.UNKNOWN:
            return "permission type"
        return None


class AclBindingFilter(NamedTuple):
    """A DescribeAcls / DeleteAcls filter."""
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def validation_error(self) -> str | None:
        """Why Kafka refuses this filter (INVALID_REQUEST), or None: a field whose code
        Kafka does not know."""
        field = self.pattern.unknown_field() or self.entry.unknown_field()
        return None if field is None else f"Filter contains an unknown {field}"

    @classmethod
    def from_wire(cls, resource_type: int, name: str | None, pattern_type: int,
                  principal: str | None, host: str | None, operation: int,
                  permission_type: int) -> AclBindingFilter:
        """The filter of a DescribeAcls request or a DeleteAcls filter entry."""
        return cls(ResourcePatternFilter(ResourceType.from_code(resource_type), name,
                                         PatternType.from_code(pattern_type)),
                   AccessControlEntryFilter(principal, host, AclOperation.from_code(operation),
                                            AclPermissionType.from_code(permission_type)))


ANY_FILTER = AclBindingFilter()


def binding_from_wire(resource_type: int, name: str, pattern_type: int, principal: str,
                      host: str, operation: int, permission_type: int) -> AclBinding:
    """The binding of one CreateAcls creation; unknown codes become UNKNOWN members,
    which validate_binding() refuses."""
    return AclBinding(
        ResourcePattern(ResourceType.from_code(resource_type), name,
                        PatternType.from_code(pattern_type)),
        AccessControlEntry(principal, host, AclOperation.from_code(operation),
                           AclPermissionType.from_code(permission_type)))


def validate_binding(binding: AclBinding) -> str | None:
    """The message of the INVALID_REQUEST Kafka's CreateAcls answers for this binding, or
    None when it may be stored (the checks of Kafka's AclApis and AclControlManager)."""
    pattern, entry = binding
    if pattern.resource_type not in CONCRETE_RESOURCE_TYPES:
        return f"Invalid resourceType {ResourceType.from_code(pattern.resource_type).name}"
    if pattern.pattern_type not in CONCRETE_PATTERN_TYPES:
        return f"Invalid patternType {PatternType.from_code(pattern.pattern_type).name}"
    if entry.operation not in CONCRETE_OPERATIONS:
        return f"Invalid operation {AclOperation.from_code(entry.operation).name}"
    if entry.permission_type not in CONCRETE_PERMISSIONS:
        return f"Invalid permissionType {AclPermissionType.from_code(entry.permission_type).name}"
    name = pattern.name
    if not isinstance(name, str) or not name:
        return "Invalid empty resource name"
    if pattern.resource_type == ResourceType.CLUSTER and name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    # A resource's ACLs are one ZooKeeper znode named after it (Kafka refuses '/'; ZooKeeper
    # itself refuses '.', '..' and NUL): refused in every mode so both stores agree.
    if "/" in name or name in (".", "..") or "\x00" in name:
        return f"ACL binding contains invalid resource name: {name}"
    try:
        parse_principal(entry.principal)
    except ValueError as e:
        return f"Could not parse principal: {e}"
    if not isinstance(entry.host, str):
        return "Invalid host"
    return None


class AclCreateResult(NamedTuple):
    """One CreateAcls result: NONE, or the error code and message for that binding."""
    error: Errors = Errors.NONE
    message: str | None = None


class AclDeleteResult(NamedTuple):
    """One DeleteAcls filter result: the filter's error, and each binding it matched with
    the error of its own deletion (NONE when deleted)."""
    error: Errors = Errors.NONE
    message: str | None = None
    matching: tuple[tuple[AclBinding, Errors, str | None], ...] = ()


# ------------------------------------------------------------------------- JSON form

def entries_to_json(entries) -> list[dict]:
    """The "acls" array of Kafka's AclAuthorizer document (sorted so the same set always
    gives the same JSON)."""
    return [{"principal": e.principal, "permissionType": e.permission_type.kafka_name,
             "operation": e.operation.kafka_name, "host": e.host}
            for e in sorted(entries)]


def acls_to_json(entries) -> bytes:
    """Kafka's AclAuthorizer document for one resource pattern's entries."""
    return json.dumps({"version": ACL_JSON_VERSION, "acls": entries_to_json(entries)},
                      separators=(",", ":")).encode("utf-8")


def entry_from_json(item) -> AccessControlEntry:
    """One element of the "acls" array; ValueError when it is not a valid concrete entry."""
    if not isinstance(item, dict):
        raise ValueError(f"ACL entry is not an object: {item!r}")
    try:
        principal, host = item["principal"], item["host"]
        permission = AclPermissionType.from_name(item["permissionType"])
        operation = AclOperation.from_name(item["operation"])
    except KeyError as e:
        raise ValueError(f"ACL entry lacks {e}") from None
    if not isinstance(host, str):
        raise ValueError(f"ACL entry has a bad host {host!r}")
    parse_principal(principal)
    if operation not in CONCRETE_OPERATIONS:
        raise ValueError(f"ACL entry has an unknown operation {item['operation']!r}")
    if permission not in CONCRETE_PERMISSIONS:
        raise ValueError(f"ACL entry has an unknown permissionType {item['permissionType']!r}")
    return AccessControlEntry(principal, host, operation, permission)


def acls_from_json(data: bytes | str | None) -> frozenset[AccessControlEntry]:
    """The entries of one Kafka AclAuthorizer document (empty data: no entries, as Kafka
    reads it); ValueError for a document Kafka would refuse."""
    if not data:
        return frozenset()
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"ACL document is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != ACL_JSON_VERSION:
        raise ValueError(f"ACL document has no version {ACL_JSON_VERSION}")
    acls = doc.get("acls")
    if not isinstance(acls, list):
        raise ValueError("ACL document has no \"acls\" array")
    return frozenset(entry_from_json(item) for item in acls)


# ------------------------------------------------------------------------- storage values

# The version of a resource pattern that has no stored ACLs (a ZooKeeper znode's version
# starts at 0 when created).
ABSENT_VERSION = -1


class VersionedAcls(NamedTuple):
    """A resource pattern's stored entries and the store's version of them, the version a
    conditional write must name (ABSENT_VERSION when nothing is stored)."""
    entries: frozenset[AccessControlEntry]
    version: int


class AclStoreError(Exception):
    """An ACL store could not read or write (ZooKeeper unreachable, a malformed stored
    document, a file that cannot be written); the message names the resource or file."""


class AclVersionConflict(AclStoreError):
    """A conditional write named a version that is no longer the stored one: someone else
    changed the resource's ACLs first; re-read and try again."""
