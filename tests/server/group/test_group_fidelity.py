"""Group APIs answered as Kafka answers them, seen through real clients: offsets committed
for a partition that does not exist, ListGroups' state and type filters, static
membership (KIP-345)."""

from __future__ import annotations

import itertools
import os

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.server.group.clients import Member, create_topic, wait_until
from tests.server.group.test_consumer_groups_cli import commit_with_kafka_python, fastlog

_names = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{os.getpid()}"


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
