"""Kafka's sasl.jaas.config format and SASL/PLAIN against its user_<name> options."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog.security import (
    AuthenticationFailed,
    PlainServer,
    SecurityConfigError,
    parse_enabled_mechanisms,
    parse_jaas_config,
    parse_login_module,
    plain_users,
)

KAFKA_LINE = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')


def test_kafka_plain_line():
    entry = parse_login_module(KAFKA_LINE)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.control_flag == "required"
    assert entry.options == {"username": "admin", "password": "admin-secret",
                             "user_admin": "admin-secret", "user_alice": "alice-secret"}
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_quotes_escapes_comments_and_several_entries():
    text = ("/* first */ a.B$c_d-1 REQUISITE k1='single \"q\"' k2=\"tab\\tnl\\n\\101\\\\\" "
            "k3=word.with-dash; // trailing\n"
            "x.Y optional;")
    first, second = parse_jaas_config(text)
    assert first.login_module == "a.B$c_d-1" and first.control_flag == "requisite"
    assert first.options == {"k1": 'single "q"', "k2": "tab\tnl\nA\\", "k3": "word.with-dash"}
    assert second.login_module == "x.Y" and second.options == {}


@pytest.mark.parametrize("text,fragment", [
    ("", "login module"),
    ("   /* only a comment */ ", "login module"),
    ("a.B", "control flag"),
    ("a.B mandatory;", "control flag"),
    ('a.B required user_x="secret-value"', "semicolon"),
    ('a.B required user_x=;', "user_x"),
    ('a.B required user_x="v" =;', "(none)"),
    ("a.B required key=123;", "key"),  # a number is not a value, as in Kafka
    ("= required;", "login module"),
])
def test_malformed_jaas_is_one_sentence_without_values(text, fragment):
    with pytest.raises(SecurityConfigError) as e:
        parse_jaas_config(text, "listener.name.sasl_ssl.plain.sasl.jaas.config")
    message = str(e.value)
    assert fragment in message and "\n" not in message
    assert "secret-value" not in message
    assert message.startswith("listener.name.sasl_ssl.plain.sasl.jaas.config")


def test_exactly_one_login_module_per_property():
    with pytest.raises(SecurityConfigError, match="2 login modules"):
        parse_login_module("a.B required; c.D required;")


def test_mechanisms():
    assert parse_enabled_mechanisms("PLAIN, SCRAM-SHA-512,PLAIN") == ("PLAIN", "SCRAM-SHA-512")
    with pytest.raises(SecurityConfigError, match="GSSAPI"):
        parse_enabled_mechanisms("PLAIN,GSSAPI")


@pytest.fixture
def server():
    return PlainServer(plain_users(parse_login_module(KAFKA_LINE)))


@pytest.mark.parametrize("message,user", [
    (b"\x00alice\x00alice-secret", "alice"),
    (b"alice\x00alice\x00alice-secret", "alice"),
    (b"\x00admin\x00admin-secret", "admin"),
])
def test_plain_accepts(server, message, user):
    assert server.step(message) == b""
    assert server.complete and server.username == user


@pytest.mark.parametrize("message,reason", [
    (b"\x00alice\x00wrong", "Invalid username or password"),
    (b"\x00nobody\x00alice-secret", "Invalid username or password"),
    (b"admin\x00alice\x00alice-secret", "authorization id"),
    (b"\x00\x00pw", "username not specified"),
    (b"\x00alice\x00", "password not specified"),
    (b"alice\x00alice-secret", "expected 3 tokens, got 2"),
    (b"\x00a\x00b\x00c", "expected 3 tokens, got 4"),
    (b"\x00al\xffice\x00pw", "UTF-8"),
    (b"\x00alice\x00" + b"x" * 5000, "too long"),
])
def test_plain_refuses(server, message, reason):
    with pytest.raises(AuthenticationFailed, match=reason):
        server.step(message)
    assert not server.complete and server.username is None


def test_plain_unknown_user_and_wrong_password_say_the_same(server):
    messages = []
    for msg in (b"\x00nobody\x00x", b"\x00alice\x00x"):
        with pytest.raises(AuthenticationFailed) as e:
            PlainServer(server._users).step(msg)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100))
def test_plain_fuzz_only_authentication_failed(message):
    server = PlainServer({"alice": "alice-secret"})
    try:
        server.step(message)
    except AuthenticationFailed:
        return
    assert message.split(b"\x00")[1:] == [b"alice", b"alice-secret"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='ab.$_ ="\';/*\\\n0', max_size=60))
def test_jaas_fuzz_only_config_error(text):
    try:
        parse_jaas_config(text)
    except SecurityConfigError:
        pass
