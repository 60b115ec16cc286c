"""Group APIs answered as Kafka answers them, seen through real clients: offsets committed
for a partition that does not exist, ListGroups' state and type filters, static
membership (KIP-345)."""

from __future__ import annotations

import itertools
import os

from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka import ConsumerGroupTopicPartitions

from tests.server.group.clients import create_topic

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
