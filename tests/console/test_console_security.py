"""The web console's ACL and SCRAM user pages against a real broker with the ACL
authorizer (the anonymous user a super user): add and remove an ACL and a user through
the pages' forms, and bad input as one sentence; sizes on disk shown as unavailable to a
console denied Describe on the cluster."""

import html

import pytest

from fastlog.client import SyncAdmin
from fastlog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from fastlog.testing import BrokerProcess, ConsoleProcess


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("secured") / "data", overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS"})
    broker.start()
    console = None
    try:
        console = ConsoleProcess(broker.bootstrap).start()
        yield broker, console
    finally:
        if console is not None:
            console.stop()
        broker.stop()


def test_add_and_remove_an_acl(secured):
    broker, console = secured
    token = console.csrf()
    acl = {"csrf": token, "resource_type": "topic", "resource_name": "orders<x>",
           "pattern_type": "prefixed", "principal": "User:billing", "host": "*",
           "operation": "read", "permission": "allow"}
    status, _, headers = console.post("/acls/add", acl)
    assert status == 303, headers
    with SyncAdmin(broker.bootstrap) as admin:
        (binding,) = admin.describe_acls(AclBindingFilter())
    assert binding.pattern.name == "orders<x>" and binding.entry.principal == "User:billing"
    _, body, _ = console.get("/acls")
    assert "orders&lt;x&gt;" in body and "orders<x>" not in body
    status, _, headers = console.post("/acls/remove", {**acl, "pattern_type": "PREFIXED",
                                                       "operation": "READ",
                                                       "permission": "ALLOW",
                                                       "resource_type": "TOPIC"})
    assert status == 303 and "Removed+1+ACL" in headers["Location"]
    with SyncAdmin(broker.bootstrap) as admin:
        assert admin.describe_acls(AclBindingFilter()) == []
    status, body, _ = console.post("/acls/add", {**acl, "principal": "billing"})
    assert status == 400
    assert "'billing' is not a principal: write it as User:NAME.</p>" in html.unescape(body)


def test_add_and_remove_a_scram_user(secured):
    broker, console = secured
    token = console.csrf()
    status, _, _ = console.post("/users/add", {"csrf": token, "user": "alice",
                                               "mechanism": "SCRAM-SHA-512",
                                               "password": "pw", "iterations": "4096"})
    assert status == 303
    _, body, _ = console.get("/users")
    assert "<td>alice</td><td>SCRAM-SHA-512</td><td>4096</td>" in body
    with SyncAdmin(broker.bootstrap) as admin:
        assert admin.describe_user_scram_credentials(None) == {"alice": [("SCRAM-SHA-512", 4096)]}
    status, body, _ = console.post("/users/add", {"csrf": token, "user": "bob",
                                                  "mechanism": "MD5", "password": "pw"})
    assert status == 400 and "is not a SCRAM mechanism" in body
    status, _, _ = console.post("/users/remove", {"csrf": token, "user": "alice",
                                                  "mechanism": "SCRAM-SHA-512"})
    assert status == 303
    with SyncAdmin(broker.bootstrap) as admin:
        assert admin.describe_user_scram_credentials(None) == {}


def test_sizes_are_unavailable_without_describe_on_the_cluster(tmp_path):
    """DescribeLogDirs needs Describe on the cluster: denied it, the topics, topic and
    overview pages still show, with sizes and log dirs as unavailable (not an error)."""
    broker = BrokerProcess(tmp_path / "data", overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    broker.start()
    console = None
    try:
        with SyncAdmin(broker.bootstrap) as admin:
            admin.create_topic("sized", 1, 1)
            admin.create_acls([AclBinding(
                ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                AccessControlEntry("User:ANONYMOUS", "*", AclOperation.DESCRIBE,
                                   AclPermissionType.DENY))])
        console = ConsoleProcess(broker.bootstrap).start()
        for path, what, table, row in (
                ("/topics", "Topic sizes", "topics", "sized</a>"),
                ("/topics/sized", "Partition sizes", "partitions", ">0</a>"),
                ("/", "Describing log dirs", "brokers", "127.0.0.1:")):
            status, body, _ = console.get(path)
            assert status == 200, body[:2000]
            assert f'<p class="unavailable">{what} is unavailable on this cluster' in body
            assert "CLUSTER_AUTHORIZATION_FAILED" in body and 'class="error"' not in body
            assert f'<table class="{table}">' in body and row in body
    finally:
        if console is not None:
            console.stop()
        broker.stop()


def test_console_over_sasl_with_the_client_options(tmp_path_factory, tmp_path):
    """-X and --command-config carry the client's security settings, as for the other
    commands; a wrong password is one sentence, not a console."""
    from tests.security.test_sasl_broker import running_sasl_broker, sasl_address

    with running_sasl_broker(tmp_path_factory.mktemp("console-sasl") / "data", "plain-pw",
                             {("SCRAM-SHA-256", "sam"): "scram-pw"}) as b:
        config = tmp_path / "client.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                          "sasl.username=sam\n")
        console = ConsoleProcess(sasl_address(b), "--command-config", str(config),
                                 "-X", "sasl.password=scram-pw").start()
        try:
            status, body, _ = console.get("/")
            assert status == 200 and "Healthy: 1 broker" in body
        finally:
            assert console.stop() == 0
        wrong = ConsoleProcess(sasl_address(b), "--command-config", str(config),
                               "-X", "sasl.password=wrong")
        with pytest.raises(AssertionError, match="console did not start.*fastlog console: "):
            wrong.start()
