"""Consumer groups with real clients (confluent-kafka, kafka-python, aiokafka) against a
real fastlog-server: splitting a topic, rebalancing on leave and on death, resuming from
committed offsets across consumer and broker restarts, mixed-client groups."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.server.group.clients import (
    CLIENTS,
    Member,
    commit_any,
    create_topic,
    produce,
    wait_until,
)

_names = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{os.getpid()}"


def close_all(members):
    for m in members:
        try:
            m.close()
        except AssertionError:
            pass


def assert_disjoint_cover(members, partitions: int):
    seen = [m.assignment for m in members]
    union = frozenset().union(*seen)
    assert union == frozenset(range(partitions)), seen
    assert sum(len(s) for s in seen) == partitions, f"overlapping assignments {seen}"


@pytest.mark.parametrize("kind", CLIENTS)
def test_members_split_topic_and_read_every_record_once(group_broker, kind):
    topic, group, parts, n = fresh("split"), fresh("g-split"), 6, 600
    create_topic(group_broker.bootstrap, topic, parts)
    count = 2 if kind == "aiokafka" else 3
    members = [Member(kind, group_broker.bootstrap, group, topic) for _ in range(count)]
    try:
        wait_until(lambda: all(m.assignment for m in members)
                   and sum(len(m.assignment) for m in members) == parts,
                   30, "every member to get partitions")
        assert_disjoint_cover(members, parts)
        produce(group_broker.bootstrap, topic, parts, n)
        wait_until(lambda: sum(len(m.records) for m in members) >= n, 30, "all records")
        for m in members:
            m.check()
        values = [v for m in members for v in m.values()]
        assert sorted(values) == sorted(str(i).encode() for i in range(n))
        for m in members:  # each read only its own partitions
            assert {p for p, _, _ in m.records} <= m.assignment
    finally:
        close_all(members)


@pytest.mark.parametrize("kind", ["confluent", "kafka-python"])
def test_member_leaving_hands_its_partitions_on(group_broker, kind):
    topic, group, parts = fresh("leave"), fresh("g-leave"), 4
    create_topic(group_broker.bootstrap, topic, parts)
    a = Member(kind, group_broker.bootstrap, group, topic)
    b = Member(kind, group_broker.bootstrap, group, topic)
    try:
        wait_until(lambda: a.assignment and b.assignment
                   and len(a.assignment | b.assignment) == parts, 30, "two-way split")
        b.close()  # sends LeaveGroup
        wait_until(lambda: a.assignment == frozenset(range(parts)), 20,
                   "the survivor to own every partition")
        produce(group_broker.bootstrap, topic, parts, 40)
        wait_until(lambda: len(a.records) >= 40, 20, "the survivor to read everything")
    finally:
        close_all([a, b])


_DYING_MEMBER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                  "session.timeout.ms": 1000, "heartbeat.interval.ms": 200,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([sys.argv[3]])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        c.poll(0.1)
        a = c.assignment()
        if a:
            print("ASSIGNED", len(a), flush=True)
""")


@pytest.mark.parametrize("kind", CLIENTS)
def test_dead_member_session_expires_and_partitions_move(group_broker, kind):
    topic, group, parts = fresh("dead"), fresh("g-dead"), 4
    create_topic(group_broker.bootstrap, topic, parts)
    survivor = Member(kind, group_broker.bootstrap, group, topic, session_ms=1000,
                      assignors=["roundrobin"] if kind != "aiokafka" else None)
    proc = subprocess.Popen([sys.executable, "-c", _DYING_MEMBER, group_broker.bootstrap,
                             group, topic], stdout=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: survivor.assignment and len(survivor.assignment) < parts, 30,
                   "the survivor to share the topic with the other process")
        # the other process holds the rest; kill it without a LeaveGroup
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_until(lambda: survivor.assignment == frozenset(range(parts)), 20,
                   "the survivor to take over after the session timeout")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        close_all([survivor])


@pytest.mark.parametrize("kind", CLIENTS)
def test_restarted_consumer_resumes_after_commit(group_broker, kind):
    topic, group, parts = fresh("resume"), fresh("g-resume"), 2
    create_topic(group_broker.bootstrap, topic, parts)
    produce(group_broker.bootstrap, topic, parts, 100)
    m = Member(kind, group_broker.bootstrap, group, topic)
    try:
        wait_until(lambda: len(m.records) >= 100, 30, "the first read")
        commit_any(m, {0: 20, 1: 30})
    finally:
        m.close()
    m2 = Member(kind, group_broker.bootstrap, group, topic)
    try:
        wait_until(lambda: len(m2.records) >= 50, 30, "the resumed read")
        first = {p: min(o for q, o, _ in m2.records if q == p) for p in range(parts)}
        assert first == {0: 20, 1: 30}
        assert len(m2.records) == 50
    finally:
        m2.close()


