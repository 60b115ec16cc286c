# fastlog/perf/workload.py: what the load loops send, and the topic they send it to.
#
# Owns: Workload — record values (1024 distinct random A-Z payloads of the chosen size,
# cycled, so nothing is allocated per record and lz4 finds nothing to squeeze, like the
# anchor runs), keys by distribution (none, sequential, random over key_count keys), the
# e2e timestamp prefix; ensure_topic (create the topic with the requested partitions
# through the selected client, tolerating "already exists"); and confluent_client (a
# librdkafka client whose refused settings are one sentence). Caller's thread only.
"""Record payloads, keys and topic setup for perf runs."""

from __future__ import annotations

import random
import struct
import time

from fastlog.client.errors import FastlogError

DISTINCT_VALUES = 1024
KEY_DISTRIBUTIONS = ("none", "sequential", "random")
_STAMP = struct.Struct(">q")


class Workload:
    def __init__(self, record_size: int, key_distribution: str = "none", key_count: int = 1000,
                 seed: int = 1):
        if record_size < 0:
            raise FastlogError("--record-size must be >= 0")
        if key_distribution not in KEY_DISTRIBUTIONS:
            raise FastlogError(f"unknown key distribution '{key_distribution}'")
        if key_count < 1:
            raise FastlogError("--key-count must be >= 1")
        rnd = random.Random(seed)
        self.record_size = record_size
        letters = bytes(range(65, 91))
        n = DISTINCT_VALUES if record_size <= 65536 else 16
        self.values = [bytes(rnd.choices(letters, k=record_size)) for _ in range(n)]
        self.key_distribution = key_distribution
        self.keys = [b"key-%d" % i for i in range(key_count)]
        self._random_index = [rnd.randrange(key_count) for _ in range(65536)]

    def value(self, i: int) -> bytes:
        return self.values[i % len(self.values)]

    def key(self, i: int) -> bytes | None:
        d = self.key_distribution
        if d == "none":
            return None
        if d == "sequential":
            return self.keys[i % len(self.keys)]
        return self.keys[self._random_index[i & 0xFFFF]]

    def stamped_value(self, i: int) -> bytes:
        """The value with its first 8 bytes replaced by the send time (perf_counter_ns)."""
        v = self.values[i % len(self.values)]
        return _STAMP.pack(time.perf_counter_ns()) + v[8:]

    @staticmethod
    def stamp_of(value: bytes | None) -> int | None:
        """The send time stamped_value() put in, or None when value is too short to hold
        one (a record some other tool wrote)."""
        if value is None or len(value) < _STAMP.size:
            return None
        return _STAMP.unpack_from(value)[0]


def confluent_client(cls, conf: dict):
    """cls(conf) for a confluent-kafka client class; a setting librdkafka refuses (an
    unknown name, a bad value, usually from -X) is one sentence."""
    from confluent_kafka import KafkaException

    try:
        return cls(conf)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        text = err.str() if hasattr(err, "str") else str(exc)
        raise FastlogError(f"librdkafka refused the client settings: {text}") from None
    except (TypeError, ValueError) as exc:
        raise FastlogError(f"librdkafka refused the client settings: {exc}") from None


def ensure_topic(client: str, bootstrap: str, topic: str, partitions: int,
                 timeout: float = 30.0, security=None) -> int:
    """Create topic with `partitions` partitions unless it exists; return its partition count.
    security: a ClientSecurity for our client, librdkafka's security keys for confluent."""
    if client == "confluent":
        return _ensure_topic_confluent(bootstrap, topic, partitions, timeout, security or {})
    from fastlog.client.sync import run_async
    return run_async(_ensure_topic_fastlog(bootstrap, topic, partitions, security))


async def _ensure_topic_fastlog(bootstrap: str, topic: str, partitions: int, security) -> int:
    from fastlog.client import Admin
    from fastlog.client.errors import KafkaError

    async with Admin(bootstrap, security=security) as admin:
        if topic not in await admin.list_topics():
            try:
                await admin.create_topic(topic, partitions, 1)
            except KafkaError as exc:
                if "already exists" not in str(exc):
                    raise
        info = (await admin.describe_topics([topic]))[0]
        return len(info.partitions)


def _ensure_topic_confluent(bootstrap: str, topic: str, partitions: int, timeout: float,
                            security: dict) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    # librdkafka's notices from this helper (on its way out it may log "Purging 1 unserved
    # events from background queue" at level 6) are no news to the user; warnings are.
    admin = confluent_client(AdminClient, {"bootstrap.servers": bootstrap, "log_level": 4,
                                           **security})
    md = admin.list_topics(timeout=timeout)
    if topic not in md.topics or md.topics[topic].error is not None:
        fut = admin.create_topics([NewTopic(topic, partitions, 1)],
                                  operation_timeout=timeout)[topic]
        try:
            fut.result(timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise FastlogError(f"cannot create topic '{topic}': {exc}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=timeout)
        t = md.topics.get(topic)
        if t is not None and t.error is None and t.partitions:
            return len(t.partitions)
        time.sleep(0.1)
    raise FastlogError(f"topic '{topic}' did not appear in metadata within {timeout:.0f}s")
