"""`fastlog configs` for users' SCRAM credentials and for client quotas (user, client id,
user + client id, defaults) against a real broker with a SASL_PLAINTEXT listener, and the client settings (-X, --command-config) that every
`fastlog` client command takes to authenticate: a user created with the CLI produces and
consumes through the CLI, loses access when its credential is deleted, and bad input is
one sentence with exit status 2."""

from __future__ import annotations

import secrets

import pytest

from fastlog.testing import BrokerProcess
from tests.security.test_sasl_broker import sasl_overrides


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("cli-sasl") / "data",
                      sasl_overrides(secrets.token_urlsafe(12))).start()
    yield b
    b.stop()


def test_scram_user_created_described_used_and_deleted(fastlog, sasl_broker, tmp_path):
    password = secrets.token_urlsafe(12)
    admin = ["--bootstrap-server", sasl_broker.bootstrap]
    r = fastlog("configs", *admin, "--alter", "--entity-type", "users", "--entity-name", "carol",
                "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={password}],"
                                f"SCRAM-SHA-256=[password={password}]")
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for user carol." in r.stdout
    r = fastlog("configs", *admin, "--describe", "--entity-type", "users",
                "--entity-name", "carol")
    assert r.stdout.strip() == ("SCRAM credential configs for user-principal 'carol' are "
                                "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192")
    sasl = ["--bootstrap-server", f"127.0.0.1:{sasl_broker.ports['SASL_PLAINTEXT']}"]
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     f"sasl.username=carol\nsasl.password={password}\n")
    r = fastlog("produce", *sasl, "--command-config", str(props), "--topic", "cli-sasl",
                input=b"a\nb\n")
    assert r.returncode == 0, r.stderr
    r = fastlog("consume", *sasl, "-X", "security.protocol=SASL_PLAINTEXT",
                "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=carol",
                "-X", f"sasl.password={password}", "--topic", "cli-sasl",
                "--from-beginning", "--max-messages", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["a", "b"]
    r = fastlog("configs", *admin, "--alter", "--entity-type", "users", "--entity-name", "carol",
                "--delete-config", "SCRAM-SHA-512")
    assert r.returncode == 0, r.stderr
    r = fastlog("topics", *sasl, "--command-config", str(props), "--list")
    assert r.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED" in r.stderr and password not in r.stderr
    r = fastlog("topics", *sasl, "-X", "security.protocol=SASL_PLAINTEXT",
                "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=carol",
                "-X", f"sasl.password={password}", "--list")
    assert r.returncode == 0 and "cli-sasl" in r.stdout.split()


def test_client_quotas_like_kafka_configs(fastlog, sasl_broker):
    admin = ["--bootstrap-server", sasl_broker.bootstrap]
    r = fastlog("configs", *admin, "--alter", "--entity-type", "users", "--entity-name", "erin",
                "--entity-type", "clients", "--entity-name", "app",
                "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for user-principal 'erin', client-id 'app'." in r.stdout
    r = fastlog("configs", *admin, "--alter", "--entity-type", "clients", "--entity-default",
                "--add-config", "request_percentage=12.5")
    assert r.returncode == 0, r.stderr
    r = fastlog("configs", *admin, "--alter", "--entity-type", "users", "--entity-name", "erin",
                "--add-config", "producer_byte_rate=4096")
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for user erin." in r.stdout
    r = fastlog("configs", *admin, "--describe", "--entity-type", "users",
                "--entity-name", "erin", "--entity-type", "clients", "--entity-name", "app")
    assert r.stdout.strip() == ("Quota configs for user-principal 'erin', client-id 'app' are "
                                "consumer_byte_rate=2048.0, producer_byte_rate=1024.0")
    r = fastlog("configs", *admin, "--describe", "--entity-type", "clients")
    assert r.stdout.strip() == ("Quota configs for the default client-id are "
                                "request_percentage=12.5")
    r = fastlog("configs", *admin, "--describe", "--entity-type", "users",
                "--entity-name", "erin")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Quota configs for user-principal 'erin' are producer_byte_rate=4096.0"
    r = fastlog("configs", *admin, "--alter", "--entity-type", "clients", "--entity-default",
                "--delete-config", "request_percentage")
    assert r.returncode == 0, r.stderr
    r = fastlog("configs", *admin, "--describe", "--entity-type", "clients")
    assert r.returncode == 0 and r.stdout.strip() == ""


@pytest.mark.parametrize("args, needle", [
    (["--entity-type", "clients", "--alter", "--entity-name", "c", "--add-config",
      "producer_byte_rate=1.5"], "producer_byte_rate must be a whole number"),
    (["--entity-type", "clients", "--alter", "--entity-name", "c", "--add-config",
      "producer_byte_rate=fast"], "producer_byte_rate needs a number"),
    (["--entity-type", "clients", "--alter", "--entity-name", "c", "--add-config",
      "SCRAM-SHA-256=[password=p]"], "--add-config takes consumer_byte_rate"),
    (["--entity-type", "users", "--alter", "--entity-name", "c", "--add-config",
      "connection_creation_rate=5"], "is not supported"),
    (["--entity-type", "clients", "--alter", "--entity-name", "c", "--delete-config",
      "retention.ms"], "--delete-config takes"),
    (["--entity-type", "users", "--entity-type", "clients", "--alter", "--entity-name", "u",
      "--add-config", "producer_byte_rate=5"], "one --entity-name or --entity-default per"),
    (["--entity-type", "users", "--entity-type", "users", "--describe"], "given once"),

    (["--entity-type", "topics", "--describe"], "is not served"),
    (["--entity-type", "users", "--alter", "--entity-name", "x", "--add-config",
      "SCRAM-SHA-1=[password=p]"], "takes SCRAM-SHA-256, SCRAM-SHA-512, consumer_byte_rate"),
    (["--entity-type", "users", "--alter", "--entity-name", "x", "--add-config",
      "SCRAM-SHA-256=[iterations=10,password=p]"], "iterations must be between 4096"),
    (["--entity-type", "users", "--alter", "--entity-name", "x", "--add-config",
      "SCRAM-SHA-256=[iterations=5000]"], "needs a password"),
    (["--entity-type", "users", "--alter", "--entity-name", "x", "--add-config",
      "SCRAM-SHA-256=[password=p"], "is not closed"),
    (["--entity-type", "users", "--alter"], "--alter needs --entity-name"),
    (["--entity-type", "brokers", "--alter", "--add-config", "a=1"],
     "--alter needs --entity-name or --entity-default"),
    (["--entity-type", "brokers", "--describe", "--entity-name", "one"], "is a broker id"),
    (["--entity-type", "brokers", "--alter", "--entity-default", "--add-config", "a"],
     "takes key=value items"),
    (["--entity-type", "users", "--describe", "--all"], "--all goes with --entity-type brokers"),
    (["--entity-type", "users", "--describe", "-X", "security.protocol=SSL",
      "-X", "ssl.ca.location=/nonexistent/ca.pem"], "cannot read /nonexistent/ca.pem"),
    (["--entity-type", "users", "--describe", "-X", "ssl.ca.location=x"],
     "need security.protocol SSL or SASL_SSL"),
    (["--entity-type", "users", "--describe", "-X", "ssl.keystore.location=x"],
     "does not support the setting 'ssl.keystore.location'"),
    (["--entity-type", "users", "--describe", "-X", "security.protocol=SASL_PLAINTEXT"],
     "sasl.mechanism GSSAPI is not supported"),
])
def test_bad_input_is_one_sentence_exit_2(fastlog, closed_port, args, needle):
    r = fastlog("configs", "--bootstrap-server", f"127.0.0.1:{closed_port}", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_broker_configs_altered_described_and_deleted(fastlog, tmp_path):
    b = BrokerProcess(tmp_path / "data", {"log.segment.bytes": "2000000"}).start()
    try:
        admin = ["--bootstrap-server", b.bootstrap, "--entity-type", "brokers"]
        r = fastlog("configs", *admin, "--alter", "--entity-default",
                    "--add-config", "log.segment.bytes=3000000,log.cleanup.policy=[delete,compact]")
        assert r.returncode == 0, r.stderr
        assert "Completed updating default config for brokers in the cluster." in r.stdout
        r = fastlog("configs", *admin, "--alter", "--entity-name", "0",
                    "--add-config", "log.segment.bytes=4000000")
        assert r.returncode == 0, r.stderr
        assert "Completed updating config for broker 0." in r.stdout
        r = fastlog("configs", *admin, "--describe", "--entity-name", "0")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [
            "Dynamic configs for broker 0 are:",
            "  log.segment.bytes=4000000 sensitive=false synonyms={"
            "DYNAMIC_BROKER_CONFIG:log.segment.bytes=4000000, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=3000000, "
            "STATIC_BROKER_CONFIG:log.segment.bytes=2000000, "
            "DEFAULT_CONFIG:log.segment.bytes=1073741824}"]
        r = fastlog("configs", *admin, "--describe", "--entity-default")
        assert sorted(r.stdout.splitlines()[1:]) == [
            "  log.cleanup.policy=delete,compact sensitive=false synonyms="
            "{DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleanup.policy=delete,compact}",
            "  log.segment.bytes=3000000 sensitive=false synonyms="
            "{DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=3000000}"]
        r = fastlog("configs", *admin, "--describe", "--entity-name", "0", "--all")
        assert "  num.io.threads=8 sensitive=false" in r.stdout
        assert "  ssl.keystore.password=null sensitive=true synonyms={}" in r.stdout
        r = fastlog("configs", *admin, "--alter", "--entity-name", "0",
                    "--delete-config", "log.segment.bytes")
        assert r.returncode == 0, r.stderr
        r = fastlog("configs", *admin, "--describe")
        assert r.stdout.splitlines() == ["Dynamic configs for broker 0 are:"]
        r = fastlog("configs", *admin, "--alter", "--entity-name", "0",
                    "--add-config", "num.io.threads=2")
        assert r.returncode == 1
        assert "Cannot update these configs dynamically: num.io.threads" in r.stderr
    finally:
        b.stop()
