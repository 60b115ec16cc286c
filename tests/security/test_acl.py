"""Kafka's ACL model (fastlog/security/acl.py): codes and names, filter matching for
DescribeAcls/DeleteAcls (MATCH included), CreateAcls validation, the ZooKeeper JSON form."""

import json

import pytest

from fastlog.security.acl import (
    ANY_FILTER,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    acls_from_json,
    acls_to_json,
    binding_from_wire,
    validate_binding,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED, MATCH, ANY = (PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH,
                                 PatternType.ANY)


def entry(principal="User:alice", op=AclOperation.READ, perm=ALLOW, host="*"):
    return AccessControlEntry(principal, host, op, perm)


def test_codes_and_names_are_kafkas():
    assert [int(t) for t in (ResourceType.ANY, TOPIC, GROUP, ResourceType.CLUSTER,
                             ResourceType.TRANSACTIONAL_ID)] == [1, 2, 3, 4, 5]
    assert [int(p) for p in (ANY, MATCH, LITERAL, PREFIXED)] == [1, 2, 3, 4]
    assert [int(p) for p in (AclPermissionType.ANY, DENY, ALLOW)] == [1, 2, 3]
    ops = ["Any", "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
           "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens"]
    assert [AclOperation(code).kafka_name for code in range(1, 15)] == ops
    assert ResourceType.TRANSACTIONAL_ID.kafka_name == "TransactionalId"
    for spelling in ("TransactionalId", "TRANSACTIONAL_ID", "transactionalid"):
        assert ResourceType.from_name(spelling) == ResourceType.TRANSACTIONAL_ID
    assert AclOperation.from_name("Teleport") == AclOperation.UNKNOWN
    assert AclOperation.from_code(99) == AclOperation.UNKNOWN
    assert ResourceType.from_code(-3) == ResourceType.UNKNOWN


@pytest.mark.parametrize("pattern, name, pattern_type, expected", [
    # MATCH: the literal name, the wildcard and every prefix of the name
    (ResourcePattern(TOPIC, "orders", LITERAL), "orders", MATCH, True),
    (ResourcePattern(TOPIC, "*", LITERAL), "orders", MATCH, True),
    (ResourcePattern(TOPIC, "ord", PREFIXED), "orders", MATCH, True),
    (ResourcePattern(TOPIC, "orders", PREFIXED), "orders", MATCH, True),
    (ResourcePattern(TOPIC, "orders-eu", PREFIXED), "orders", MATCH, False),
    (ResourcePattern(TOPIC, "other", LITERAL), "orders", MATCH, False),
    (ResourcePattern(TOPIC, "*", PREFIXED), "orders", MATCH, False),
    # ANY: both pattern types, the exact name only (no wildcard or prefix expansion)
    (ResourcePattern(TOPIC, "orders", LITERAL), "orders", ANY, True),
    (ResourcePattern(TOPIC, "orders", PREFIXED), "orders", ANY, True),
    (ResourcePattern(TOPIC, "*", LITERAL), "orders", ANY, False),
    (ResourcePattern(TOPIC, "ord", PREFIXED), "orders", ANY, False),
    # a concrete pattern type: exactly that pattern
    (ResourcePattern(TOPIC, "ord", PREFIXED), "ord", PREFIXED, True),
    (ResourcePattern(TOPIC, "ord", LITERAL), "ord", PREFIXED, False),
    (ResourcePattern(TOPIC, "*", LITERAL), "orders", LITERAL, False),
    (ResourcePattern(TOPIC, "*", LITERAL), "*", LITERAL, True),
    # no name: every name of the matching pattern types
    (ResourcePattern(TOPIC, "anything", PREFIXED), None, ANY, True),
    (ResourcePattern(TOPIC, "anything", PREFIXED), None, LITERAL, False),
    (ResourcePattern(TOPIC, "anything", PREFIXED), None, MATCH, True),
])
def test_resource_pattern_filter(pattern, name, pattern_type, expected):
    assert ResourcePatternFilter(TOPIC, name, pattern_type).matches(pattern) is expected
    assert ResourcePatternFilter(ResourceType.ANY, name, pattern_type).matches(pattern) is expected
    assert ResourcePatternFilter(GROUP, name, pattern_type).matches(pattern) is False


def test_entry_filter_matches_exactly_without_wildcard_expansion():
    e = entry("User:alice", AclOperation.WRITE, DENY, "10.0.0.1")
    assert AccessControlEntryFilter().matches(e)
    assert AccessControlEntryFilter("User:alice", "10.0.0.1", AclOperation.WRITE, DENY).matches(e)
    assert not AccessControlEntryFilter(principal="User:bob").matches(e)
    assert not AccessControlEntryFilter(principal="User:*").matches(e)
    assert not AccessControlEntryFilter(host="*").matches(e)
    assert not AccessControlEntryFilter(operation=AclOperation.ALL).matches(e)
    assert not AccessControlEntryFilter(permission_type=ALLOW).matches(e)
    wildcard = entry("User:*")
    assert AccessControlEntryFilter(principal="User:*").matches(wildcard)


def test_binding_filter_and_its_validation():
    b = AclBinding(ResourcePattern(TOPIC, "t"), entry())
    assert ANY_FILTER.matches(b)
    assert ANY_FILTER.validation_error() is None
    f = AclBindingFilter.from_wire(2, "t", 3, "User:alice", None, 3, 3)
    assert f.matches(b)
    assert not AclBindingFilter.from_wire(2, "t", 3, "User:alice", None, 4, 3).matches(b)
    assert "operation" in AclBindingFilter.from_wire(2, None, 1, None, None, 42, 1).validation_error()
    assert "resource type" in AclBindingFilter.from_wire(0, None, 1, None, None, 1, 1).validation_error()
    assert "pattern type" in AclBindingFilter.from_wire(1, None, 9, None, None, 1, 1).validation_error()
    assert "permission" in AclBindingFilter.from_wire(1, None, 1, None, None, 1, 7).validation_error()


@pytest.mark.parametrize("fields, message", [
    ((2, "t", 3, "User:a", "*", 3, 3), None),
    ((2, "t-", 4, "User:*", "10.1.2.3", 2, 2), None),
    ((4, "kafka-cluster", 3, "User:broker", "*", 9, 3), None),
    ((5, "tx", 3, "User:a", "*", 12, 3), None),
    ((7, "alice", 3, "User:a", "*", 13, 3), None),
    ((1, "t", 3, "User:a", "*", 3, 3), "Invalid resourceType ANY"),
    ((0, "t", 3, "User:a", "*", 3, 3), "Invalid resourceType UNKNOWN"),
    ((42, "t", 3, "User:a", "*", 3, 3), "Invalid resourceType UNKNOWN"),
    ((2, "t", 1, "User:a", "*", 3, 3), "Invalid patternType ANY"),
    ((2, "t", 2, "User:a", "*", 3, 3), "Invalid patternType MATCH"),
    ((2, "t", 3, "User:a", "*", 1, 3), "Invalid operation ANY"),
    ((2, "t", 3, "User:a", "*", 77, 3), "Invalid operation UNKNOWN"),
    ((2, "t", 3, "User:a", "*", 3, 1), "Invalid permissionType ANY"),
    ((2, "t", 3, "User:a", "*", 3, 0), "Invalid permissionType UNKNOWN"),
    ((2, "", 3, "User:a", "*", 3, 3), "Invalid empty resource name"),
    ((4, "my-cluster", 3, "User:a", "*", 3, 3), "The only valid name for the CLUSTER resource is kafka-cluster"),
    ((3, "a/b", 3, "User:a", "*", 3, 3), "invalid resource name"),
    ((3, "..", 3, "User:a", "*", 3, 3), "invalid resource name"),
    ((2, "t", 3, "alice", "*", 3, 3), "Could not parse principal"),
    ((2, "t", 3, "", "*", 3, 3), "Could not parse principal"),
])
def test_create_acls_validation(fields, message):
    got = validate_binding(binding_from_wire(*fields))
    if message is None:
        assert got is None
    else:
        assert got is not None and message in got


def test_json_form_is_kafkas_acl_authorizer_document():
    entries = {entry("User:alice", AclOperation.DESCRIBE_CONFIGS, ALLOW, "*"),
               entry("User:bob", AclOperation.ALL, DENY, "10.0.0.9")}
    data = acls_to_json(entries)
    doc = json.loads(data)
    assert doc["version"] == 1
    assert sorted(doc["acls"], key=lambda a: a["principal"]) == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "DescribeConfigs", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "All", "host": "10.0.0.9"},
    ]
    assert acls_from_json(data) == entries
    # what Kafka itself writes (operation names in Kafka's case) reads back the same
    kafka = (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
             b'"operation":"Read","host":"*"},{"principal":"User:*","permissionType":"Deny",'
             b'"operation":"IdempotentWrite","host":"192.168.0.1"}]}')
    assert acls_from_json(kafka) == {entry("User:alice", AclOperation.READ),
                                     entry("User:*", AclOperation.IDEMPOTENT_WRITE, DENY, "192.168.0.1")}
    assert acls_from_json(b"") == frozenset()


@pytest.mark.parametrize("data", [
    b"not json", b"[]", b'{"version":2,"acls":[]}', b'{"version":1}',
    b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Fly","host":"*"}]}',
    b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe","operation":"Read","host":"*"}]}',
    b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
    b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read"}]}',
    b'{"version":1,"acls":["x"]}',
])
def test_malformed_documents_are_refused(data):
    with pytest.raises(ValueError):
        acls_from_json(data)
