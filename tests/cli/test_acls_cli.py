"""`fastlog acls` against a real broker with an ACL authorizer and a SASL_PLAINTEXT
listener: ACLs added, listed and removed as the super user (through --command-config and
-X); the added ACL lets a user produce; a user without Alter on the cluster is told so in
one sentence; bad input is one sentence with exit status 2."""

from __future__ import annotations

import pytest

from fastlog.testing import BrokerProcess
from tests.server.test_authz import USERS, authz_overrides


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("cli-acls") / "data", authz_overrides()).start()
    yield b
    b.stop()


def as_user(b, user: str) -> list[str]:
    return ["--bootstrap-server", f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}",
            "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={USERS[user]}"]


def test_add_list_remove(fastlog, acl_broker, tmp_path):
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f"sasl.username=admin\nsasl.password={USERS['admin']}\n")
    admin = ["--bootstrap-server", f"127.0.0.1:{acl_broker.ports['SASL_PLAINTEXT']}",
             "--command-config", str(props)]
    r = fastlog("acls", *admin, "--add", "--allow-principal", "User:alice", "--operation",
                "Read", "--operation", "Describe", "--topic", "cli-t", "--group", "cli-g")
    assert r.returncode == 0, r.stderr
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=cli-t, " \
           "patternType=LITERAL)`" in r.stdout
    r = fastlog("acls", *admin, "--add", "--deny-principal", "User:alice", "--deny-host",
                "10.0.0.9", "--operation", "Write", "--topic", "cli-", "--resource-pattern-type",
                "prefixed")
    assert r.returncode == 0, r.stderr
    r = fastlog("acls", *admin, "--list")
    assert r.returncode == 0, r.stderr
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in r.stdout
    assert "(principal=User:alice, host=10.0.0.9, operation=WRITE, permissionType=DENY)" \
        in r.stdout
    assert "resourceType=GROUP, name=cli-g" in r.stdout
    r = fastlog("acls", *admin, "--list", "--topic", "cli-t", "--resource-pattern-type", "match")
    assert "name=cli-t, patternType=LITERAL" in r.stdout
    assert "name=cli-, patternType=PREFIXED" in r.stdout
    assert "cli-g" not in r.stdout
    r = fastlog("acls", *admin, "--remove", "--allow-principal", "User:alice", "--operation",
                "Read", "--topic", "cli-t", "--force")
    assert r.returncode == 0, r.stderr
    assert "operation=READ" in r.stdout
    r = fastlog("acls", *admin, "--list", "--topic", "cli-t")
    assert "operation=DESCRIBE" in r.stdout and "operation=READ" not in r.stdout
    r = fastlog("acls", *admin, "--remove", "--topic", "cli-t", "--group", "cli-g")
    assert r.returncode == 0, r.stderr
    r = fastlog("acls", *admin, "--list", "--topic", "cli-t", "--group", "cli-g")
    assert r.stdout.strip() == ""


def test_added_acl_lets_a_user_produce(fastlog, acl_broker):
    r = fastlog("produce", *as_user(acl_broker, "bob"), "--topic", "cli-bob", input=b"x\n")
    assert r.returncode != 0
    r = fastlog("acls", *as_user(acl_broker, "admin"), "--add", "--allow-principal",
                "User:bob", "--operation", "All", "--topic", "cli-bob")
    assert r.returncode == 0, r.stderr
    r = fastlog("acls", *as_user(acl_broker, "admin"), "--add", "--allow-principal",
                "User:bob", "--operation", "Create", "--cluster")
    assert r.returncode == 0, r.stderr
    r = fastlog("produce", *as_user(acl_broker, "bob"), "--topic", "cli-bob", input=b"x\n")
    assert r.returncode == 0, r.stderr


def test_without_alter_on_the_cluster_one_sentence(fastlog, acl_broker):
    r = fastlog("acls", *as_user(acl_broker, "alice"), "--add", "--allow-principal",
                "User:alice", "--topic", "t")
    assert r.returncode == 1
    assert "needs Alter on the cluster" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = fastlog("acls", *as_user(acl_broker, "alice"), "--list")
    assert r.returncode == 1 and "needs Describe on the cluster" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--add", "--topic", "t"], "--add needs --allow-principal or --deny-principal"),
    (["--add", "--allow-principal", "alice", "--topic", "t"], "is not of the form User:"),
    (["--add", "--allow-principal", "User:a"], "needs a resource"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Fly"],
     "is not an operation"),
    (["--add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"],
     "ResourceType Group only supports operations"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
      "match"], "--add takes --resource-pattern-type literal or prefixed"),
    (["--list", "--resource-pattern-type", "weird"], "--resource-pattern-type must be one of"),
    (["--add", "--allow-host", "1.2.3.4", "--deny-principal", "User:a", "--topic", "t"],
     "--allow-host goes with --allow-principal"),
    (["--remove", "--principal", "User:a", "--topic", "t"], "--principal goes with --list"),
])
def test_bad_input_is_one_sentence_exit_2(fastlog, closed_port, args, needle):
    r = fastlog("acls", "--bootstrap-server", f"127.0.0.1:{closed_port}", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
