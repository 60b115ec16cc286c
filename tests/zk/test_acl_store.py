"""ZkAclStore (fastlog/zk/acl_store.py) against a real ZooKeeper: Kafka's znodes and
payloads, conditional updates by znode version, change notifications read by another
store's listener, and two authorizers on two sessions seeing each other's changes."""

import json

import pytest
from kazoo.client import KazooClient

from fastlog.security.acl import (
    ABSENT_VERSION,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclStoreError,
    AclVersionConflict,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    VersionedAcls,
)
from fastlog.security.authorizer import AclAuthorizer
from fastlog.testing import wait_until
from fastlog.zk.acl_store import ZkAclStore, decode_change, encode_change

TOPIC = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
PREFIX = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "app-", PatternType.PREFIXED)
READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
DENY = AccessControlEntry("User:*", "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY)


@pytest.fixture
def sessions(zk_hosts):
    """Started kazoo clients on the test's chroot, one per broker; all stopped at the end."""
    clients, stores = [], []

    def new(store=True):
        client = KazooClient(hosts=zk_hosts, timeout=5.0)
        client.start(timeout=15)
        clients.append(client)
        if not store:
            return client
        s = ZkAclStore(client)
        stores.append(s)
        return s

    yield new
    for s in stores:
        s.close()
    for c in clients:
        c.stop()
        c.close()


def test_znodes_are_kafkas(sessions, kazoo):
    store = sessions()
    for path in ("/kafka-acl/Topic", "/kafka-acl/Group", "/kafka-acl/Cluster", "/kafka-acl/TransactionalId",
                 "/kafka-acl-extended/prefixed/Topic", "/kafka-acl-extended/prefixed/TransactionalId",
                 "/kafka-acl-changes", "/kafka-acl-extended-changes"):
        assert kazoo.exists(path), path
    assert store.write(TOPIC, frozenset({READ}), ABSENT_VERSION) == 0
    assert store.write(PREFIX, frozenset({DENY}), ABSENT_VERSION) == 0
    data, _ = kazoo.get("/kafka-acl/Topic/orders")
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    data, _ = kazoo.get("/kafka-acl-extended/prefixed/TransactionalId/app-")
    assert json.loads(data)["acls"] == [
        {"principal": "User:*", "permissionType": "Deny", "operation": "All", "host": "10.0.0.1"}]
    literal = kazoo.get_children("/kafka-acl-changes")
    assert literal == ["acl_changes_0000000000"]
    assert kazoo.get("/kafka-acl-changes/" + literal[0])[0] == b"Topic:orders"
    extended = kazoo.get_children("/kafka-acl-extended-changes")
    assert json.loads(kazoo.get("/kafka-acl-extended-changes/" + extended[0])[0]) == {
        "version": 1, "resourceType": "TransactionalId", "name": "app-", "patternType": "PREFIXED"}


def test_change_notification_forms_decode():
    for pattern in (TOPIC, PREFIX, ResourcePattern(ResourceType.GROUP, "a:b", PatternType.LITERAL)):
        assert decode_change(*encode_change(pattern)) == pattern
    # the Java enum spelling of the resource type reads the same
    assert decode_change("/kafka-acl-changes", b"TRANSACTIONAL_ID:x") == ResourcePattern(
        ResourceType.TRANSACTIONAL_ID, "x", PatternType.LITERAL)
    for directory, data in (("/kafka-acl-changes", b"no-separator"), ("/kafka-acl-changes", b"Planet:x"),
                            ("/kafka-acl-extended-changes", b"{}"),
                            ("/kafka-acl-extended-changes",
                             b'{"version":1,"resourceType":"Topic","name":"x","patternType":"LITERAL"}')):
        with pytest.raises(ValueError):
            decode_change(directory, data)


def test_conditional_updates_by_znode_version(sessions):
    a, b = sessions(), sessions()
    assert a.write(TOPIC, frozenset({READ}), ABSENT_VERSION) == 0
    with pytest.raises(AclVersionConflict):
        b.write(TOPIC, frozenset({DENY}), ABSENT_VERSION)
    assert b.read(TOPIC) == VersionedAcls(frozenset({READ}), 0)
    assert b.write(TOPIC, frozenset({READ, DENY}), 0) == 1
    with pytest.raises(AclVersionConflict):
        a.write(TOPIC, frozenset(), 0)
    a.delete(TOPIC, 1)
    assert b.read(TOPIC) == VersionedAcls(frozenset(), ABSENT_VERSION)
    assert a.load_all() == {}


def test_malformed_znode_is_an_error_not_an_empty_acl(sessions, kazoo):
    store = sessions()
    kazoo.create("/kafka-acl/Topic/bad", b'{"version":1,"acls":[{"principal":"nobody"}]}')
    with pytest.raises(AclStoreError):
        store.load_all()


def test_another_stores_listener_sees_changes_within_seconds(sessions):
    writer, reader = sessions(), sessions()
    writer.write(TOPIC, frozenset({READ}), ABSENT_VERSION)  # before the reader listens
    seen = []
    reader.watch(lambda pattern, acls: seen.append((pattern, acls)))
    wait_until(lambda: (TOPIC, VersionedAcls(frozenset({READ}), 0)) in seen, timeout=10,
               what="an existing notification processed at start")
    writer.write(PREFIX, frozenset({DENY}), ABSENT_VERSION)
    wait_until(lambda: (PREFIX, VersionedAcls(frozenset({DENY}), 0)) in seen, timeout=10,
               what="a prefixed change")
    writer.write(TOPIC, frozenset(), 0)
    wait_until(lambda: seen[-1] == (TOPIC, VersionedAcls(frozenset(), ABSENT_VERSION)), timeout=10,
               what="a deletion")


def test_expired_notifications_are_purged(sessions, kazoo):
    store = sessions()
    store.write(TOPIC, frozenset({READ}), ABSENT_VERSION)
    listener = sessions()
    listener.change_expiration_s = 0.0
    seen = []
    listener.watch(lambda *change: seen.append(change))
    wait_until(lambda: seen and not kazoo.get_children("/kafka-acl-changes"), timeout=10,
               what="the processed, expired notification deleted")


def test_two_authorizers_on_two_sessions(sessions):
    one = AclAuthorizer(store=sessions())
    two = AclAuthorizer(store=sessions())
    one.start()
    two.start()
    alice = ("User:alice", "10.0.0.5")
    binding = AclBinding(ResourcePattern(ResourceType.TOPIC, "fin-", PatternType.PREFIXED), READ)
    assert not two.authorize(*alice, AclOperation.READ, ResourceType.TOPIC, "fin-eu")
    assert [r.error for r in one.add([binding])] == [0]
    wait_until(lambda: two.authorize(*alice, AclOperation.READ, ResourceType.TOPIC, "fin-eu"),
               timeout=10, what="the second broker allowing after the first added the ACL")
    # both add to the same resource from their own (possibly stale) view: nothing is lost
    deny = AclBinding(binding.pattern, AccessControlEntry("User:alice", "10.0.0.5", AclOperation.READ,
                                                          AclPermissionType.DENY))
    write = AclBinding(binding.pattern, AccessControlEntry("User:bob", "*", AclOperation.WRITE,
                                                           AclPermissionType.ALLOW))
    assert [r.error for r in two.add([deny])] == [0]
    assert [r.error for r in one.add([write])] == [0]
    assert set(one.store.read(binding.pattern).entries) == {READ, deny.entry, write.entry}
    wait_until(lambda: not one.authorize(*alice, AclOperation.READ, ResourceType.TOPIC, "fin-eu")
               and two.authorize("User:bob", "1.2.3.4", AclOperation.WRITE, ResourceType.TOPIC, "fin-x"),
               timeout=10, what="both brokers seeing all three ACLs")
    results = two.remove([AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, "fin-eu",
                                                                 PatternType.MATCH))])
    assert {m[0] for m in results[0].matching} == {binding, deny, write}
    wait_until(lambda: one.list() == [], timeout=10, what="the deletion seen by the first broker")
    # a third broker starting now loads what is there
    three = AclAuthorizer(store=sessions())
    three.start()
    assert three.list() == []


