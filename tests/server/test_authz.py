"""ACL authorization on a real fastlog-server (authorizer.class.name set), with clients
authenticated over SASL_PLAINTEXT (PLAIN): a matrix of APIs (CreateTopics, DeleteTopics,
OffsetCommit and OffsetDelete among them) x {no ACL, allow literal,
allow prefixed, deny over allow, wildcard principal, super user} answered with Kafka's
error codes over raw wire requests (topics, groups and transactional ids); the transaction
APIs' topic and group checks; confluent-kafka producing, consuming in a group (which
needs both group and topic Read) and managing ACLs; Metadata filtering and
authorized_operations; a client claiming to be a replica refused; the ACL, broker-config
and partition-reassignment APIs refused without Alter/Describe on the cluster; ACLs of the
file store surviving a restart."""

from __future__ import annotations

import secrets
import time
import types

import pytest

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import BrokerProcess
from tests.security.test_sasl_broker import authenticate, call
from tests.server.wire import Wire, batch, fetch_body

TIMEOUT = 30
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
USERS = {name: secrets.token_urlsafe(12) for name in ("admin", "alice", "bob", "carol")}
AUTH_ERRORS = (Errors.TOPIC_AUTHORIZATION_FAILED, Errors.GROUP_AUTHORIZATION_FAILED,
               Errors.CLUSTER_AUTHORIZATION_FAILED)


def authz_overrides(**extra) -> dict[str, str]:
    users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "authorizer.class.name": ACL_AUTHORIZER,
        "super.users": "User:admin",
        "num.partitions": "1",
        **extra,
    }


def sasl_address(b) -> str:
    return f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"


def client_conf(b, user: str) -> dict:
    return {"bootstrap.servers": sasl_address(b), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


def wire_as(b, user: str | None) -> Wire:
    """A raw connection authenticated as `user` (None: the PLAINTEXT listener, anonymous)."""
    if user is None:
        return Wire(b)
    w = Wire(types.SimpleNamespace(host="127.0.0.1", port=b.ports["SASL_PLAINTEXT"]))
    assert authenticate(w, "PLAIN", user, USERS[user]).error_code == 0
    return w


def admin_client(b, user="admin"):
    from confluent_kafka.admin import AdminClient
    return AdminClient(client_conf(b, user))


def acl(restype, name, principal, operation, permission="ALLOW", pattern="LITERAL",
        host="*"):
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    restype = {"CLUSTER": "BROKER"}.get(restype, restype)  # confluent-kafka's name
    return AclBinding(getattr(ResourceType, restype), name,
                      getattr(ResourcePatternType, pattern), principal, host,
                      getattr(AclOperation, operation), getattr(AclPermissionType, permission))


def create_acls(b, bindings, user="admin"):
    admin = admin_client(b, user)  # kept alive until every future is done
    for f in admin.create_acls(bindings).values():
        f.result(TIMEOUT)


# --------------------------------------------------------------------------- the matrix

# scenario -> (who asks, topic/group name suffix, ACLs to create given the API's operation
# and resource type, allowed?)
def scenario_acls(kind, restype, base, op):
    return {
        "none": [],
        "literal": [acl(restype, f"{base}-literal", "User:alice", op)],
        "prefixed": [acl(restype, f"{base}-pre", "User:alice", op, pattern="PREFIXED")],
        "deny": [acl(restype, f"{base}-deny", "User:alice", "ALL"),
                 acl(restype, f"{base}-deny", "User:alice", op, permission="DENY")],
        "wildcard": [acl(restype, f"{base}-wildcard", "User:*", op)],
        "super": [],
    }[kind]


SCENARIOS = {  # kind -> (user, name suffix, allowed)
    "none": ("alice", "none", False),
    "literal": ("alice", "literal", True),
    "prefixed": ("alice", "prefixed", True),  # "<base>-prefixed" starts with "<base>-pre"
    "deny": ("alice", "deny", False),
    "wildcard": ("alice", "wildcard", True),
    "super": ("admin", "none", True),
}


def _produce(w, topic):
    r = call(w, ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
                                    "topic_data": [{"name": topic, "partition_data": [
                                        {"index": 0, "records": batch([b"x"])}]}]})
    return r.responses[0].partition_responses[0].error_code


def _fetch(w, topic):
    r = call(w, ApiKey.FETCH, 11, fetch_body(topic, 0, 0))
    return r.responses[0].partitions[0].error_code


