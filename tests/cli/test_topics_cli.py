"""`fastlog topics` against a real broker: create, list, describe, alter, delete."""

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient


def test_create_list_describe_delete(fastlog, bootstrap, topic_name):
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic_name,
                "--partitions", 3, "--replication-factor", 1)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"Created topic {topic_name}."

    r = fastlog("topics", "--bootstrap-server", bootstrap, "--list")
    assert r.returncode == 0, r.stderr
    assert topic_name in r.stdout.splitlines()

    r = fastlog("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic_name)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"Topic: {topic_name}\tPartitionCount: 3\tReplicationFactor: 1")
    assert [ln.split("\t")[2] for ln in lines[1:]] == [f"Partition: {p}" for p in range(3)]
    assert all("Leader: " in ln and "Isr: " in ln for ln in lines[1:])

    r = fastlog("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", topic_name)
    assert r.returncode == 0, r.stderr
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--list")
    assert topic_name not in r.stdout.splitlines()


def test_create_with_config_then_alter_config(fastlog, bootstrap, topic_name):
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic_name,
                "--partitions", 1, "--config", "retention.ms=86400000")
    assert r.returncode == 0, r.stderr
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic_name)
    assert "retention.ms=86400000" in r.stdout.splitlines()[0]

    r = fastlog("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
                "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    assert r.returncode == 0, r.stderr
    head = fastlog("topics", "--bootstrap-server", bootstrap, "--describe",
                   "--topic", topic_name).stdout.splitlines()[0]
    assert "retention.ms=3600000" in head and "cleanup.policy=compact" in head

    r = fastlog("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
                "--delete-config", "cleanup.policy")
    assert r.returncode == 0, r.stderr
    head = fastlog("topics", "--bootstrap-server", bootstrap, "--describe",
                   "--topic", topic_name).stdout.splitlines()[0]
    assert "cleanup.policy" not in head and "retention.ms=3600000" in head


def test_create_twice_fails_in_one_sentence(fastlog, bootstrap, topic_name):
    args = ("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic_name)
    assert fastlog(*args).returncode == 0
    r = fastlog(*args)
    assert r.returncode != 0
    assert "already exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert fastlog(*args, "--if-not-exists").returncode == 0


def test_describe_missing_topic_fails_in_one_sentence(fastlog, bootstrap, topic_name):
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic_name)
    assert r.returncode != 0
    assert r.stderr.strip() == f"fastlog topics: topic '{topic_name}' does not exist"


def test_delete_missing_topic_fails_in_one_sentence(fastlog, bootstrap, topic_name):
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", topic_name)
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and "does not exist" in r.stderr
    assert "Traceback" not in r.stderr


def test_alter_partitions_grows_or_says_why_not(fastlog, bootstrap, topic_name):
    fastlog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic_name,
            "--partitions", 2)
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
                "--partitions", 1)
    assert r.returncode != 0 and "can only grow" in r.stderr
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
                "--partitions", 3)
    if r.returncode == 0:
        described = fastlog("topics", "--bootstrap-server", bootstrap, "--describe",
                            "--topic", topic_name).stdout
        assert "PartitionCount: 3" in described
    else:  # a broker without CreatePartitions: one sentence, no traceback
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert "partition" in r.stderr



def test_internal_topic_delete_is_refused(fastlog, bootstrap):
    # By the command line before a request is sent, and by the broker for other clients:
    # without __consumer_offsets no group could join or commit.
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--delete",
                "--topic", "__consumer_offsets")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "fastlog topics: topic __consumer_offsets is internal to the brokers and cannot be "
        "deleted"]
    a = AdminClient({"bootstrap.servers": bootstrap})
    fut = a.delete_topics(["__consumer_offsets"], operation_timeout=10)["__consumer_offsets"]
    with pytest.raises(KafkaException) as exc:
        fut.result(15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION


def test_longest_legal_topic_name_is_created_and_described(fastlog, bootstrap, topic_name):
    name = (topic_name + "." + "x" * 249)[:249]
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name)
    assert r.returncode == 0, r.stderr
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Topic: {name}\t")
