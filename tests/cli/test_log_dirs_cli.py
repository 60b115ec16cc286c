"""`fastlog log-dirs --describe` against a real broker: Kafka's two progress lines and one
line of JSON in the layout of kafka-log-dirs.sh (sizes after producing, --topic-list and
--broker-list), an unknown broker id in one sentence, and bad command lines refused."""

from __future__ import annotations

import json

from fastlog.client import SyncAdmin, SyncProducer


def test_describe_as_kafka_prints_it(fastlog, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 2, 1)
    with SyncProducer(bootstrap) as producer:
        producer.send(topic_name, b"p" * 500, partition=1).result(30)
    r = fastlog("log-dirs", "--bootstrap-server", bootstrap, "--describe",
                "--topic-list", topic_name)
    assert r.returncode == 0, r.stderr
    querying, received, line = r.stdout.splitlines()
    assert querying == "Querying brokers for log directories information"
    assert received == "Received log directory information from brokers 0"
    assert ": " not in line  # compact, as Kafka's Jackson writes it
    doc = json.loads(line)
    assert list(doc) == ["version", "brokers"] and doc["version"] == 1
    ((broker),) = doc["brokers"]
    assert list(broker) == ["broker", "logDirs"] and broker["broker"] == 0
    ((log_dir),) = broker["logDirs"]
    assert list(log_dir) == ["logDir", "error", "partitions"] and log_dir["error"] is None
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert set(parts) == {f"{topic_name}-0", f"{topic_name}-1"}
    assert list(parts[f"{topic_name}-1"]) == ["partition", "size", "offsetLag", "isFuture"]
    assert parts[f"{topic_name}-0"]["size"] == 0 and parts[f"{topic_name}-1"]["size"] > 500
    assert parts[f"{topic_name}-1"]["offsetLag"] == 0
    assert parts[f"{topic_name}-1"]["isFuture"] is False

    r = fastlog("log-dirs", "--bootstrap-server", bootstrap, "--describe", "--broker-list", "0")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.splitlines()[2])
    assert f"{topic_name}-1" in {p["partition"] for p in doc["brokers"][0]["logDirs"][0]
                                 ["partitions"]}


def test_bad_broker_lists_are_one_sentence(fastlog, bootstrap):
    r = fastlog("log-dirs", "--bootstrap-server", bootstrap, "--describe",
                "--broker-list", "0,7")
    assert r.returncode == 2
    assert r.stderr.strip().endswith("The given brokers do not exist from --broker-list: 7. "
                                     "Current existent brokers: 0")
    assert "Traceback" not in r.stderr and r.stdout == ""
    r = fastlog("log-dirs", "--bootstrap-server", bootstrap, "--describe", "--broker-list", "x")
    assert r.returncode == 2 and "broker ids separated by commas" in r.stderr
    r = fastlog("log-dirs", "--bootstrap-server", bootstrap)
    assert r.returncode == 2 and "--describe" in r.stderr
