"""fastlog's own Kafka client: asyncio producer, consumer and admin, plus sync wrappers.

Built on fastlog.protocol (request/response encoding) and fastlog._codec (record batches),
it is what the ``fastlog`` CLI, the perf harness and the Spark source use::

    async with Producer("127.0.0.1:9092", compression="lz4") as p:
        await p.send("events", b"value", key=b"k")
    async with Consumer("127.0.0.1:9092") as c:
        c.assign([TopicPartition("events", 0)])
        await c.seek_to_beginning()
        batch = await c.getmany(timeout_ms=1000)

Threads: SyncProducer / SyncConsumer / SyncAdmin run the same objects on a private loop.
"""

from fastlog.client.admin import EARLIEST, LATEST, Admin, ConfigEntry, OffsetAndTimestamp
from fastlog.client.cluster import Cluster, TopicPartition
from fastlog.client.consumer import Consumer
from fastlog.client.errors import (
    BrokerUnavailable,
    ClientTimeout,
    FastlogError,
    KafkaError,
    UnknownTopic,
)
from fastlog.client.producer import Producer, RecordMetadata
from fastlog.client.sync import SyncAdmin, SyncConsumer, SyncProducer

__all__ = [
    "Admin", "BrokerUnavailable", "ClientTimeout", "Cluster", "ConfigEntry", "Consumer",
    "EARLIEST", "FastlogError", "KafkaError", "LATEST", "OffsetAndTimestamp", "Producer",
    "RecordMetadata", "SyncAdmin", "SyncConsumer", "SyncProducer", "TopicPartition",
    "UnknownTopic",
]
