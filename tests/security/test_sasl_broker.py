"""SASL on a real fastlog-server's SASL_PLAINTEXT listener with real clients: PLAIN from
the listener's JAAS line, SCRAM-SHA-256/512 users created with confluent-kafka's
AdminClient; wrong password and unknown user refused alike (58), requests before
authentication disconnected, the authentication deadline, SaslHandshake v0 (raw tokens),
credentials surviving a restart, and no password in the broker's log."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import socket
import struct
import subprocess
import time
import types

import pytest

from fastlog import protocol
from fastlog.protocol import ApiKey, Errors
from fastlog.security import ScramClient
from fastlog.testing import BrokerProcess, wait_until
from tests.server.wire import Wire

KCAT = shutil.which("kcat")
TIMEOUT = 30


def _password() -> str:
    return secrets.token_urlsafe(16)


PLAIN_PW = _password()
SCRAM = {"SCRAM-SHA-256": ("sam", _password()), "SCRAM-SHA-512": ("sara", _password())}


def sasl_overrides(plain_password: str, **extra) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_alice="{plain_password}";',
        "num.partitions": "1",
        **extra,
    }


def add_scram_user(bootstrap: str, mechanism: str, user: str, password: str,
                   iterations: int = 4096) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    kind = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
            "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}[mechanism]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(kind, iterations),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(TIMEOUT)


@contextlib.contextmanager
def running_sasl_broker(data_dir, plain_password: str, scram_users: dict, **extra):
    """A started broker on sasl_overrides with SCRAM users {(mechanism, user): password};
    stopped cleanly at the end (for other folders' module fixtures)."""
    b = BrokerProcess(data_dir, sasl_overrides(plain_password, **extra))
    b.start()
    for (mechanism, user), password in scram_users.items():
        add_scram_user(b.bootstrap, mechanism, user, password)
    yield b
    if b.alive():
        assert b.stop() == 0, b.log_tail()


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("sasl") / "data",
                      sasl_overrides(PLAIN_PW, **{"fastlog.sasl.authentication.timeout.ms": "1500"}))
    b.start()
    for mechanism, (user, password) in SCRAM.items():
        add_scram_user(b.bootstrap, mechanism, user, password)
    yield b
    if b.alive():
        assert b.stop() == 0, b.log_tail()


def sasl_address(b) -> str:
    return f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"


def credentials(mechanism: str) -> tuple[str, str]:
    return ("alice", PLAIN_PW) if mechanism == "PLAIN" else SCRAM[mechanism]


MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def confluent_conf(b, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": sasl_address(b), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes(sasl_broker, mechanism):
    import confluent_kafka
    topic = f"ck-{mechanism.lower()}"
    conf = confluent_conf(sasl_broker, mechanism, *credentials(mechanism))
    producer = confluent_kafka.Producer(conf)
    for i in range(5):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(TIMEOUT) == 0
    consumer = confluent_kafka.Consumer({**conf, "group.id": f"g-{topic}",
                                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 5 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(5)]


def python_client_conf(b, mechanism: str) -> dict:
    """kafka-python's and aiokafka's settings (the same names) for the SASL listener."""
    user, password = credentials(mechanism)
    return {"bootstrap_servers": sasl_address(b), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes(sasl_broker, mechanism):
    import kafka
    conf = python_client_conf(sasl_broker, mechanism)
    topic = f"kp-{mechanism.lower()}"
    producer = kafka.KafkaProducer(**conf)
    producer.send(topic, b"one").get(TIMEOUT)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest",
                                   consumer_timeout_ms=10000, **conf)
    assert [m.value for m in consumer] == [b"one"]
    consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_and_consumes(sasl_broker, mechanism):
    import aiokafka
    conf = python_client_conf(sasl_broker, mechanism)
    topic = f"aio-{mechanism.lower()}"

    async def run():
        producer = aiokafka.AIOKafkaProducer(**conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aio")
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), TIMEOUT)
        finally:
            await consumer.stop()
        return message.value

    assert asyncio.run(run()) == b"aio"


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_produces_and_consumes(sasl_broker, mechanism):
    user, password = credentials(mechanism)
    topic = f"kcat-{mechanism.lower()}"
    base = [KCAT, "-b", sasl_address(sasl_broker), "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}",
            "-X", f"sasl.password={password}", "-t", topic, "-p", "0"]
    subprocess.run([*base, "-P"], input=b"k1\nk2\n", check=True, timeout=TIMEOUT)
    out = subprocess.run([*base, "-C", "-o", "beginning", "-e", "-q"], check=True,
                         capture_output=True, timeout=TIMEOUT).stdout
    assert out.split() == [b"k1", b"k2"]


def sasl_wire(b) -> Wire:
    return Wire(types.SimpleNamespace(host="127.0.0.1", port=b.ports["SASL_PLAINTEXT"]))


def call(w: Wire, api_key, version, body):
    w.send(api_key, version, body)
    frame = w.recv_frame()
    assert frame is not None, "the broker closed the connection"
    return protocol.decode_response(api_key, version, frame)[1]


def closed(w: Wire) -> bool:
    """True when the broker closes the connection (within the wire's timeout)."""
    try:
        return w.recv_frame() is None
    except ConnectionResetError:
        return True


def authenticate(w: Wire, mechanism: str, user: str, password: str):
    """SaslHandshake v1 + SaslAuthenticate v2; the last response."""
    assert call(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
    if mechanism == "PLAIN":
        return call(w, ApiKey.SASL_AUTHENTICATE, 2,
                    {"auth_bytes": f"\0{user}\0{password}".encode()})
    client = ScramClient(mechanism, user, password)
    first = call(w, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    if first.error_code:
        return first
    final = call(w, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final(first.auth_bytes)})
    if final.error_code == 0:
        client.verify(final.auth_bytes)
    return final


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_get_the_same_refusal(sasl_broker, mechanism):
    user, _ = credentials(mechanism)
    messages = set()
    for who, password in ((user, _password()), ("nobody-" + secrets.token_hex(4), _password())):
        w = sasl_wire(sasl_broker)
        resp = authenticate(w, mechanism, who, password)
        assert resp.error_code == Errors.SASL_AUTHENTICATION_FAILED
        messages.add(resp.error_message)
        assert closed(w)
        w.close()
    assert len(messages) == 1
    message = messages.pop()
    assert "nobody" not in message and "exist" not in message


def test_confluent_kafka_with_a_wrong_password_is_refused(sasl_broker):
    import confluent_kafka
    conf = confluent_conf(sasl_broker, "SCRAM-SHA-256", SCRAM["SCRAM-SHA-256"][0], _password())
    errors = []
    producer = confluent_kafka.Producer({**conf, "error_cb": errors.append})
    producer.produce("ck-refused", b"x")
    producer.flush(5)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


def test_authenticated_then_served_and_principal_kept(sasl_broker):
    w = sasl_wire(sasl_broker)
    resp = authenticate(w, "PLAIN", "alice", PLAIN_PW)
    assert resp.error_code == 0 and resp.error_message is None
    md = call(w, ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False})
    # Metadata names this broker by the listener the request came on.
    assert [(b.host, b.port) for b in md.brokers] == [
        ("127.0.0.1", sasl_broker.ports["SASL_PLAINTEXT"])]
    again = call(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert again.error_code == Errors.ILLEGAL_SASL_STATE
    w.close()


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes(sasl_broker):
    w = sasl_wire(sasl_broker)
    resp = call(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert resp.error_code == Errors.UNSUPPORTED_SASL_MECHANISM
    assert resp.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert closed(w)
    w.close()


@pytest.mark.parametrize("api_key, version, body", [
    (ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False}),
    (ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0x"}),
])
def test_requests_before_authentication_are_disconnected(sasl_broker, api_key, version, body):
    w = sasl_wire(sasl_broker)
    versions = call(w, ApiKey.API_VERSIONS, 2, {})
    advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert advertised[ApiKey.SASL_HANDSHAKE] == (0, 1)
    assert advertised[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    w.send(api_key, version, body)
    assert closed(w)
    w.close()


def test_produce_before_authentication_is_disconnected(sasl_broker):
    from tests.server.wire import batch, produce
    w = sasl_wire(sasl_broker)
    with pytest.raises(AssertionError, match="broker closed the connection"):
        produce(w, "never-written", batch([b"x"]))
    w.close()
    admin = Wire(sasl_broker)
    md = call(admin, ApiKey.METADATA, 8, {"topics": [{"name": "never-written"}],
                                          "allow_auto_topic_creation": False})
    assert md.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    admin.close()


def test_a_silent_connection_is_closed_at_the_deadline(sasl_broker):
    # The deadline (1.5 s here) runs from the first request: a client that asks for the
    # versions and then says nothing is closed, while an authenticated one stays.
    quiet, done = sasl_wire(sasl_broker), sasl_wire(sasl_broker)
    call(quiet, ApiKey.API_VERSIONS, 2, {})
    assert authenticate(done, "PLAIN", "alice", PLAIN_PW).error_code == 0
    started = time.monotonic()
    assert closed(quiet)
    assert time.monotonic() - started < 8, "closed by something else than the deadline"
    time.sleep(1.0)
    assert call(done, ApiKey.API_VERSIONS, 2, {}).error_code == 0
    quiet.close()
    done.close()


def _raw(sock: socket.socket, token: bytes) -> bytes | None:
    sock.sendall(struct.pack(">i", len(token)) + token)
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">i", head)
    return sock.recv(size, socket.MSG_WAITALL) if size else b""


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_handshake_v0_takes_raw_tokens(sasl_broker, mechanism):
    user, password = credentials(mechanism)
    w = sasl_wire(sasl_broker)
    assert call(w, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": mechanism}).error_code == 0
    if mechanism == "PLAIN":
        assert _raw(w.sock, f"\0{user}\0{password}".encode()) == b""
    else:
        client = ScramClient(mechanism, user, password)
        server_first = _raw(w.sock, client.first())
        client.verify(_raw(w.sock, client.final(server_first)))
    assert call(w, ApiKey.API_VERSIONS, 2, {}).error_code == 0
    w.close()
    bad = sasl_wire(sasl_broker)
    assert call(bad, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
    assert _raw(bad.sock, f"\0{user}\0{_password()}".encode()) is None
    bad.close()


def test_plaintext_listener_is_anonymous_and_refuses_sasl(sasl_broker):
    w = Wire(sasl_broker)
    resp = call(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert resp.error_code == Errors.ILLEGAL_SASL_STATE
    w.close()


def test_describe_and_alter_scram_credentials(sasl_broker):
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    described = {u: f.result(TIMEOUT) for u, f in
                 admin.describe_user_scram_credentials(["sam", "sara"]).items()}
    assert [(i.mechanism, i.iterations) for i in described["sam"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)]
    user, password = "temp-" + secrets.token_hex(3), _password()
    add_scram_user(sasl_broker.bootstrap, "SCRAM-SHA-512", user, password, iterations=8192)
    w = sasl_wire(sasl_broker)
    assert authenticate(w, "SCRAM-SHA-512", user, password).error_code == 0
    w.close()
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    for f in admin.alter_user_scram_credentials([deletion]).values():
        f.result(TIMEOUT)
    w = sasl_wire(sasl_broker)
    assert authenticate(w, "SCRAM-SHA-512", user, password).error_code == 58
    w.close()
    with pytest.raises(Exception, match="does not exist"):
        for f in admin.alter_user_scram_credentials([deletion]).values():
            f.result(TIMEOUT)


def test_alter_scram_credentials_refusals(sasl_broker):
    w = Wire(sasl_broker)
    up = {"name": "x", "mechanism": 1, "iterations": 4096, "salt": b"s",
          "salted_password": bytes(32)}
    resp = call(w, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        {**up, "name": ""}, {**up, "name": "few", "iterations": 100},
        {**up, "name": "many", "iterations": 1 << 20}, {**up, "name": "mech", "mechanism": 9},
        {**up, "name": "short", "salted_password": b"abc"}, up, up]})
    got = {r.user: (r.error_code, r.error_message) for r in resp.results}
    assert got[""][0] == Errors.UNACCEPTABLE_CREDENTIAL
    assert got["few"] == (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert got["many"] == (Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert got["mech"][0] == Errors.UNSUPPORTED_SASL_MECHANISM
    assert got["short"][0] == Errors.UNACCEPTABLE_CREDENTIAL
    assert got["x"][0] == Errors.DUPLICATE_RESOURCE
    w.close()


def test_credentials_survive_a_restart_and_no_password_is_logged(tmp_path):
    plain = _password()
    b = BrokerProcess(tmp_path / "data", sasl_overrides(plain)).start()
    try:
        user, password = "restart-user", _password()
        add_scram_user(b.bootstrap, "SCRAM-SHA-256", user, password)
        w = sasl_wire(b)
        assert authenticate(w, "SCRAM-SHA-256", user, _password()).error_code == 58
        w.close()
        b.stop()
        b.start()
        w = sasl_wire(b)
        assert authenticate(w, "SCRAM-SHA-256", user, password).error_code == 0
        w.close()
        w = sasl_wire(b)
        assert authenticate(w, "PLAIN", "alice", password).error_code == 58
        w.close()
        wait_until(lambda: "failed authentication" in b.log_tail(200), what="a log line")
        logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
        assert "SASL mechanism PLAIN" in logs and "127.0.0.1" in logs
        assert password not in logs and plain not in logs
    finally:
        b.stop()
