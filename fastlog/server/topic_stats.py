# fastlog/server/topic_stats.py — BrokerTopicStats: Kafka's per-topic and broker-wide
# produce and fetch counters (kafka.server:type=BrokerTopicMetrics).
#
# Owns: plain integer counters, one TopicStats per topic plus `all_topics` for the broker;
# no format, no files. The hot paths bump them once per partition of a request (never
# per record): apis._append_led after each append (produce_done), apis.handle_fetch
# once per answered Fetch (fetch_done), ReplicaManager.append_as_follower (replication
# bytes in). fastlog/server/metrics.py reads them at scrape time.
# Which outcomes count follows Kafka's ReplicaManager and KafkaApis:
#   - messages_in / bytes_in: records and bytes of every append answered without an error
#     (an idempotent producer's retried duplicate included, as Kafka counts it);
#   - bytes_rejected: the bytes of a record set refused as too large (MESSAGE_TOO_LARGE,
#     RECORD_LIST_TOO_LARGE);
#   - total_produce_requests / total_fetch_requests: one per partition of a request that
#     reached the partition (authorization refusals never do);
#   - failed_produce_requests / failed_fetch_requests: partitions answered with an error
#     that Kafka counts as failed — any error except those its ReplicaManager expects in
#     normal operation (not the leader, unknown partition, storage error, a record set
#     too large or corrupt; for fetches also out-of-range offsets and stale epochs);
#   - a partition answered UNKNOWN_TOPIC_OR_PARTITION counts for the broker only, so
#     that clients naming random topics cannot grow the per-topic table;
#   - bytes_out: record bytes answered to consumers; a follower's fetch counts as
#     replication_bytes_out (broker-wide only), a follower's append as replication_bytes_in.
#   - compiled_fetch_requests (fastlog's own, broker-wide): fetches apis._fetch_one
#     answered in compiled code.
# Called from: the broker's asyncio API loop only; the scrape thread reads the ints
# (a torn read is impossible for a Python int) and snapshots `topics` with dict(...).
"""Per-topic produce and fetch counters (Kafka's BrokerTopicMetrics)."""

from __future__ import annotations

from fastlog.protocol.errors import Errors

# Errors Kafka's ReplicaManager.appendToLocalLog answers without marking the partition's
# produce as failed.
PRODUCE_EXPECTED_ERRORS = frozenset({
    Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.CORRUPT_MESSAGE,
    Errors.KAFKA_STORAGE_ERROR,
})
REJECTED_ERRORS = frozenset({Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE})
# (an enum member read from its class costs a lookup; produce_done runs per partition)
_NONE, _UNKNOWN = Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION
# ... and readFromLocalLog without marking the fetch as failed.
FETCH_EXPECTED_ERRORS = frozenset({
    Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.UNKNOWN_LEADER_EPOCH, Errors.FENCED_LEADER_EPOCH, Errors.REPLICA_NOT_AVAILABLE,
    Errors.KAFKA_STORAGE_ERROR, Errors.OFFSET_OUT_OF_RANGE, Errors.OFFSET_NOT_AVAILABLE,
})

# Counter attribute -> the JMX exporter's name part (kafka_server_brokertopicmetrics_<part>_total)
TOPIC_COUNTERS = (
    ("messages_in", "messagesin", "Records appended to the log."),
    ("bytes_in", "bytesin", "Record bytes appended by producers."),
    ("bytes_out", "bytesout", "Record bytes sent to consumers."),
    ("bytes_rejected", "bytesrejected", "Record bytes refused as too large."),
    ("failed_produce_requests", "failedproducerequests",
     "Partitions of Produce requests that failed."),
    ("failed_fetch_requests", "failedfetchrequests",
     "Partitions of Fetch requests that failed."),
    ("total_produce_requests", "totalproducerequests", "Partitions of Produce requests."),
    ("total_fetch_requests", "totalfetchrequests", "Partitions of Fetch requests."),
)
# Broker-wide only, as in Kafka.
BROKER_COUNTERS = (
    ("replication_bytes_in", "replicationbytesin",
     "Record bytes a follower appended from its leaders."),
    ("replication_bytes_out", "replicationbytesout",
     "Record bytes sent to followers."),
)


class TopicStats:
    __slots__ = tuple(attr for attr, _, _ in TOPIC_COUNTERS + BROKER_COUNTERS)

    def __init__(self):
        for attr in self.__slots__:
            setattr(self, attr, 0)


# Counts of a topic this broker does not know go here and nowhere: a client naming
# random topics must not grow `topics` (the broker-wide counts still rise).
_UNKEPT = TopicStats()


class BrokerTopicStats:
    """See the module comment."""

    def __init__(self):
        self.topics: dict[str, TopicStats] = {}
        self.all_topics = TopicStats()
        # Fetches answered in compiled code (KafkaApis._fetch_one), fastlog's own count
        self.compiled_fetch_requests = 0

    def topic_stats(self, topic: str) -> TopicStats:
        s = self.topics.get(topic)
        if s is None:
            s = self.topics[topic] = TopicStats()
        return s

    def remove_topic(self, topic: str) -> None:
        """A deleted topic's counters go (Kafka's removeMetrics); the broker's stay."""
        self.topics.pop(topic, None)

    def produce_done(self, topic: str, records, result):
        """Count one partition's append (`result`: a replica_manager.PartitionResult whose
        offsets span the appended records); returns `result`."""
        err = result.error
        if err == _UNKNOWN:
            s = _UNKEPT
        elif (s := self.topics.get(topic)) is None:   # (topic_stats, spelled out: per request)
            s = self.topic_stats(topic)
        a = self.all_topics
        s.total_produce_requests += 1
        a.total_produce_requests += 1
        if err == _NONE:
            if result.base_offset >= 0:
                n = result.required_offset - result.base_offset
                size = len(records)
                s.messages_in += n
                a.messages_in += n
                s.bytes_in += size
                a.bytes_in += size
        elif err in REJECTED_ERRORS:
            size = len(records) if records is not None else 0
            s.bytes_rejected += size
            a.bytes_rejected += size
        elif err not in PRODUCE_EXPECTED_ERRORS:
            s.failed_produce_requests += 1
            a.failed_produce_requests += 1
        return result

    def fetch_done(self, responses: list, from_follower: bool, quiet: dict | None = None) -> None:
        """Count the partitions of one answered Fetch (the handler's `responses`: topic
        entries whose partition entries carry error_code and records; `quiet`: partitions
        of a fetch session not read because nothing changed, by topic)."""
        a = self.all_topics
        if quiet:
            for topic, n in quiet.items():
                self.topic_stats(topic).total_fetch_requests += n
                a.total_fetch_requests += n
        for t in responses:
            parts = t["partitions"]
            s = None
            for entry in parts:
                err = entry["error_code"]
                if err == Errors.TOPIC_AUTHORIZATION_FAILED:
                    continue  # refused before reaching the partition
                if s is None or s is _UNKEPT:
                    s = (self.topic_stats(t["topic"])
                         if err not in (Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                        Errors.UNKNOWN_TOPIC_ID) else _UNKEPT)
                s.total_fetch_requests += 1
                a.total_fetch_requests += 1
                if err not in FETCH_EXPECTED_ERRORS:
                    s.failed_fetch_requests += 1
                    a.failed_fetch_requests += 1
                records = entry["records"]
                if type(records) is tuple:  # (file regions, size)
                    size = records[1]
                    if from_follower:
                        a.replication_bytes_out += size
                    else:
                        s.bytes_out += size
                        a.bytes_out += size
