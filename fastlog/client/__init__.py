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

The public names below are imported on first use (PEP 562), so that a process needing
one submodule (a Spark executor reading with the cluster and connection alone) does not
load the admin, producer and consumer.
"""

import importlib

_WHERE = {
    "Admin": "admin", "ConfigEntry": "admin", "EARLIEST": "admin", "LATEST": "admin",
    "OffsetAndTimestamp": "admin", "Cluster": "cluster", "TopicPartition": "cluster",
    "Consumer": "consumer", "BrokerUnavailable": "errors", "ClientTimeout": "errors",
    "FastlogError": "errors", "KafkaError": "errors", "UnknownTopic": "errors",
    "Producer": "producer", "RecordMetadata": "producer", "SyncAdmin": "sync",
    "SyncConsumer": "sync", "SyncProducer": "sync",
}

__all__ = sorted(_WHERE)


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fastlog.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fastlog.client.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
