"""Cluster metadata: the model (topics, partitions, leaders, ISR), the store interface the
broker uses, and the embedded single-node store.

model.py     TopicState, PartitionState, new_kafka_uuid, MetadataError: plain data
store.py     MetadataStore: the interface (EmbeddedMetadataStore here, ZkMetadataStore in
             fastlog/zk/ implement it)
embedded.py  EmbeddedMetadataStore: one JSON file in the first log dir, written atomically

This package sits below both the broker (fastlog/server/) and cluster coordination
(fastlog/zk/), which import it; it imports neither.
"""

from fastlog.metadata.embedded import METADATA_FILE, EmbeddedMetadataStore
from fastlog.metadata.model import MetadataError, PartitionState, TopicState, new_kafka_uuid
from fastlog.metadata.store import DEFAULT_BROKER_ENTITY, PRODUCER_ID_BLOCK_SIZE, MetadataStore

__all__ = [
    "DEFAULT_BROKER_ENTITY",
    "METADATA_FILE",
    "PRODUCER_ID_BLOCK_SIZE",
    "EmbeddedMetadataStore",
    "MetadataError",
    "MetadataStore",
    "PartitionState",
    "TopicState",
    "new_kafka_uuid",
]