def test_group_and_offsets_survive_broker_restart(tmp_path):
    from tests.server.group.clients import GROUP_OVERRIDES, GroupBroker

    with GroupBroker(tmp_path / "data", overrides=GROUP_OVERRIDES) as b:
        topic, group, parts = "restart-t", "g-restart", 2
        create_topic(b.bootstrap, topic, parts)
        produce(b.bootstrap, topic, parts, 60)
        m = Member("kafka-python", b.bootstrap, group, topic)
        try:
            wait_until(lambda: len(m.records) >= 60, 30, "the first read")
            from kafka import OffsetAndMetadata, TopicPartition

            m.call(lambda c: c.commit({
                TopicPartition(topic, 0): OffsetAndMetadata(10, "meta-0", 3),
                TopicPartition(topic, 1): OffsetAndMetadata(25, "meta-1", -1)}))
            gen_before = m.call(lambda c: c._coordinator._generation.generation_id)
        finally:
            m.close()
        b.restart()
        from kafka import KafkaConsumer, TopicPartition

        wait_until(lambda: group in _group_ids(b.bootstrap), 20,
                   "the group to be listed after the restart")
        probe = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group,
                              enable_auto_commit=False)
        try:
            c0 = probe.committed(TopicPartition(topic, 0), metadata=True)
            c1 = probe.committed(TopicPartition(topic, 1), metadata=True)
        finally:
            probe.close()
        assert (c0.offset, c0.metadata, c0.leader_epoch) == (10, "meta-0", 3)
        assert (c1.offset, c1.metadata) == (25, "meta-1")
        m2 = Member("confluent", b.bootstrap, group, topic)
        try:
            wait_until(lambda: len(m2.records) >= 25, 30, "the resumed read")
            first = {p: min(o for q, o, _ in m2.records if q == p) for p in range(parts)}
            assert first == {0: 10, 1: 25} and len(m2.records) == 25
        finally:
            m2.close()
        assert gen_before >= 1


def _group_ids(bootstrap: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        listing = admin.list_consumer_groups(request_timeout=5).result(timeout=10)
    except Exception:  # noqa: BLE001 - e.g. COORDINATOR_LOAD_IN_PROGRESS right after a start
        return []
    return [g.group_id for g in listing.valid]


@pytest.mark.parametrize("kinds,protocol", [
    (("kafka-python", "confluent"), None),
    (("kafka-python", "aiokafka"), "roundrobin"),
    (("confluent", "aiokafka"), "roundrobin"),
])
def test_mixed_group_agrees_on_a_protocol(group_broker, kinds, protocol):
    topic, group, parts = fresh("mixed"), fresh("g-mixed"), 4
    create_topic(group_broker.bootstrap, topic, parts)
    members = [Member(k, group_broker.bootstrap, group, topic) for k in kinds]
    try:
        wait_until(lambda: all(m.assignment for m in members)
                   and sum(len(m.assignment) for m in members) == parts, 30,
                   "both clients to get partitions")
        assert_disjoint_cover(members, parts)
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=20)
        assert len(desc.members) == 2
        if protocol is not None:
            assert desc.partition_assignor == protocol
        else:
            assert desc.partition_assignor in ("range", "roundrobin")
    finally:
        close_all(members)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat (librdkafka 2.0.2) not installed")
def test_kcat_balanced_consumer_reads_all_and_commits(group_broker):
    """Old librdkafka (Debian's kcat 1.7.1 on 2.0.2): group join, read, auto-commit."""
    topic, group, parts = fresh("kcat"), fresh("g-kcat"), 3
    create_topic(group_broker.bootstrap, topic, parts)
    produce(group_broker.bootstrap, topic, parts, 30)
    r = subprocess.run(["kcat", "-b", group_broker.bootstrap, "-G", group, "-o", "beginning",
                        "-e", "-q", "-X", "enable.auto.commit=true",
                        "-X", "auto.commit.interval.ms=100", topic],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(str(i) for i in range(30))
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=group_broker.bootstrap, group_id=group,
                      enable_auto_commit=False)
    try:
        assert [c.committed(TopicPartition(topic, p)) for p in range(parts)] == [10, 10, 10]
    finally:
        c.close()


def test_cooperative_sticky_members_split_and_rebalance_incrementally(group_broker):
    """librdkafka's cooperative-sticky assignor over the classic protocol (KIP-429): the
    coordinator only chooses the protocol; incremental rebalances are the clients' job."""
    topic, group, parts = fresh("coop"), fresh("g-coop"), 4
    create_topic(group_broker.bootstrap, topic, parts)
    a = Member("confluent", group_broker.bootstrap, group, topic,
               assignors=["cooperative-sticky"])
    b = None
    try:
        wait_until(lambda: a.assignment == frozenset(range(parts)), 30, "the first member")
        b = Member("confluent", group_broker.bootstrap, group, topic,
                   assignors=["cooperative-sticky"])
        wait_until(lambda: a.assignment and b.assignment
                   and sum(len(m.assignment) for m in (a, b)) == parts, 30, "a two-way split")
        assert_disjoint_cover([a, b], parts)
        produce(group_broker.bootstrap, topic, parts, 40)
        wait_until(lambda: len(a.records) + len(b.records) >= 40, 20, "all records")
        assert sorted(a.values() + b.values()) == sorted(str(i).encode() for i in range(40))
    finally:
        close_all([m for m in (a, b) if m is not None])