def _list_offsets(w, topic):
    r = call(w, ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                        "timestamp": -1}]}]})
    return r.topics[0].partitions[0].error_code


def _metadata(w, topic):
    r = call(w, ApiKey.METADATA, 8, {"topics": [{"name": topic}],
                                     "allow_auto_topic_creation": False,
                                     "include_cluster_authorized_operations": False,
                                     "include_topic_authorized_operations": False})
    return r.topics[0].error_code


def _epoch(w, topic):
    r = call(w, ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                         "leader_epoch": 0}]}]})
    return r.topics[0].partitions[0].error_code


def _describe_producers(w, topic):
    r = call(w, ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": topic, "partition_indexes": [0]}]})
    return r.topics[0].partitions[0].error_code


def _delete_records(w, topic):
    r = call(w, ApiKey.DELETE_RECORDS, 1, {"timeout_ms": 10000, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}]})
    return r.topics[0].partitions[0].error_code


def _create_partitions(w, topic):
    r = call(w, ApiKey.CREATE_PARTITIONS, 1, {"timeout_ms": 10000, "validate_only": True,
                                              "topics": [{"name": topic, "count": 2,
                                                          "assignments": None}]})
    return r.results[0].error_code


def _describe_configs(w, topic):
    r = call(w, ApiKey.DESCRIBE_CONFIGS, 3, {"include_synonyms": False,
                                             "include_documentation": False, "resources": [
                                                 {"resource_type": 2, "resource_name": topic,
                                                  "configuration_keys": ["retention.ms"]}]})
    return r.results[0].error_code


def _alter_configs(w, topic):
    r = call(w, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": True, "resources": [
        {"resource_type": 2, "resource_name": topic, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "3600000"}]}]})
    return r.responses[0].error_code


def _find_coordinator(w, group):
    return call(w, ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0}).error_code


def _describe_group(w, group):
    r = call(w, ApiKey.DESCRIBE_GROUPS, 4, {"groups": [group],
                                            "include_authorized_operations": True})
    return r.groups[0].error_code


def _offset_fetch(w, group):
    return call(w, ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": None}).error_code


def _delete_group(w, group):
    r = call(w, ApiKey.DELETE_GROUPS, 1, {"groups_names": [group]})
    return r.results[0].error_code


def _create_topics(w, topic):
    r = call(w, ApiKey.CREATE_TOPICS, 4, {"timeout_ms": 10000, "validate_only": True,
                                          "topics": [{"name": topic, "num_partitions": 1,
                                                      "replication_factor": 1,
                                                      "assignments": [], "configs": []}]})
    return r.topics[0].error_code


def _delete_topics(w, topic):
    r = call(w, ApiKey.DELETE_TOPICS, 3, {"topic_names": [topic], "timeout_ms": 10000})
    return r.responses[0].error_code


# a topic alice may Read (the fetch row's literal ACL): the group is what is asked about
READABLE_TOPIC = "fetch-literal"


def _offset_commit(w, group, topic=READABLE_TOPIC):
    r = call(w, ApiKey.OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 0, "committed_metadata": None}]}]})
    return r.topics[0].partitions[0].error_code


def _offset_delete(w, group, topic=READABLE_TOPIC):
    r = call(w, ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0}]}]})
    if r.error_code:
        return r.error_code
    return r.topics[0].partitions[0].error_code


def _init_txn_producer(w, txn_id):
    return call(w, ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1}).error_code


def _find_txn_coordinator(w, txn_id):
    return call(w, ApiKey.FIND_COORDINATOR, 2, {"key": txn_id, "key_type": 1}).error_code


def _describe_txn(w, txn_id):
    r = call(w, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})
    return r.transaction_states[0].error_code