def test_a_stale_view_retries_on_the_version_conflict(sessions):
    store = sessions()
    stale = AclAuthorizer(store=store)
    stale.load(store.load_all())  # not watching: it never hears of the other write
    other = sessions()
    other.write(TOPIC, frozenset({DENY}), ABSENT_VERSION)
    assert [r.error for r in stale.add([AclBinding(TOPIC, READ)])] == [0]
    assert store.read(TOPIC) == VersionedAcls(frozenset({READ, DENY}), 1)
    assert set(stale.list()) == {AclBinding(TOPIC, READ), AclBinding(TOPIC, DENY)}
    # deleting from a stale view removes what is stored now, not what it remembered
    other.write(TOPIC, frozenset({READ, DENY, READ._replace(principal="User:bob")}), 1)
    results = stale.remove([AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, "orders"))])
    assert len(results[0].matching) == 3
    assert store.read(TOPIC).version == ABSENT_VERSION


def test_listener_keeps_following_after_its_session_expires(sessions, zk_hosts):
    from tests.zk_fixture import expire_session

    writer = sessions()
    client = sessions(store=False)
    reader = ZkAclStore(client)
    seen = []
    reader.watch(lambda pattern, acls: seen.append((pattern, acls)))
    try:
        writer.write(TOPIC, frozenset({READ}), ABSENT_VERSION)
        wait_until(lambda: seen, timeout=10, what="the first change")
        expire_session(client, zk_hosts)
        writer.write(PREFIX, frozenset({DENY}), ABSENT_VERSION)
        wait_until(lambda: (PREFIX, VersionedAcls(frozenset({DENY}), 0)) in seen, timeout=10,
                   what="a change made after the listener's session expired")
    finally:
        reader.close()
