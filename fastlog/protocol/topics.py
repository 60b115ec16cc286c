# fastlog/protocol/topics.py: the topic names Kafka reserves for its own coordinators.
# Shared by the broker (never auto-created, never deleted), the ZooKeeper metadata store
# (marked internal) and the command line (refused before a request is sent).
"""Kafka's internal topic names."""

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