# api -> (request, resource type, operation, the refusal, what an allowed request answers)
TOPIC_DENIED = Errors.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = Errors.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
APIS = {
    "produce": (_produce, "TOPIC", "WRITE", TOPIC_DENIED, (Errors.NONE,)),
    "fetch": (_fetch, "TOPIC", "READ", TOPIC_DENIED, (Errors.NONE,)),
    "listoffsets": (_list_offsets, "TOPIC", "DESCRIBE", TOPIC_DENIED, (Errors.NONE,)),
    "metadata": (_metadata, "TOPIC", "DESCRIBE", TOPIC_DENIED, (Errors.NONE,)),
    "epoch": (_epoch, "TOPIC", "DESCRIBE", TOPIC_DENIED, (Errors.NONE,)),
    "descproducers": (_describe_producers, "TOPIC", "READ", TOPIC_DENIED, (Errors.NONE,)),
    "deleterecords": (_delete_records, "TOPIC", "DELETE", TOPIC_DENIED, (Errors.NONE,)),
    "createparts": (_create_partitions, "TOPIC", "ALTER", TOPIC_DENIED, (Errors.NONE,)),
    "descconfigs": (_describe_configs, "TOPIC", "DESCRIBE_CONFIGS", TOPIC_DENIED,
                    (Errors.NONE,)),
    "alterconfigs": (_alter_configs, "TOPIC", "ALTER_CONFIGS", TOPIC_DENIED, (Errors.NONE,)),
    "findcoord": (_find_coordinator, "GROUP", "DESCRIBE", GROUP_DENIED, (Errors.NONE,)),
    "descgroup": (_describe_group, "GROUP", "DESCRIBE", GROUP_DENIED, (Errors.NONE,)),
    "offsetfetch": (_offset_fetch, "GROUP", "READ", GROUP_DENIED, (Errors.NONE,)),
    # a group nobody joined: allowed means the coordinator's own answer
    "deletegroup": (_delete_group, "GROUP", "DELETE", GROUP_DENIED,
                    (Errors.GROUP_ID_NOT_FOUND, Errors.NONE)),
    # validate_only on a topic that does not exist (Create on the topic; the cluster's
    # Create would allow every name)
    "createtopics": (_create_topics, "TOPIC", "CREATE", TOPIC_DENIED, (Errors.NONE,)),
    "deletetopics": (_delete_topics, "TOPIC", "DELETE", TOPIC_DENIED, (Errors.NONE,)),
    "offsetcommit": (_offset_commit, "GROUP", "READ", GROUP_DENIED, (Errors.NONE,)),
    # no offsets stored for the group: allowed means the coordinator's own answer
    "offsetdelete": (_offset_delete, "GROUP", "DELETE", GROUP_DENIED,
                     (Errors.GROUP_ID_NOT_FOUND, Errors.NONE)),
    "inittxn": (_init_txn_producer, "TRANSACTIONAL_ID", "WRITE", TXN_DENIED, (Errors.NONE,)),
    "findtxn": (_find_txn_coordinator, "TRANSACTIONAL_ID", "DESCRIBE", TXN_DENIED,
                (Errors.NONE,)),
    # an id nobody initialized: allowed means the coordinator's own answer
    "desctxn": (_describe_txn, "TRANSACTIONAL_ID", "DESCRIBE", TXN_DENIED,
                (Errors.TRANSACTIONAL_ID_NOT_FOUND,)),
}
NOT_CREATED = {"createtopics"}


@pytest.fixture(scope="module")
def authz_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("authz") / "data", authz_overrides())
    b.start()
    from confluent_kafka.admin import NewTopic
    admin = admin_client(b)
    topics = [f"{api}-{suffix}" for api, spec in APIS.items()
              if spec[1] == "TOPIC" and api not in NOT_CREATED
              for suffix in ("none", "literal", "prefixed", "deny", "wildcard")]
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(TIMEOUT)
    bindings = [binding for api, (_, restype, op, _, _) in APIS.items()
                for kind in ("literal", "prefixed", "deny", "wildcard")
                for binding in scenario_acls(kind, restype, api, op)]
    create_acls(b, bindings)
    yield b
    if b.alive():
        assert b.stop() == 0, b.log_tail()


@pytest.mark.parametrize("kind", list(SCENARIOS))
@pytest.mark.parametrize("api", list(APIS))
def test_api_matrix(authz_broker, api, kind):
    request, _, _, refusal, allowed_codes = APIS[api]
    user, suffix, allowed = SCENARIOS[kind]
    w = wire_as(authz_broker, user)
    try:
        code = request(w, f"{api}-{suffix}")
    finally:
        w.close()
    if allowed:
        assert code in allowed_codes, f"{api} as {user} ({kind}): error {code}"
    else:
        assert code == refusal, f"{api} as {user} ({kind}): error {code}"


