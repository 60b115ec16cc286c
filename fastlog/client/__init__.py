"""fastlog's own Kafka client: asyncio producer, consumer and admin, plus sync wrappers.

Built on fastlog.protocol (request/response encoding) and fastlog._codec (record batches
are built and decoded per batch in compiled code); it is what the ``fastlog`` CLI, the
perf harness and the Spark source use. Any Kafka-compatible broker works::

    async with Admin("127.0.0.1:9092") as admin:
        await admin.create_topic("events", num_partitions=3, configs={"retention.ms": "60000"})
        offsets = await admin.list_offsets({TopicPartition("events", 0): LATEST})

    async with Producer("127.0.0.1:9092", compression="lz4", acks="all",
                        enable_idempotence=True) as p:
        handle = await p.send("events", b"value", key=b"k", headers=[("h", b"v")])
        meta = await handle                     # RecordMetadata(topic, partition, offset, ...)
        base = await (await p.send_batch("events", 0, [(ts_ms, key, value, headers), ...]))

    async with Consumer("127.0.0.1:9092") as c:
        c.assign([TopicPartition("events", 0)])  # or: await c.subscribe(["events"], "group")
        await c.seek_to_beginning()
        for tp, records in (await c.getmany(timeout_ms=1000)).items():
            ...                                   # record.offset/.timestamp/.key/.value/.headers

Threads: SyncProducer / SyncConsumer / SyncAdmin run the same objects on a private loop
(``SyncConsumer(...).poll(1000)``, ``SyncProducer(...).send(...).result()``). Errors are
FastlogError subclasses whose message is one sentence.
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
