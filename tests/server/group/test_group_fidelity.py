"""Group APIs answered as Kafka answers them, seen through real clients: offsets committed
for a partition that does not exist, ListGroups' state and type filters, static
membership (KIP-345)."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from fastlog.client import Cluster
from fastlog.protocol import ApiKey, Errors
from tests.server.group.clients import Member, create_topic, wait_until
from tests.server.group.test_consumer_groups_cli import commit_with_kafka_python, fastlog
from tests.server.group.test_group_clients import fresh
from tests.server.group.test_group_wire import join_body


def test_alter_offsets_of_a_missing_topic_or_partition_is_refused_per_partition(group_broker):
    topic = fresh("fid-commit")
    create_topic(group_broker.bootstrap, topic, 2)
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    group = fresh("fid-commit-group")
    # Kafka's AlterConsumerGroupOffsets rides on OffsetCommit: the partitions that
    # exist are committed, the others answer UNKNOWN_TOPIC_OR_PARTITION.
    fs = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, 0, 5), TopicPartition(topic, 7, 5),
        TopicPartition("no-such-topic-" + topic, 0, 5)])])
    answered = {(tp.topic, tp.partition): tp.error and tp.error.code()
                for tp in fs[group].result(15).topic_partitions}
    assert answered == {(topic, 0): None, (topic, 7): KafkaError.UNKNOWN_TOPIC_OR_PART,
                        ("no-such-topic-" + topic, 0): KafkaError.UNKNOWN_TOPIC_OR_PART}
    fs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, 0), TopicPartition(topic, 7)])])
    got = {(tp.partition, tp.offset, tp.error and tp.error.code())
           for tp in fs[group].result(15).topic_partitions}
    assert (0, 5, None) in got
    assert not any(p == 7 and off == 5 for p, off, _ in got)


def test_list_groups_filters_by_state_and_type(group_broker):
    topic, stable, empty = fresh("fid-list"), fresh("fid-stable"), fresh("fid-empty")
    create_topic(group_broker.bootstrap, topic, 1)
    commit_with_kafka_python(group_broker.bootstrap, empty, topic, {0: 1})
    member = Member("confluent", group_broker.bootstrap, stable, topic)
    try:
        wait_until(lambda: member.assignment == frozenset({0}), what="stable group")
        admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})

        def listed(**kw):
            res = admin.list_consumer_groups(**kw).result(15)
            assert not res.errors, res.errors
            return {g.group_id: g for g in res.valid if g.group_id in (stable, empty)}

        every = listed()
        assert every[stable].state == ConsumerGroupState.STABLE
        assert every[empty].state == ConsumerGroupState.EMPTY
        assert set(listed(states={ConsumerGroupState.STABLE})) == {stable}
        assert set(listed(states={ConsumerGroupState.EMPTY})) == {empty}
        # ListGroups v5: every group here is a classic one.
        classic = listed(types={ConsumerGroupType.CLASSIC})
        assert set(classic) == {stable, empty}
        assert classic[stable].type == ConsumerGroupType.CLASSIC
        assert listed(types={ConsumerGroupType.CONSUMER}) == {}
        # The command line: --state alone adds the state, with states it filters.
        r = fastlog("--bootstrap-server", group_broker.bootstrap, "--list", "--state")
        assert r.returncode == 0, r.stderr
        rows = dict(line.split() for line in r.stdout.splitlines()[1:])
        assert r.stdout.split()[:2] == ["GROUP", "STATE"]
        assert rows[stable] == "Stable" and rows[empty] == "Empty"
        r = fastlog("--bootstrap-server", group_broker.bootstrap, "--list", "--state", "stable")
        assert r.returncode == 0, r.stderr
        names = {line.split()[0] for line in r.stdout.splitlines()[1:]}
        assert stable in names and empty not in names
        r = fastlog("--bootstrap-server", group_broker.bootstrap, "--list", "--state", "Bored")
        assert r.returncode != 0 and "not a group state" in r.stderr
    finally:
        member.close()


class StaticConsumer:
    """A confluent-kafka consumer with a group.instance.id that records its rebalance
    callbacks; polled from the test's thread."""

    def __init__(self, bootstrap, group, instance, topics):
        self.events: list[tuple[str, frozenset[int]]] = []
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "group.instance.id": instance, "session.timeout.ms": 6000,
                           "heartbeat.interval.ms": 500, "enable.auto.commit": False,
                           "partition.assignment.strategy": "range"})
        self.c.subscribe(topics, on_assign=self._on("assign"), on_revoke=self._on("revoke"))

    def _on(self, what):
        def record(_consumer, partitions):
            self.events.append((what, frozenset(p.partition for p in partitions)))
        return record

    @property
    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.c.assignment())

    def revokes(self) -> list[frozenset[int]]:
        return [ps for what, ps in self.events if what == "revoke" and ps]