def test_offsets_of_a_readable_group_need_the_topic_too(authz_broker):
    # alice may Read/Delete the groups of the literal rows, not the topic "produce-none"
    w = wire_as(authz_broker, "alice")
    try:
        assert _offset_commit(w, "offsetcommit-literal", "produce-none") == TOPIC_DENIED
        assert _offset_commit(w, "offsetcommit-literal") == Errors.NONE
        assert _offset_delete(w, "offsetdelete-literal", "produce-none") in (
            TOPIC_DENIED, Errors.GROUP_ID_NOT_FOUND)
    finally:
        w.close()


def test_list_groups_lists_only_groups_the_principal_may_describe(authz_broker):
    admin = wire_as(authz_broker, "admin")
    try:
        for group in ("listed-visible", "listed-hidden"):
            assert _offset_commit(admin, group) == Errors.NONE
        create_acls(authz_broker, [acl("GROUP", "listed-visible", "User:alice", "DESCRIBE")])
        everything = call(admin, ApiKey.LIST_GROUPS, 2, {})
        assert {"listed-visible", "listed-hidden"} <= {g.group_id for g in everything.groups}
    finally:
        admin.close()
    w = wire_as(authz_broker, "alice")
    try:
        resp = call(w, ApiKey.LIST_GROUPS, 2, {})
        assert resp.error_code == Errors.NONE
        names = {g.group_id for g in resp.groups}
        assert "listed-visible" in names and "listed-hidden" not in names
    finally:
        w.close()


def test_unknown_topic_not_leaked(authz_broker):
    """A topic alice may not Describe answers 29 whether it exists or not."""
    w = wire_as(authz_broker, "alice")
    try:
        assert _metadata(w, "no-such-topic") == TOPIC_DENIED
        assert _list_offsets(w, "no-such-topic") == TOPIC_DENIED
        assert _produce(w, "no-such-topic") == TOPIC_DENIED
    finally:
        w.close()


def test_metadata_lists_only_described_topics_with_operations(authz_broker):
    w = wire_as(authz_broker, "alice")
    try:
        r = call(w, ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_cluster_authorized_operations": True,
                                         "include_topic_authorized_operations": True})
        names = {t.name for t in r.topics}
        # Describe is implied by Read, Write, Delete and Alter (Kafka's rule)
        assert {"metadata-literal", "produce-literal", "fetch-prefixed",
                "metadata-wildcard"} <= names
        assert not names & {"metadata-none", "metadata-deny", "produce-none"}
        ops = {t.name: t.topic_authorized_operations for t in r.topics}
        assert ops["produce-literal"] == (1 << 4) | (1 << 8)  # Write, Describe
        assert r.cluster_authorized_operations == 0
        plain = call(w, ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False,
                                             "include_cluster_authorized_operations": False,
                                             "include_topic_authorized_operations": False})
        assert plain.cluster_authorized_operations == -(1 << 31)
        assert {t.topic_authorized_operations for t in plain.topics} == {-(1 << 31)}
    finally:
        w.close()
    w = wire_as(authz_broker, "admin")
    try:
        r = call(w, ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_cluster_authorized_operations": True,
                                         "include_topic_authorized_operations": False})
        assert "metadata-none" in {t.name for t in r.topics}
        assert r.cluster_authorized_operations != 0
    finally:
        w.close()


def test_describe_cluster_authorized_operations_need_describe_on_the_cluster(authz_broker):
    from confluent_kafka.admin import AclOperation

    def cluster_ops(user):
        admin = admin_client(authz_broker, user)  # alive until the future is done
        got = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
        assert got.cluster_id and [n.id for n in got.nodes] == [got.controller.id]
        return set(got.authorized_operations or ())

    # Kafka answers 0 to a principal that may not Describe the cluster
    create_acls(authz_broker, [acl("CLUSTER", "kafka-cluster", "User:carol", "ALTER_CONFIGS")])
    assert cluster_ops("carol") == set()
    create_acls(authz_broker, [acl("CLUSTER", "kafka-cluster", "User:carol", "ALTER")])
    # Alter implies Describe, AlterConfigs implies DescribeConfigs (Kafka's rules)
    assert cluster_ops("carol") == {AclOperation.ALTER, AclOperation.DESCRIBE,
                                    AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS}
    assert AclOperation.CLUSTER_ACTION in cluster_ops("admin")


