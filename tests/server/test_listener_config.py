"""KafkaConfig's listeners of every security protocol and Kafka's per-listener keys
(listener.name.<listener>.<key>): what is accepted, the resolved view of one listener, and
one sentence for each refusal."""

from __future__ import annotations

import pytest

from fastlog.security import JaasEntry
from fastlog.server.config import ConfigError, KafkaConfig

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-pw" user_bob="bob-pw";')


def test_four_protocols_and_named_listeners():
    c = KafkaConfig({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,"
                     "SASL_PLAINTEXT://127.0.0.1:9094,SASL_SSL://127.0.0.1:9095",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    })
    assert [n for n, _, _ in c.listeners] == ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    assert c.listener_security_protocol("SASL_SSL") == "SASL_SSL"
    named = KafkaConfig({
        "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    })
    assert named.listener_security_protocol("internal") == "SASL_PLAINTEXT"
    assert named.listener_security_protocol("EXTERNAL") == "SSL"


def test_listener_config_resolves_the_listener_form_first():
    c = KafkaConfig({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,"
                     "SSL://127.0.0.1:9093",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.client.auth": "requested",
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    })
    sasl = c.listener_config("SASL_PLAINTEXT")
    assert sasl["sasl.enabled.mechanisms"] == ["PLAIN", "SCRAM-SHA-256"]
    entry = sasl["plain.sasl.jaas.config"]
    assert isinstance(entry, JaasEntry) and entry.options["user_bob"] == "bob-pw"
    assert sasl["ssl.client.auth"] == "requested"
    assert c.listener_config("SSL")["ssl.client.auth"] == "required"
    assert c.listener_config("PLAINTEXT")["sasl.enabled.mechanisms"] == ["SCRAM-SHA-512"]
    assert "plain.sasl.jaas.config" not in c.listener_config("PLAINTEXT")
    assert KafkaConfig().listener_config("PLAINTEXT")["sasl.enabled.mechanisms"] == ["PLAIN"]


@pytest.mark.parametrize("props, needle", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "names GSSAPI, which fastlog does not serve"),
    ({"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}, "names OAUTHBEARER, which fastlog"),
    ({"sasl.enabled.mechanisms": "DIGEST-MD5"}, "must list SASL mechanisms among PLAIN"),
    ({"listener.name.SSL.ssl.client.auth": "required"}, "must name its listener in lower case"),
    ({"listener.name.ssl": "x"}, "must be of the form listener.name.<listener>.<key>"),
    ({"listener.name.other.ssl.client.auth": "required"},
     "names listener OTHER, which listeners does not bind"),
    ({"listener.name.plaintext.log.retention.hours": "1"}, "takes only these keys per listener"),
    ({"listener.name.plaintext.gssapi.sasl.jaas.config": "x required;"},
     "takes only these keys per listener"),
    ({"listener.name.plaintext.plain.sasl.jaas.config": "PlainLoginModule required user_a=1;"},
     "does not give a value for option"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1"},
     "enables SASL mechanism PLAIN, which needs its users in "
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": "a.B required;"},
     "must use org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1",
      "listener.name.sasl_plaintext.sasl.enabled.mechanisms": ""},
     "uses SASL but sasl.enabled.mechanisms is empty"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
      "zookeeper.connect": "127.0.0.1:2181"},
     "sasl.mechanism.inter.broker.protocol PLAIN must be among the sasl.enabled.mechanisms "
     "of the inter-broker listener SASL_PLAINTEXT"),
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "names GSSAPI, which fastlog does not serve"),
    ({"security.inter.broker.protocol": "KERBEROS"},
     "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"security.inter.broker.protocol": "SSL"},
     "security.inter.broker.protocol 'SSL' must be one of the listeners (PLAINTEXT)"),
    ({"security.inter.broker.protocol": "PLAINTEXT", "inter.broker.listener.name": "PLAINTEXT"},
     "set only one of inter.broker.listener.name and security.inter.broker.protocol"),
])
def test_refusals_are_one_sentence(props, needle):
    with pytest.raises(ConfigError) as e:
        KafkaConfig(props)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_security_inter_broker_protocol_names_the_inter_broker_listener():
    c = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2",
                     "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                     "security.inter.broker.protocol": "sasl_plaintext",
                     "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                     "zookeeper.connect": "127.0.0.1:2181"})
    assert c.inter_broker_listener_name == "SASL_PLAINTEXT"


def test_a_refused_jaas_line_never_shows_its_password():
    with pytest.raises(ConfigError) as e:
        KafkaConfig({"listener.name.plaintext.plain.sasl.jaas.config":
                     'org.apache.kafka.common.security.plain.PlainLoginModule required '
                     'user_alice="s3cret-value"'})
    assert "s3cret-value" not in str(e.value)


@pytest.mark.parametrize("listeners, protocol", [
    ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "SSL"),
    ("SASL_SSL://127.0.0.1:0", "SASL_SSL"),
])
def test_tls_listener_without_a_keystore_is_one_sentence(tmp_path, listeners, protocol):
    import subprocess

    from fastlog.testing import server_command
    r = subprocess.run(server_command() + [
        "--override", f"listeners={listeners}",
        "--override", f"listener.name.{protocol.lower()}.plain.sasl.jaas.config={PLAIN_JAAS}",
        "--override", f"log.dirs={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2
    assert f"listener {protocol}:" in r.stderr and "keystore" in r.stderr
    assert r.stderr.strip().count("\n") == 0
    assert "Traceback" not in r.stderr and not (tmp_path / "data").exists()