def poll_until(consumers, cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.c.poll(0.05)
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}")


def test_static_member_restart_gets_its_partitions_and_the_other_sees_no_revoke(group_broker):
    topic, group = fresh("fid-static"), fresh("fid-static-group")
    create_topic(group_broker.bootstrap, topic, 4)
    a = StaticConsumer(group_broker.bootstrap, group, "a", [topic])
    b = StaticConsumer(group_broker.bootstrap, group, "b", [topic])
    try:
        poll_until([a, b], lambda: len(a.assignment) == 2 and len(b.assignment) == 2,
                   what="a two-way split")
        # Restart each in turn (one of them leads the group): a static member leaves no
        # LeaveGroup behind, and its new incarnation takes its place without a rebalance.
        for name in ("a", "b"):
            old, other = (a, b) if name == "a" else (b, a)
            held, seen = old.assignment, len(other.events)
            old.c.close()
            new = StaticConsumer(group_broker.bootstrap, group, name, [topic])
            poll_until([new, other], lambda new=new: new.assignment, what="the restart's share")
            assert new.assignment == held
            poll_until([new, other], lambda: True, timeout=1.0)  # time for a stray rebalance
            assert other.events[seen:] == [], other.events[seen:]
            if name == "a":
                a = new
            else:
                b = new
        # A restart with another subscription does rebalance.
        topic2 = fresh("fid-static-2")
        create_topic(group_broker.bootstrap, topic2, 2)
        seen = len(a.events)
        b.c.close()
        b = StaticConsumer(group_broker.bootstrap, group, "b", [topic, topic2])
        poll_until([a, b], lambda: a.revokes()[len([e for e in a.events[:seen]
                                                    if e[0] == "revoke" and e[1]]):],
                   what="a rebalance for the changed subscription")
    finally:
        for c in (a, b):
            c.c.close()


def test_old_incarnation_of_a_static_member_is_fenced(group_broker):
    group = fresh("fid-fence")

    async def main():
        cluster = Cluster(group_broker.bootstrap, client_id="fence-test")
        conn = await cluster.bootstrap_connection()
        try:
            first = await conn.request(ApiKey.JOIN_GROUP, join_body(group, instance="i"),
                                       version=5)
            assert first.error_code == Errors.NONE
            await conn.request(ApiKey.SYNC_GROUP, {
                "group_id": group, "generation_id": first.generation_id,
                "member_id": first.member_id, "group_instance_id": "i",
                "assignments": [{"member_id": first.member_id, "assignment": b"A"}]},
                version=3)
            again = await conn.request(ApiKey.JOIN_GROUP, join_body(group, instance="i"),
                                       version=5)
            assert again.error_code == Errors.NONE and again.member_id != first.member_id
            assert again.generation_id == first.generation_id  # no rebalance
            hb = await conn.request(ApiKey.HEARTBEAT, {
                "group_id": group, "generation_id": first.generation_id,
                "member_id": first.member_id, "group_instance_id": "i"}, version=3)
            assert hb.error_code == Errors.FENCED_INSTANCE_ID
            sync = await conn.request(ApiKey.SYNC_GROUP, {
                "group_id": group, "generation_id": again.generation_id,
                "member_id": again.member_id, "group_instance_id": "i", "assignments": []},
                version=3)
            assert sync.error_code == Errors.NONE and bytes(sync.assignment) == b"A"
        finally:
            await cluster.close()
    asyncio.run(asyncio.wait_for(main(), 60))
