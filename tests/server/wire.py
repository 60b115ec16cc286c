"""Raw Kafka-protocol helpers for the broker tests: one framed connection (Wire, from
fastlog.testing), batch building, and the few requests many tests send (create topic,
create partitions, produce, fetch body, InitProducerId, a health check, the transaction
markers of a partition), and HandlerConnection for tests that feed frames to a broker's
request handler in process."""

import time

from fastlog import _codec
from fastlog.protocol import ApiKey, Errors
from fastlog.testing import Wire  # noqa: F401 - the tests' raw connection, re-exported


def create_topic(broker, name, partitions=1, configs=None):
    w = Wire(broker)
    try:
        resp = w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1,
            "assignments": [], "configs": [{"name": k, "value": v}
                                           for k, v in (configs or {}).items()]}],
            "timeout_ms": 10000, "validate_only": False})
        assert resp.topics[0].error_code in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS)
    finally:
        w.close()


def create_partitions(w, name, count):
    """CreatePartitions v1 growing topic `name` to `count` partitions; its one result."""
    r = w.call(ApiKey.CREATE_PARTITIONS, 1, {"topics": [
        {"name": name, "count": count, "assignments": None}],
        "timeout_ms": 30000, "validate_only": False})
    return r.results[0]


def batch(values, compression=0, producer_id=-1, epoch=-1, seq=-1, **kw):
    now = int(time.time() * 1000)
    return _codec.build_batch([(now, None, v) for v in values], compression=compression,
                              producer_id=producer_id, producer_epoch=epoch,
                              base_sequence=seq, **kw)


def produce(w, topic, records, version=7, acks=-1, partition=0, transactional_id=None):
    resp = w.call(ApiKey.PRODUCE, version, {
        "transactional_id": transactional_id, "acks": acks, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                          "records": records}]}]})
    return resp.responses[0].partition_responses[0]


def txn_batch(values, pid, epoch, seq):
    """A transactional batch of the producer (its sequence starting at seq)."""
    return batch(values, producer_id=pid, epoch=epoch, seq=seq, is_transactional=True)


def list_offset(w, topic, isolation, timestamp=-1, partition=0):
    """ListOffsets v2 of one partition: read_committed (isolation 1) answers the LSO."""
    r = w.call(ApiKey.LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": isolation,
                                        "topics": [{"name": topic, "partitions": [
                                            {"partition_index": partition,
                                             "timestamp": timestamp}]}]})
    return r.topics[0].partitions[0].offset


def healthy(broker):
    """A fresh connection still gets ApiVersions and Metadata answered."""
    w = Wire(broker)
    try:
        assert w.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
        assert w.call(ApiKey.METADATA, 1, {"topics": []}).controller_id == 0
        return True
    finally:
        w.close()


def init_pid(w):
    r = w.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                            "transaction_timeout_ms": 60000})
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def fetch_body(topic, offset, max_wait_ms, min_bytes=1, partition=0):
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": 1, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def topic_id(w, topic) -> bytes:
    """The 16-byte id of `topic` (Metadata v12), for Fetch v13+ which names topics by id."""
    r = w.call(ApiKey.METADATA, 12, {"topics": [{"name": topic}],
                                     "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
    assert r.topics[0].error_code == 0
    return bytes(r.topics[0].topic_id)


def markers(w, topic, partition=0):
    """"COMMIT" / "ABORT" for each transaction marker of the partition, in log order
    (a read_uncommitted fetch from offset 0 on this connection's broker)."""
    body = fetch_body(topic, 0, 0, min_bytes=0, partition=partition)
    body["isolation_level"] = 0
    part = w.call(ApiKey.FETCH, 11, body).responses[0].partitions[0]
    assert part.error_code == Errors.NONE, part.error_code
    recs = _codec.read_records(bytes(part.records or b""), include_control=True)
    return ["COMMIT" if _codec.parse_control_record(r)[1] == 1 else "ABORT"
            for r in recs if r.key is not None and len(r.key) == 4
            and r.value is not None and len(r.value) == 6]


class HandlerConnection:
    """What KafkaApis.handle reads of a socket server connection, for a broker in the
    test's process fed request frames directly."""

    def __init__(self):
        self.state = {"listener": "PLAINTEXT"}
        self.peer = ("127.0.0.1", 1)
