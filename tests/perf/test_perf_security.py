"""`fastlog perf` against a real broker's SASL_PLAINTEXT listener: -X and --command-config
carry Kafka's client security keys to every client of a run (ours through ClientSecurity,
librdkafka's with --client confluent); a wrong password is one sentence and a non-zero exit."""

import secrets

import pytest

from tests.perf.test_perf_harness import assert_one_sentence, check_summary, perf, perf_json
from tests.security.test_sasl_broker import running_sasl_broker, sasl_address

PLAIN_PW = secrets.token_urlsafe(16)
SCRAM_USER, SCRAM_PW = "sam", secrets.token_urlsafe(16)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    with running_sasl_broker(tmp_path_factory.mktemp("perf-sasl") / "data", PLAIN_PW,
                             {("SCRAM-SHA-256", SCRAM_USER): SCRAM_PW}) as b:
        yield b


def _plain(password):
    return ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=alice", "-X", f"sasl.password={password}"]


@pytest.mark.parametrize("client", ["fastlog", "confluent"])
def test_produce_and_consume_authenticate(sasl_broker, client):
    topic = f"perf-sasl-{client}"
    s = perf_json("produce", "--bootstrap-server", sasl_address(sasl_broker), "--topic", topic,
                  "--client", client, "--num-records", 200, *_plain(PLAIN_PW))
    check_summary(s, "produce", 200, 100)
    c = perf_json("consume", "--bootstrap-server", sasl_address(sasl_broker), "--topic", topic,
                  "--client", client, "--num-records", 200, "--duration", 60,
                  *_plain(PLAIN_PW))
    check_summary(c, "consume", 200, 100)


@pytest.mark.parametrize("client", ["fastlog", "confluent"])
def test_e2e_with_command_config_and_jaas_line(sasl_broker, client, tmp_path):
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                      f'required username="{SCRAM_USER}" password="{SCRAM_PW}";\n')
    s = perf_json("e2e", "--bootstrap-server", sasl_address(sasl_broker), "--client", client,
                  "--topic", f"perf-sasl-e2e-{client}", "--num-records", 50, "--rate", 500,
                  "--duration", 60, "--command-config", config)
    check_summary(s, "e2e", 50, 100)


@pytest.mark.parametrize("client", ["fastlog", "confluent"])
def test_wrong_password_is_one_sentence(sasl_broker, client):
    r = perf("produce", "--bootstrap-server", sasl_address(sasl_broker), "--client", client,
             "--num-records", 10, *_plain("not-" + PLAIN_PW), timeout=60)
    assert_one_sentence(r, 1, "SASL PLAIN authentication")
    assert PLAIN_PW not in r.stderr and r.stdout == ""


def test_security_setting_the_client_cannot_honour_is_refused_before_connecting():
    r = perf("produce", "--bootstrap-server", "127.0.0.1:1", "-X",
             "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=GSSAPI", timeout=60)
    assert_one_sentence(r, 2, "sasl.mechanism GSSAPI is not supported")
