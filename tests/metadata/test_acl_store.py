"""FileAclStore (fastlog/metadata/acl_store.py): the single-node ACL store — conditional
writes by version, the change callback, the file surviving a reopen, and refusing a file
it cannot trust rather than starting without its ACLs."""

import json
import os

import pytest

from fastlog.metadata.acl_store import ACL_FILE, FileAclStore
from fastlog.security.acl import (
    ABSENT_VERSION,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    AclStoreError,
    AclVersionConflict,
    PatternType,
    ResourcePattern,
    ResourceType,
    VersionedAcls,
)

TOPIC = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
PREFIX = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "app-", PatternType.PREFIXED)
READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
DENY = AccessControlEntry("User:*", "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY)


def test_conditional_writes_and_versions(tmp_path):
    store = FileAclStore(str(tmp_path))
    assert store.read(TOPIC) == VersionedAcls(frozenset(), ABSENT_VERSION)
    assert store.write(TOPIC, frozenset({READ}), ABSENT_VERSION) == 0
    with pytest.raises(AclVersionConflict):
        store.write(TOPIC, frozenset({READ, DENY}), ABSENT_VERSION)
    assert store.write(TOPIC, frozenset({READ, DENY}), 0) == 1
    with pytest.raises(AclVersionConflict):
        store.write(TOPIC, frozenset(), 0)
    assert store.read(TOPIC) == VersionedAcls(frozenset({READ, DENY}), 1)
    store.delete(TOPIC, 1)
    assert store.read(TOPIC).version == ABSENT_VERSION
    assert store.load_all() == {}


def test_callback_hears_every_write(tmp_path):
    store = FileAclStore(str(tmp_path))
    seen = []
    store.watch(lambda pattern, acls: seen.append((pattern, acls)))
    store.write(PREFIX, frozenset({DENY}), ABSENT_VERSION)
    store.write(PREFIX, frozenset(), 0)
    assert seen == [(PREFIX, VersionedAcls(frozenset({DENY}), 0)),
                    (PREFIX, VersionedAcls(frozenset(), ABSENT_VERSION))]


def test_survives_a_reopen_in_kafkas_entry_form(tmp_path):
    store = FileAclStore(str(tmp_path))
    store.write(TOPIC, frozenset({READ}), ABSENT_VERSION)
    store.write(TOPIC, frozenset({READ, DENY}), 0)
    store.write(PREFIX, frozenset({DENY}), ABSENT_VERSION)
    assert sorted(os.listdir(tmp_path)) == [ACL_FILE]  # no temporary file left behind
    doc = json.loads((tmp_path / ACL_FILE).read_text())
    assert doc["version"] == 1
    by_name = {r["name"]: r for r in doc["resources"]}
    assert by_name["app-"]["resourceType"] == "TransactionalId"
    assert by_name["app-"]["patternType"] == "PREFIXED"
    assert by_name["app-"]["acls"] == [{"principal": "User:*", "permissionType": "Deny",
                                        "operation": "All", "host": "10.0.0.1"}]
    again = FileAclStore(str(tmp_path))
    assert again.load_all() == {TOPIC: VersionedAcls(frozenset({READ, DENY}), 1),
                                PREFIX: VersionedAcls(frozenset({DENY}), 0)}
    assert again.write(TOPIC, frozenset({READ}), 1) == 2


@pytest.mark.parametrize("content", [
    "{not json",
    '{"version": 7, "resources": []}',
    '{"version": 1}',
    '{"version": 1, "resources": [{"resourceType": "Planet", "patternType": "LITERAL", '
    '"name": "x", "version": 0, "acls": []}]}',
    '{"version": 1, "resources": [{"resourceType": "Topic", "patternType": "LITERAL", '
    '"name": "x", "version": 0, "acls": [{"principal": "User:a"}]}]}',
])
def test_a_file_it_cannot_trust_is_refused(tmp_path, content):
    (tmp_path / ACL_FILE).write_text(content)
    with pytest.raises(AclStoreError):
        FileAclStore(str(tmp_path))


def test_a_failed_write_changes_nothing(tmp_path):
    store = FileAclStore(str(tmp_path))
    store.write(TOPIC, frozenset({READ}), ABSENT_VERSION)
    seen = []
    store.watch(lambda *change: seen.append(change))
    blocker = tmp_path / (ACL_FILE + ".tmp")
    blocker.mkdir()  # the temporary file cannot be created (even by root)
    with pytest.raises(AclStoreError):
        store.write(TOPIC, frozenset({READ, DENY}), 0)
    assert store.read(TOPIC) == VersionedAcls(frozenset({READ}), 0)
    assert seen == []
    blocker.rmdir()
    assert FileAclStore(str(tmp_path)).read(TOPIC) == VersionedAcls(frozenset({READ}), 0)
    assert store.write(TOPIC, frozenset({READ, DENY}), 0) == 1