def test_elect_leaders_needs_alter_on_the_cluster(authz_broker):
    body = {"election_type": 0, "timeout_ms": 1000,
            "topic_partitions": [{"topic": "produce-literal", "partitions": [0]}]}
    for user, top, code in (
            ("alice", Errors.CLUSTER_AUTHORIZATION_FAILED, Errors.CLUSTER_AUTHORIZATION_FAILED),
            ("admin", Errors.NONE, Errors.ELECTION_NOT_NEEDED)):
        w = wire_as(authz_broker, user)
        try:
            r = call(w, ApiKey.ELECT_LEADERS, 2, body)
            assert r.error_code == top
            assert [p.error_code for p in r.replica_election_results[0].partition_result] == [
                code]
        finally:
            w.close()


def test_log_dir_apis_need_describe_or_alter_on_the_cluster(authz_broker):
    move = {"dirs": [{"path": "/elsewhere", "topics": [
        {"name": "produce-literal", "partitions": [0]}]}]}
    for user, code, move_code in (
            ("alice", Errors.CLUSTER_AUTHORIZATION_FAILED, Errors.CLUSTER_AUTHORIZATION_FAILED),
            ("admin", Errors.NONE, Errors.LOG_DIR_NOT_FOUND)):
        w = wire_as(authz_broker, user)
        try:
            r = call(w, ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
            assert r.error_code == code
            assert bool(r.results) == (code == Errors.NONE)
            r = call(w, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, move)
            assert [p.error_code for p in r.results[0].partitions] == [move_code]
        finally:
            w.close()


def test_auto_creation_needs_create(authz_broker):
    create_acls(authz_broker, [acl("TOPIC", "auto-", "User:bob", "DESCRIBE",
                                   pattern="PREFIXED")])
    w = wire_as(authz_broker, "bob")
    try:
        r = call(w, ApiKey.METADATA, 8, {"topics": [{"name": "auto-x"}],
                                         "allow_auto_topic_creation": True,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False})
        assert r.topics[0].error_code == TOPIC_DENIED
        create_acls(authz_broker, [acl("TOPIC", "auto-x", "User:bob", "CREATE")])
        r = call(w, ApiKey.METADATA, 8, {"topics": [{"name": "auto-x"}],
                                         "allow_auto_topic_creation": True,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False})
        assert r.topics[0].error_code in (Errors.NONE, Errors.LEADER_NOT_AVAILABLE)
    finally:
        w.close()


def test_replica_fetch_claim_refused(authz_broker):
    """A client posing as a replica (replica_id >= 0) without ClusterAction gets 29 even
    for a topic it may Read (CVE-2018-1288)."""
    w = wire_as(authz_broker, "alice")
    try:
        body = fetch_body("fetch-literal", 0, 0)
        body["replica_id"] = 1
        r = call(w, ApiKey.FETCH, 11, body)
        assert r.responses[0].partitions[0].error_code == TOPIC_DENIED
    finally:
        w.close()


def test_cluster_apis_refused_without_cluster_acls(authz_broker):
    w = wire_as(authz_broker, "alice")
    try:
        r = call(w, ApiKey.DESCRIBE_ACLS, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
        assert r.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = call(w, ApiKey.CREATE_ACLS, 3, {"creations": [{
            "resource_type": 2, "resource_name": "x", "resource_pattern_type": 3,
            "principal": "User:alice", "host": "*", "operation": 2, "permission_type": 3}]})
        assert r.results[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = call(w, ApiKey.DESCRIBE_CONFIGS, 3, {"include_synonyms": False,
                                                 "include_documentation": False, "resources": [
                                                     {"resource_type": 4, "resource_name": "",
                                                      "configuration_keys": None}]})
        assert r.results[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = call(w, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "1"}]}]})
        assert r.responses[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = call(w, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": []})
        assert r.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = call(w, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None})
        assert r.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = call(w, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
        assert r.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = call(w, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                 "transaction_timeout_ms": 60000,
                                                 "producer_id": -1, "producer_epoch": -1})
        assert r.error_code == Errors.NONE  # KIP-679: Write on some topic is enough
        # transaction markers come from brokers: ClusterAction on the cluster
        r = call(w, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": 1, "producer_epoch": 0, "transaction_result": False,
            "coordinator_epoch": 0, "topics": [{"name": "produce-literal",
                                                "partition_indexes": [0]}]}]})
        assert r.markers[0].topics[0].partitions[0].error_code == \
            Errors.CLUSTER_AUTHORIZATION_FAILED
        # transactional batches need Write on the transactional id (alice may write the topic)
        txn = batch([b"t"], producer_id=1, epoch=0, seq=0, is_transactional=True)
        r = call(w, ApiKey.PRODUCE, 8, {"transactional_id": "alice-txn", "acks": 1,
                                        "timeout_ms": 10000, "topic_data": [{
                                            "name": "produce-literal", "partition_data": [
                                                {"index": 0, "records": txn}]}]})
        assert r.responses[0].partition_responses[0].error_code == \
            Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    finally:
        w.close()
    w = wire_as(authz_broker, "admin")
    try:
        r = call(w, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": 1, "producer_epoch": 0, "transaction_result": False,
            "coordinator_epoch": 0, "topics": [{"name": "produce-literal",
                                                "partition_indexes": [0]}]}]})
        assert r.markers[0].topics[0].partitions[0].error_code == Errors.NONE
    finally:
        w.close()
    # bob may Write to the topics that allow User:*, unless a DENY covers every topic
    create_acls(authz_broker, [acl("TOPIC", "*", "User:bob", "WRITE", permission="DENY")])
    w = wire_as(authz_broker, "bob")
    try:
        r = call(w, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                 "transaction_timeout_ms": 60000,
                                                 "producer_id": -1, "producer_epoch": -1})
        assert r.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    finally:
        w.close()


