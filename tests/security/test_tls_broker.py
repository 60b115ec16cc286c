"""TLS on a real broker's listeners, with real clients: SSL and SASL_SSL listeners built
from Kafka's ssl.* keys (listener.name.<listener>. prefixes included), produce and consume
with confluent-kafka, kafka-python, aiokafka and kcat over SSL, PLAIN and both SCRAMs over
SASL_SSL, our own tools over both, mutual TLS whose
certificate subject is the principal the authorizer sees, a plaintext client on the TLS
port closed while others are served, and bad keystores refused at startup in one sentence
(exit 2). Certificates come from tests/security/conftest.py (made by each run)."""

import secrets
import shutil
import socket
import subprocess

import pytest

from fastlog.protocol import Errors
from fastlog.testing import BrokerProcess, server_command
from tests.security.conftest import PASSWORDS
from tests.security.test_sasl_broker import add_scram_user

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

KCAT = shutil.which("kcat")
TIMEOUT = 30
CLIENT_PRINCIPAL = "User:CN=client1,OU=Eng,O=Acme,C=US"
SCRAM_USER, SCRAM_PASSWORD = "tina", secrets.token_urlsafe(16)
PLAIN_USER, PLAIN_PASSWORD = "paula", secrets.token_urlsafe(16)


def tls_overrides(certs, **extra) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.keystore,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.dir / "ca.pem"),
        "listener.name.ssl.ssl.client.auth": "requested",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";',
        # mutual TLS principals may drop nothing here; DEFAULT keeps the whole DN
        "ssl.principal.mapping.rules": "DEFAULT",
        # anyone may do what no ACL speaks of; the test's ACLs guard one topic
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "num.partitions": "1",
        **extra,
    }


@pytest.fixture(scope="module")
def tls_broker(certs, tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("tls") / "data", tls_overrides(certs))
    b.start()
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        add_scram_user(b.bootstrap, mechanism, SCRAM_USER, SCRAM_PASSWORD)
    yield b
    if b.alive():
        assert b.stop() == 0, b.log_tail()
    assert "Traceback" not in b.log_path.read_text(errors="replace")


def ssl_conf(b, certs, client_cert=False, listener="SSL", **extra) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{b.ports[listener]}",
            "security.protocol": listener, "ssl.ca.location": str(certs.dir / "ca.pem"),
            **extra}
    if client_cert:
        conf["ssl.certificate.location"] = str(certs.dir / "client.pem")
        conf["ssl.key.location"] = str(certs.dir / "client.key")
    return conf


