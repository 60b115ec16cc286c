"""AclAuthorizer (fastlog/security/authorizer.py): Kafka's decision rules (literal,
wildcard and prefixed ACLs, deny over allow, hosts, the wildcard principal, super users,
allow.everyone.if.no.acl.found, Describe/DescribeConfigs implications), the decision cache
following every change, CreateAcls/DescribeAcls/DeleteAcls results, and the bit field of
include_*_authorized_operations. In memory (no store) and over the single-node file store."""

import threading

import pytest

from fastlog.metadata.acl_store import FileAclStore
from fastlog.protocol.errors import Errors
from fastlog.security.acl import (
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
    VersionedAcls,
)
from fastlog.security.authorizer import AclAuthorizer, parse_super_users
from fastlog.security.errors import SecurityConfigError

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
HOST = "10.0.0.1"


def acl(name, principal="User:alice", op=Op.READ, perm=ALLOW, host="*", rtype=TOPIC, ptype=LITERAL):
    return AclBinding(ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm))


def authorizer(*bindings, **kwargs):
    a = AclAuthorizer(**kwargs)
    assert all(r.error == Errors.NONE for r in a.add(bindings))
    return a


def can(a, op, name, principal="User:alice", host=HOST, rtype=TOPIC):
    return a.authorize(principal, host, op, rtype, name)


def test_no_acls_denies_unless_allow_everyone():
    assert not can(AclAuthorizer(), Op.READ, "t")
    assert can(AclAuthorizer(allow_everyone_if_no_acl_found=True), Op.READ, "t")
    # allow.everyone only applies when no ACL at all matches the resource
    a = authorizer(acl("t", "User:bob"), allow_everyone_if_no_acl_found=True)
    assert not can(a, Op.READ, "t")
    assert can(a, Op.READ, "other")


def test_literal_acl_applies_to_its_name_and_operation_only():
    a = authorizer(acl("orders"))
    assert can(a, Op.READ, "orders")
    assert not can(a, Op.WRITE, "orders")
    assert not can(a, Op.READ, "orders2")
    assert not can(a, Op.READ, "orders", principal="User:bob")
    assert not can(a, Op.READ, "orders", rtype=GROUP)


def test_wildcard_resource_and_principal():
    a = authorizer(acl("*", "User:alice", Op.WRITE), acl("public", "User:*", Op.READ))
    assert can(a, Op.WRITE, "anything")
    assert not can(a, Op.WRITE, "anything", principal="User:bob")
    assert can(a, Op.READ, "public", principal="User:bob")
    assert can(a, Op.READ, "public", principal="User:ANONYMOUS")
    assert not can(a, Op.READ, "private", principal="User:bob")


def test_prefixed_acls_apply_to_names_starting_with_the_prefix():
    a = authorizer(acl("fin-", ptype=PREFIXED), acl("fin-eu-", "User:bob", ptype=PREFIXED),
                   acl("x", "User:carol", ptype=PREFIXED))
    assert can(a, Op.READ, "fin-")
    assert can(a, Op.READ, "fin-eu-payments")
    assert not can(a, Op.READ, "fin")
    assert not can(a, Op.READ, "finance")
    assert can(a, Op.READ, "fin-eu-x", principal="User:bob")
    assert not can(a, Op.READ, "fin-us-x", principal="User:bob")
    assert can(a, Op.READ, "xyz", principal="User:carol")
    # a PREFIXED "*" is not the wildcard: it only matches names starting with '*'
    b = authorizer(acl("*", ptype=PREFIXED))
    assert not can(b, Op.READ, "orders")


def test_deny_wins_over_allow_from_any_pattern():
    a = authorizer(acl("*", "User:*", Op.ALL), acl("secret-", "User:alice", Op.READ, DENY, ptype=PREFIXED))
    assert not can(a, Op.READ, "secret-plans")
    assert can(a, Op.WRITE, "secret-plans")
    assert can(a, Op.READ, "plans")
    # deny All refuses every operation; a deny for the wildcard principal refuses everyone
    b = authorizer(acl("t", "User:*", Op.ALL), acl("t", "User:alice", Op.ALL, DENY))
    assert not any(can(b, op, "t") for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS))
    assert can(b, Op.READ, "t", principal="User:bob")
    c = authorizer(acl("t", "User:alice", Op.READ), acl("t", "User:*", Op.READ, DENY))
    assert not can(c, Op.READ, "t")


