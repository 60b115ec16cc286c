"""`fastlog consumer-groups` against a real broker: lag = log end - committed, reset
offsets (dry run and --execute), delete, and one-sentence errors with non-zero exits."""

from __future__ import annotations

import subprocess

from tests.client_fixture import run_fastlog
from tests.server.group.clients import Member, create_topic, produce, wait_until
from tests.server.group.test_group_clients import fresh


def fastlog(*args: str) -> subprocess.CompletedProcess:
    return run_fastlog("consumer-groups", *args)


def table(stdout: str) -> list[dict[str, str]]:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("GROUP"))
    header = lines[start].split()
    return [dict(zip(header, ln.split(), strict=False)) for ln in lines[start + 1:]
            if not ln.startswith("(")]


def commit_with_kafka_python(bootstrap, group, topic, offsets):
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                  for p, o in offsets.items()})
    finally:
        c.close()


def test_describe_lag_is_end_minus_committed(group_broker):
    topic, group = fresh("cli-lag"), fresh("g-cli-lag")
    create_topic(group_broker.bootstrap, topic, 3)
    produce(group_broker.bootstrap, topic, 3, 90)  # 30 per partition
    commit_with_kafka_python(group_broker.bootstrap, group, topic, {0: 5, 1: 30})
    produce(group_broker.bootstrap, topic, 3, 9, start=90)  # 33 per partition
    r = fastlog("--bootstrap-server", group_broker.bootstrap, "--describe", "--group", group)
    assert r.returncode == 0, r.stderr
    rows = {int(row["PARTITION"]): row for row in table(r.stdout) if row["TOPIC"] == topic}
    assert rows[0]["CURRENT-OFFSET"] == "5" and rows[0]["LOG-END-OFFSET"] == "33"
    assert rows[0]["LAG"] == "28"
    assert rows[1]["LAG"] == "3"
    for row in rows.values():
        if row["CURRENT-OFFSET"] != "-":
            assert int(row["LAG"]) == int(row["LOG-END-OFFSET"]) - int(row["CURRENT-OFFSET"])
    listed = fastlog("--bootstrap-server", group_broker.bootstrap, "--list")
    assert listed.returncode == 0 and group in listed.stdout.split()


def test_describe_shows_members_and_assignment(group_broker):
    topic, group = fresh("cli-members"), fresh("g-cli-members")
    create_topic(group_broker.bootstrap, topic, 2)
    m = Member("confluent", group_broker.bootstrap, group, topic)
    try:
        wait_until(lambda: len(m.assignment) == 2, 30, "the assignment")
        r = fastlog("--bootstrap-server", group_broker.bootstrap, "--describe", "--group", group)
        assert r.returncode == 0, r.stderr
        assert "Stable" in r.stdout
        rows = [row for row in table(r.stdout) if row["TOPIC"] == topic]
        assert {row["PARTITION"] for row in rows} == {"0", "1"}
        assert all(row["CONSUMER-ID"] != "-" for row in rows)
        # an active group refuses a reset and a delete, in one sentence
        r = fastlog("--bootstrap-server", group_broker.bootstrap, "--reset-offsets",
                    "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert r.returncode != 0 and "still active" in r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        r = fastlog("--bootstrap-server", group_broker.bootstrap, "--delete", "--group", group)
        assert r.returncode != 0 and "members" in r.stderr
    finally:
        m.close()


def test_reset_offsets_dry_run_then_execute_then_delete(group_broker):
    from kafka import KafkaConsumer, TopicPartition

    topic, group = fresh("cli-reset"), fresh("g-cli-reset")
    create_topic(group_broker.bootstrap, topic, 2)
    produce(group_broker.bootstrap, topic, 2, 40)  # 20 per partition
    commit_with_kafka_python(group_broker.bootstrap, group, topic, {0: 10, 1: 10})
    base = ["--bootstrap-server", group_broker.bootstrap, "--reset-offsets", "--group", group]

    def committed():
        c = KafkaConsumer(bootstrap_servers=group_broker.bootstrap, group_id=group,
                          enable_auto_commit=False)
        try:
            return [c.committed(TopicPartition(topic, p)) for p in (0, 1)]
        finally:
            c.close()

    r = fastlog(*base, "--topic", topic, "--to-earliest")
    assert r.returncode == 0, r.stderr
    assert [row["NEW-OFFSET"] for row in table(r.stdout)] == ["0", "0"]
    assert committed() == [10, 10]  # dry run changed nothing
    r = fastlog(*base, "--topic", topic, "--shift-by", "-3", "--execute")
    assert r.returncode == 0, r.stderr
    assert committed() == [7, 7]
    r = fastlog(*base, "--topic", f"{topic}:1", "--to-offset", "15", "--execute")
    assert r.returncode == 0, r.stderr
    assert committed() == [7, 15]
    r = fastlog(*base, "--topic", topic, "--to-latest", "--execute")
    assert committed() == [20, 20]
    r = fastlog(*base, "--topic", topic, "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
    assert r.returncode == 0, r.stderr
    assert committed() == [0, 0]
    r = fastlog(*base, "--topic", topic, "--to-datetime", "yesterday")
    assert r.returncode != 0 and "not a date-time" in r.stderr and "Traceback" not in r.stderr
    r = fastlog("--bootstrap-server", group_broker.bootstrap, "--delete", "--group", group)
    assert r.returncode == 0, r.stderr
    r = fastlog("--bootstrap-server", group_broker.bootstrap, "--describe", "--group", group)
    assert r.returncode != 0 and "does not exist" in r.stderr
    r = fastlog("--bootstrap-server", group_broker.bootstrap, "--delete", "--group", group)
    assert r.returncode != 0 and "does not exist" in r.stderr
