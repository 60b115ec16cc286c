"""SCRAM-SHA-256/512: RFC 7677's vector, full exchanges with our client and kafka-python's,
Kafka's stored credential form, and refusals that are always one AuthenticationFailed."""

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from fastlog.protocol.errors import Errors
from fastlog.security import (
    AuthenticationFailed,
    ScramClient,
    ScramCredential,
    ScramServer,
    SecurityConfigError,
    credentials_from_user_config,
)

# RFC 7677 section 3
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def rfc_server():
    credential = ScramCredential.from_password("pencil", "SCRAM-SHA-256", salt=RFC_SALT)
    return ScramServer("SCRAM-SHA-256", {"user": credential}.get, server_nonce=RFC_SERVER_NONCE)


def test_rfc7677_vector_server_side():
    server = rfc_server()
    assert server.step(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_vector_client_side():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(AuthenticationFailed):
        client.verify(b"v=" + base64.b64encode(bytes(32)))


@pytest.fixture(scope="module")
def users():
    return {m: {"alice": ScramCredential.from_password("alice-secret", m),
                "a,b=c": ScramCredential.from_password("odd", m)} for m in MECHANISMS}


def exchange(server, client):
    server_first = server.step(client.first())
    server_final = server.step(client.final(server_first))
    client.verify(server_final)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", [("alice", "alice-secret"), ("a,b=c", "odd")])
def test_full_exchange(users, mechanism, user, password):
    server = ScramServer(mechanism, users[mechanism].get)
    exchange(server, ScramClient(mechanism, user, password))
    assert server.complete and server.username == user


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_client_against_our_server(users, mechanism):
    server = ScramServer(mechanism, users[mechanism].get)
    client = KafkaPythonScramClient("alice", "alice-secret", mechanism)
    client.process_server_first_message(server.step(client.first_message()))
    client.process_server_final_message(server.step(client.final_message()))
    assert server.complete and server.username == "alice"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_client_wrong_password(users, mechanism):
    server = ScramServer(mechanism, users[mechanism].get)
    client = KafkaPythonScramClient("alice", "wrong", mechanism)
    client.process_server_first_message(server.step(client.first_message()))
    with pytest.raises(AuthenticationFailed) as e:
        server.step(client.final_message())
    assert e.value.code == Errors.SASL_AUTHENTICATION_FAILED
    assert not server.complete


def test_credential_kafka_string_round_trip():
    credential = ScramCredential.from_password("x", "SCRAM-SHA-512", iterations=8192)
    text = credential.to_kafka_string()
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_kafka_string(text) == credential
    # the config map of /config/users/<user>, as Kafka writes it
    config = {"SCRAM-SHA-512": text, "producer_byte_rate": "1024"}
    assert credentials_from_user_config(config) == {"SCRAM-SHA-512": credential}


@pytest.mark.parametrize("text", [
    "", "salt=AAAA", "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=ten",
    "salt=!!,stored_key=AAAA,server_key=AAAA,iterations=4096",
    "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=100",
])
def test_bad_stored_credential_is_one_sentence(text):
    with pytest.raises(SecurityConfigError) as e:
        ScramCredential.from_kafka_string(text)
    assert "\n" not in str(e.value)


def test_iterations_below_kafka_minimum_refused():
    with pytest.raises(SecurityConfigError):
        ScramCredential.from_password("x", iterations=1000)


def test_unknown_mechanism_is_one_sentence():
    with pytest.raises(SecurityConfigError, match="SCRAM-SHA-1"):
        ScramServer("SCRAM-SHA-1", {}.get)


def test_unknown_user_looks_like_a_known_one(users):
    key = b"k" * 32
    lookup = users["SCRAM-SHA-256"].get
    first = [ScramServer("SCRAM-SHA-256", lookup, key).step(b"n,,n=nobody,r=abc")
             for _ in range(2)]
    known = ScramServer("SCRAM-SHA-256", lookup, key).step(b"n,,n=alice,r=abc")

    def fields(msg):
        return dict(p.split("=", 1) for p in msg.decode().split(","))
    # same salt each time (as a stored one), same shape as a real user's answer
    assert fields(first[0])["s"] == fields(first[1])["s"]
    assert len(base64.b64decode(fields(first[0])["s"])) == 32 == len(
        base64.b64decode(fields(known)["s"]))
    assert fields(first[0])["i"] == fields(known)["i"] == "4096"

    def failure(user, password):
        server = ScramServer("SCRAM-SHA-256", lookup, key)
        client = ScramClient("SCRAM-SHA-256", user, password)
        with pytest.raises(AuthenticationFailed) as e:
            server.step(client.final(server.step(client.first())))
        return str(e.value)
    assert failure("nobody", "x") == failure("alice", "wrong")


def test_bad_nonce_refused(users):
    server = ScramServer("SCRAM-SHA-256", users["SCRAM-SHA-256"].get)
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    final = client.final(server.step(client.first()))
    # The nonce must end with the server's (Kafka checks the suffix): change its last byte.
    head, sep, proof = final.partition(b",p=")
    tampered = head[:-1] + (b"A" if head[-1:] != b"A" else b"B") + sep + proof
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.step(tampered)
    with pytest.raises(AuthenticationFailed):  # a failed exchange stays failed
        server.step(final)


def test_bad_proof_refused(users):
    server = ScramServer("SCRAM-SHA-256", users["SCRAM-SHA-256"].get)
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    final = client.final(server.step(client.first()))
    head, _, proof = final.rpartition(b",p=")
    flipped = bytearray(base64.b64decode(proof))
    flipped[0] ^= 1
    with pytest.raises(AuthenticationFailed):
        server.step(head + b",p=" + base64.b64encode(bytes(flipped)))


@pytest.mark.parametrize("first", [
    b"y,,n=alice,r=abc",             # channel binding supported by client: refused
    b"p=tls-unique,,n=alice,r=abc",  # channel binding required: refused
    b"n,,n=alice,r=abc,tokenauth=true",
    b"n,a=bob,n=alice,r=abc",        # authzid different from the username
    b"n,,n=,r=abc", b"n,,n=alice", b"n,,n=al=ice,r=abc", b"", b"\xff\xfe",
    b"n,,n=alice,r=a" + b"b" * 5000,
])
def test_malformed_client_first(users, first):
    server = ScramServer("SCRAM-SHA-256", users["SCRAM-SHA-256"].get)
    with pytest.raises(AuthenticationFailed):
        server.step(first)


def test_extensions_other_than_tokenauth_are_ignored(users):
    server = ScramServer("SCRAM-SHA-256", users["SCRAM-SHA-256"].get)
    server.step(b"n,,n=alice,r=abc,tokenauth=false,foo=bar")
    assert server.extensions == {"tokenauth": "false", "foo": "bar"}


def test_authzid_equal_to_username_and_its_channel_binding(users):
    lookup = users["SCRAM-SHA-256"].get
    server = ScramServer("SCRAM-SHA-256", lookup)
    server.step(b"n,a=alice,n=alice,r=abc")
    # c= must carry the gs2 header actually sent, not "biws"
    with pytest.raises(AuthenticationFailed, match="channel binding"):
        server.step(b"c=biws,r=abc" + server._server_nonce.encode() + b",p=AAAA")


@settings(max_examples=200, deadline=None)
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_fuzz_only_authentication_failed(users, first, final):
    server = ScramServer("SCRAM-SHA-256", users["SCRAM-SHA-256"].get)
    try:
        server.step(first)
        server.step(final)
    except AuthenticationFailed:
        return
    raise AssertionError("random bytes authenticated")


@settings(max_examples=100, deadline=None)
@given(final=st.text(alphabet="cprv=,/+biwsAZ09xyz", max_size=120))
def test_fuzz_client_final_after_valid_first(users, final):
    server = ScramServer("SCRAM-SHA-256", users["SCRAM-SHA-256"].get, server_nonce="srv")
    server.step(b"n,,n=alice,r=cli")
    with pytest.raises(AuthenticationFailed):
        server.step(final.encode())