def produce_and_consume(conf: dict, topic: str, n: int = 20) -> list[bytes]:
    producer = confluent_kafka.Producer(conf)
    errors = []
    for i in range(n):
        producer.produce(topic, b"v%d" % i,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(TIMEOUT) == 0 and not errors, errors
    consumer = confluent_kafka.Consumer({**conf, "group.id": f"g-{topic}",
                                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(200):
            if len(got) >= n:
                break
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    return got


def test_confluent_kafka_over_ssl(tls_broker, certs):
    assert produce_and_consume(ssl_conf(tls_broker, certs), "tls-ck") == \
        [b"v%d" % i for i in range(20)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl(tls_broker, certs, mechanism):
    user, password = ((PLAIN_USER, PLAIN_PASSWORD) if mechanism == "PLAIN"
                      else (SCRAM_USER, SCRAM_PASSWORD))
    conf = ssl_conf(tls_broker, certs, listener="SASL_SSL", **{
        "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    assert len(produce_and_consume(conf, f"tls-{mechanism.lower()}")) == 20


def test_aiokafka_over_ssl(tls_broker, certs):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def main():
        ctx = create_ssl_context(cafile=str(certs.dir / "ca.pem"))
        common = {"bootstrap_servers": f"127.0.0.1:{tls_broker.ports['SSL']}",
                  "security_protocol": "SSL", "ssl_context": ctx}
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait("tls-aio", b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("tls-aio", auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            got = []
            while len(got) < 5:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), TIMEOUT)
                got += [m.value for msgs in batch.values() for m in msgs]
            return got
        finally:
            await consumer.stop()
    assert asyncio.run(main()) == [b"a%d" % i for i in range(5)]


def test_kafka_python_over_ssl(tls_broker, certs):
    from kafka import KafkaConsumer, KafkaProducer
    common = {"bootstrap_servers": f"127.0.0.1:{tls_broker.ports['SSL']}",
              "security_protocol": "SSL", "ssl_cafile": str(certs.dir / "ca.pem")}
    producer = KafkaProducer(**common)
    for i in range(5):
        producer.send("tls-kp", b"k%d" % i).get(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer("tls-kp", auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **common)
    assert [m.value for m in consumer] == [b"k%d" % i for i in range(5)]
    consumer.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make test installs it)")
def test_kcat_over_ssl(tls_broker, certs):
    args = [KCAT, "-b", f"127.0.0.1:{tls_broker.ports['SSL']}", "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={certs.dir / 'ca.pem'}", "-t", "tls-kcat"]
    subprocess.run(args + ["-P"], input=b"one\ntwo\n", check=True, timeout=TIMEOUT)
    out = subprocess.run(args + ["-C", "-o", "beginning", "-e", "-q"], capture_output=True,
                         check=True, timeout=TIMEOUT).stdout
    assert out.split() == [b"one", b"two"]


def test_mutual_tls_subject_is_the_principal(tls_broker, certs):
    """An ACL for the client certificate's subject DN lets it write a topic that the same
    client without a certificate (User:ANONYMOUS) may not."""
    topic = "tls-mtls-only"
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap})
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, CLIENT_PRINCIPAL,
                   "*", AclOperation.ALL, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS",
                   "*", AclOperation.WRITE, AclPermissionType.DENY),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(TIMEOUT)
    assert len(produce_and_consume(ssl_conf(tls_broker, certs, client_cert=True), topic)) == 20
    producer = confluent_kafka.Producer(ssl_conf(tls_broker, certs))
    errors = []
    producer.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(TIMEOUT)
    assert errors and errors[0] is not None
    assert errors[0].code() == Errors.TOPIC_AUTHORIZATION_FAILED


def test_plaintext_client_on_the_tls_port_is_closed(tls_broker):
    from tests.server.wire import Wire, healthy
    with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x0a" + b"\x00" * 10)   # a Kafka frame, not a TLS hello
        s.settimeout(15)
        assert s.recv(100) == b""   # closed
    assert healthy(tls_broker)
    Wire(tls_broker).close()


@pytest.mark.parametrize("change, needle", [
    ({"ssl.keystore.location": "/nonexistent/keystore.pem"}, "ssl.keystore.location"),
    ({"ssl.keystore.location": "{enc}", "ssl.key.password": "wrong"}, "ssl.key.password"),
    ({"ssl.keystore.location": "{expired}"}, "expired"),
])
def test_bad_keystore_is_one_sentence_and_exit_2(certs, tmp_path, change, needle):
    expired = certs.write("expired.keystore.pem", certs.text("expired.key"),
                          certs.text("expired.pem"))
    props = tls_overrides(certs, **{k: v.format(enc=certs.enc_keystore, expired=expired)
                                    for k, v in change.items()})
    props["log.dirs"] = str(tmp_path / "data")
    args = server_command()
    for k, v in props.items():
        args += ["--override", f"{k}={v}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "listener" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert PASSWORDS["key"] not in r.stderr and "wrong" not in r.stderr.replace(needle, "")


def test_fastlog_tools_over_ssl_and_sasl_ssl(tls_broker, certs, tmp_path):
    """Our own client, through the `fastlog` commands: SSL with mutual TLS, then SCRAM over
    SASL_SSL, with librdkafka's client keys; a wrong CA is one sentence."""
    from tests.cli.conftest import run_fastlog
    ca = str(certs.dir / "ca.pem")
    ssl_args = ["--bootstrap-server", f"127.0.0.1:{tls_broker.ports['SSL']}",
                "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={ca}",
                "-X", f"ssl.certificate.location={certs.dir / 'client.pem'}",
                "-X", f"ssl.key.location={certs.dir / 'client.key'}"]
    r = run_fastlog("produce", *ssl_args, "--topic", "tls-cli", input=b"a\nb\n")
    assert r.returncode == 0, r.stderr
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SASL_SSL\nssl.ca.location={ca}\n"
                     f"sasl.mechanism=SCRAM-SHA-512\nsasl.username={SCRAM_USER}\n"
                     f"sasl.password={SCRAM_PASSWORD}\n")
    r = run_fastlog("consume", "--bootstrap-server",
                    f"127.0.0.1:{tls_broker.ports['SASL_SSL']}", "--command-config",
                    str(props), "--topic", "tls-cli", "--from-beginning", "--max-messages", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["a", "b"]
    r = run_fastlog("topics", "--bootstrap-server", f"127.0.0.1:{tls_broker.ports['SSL']}",
                    "-X", "security.protocol=SSL",
                    "-X", f"ssl.ca.location={certs.dir / 'other.pem'}", "--list")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "certificate" in r.stderr