def test_host_matching_is_exact_or_wildcard():
    a = authorizer(acl("t", op=Op.READ, host=HOST), acl("t", op=Op.WRITE, perm=DENY, host="10.0.0.2"),
                   acl("t", op=Op.WRITE, host="*"))
    assert can(a, Op.READ, "t", host=HOST)
    assert not can(a, Op.READ, "t", host="10.0.0.2")
    assert can(a, Op.WRITE, "t", host=HOST)
    assert not can(a, Op.WRITE, "t", host="10.0.0.2")


def test_kafka_implications():
    for granting in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL):
        assert can(authorizer(acl("t", op=granting)), Op.DESCRIBE, "t"), granting
    for not_granting in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.CLUSTER_ACTION):
        assert not can(authorizer(acl("t", op=not_granting)), Op.DESCRIBE, "t"), not_granting
    assert can(authorizer(acl("t", op=Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, "t")
    assert not can(authorizer(acl("t", op=Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS, "t")
    assert not can(authorizer(acl("t", op=Op.DESCRIBE)), Op.READ, "t")
    # a deny of Read does not deny the Describe that an allowed Write implies
    a = authorizer(acl("t", op=Op.WRITE), acl("t", op=Op.READ, perm=DENY))
    assert can(a, Op.DESCRIBE, "t")
    b = authorizer(acl("t", op=Op.WRITE), acl("t", op=Op.DESCRIBE, perm=DENY))
    assert not can(b, Op.DESCRIBE, "t") and can(b, Op.WRITE, "t")


def test_super_users_bypass_everything():
    a = authorizer(acl("t", "User:admin", Op.ALL, DENY), super_users=parse_super_users("User:admin; User:broker"))
    assert can(a, Op.READ, "t", principal="User:admin")
    assert can(a, Op.CLUSTER_ACTION, "kafka-cluster", principal="User:broker", rtype=CLUSTER)
    assert not can(a, Op.READ, "t", principal="User:alice")
    with pytest.raises(SecurityConfigError):
        parse_super_users("User:admin;admin")
    cfg = AclAuthorizer.from_config({"super.users": "User:admin", "allow.everyone.if.no.acl.found": "TRUE"})
    assert cfg.super_users == {"User:admin"} and cfg.allow_everyone_if_no_acl_found
    assert not AclAuthorizer.from_config({}).allow_everyone_if_no_acl_found
    with pytest.raises(SecurityConfigError):
        AclAuthorizer.from_config({"allow.everyone.if.no.acl.found": "yes"})


def test_batch_and_authorized_operations():
    a = authorizer(acl("t", op=Op.WRITE), acl("t", op=Op.ALTER_CONFIGS), acl("g", op=Op.READ, rtype=GROUP))
    assert a.authorize_batch("User:alice", HOST, [(Op.WRITE, TOPIC, "t"), (Op.READ, TOPIC, "t"),
                                                  (Op.READ, GROUP, "g")]) == [True, False, True]
    expected = sum(1 << op for op in (Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS))
    assert a.authorized_operations("User:alice", HOST, TOPIC, "t") == expected
    assert a.authorized_operations("User:alice", HOST, GROUP, "g") == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert a.authorized_operations("User:bob", HOST, TOPIC, "t") == 0
    admin = AclAuthorizer(super_users={"User:admin"})
    topic_ops = (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                 Op.ALTER_CONFIGS)
    assert admin.authorized_operations("User:admin", HOST, TOPIC, "x") == sum(1 << op for op in topic_ops)
    assert admin.authorized_operations("User:admin", HOST, TXN, "x") == (1 << Op.DESCRIBE) | (1 << Op.WRITE)


def test_cache_follows_every_kind_of_change():
    a = AclAuthorizer()
    names = ["orders", "orders-eu", "payments", "*"]
    for name in names:  # fill the cache with denials
        assert not can(a, Op.READ, name)
    a.add([acl("orders-", ptype=PREFIXED)])
    assert [can(a, Op.READ, n) for n in names] == [False, True, False, False]
    a.add([acl("*")])
    assert all(can(a, Op.READ, n) for n in names)
    a.add([acl("orders-eu", op=Op.READ, perm=DENY)])
    assert [can(a, Op.READ, n) for n in names] == [True, False, True, True]
    a.remove([AclBindingFilter(ResourcePatternFilter(TOPIC, "*", LITERAL))])
    assert [can(a, Op.READ, n) for n in names] == [False, False, False, False]
    a.remove([AclBindingFilter(ResourcePatternFilter(TOPIC, "orders-eu", LITERAL))])
    assert [can(a, Op.READ, n) for n in names] == [False, True, False, False]
    # a change pushed by a store (another broker's write) is seen at once
    a.apply_change(ResourcePattern(TOPIC, "orders-", PREFIXED), VersionedAcls(frozenset(), -1))
    assert not can(a, Op.READ, "orders-eu")
    a.load({ResourcePattern(TOPIC, "pay", PREFIXED): VersionedAcls(
        frozenset({AccessControlEntry("User:alice", "*", Op.READ, ALLOW)}), 4)})
    assert [can(a, Op.READ, n) for n in names] == [False, False, True, False]


def test_per_principal_and_host_decisions_are_kept_apart():
    a = authorizer(acl("t", "User:alice", host=HOST), acl("t", "User:bob", op=Op.WRITE))
    for _ in range(3):
        assert can(a, Op.READ, "t") and not can(a, Op.READ, "t", host="10.9.9.9")
        assert can(a, Op.WRITE, "t", principal="User:bob") and not can(a, Op.READ, "t", principal="User:bob")


def test_create_results_per_binding():
    a = AclAuthorizer()
    results = a.add([acl("t"), acl("", op=Op.READ), acl("t", op=Op.ANY), acl("t", op=Op.WRITE),
                     acl("t")])
    assert [r.error for r in results] == [Errors.NONE, Errors.INVALID_REQUEST, Errors.INVALID_REQUEST,
                                          Errors.NONE, Errors.NONE]
    assert results[1].message == "Invalid empty resource name"
    assert len(a.list()) == 2


def test_describe_and_delete_filters():
    bindings = [acl("orders"), acl("orders", "User:bob", Op.WRITE), acl("*", "User:carol"),
                acl("ord", ptype=PREFIXED, op=Op.DESCRIBE), acl("g", rtype=GROUP)]
    a = authorizer(*bindings)
    assert a.list() == sorted(bindings)
    match = AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH))
    assert set(a.list(match)) == set(bindings[:4])
    by_principal = AclBindingFilter(entry=AccessControlEntryFilter(principal="User:alice"))
    assert set(a.list(by_principal)) == {bindings[0], bindings[3], bindings[4]}
    groups = AclBindingFilter(ResourcePatternFilter(GROUP))
    assert a.list(groups) == [bindings[4]]

    deny_filter = AclBindingFilter(entry=AccessControlEntryFilter(permission_type=DENY))
    bad = AclBindingFilter.from_wire(2, None, 1, None, None, 99, 1)
    results = a.remove([AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", LITERAL)), deny_filter,
                        bad, match])
    assert results[0].error == Errors.NONE
    assert {m[0] for m in results[0].matching} == set(bindings[:2])
    assert all(m[1] == Errors.NONE for m in results[0].matching)
    assert results[1].matching == ()
    assert results[2].error == Errors.INVALID_REQUEST
    # a binding matched by two filters is reported under the first one only
    assert {m[0] for m in results[3].matching} == {bindings[2], bindings[3]}
    assert a.list() == [bindings[4]]


def test_concurrent_readers_during_changes():
    a = authorizer(acl("t"))
    stop = threading.Event()
    errors = []

    def read():
        try:
            for _ in range(20_000):
                if stop.is_set():
                    return
                can(a, Op.READ, "t")
                can(a, Op.READ, "t-1")
        except Exception as e:  # pragma: no cover - the failure being tested for
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for i in range(200):
        a.add([acl("t-", ptype=PREFIXED, principal=f"User:u{i}")])
    stop.set()
    for r in readers:
        r.join(timeout=30)
    assert not errors
    assert can(a, Op.READ, "t-1", principal="User:u199")


def test_file_store_keeps_acls_across_a_reopen(tmp_path):
    a = AclAuthorizer(store=FileAclStore(str(tmp_path)))
    a.start()
    a.add([acl("orders"), acl("fin-", "User:bob", Op.WRITE, ptype=PREFIXED), acl("g", rtype=GROUP)])
    a.remove([AclBindingFilter(ResourcePatternFilter(GROUP))])
    a.close()
    b = AclAuthorizer(store=FileAclStore(str(tmp_path)))
    b.start()
    assert b.list() == sorted([acl("orders"), acl("fin-", "User:bob", Op.WRITE, ptype=PREFIXED)])
    assert can(b, Op.READ, "orders") and can(b, Op.WRITE, "fin-x", principal="User:bob")
    assert not can(b, Op.READ, "g", rtype=GROUP)