def test_anonymous_plaintext_client_is_refused(authz_broker):
    w = wire_as(authz_broker, None)
    try:
        assert _produce(w, "produce-literal") == TOPIC_DENIED
        r = call(w, ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False})
        assert {t.name for t in r.topics} <= {"produce-wildcard", "fetch-wildcard",
                                              "listoffsets-wildcard", "metadata-wildcard",
                                              "epoch-wildcard", "deleterecords-wildcard",
                                              "createparts-wildcard", "descconfigs-wildcard",
                                              "alterconfigs-wildcard",
                                              "descproducers-wildcard"}
    finally:
        w.close()


def test_denials_are_logged_with_principal_and_host(authz_broker):
    w = wire_as(authz_broker, "alice")
    try:
        assert _produce(w, "logged-denial") == TOPIC_DENIED
    finally:
        w.close()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if any("Principal = User:alice is Denied Operation = Write from host = 127.0.0.1"
               in line for line in authz_broker.log_tail(400).splitlines()):
            return
        time.sleep(0.2)
    pytest.fail(f"no denial line in the log:\n{authz_broker.log_tail()}")


def test_transaction_apis_check_topic_write_and_group_read(authz_broker):
    """AddPartitionsToTxn needs Write on each topic (nothing is added when one is refused),
    AddOffsetsToTxn and TxnOffsetCommit Read on the group, all Write on the id."""
    import confluent_kafka
    from confluent_kafka.admin import NewTopic
    b = authz_broker
    ok, refused, txn_id, group = "txn-acl-ok", "txn-acl-no", "txn-acl-id", "txn-acl-group"
    admin = admin_client(b)
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in (ok, refused)]).values():
        f.result(TIMEOUT)
    create_acls(b, [acl("TRANSACTIONAL_ID", txn_id, "User:alice", "WRITE"),
                    acl("TOPIC", ok, "User:alice", "WRITE")])
    w = wire_as(b, "alice")
    try:
        r = call(w, ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1})
        assert r.error_code == Errors.NONE
        added = call(w, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": r.producer_id,
            "v3_and_below_producer_epoch": r.producer_epoch, "v3_and_below_topics": [
                {"name": ok, "partitions": [0]}, {"name": refused, "partitions": [0]}]})
        assert {t.name: t.results_by_partition[0].partition_error_code
                for t in added.results_by_topic_v3_and_below} == {
            ok: Errors.OPERATION_NOT_ATTEMPTED, refused: TOPIC_DENIED}
        offsets = call(w, ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": txn_id, "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch, "group_id": group})
        assert offsets.error_code == GROUP_DENIED
        commit = call(w, ApiKey.TXN_OFFSET_COMMIT, 3, {
            "transactional_id": txn_id, "group_id": group, "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch, "generation_id": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": ok, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert commit.topics[0].partitions[0].error_code == GROUP_DENIED
    finally:
        w.close()
    # with those ACLs confluent-kafka's transactional producer commits to the allowed topic
    p = confluent_kafka.Producer({**client_conf(b, "alice"), "transactional.id": txn_id})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(ok, b"in a transaction")
    p.commit_transaction(TIMEOUT)


# --------------------------------------------------------------------------- real clients

def test_confluent_kafka_produce_and_group_consume_need_topic_and_group_read(authz_broker):
    import confluent_kafka
    b = authz_broker
    topic, group = "ck-orders", "ck-group"
    from confluent_kafka.admin import NewTopic
    admin = admin_client(b)
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(TIMEOUT)
    create_acls(b, [acl("TOPIC", topic, "User:alice", "WRITE"),
                    acl("TOPIC", topic, "User:bob", "READ")])
    producer = confluent_kafka.Producer({**client_conf(b, "alice"), "enable.idempotence": True})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(TIMEOUT) == 0

    def consume(max_s: float):
        consumer = confluent_kafka.Consumer({**client_conf(b, "bob"), "group.id": group,
                                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got, errors = [], []
        deadline = time.monotonic() + max_s
        try:
            while len(got) < 5 and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    errors.append(m.error().code())
                    if m.error().code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED:
                        break
                else:
                    got.append(m.value())
        finally:
            consumer.close()
        return got, errors

    # topic Read alone is not enough: the group needs Read too
    got, errors = consume(TIMEOUT)
    assert not got and confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED in errors
    create_acls(b, [acl("GROUP", group, "User:bob", "READ")])
    got, _ = consume(TIMEOUT)
    assert got == [f"v{i}".encode() for i in range(5)]


def test_confluent_admin_acls_describe_delete_and_refusal(authz_broker):
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    b = authz_broker
    admin = admin_client(b)
    create_acls(b, [acl("TOPIC", "acl-admin-t", "User:carol", "READ"),
                    acl("TOPIC", "acl-admin-", "User:carol", "WRITE", pattern="PREFIXED"),
                    acl("TOPIC", "acl-admin-other", "User:carol", "READ")])
    match = AclBindingFilter(ResourceType.TOPIC, "acl-admin-t", ResourcePatternType.MATCH,
                             "User:carol", None, AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(match).result(TIMEOUT)
    assert {(x.name, x.operation) for x in found} == {("acl-admin-t", AclOperation.READ),
                                                      ("acl-admin-", AclOperation.WRITE)}
    deleted = admin.delete_acls([match])[match].result(TIMEOUT)
    assert len(deleted) == 2
    assert admin.describe_acls(match).result(TIMEOUT) == []
    from confluent_kafka import KafkaException
    with pytest.raises(KafkaException) as e:
        create_acls(b, [acl("TOPIC", "x", "User:bob", "READ")], user="bob")
    assert e.value.args[0].code() == 31  # CLUSTER_AUTHORIZATION_FAILED


# --------------------------------------------------------------------------- restart, config

def test_file_store_acls_survive_a_restart(tmp_path):
    with BrokerProcess(tmp_path / "data", authz_overrides()) as b:
        create_acls(b, [acl("TOPIC", "kept", "User:alice", "DESCRIBE")])
        b.restart()
        w = wire_as(b, "alice")
        try:
            assert _metadata(w, "kept") == Errors.UNKNOWN_TOPIC_OR_PARTITION
            assert _metadata(w, "other") == TOPIC_DENIED
        finally:
            w.close()
    assert (tmp_path / "data" / "fastlog-acls.json").exists()


def test_without_authorizer_the_acl_apis_say_security_disabled(tmp_path):
    with BrokerProcess(tmp_path / "data", {"num.partitions": "1"}) as b:
        w = Wire(b)
        try:
            r = call(w, ApiKey.DESCRIBE_ACLS, 3, {
                "resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1})
            assert r.error_code == Errors.SECURITY_DISABLED
            r = call(w, ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False,
                                             "include_cluster_authorized_operations": True,
                                             "include_topic_authorized_operations": False})
            assert r.cluster_authorized_operations > 0
        finally:
            w.close()


def test_unknown_authorizer_class_exits_2(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run(
        [sys.executable, "-m", "fastlog.cli.server", "--override", f"log.dirs={tmp_path}",
         "--override", "authorizer.class.name=com.example.MyAuthorizer"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "authorizer.class.name must be empty or one of" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
