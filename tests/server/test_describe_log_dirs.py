"""DescribeLogDirs (API 35, v1-v4) and AlterReplicaLogDirs (34, v1-v2) through
kafka-python's admin client and on the wire: a broker with two log dirs lists both, each
with the partitions it holds, their size on disk, offset lag 0 and is_future_key false,
and (v4) the file system's total and usable bytes; asked for some partitions, only those
are listed. A partition moved to the other dir while a producer writes to it keeps every
record and its offsets, is served from there, and stays there after a restart; a move a
restart interrupts goes on from where its copy had got to (Kafka's `-future` log)."""

from __future__ import annotations

import os
import shutil
import threading

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, TopicPartitionReplica
from kafka.errors import LogDirNotFoundError, ReplicaNotAvailableError

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import wait_until
from tests.server.test_confluent_kafka import consume, create, produce
from tests.server.wire import Wire


def test_describe_log_dirs_lists_each_dir_and_its_partitions(broker_factory, tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    b = broker_factory({"log.dirs": ",".join(dirs)})
    create(b, "ld", partitions=4)
    produce(b, "ld", [b"x" * 100] * 10, partition=1)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    results = {r["log_dir"]: r for r in answer["log_dirs"]}
    assert sorted(results) == sorted(os.path.abspath(d) for d in dirs)
    held = {}
    for d, r in results.items():
        assert r["error_code"] == 0
        assert r["total_bytes"] > 0 and 0 <= r["usable_bytes"] <= r["total_bytes"]
        for t in r["topics"]:
            for p in t["partitions"]:
                assert p["offset_lag"] == 0 and p["is_future_key"] is False
                if t["name"] == "ld":
                    held[p["partition_index"]] = (d, p["partition_size"])
    assert sorted(held) == [0, 1, 2, 3]
    assert {d for d, _ in held.values()} == set(results)  # spread over both dirs
    assert held[1][1] > 1000 and held[0][1] == 0
    assert os.path.isdir(os.path.join(held[1][0], "ld-1"))

    w = Wire(b)
    try:
        r = w.call(ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": [{"topic": "ld", "partitions": [1]}]})
        listed = [(res.log_dir, t.name, p.partition_index)
                  for res in r.results for t in res.topics for p in t.partitions]
        assert listed == [(held[1][0], "ld", 1)]
        assert {res.error_code for res in r.results} == {Errors.NONE}
    finally:
        w.close()


def _partition_dirs(b, topic):
    """{partition: (log dir, is_future_key)} from DescribeLogDirs v4."""
    w = Wire(b)
    try:
        r = w.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    finally:
        w.close()
    return {(p.partition_index, p.is_future_key): res.log_dir
            for res in r.results for t in res.topics if t.name == topic for p in t.partitions}


def _partition_to_move(broker_factory, tmp_path, count: int):
    """A broker with two log dirs and small segments (a move copies many of them), topic
    "mv" of one partition holding the first half of `count` records; (broker, the
    records, the partition's dir, the other dir)."""
    dirs = [os.path.abspath(tmp_path / "d1"), os.path.abspath(tmp_path / "d2")]
    b = broker_factory({"log.dirs": ",".join(dirs), "log.segment.bytes": "20000"})
    create(b, "mv", partitions=1)
    values = [b"v%05d-" % i + b"x" * 200 for i in range(count)]
    produce(b, "mv", values[:count // 2])
    (source,) = _partition_dirs(b, "mv").values()
    return b, values, source, next(d for d in dirs if d != source)


def test_alter_replica_log_dirs_moves_a_partition_while_it_serves(broker_factory, tmp_path):
    b, values, source, dest = _partition_to_move(broker_factory, tmp_path, 1000)
    # a producer keeps writing while the partition moves
    stop = threading.Event()
    sent = []

    def keep_producing():
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
        for v in values[500:]:
            if stop.is_set():
                break
            p.produce("mv", v, partition=0, on_delivery=lambda e, m: sent.append(e))
            p.poll(0)
        p.flush(30)

    t = threading.Thread(target=keep_producing)
    t.start()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        got = admin.alter_replica_log_dirs({
            TopicPartitionReplica("mv", 0, 0): dest,
            TopicPartitionReplica("mv", 5, 0): dest,
            TopicPartitionReplica("nope", 0, 0): dest})
        codes = {(k.topic, k.partition): v for k, v in got.items()}
        assert codes[("mv", 0)].errno == 0
        assert codes[("mv", 5)] is ReplicaNotAvailableError
        assert codes[("nope", 0)] is ReplicaNotAvailableError
        got = admin.alter_replica_log_dirs({TopicPartitionReplica("mv", 0, 0): "/no/such/dir"})
        assert list(got.values()) == [LogDirNotFoundError]
    finally:
        t.join(60)
        stop.set()
        admin.close()
    assert sent and all(e is None for e in sent)
    wait_until(lambda: _partition_dirs(b, "mv") == {(0, False): dest}, 30,
               what="the partition served from the other dir")
    assert not os.path.isdir(os.path.join(source, "mv-0"))
    got = consume(b, "mv", 0, 0, 500 + len(sent))
    assert [v for _, _, v in got] == values[:500 + len(sent)]
    assert [o for o, _, _ in got] == list(range(500 + len(sent)))
    produce(b, "mv", [b"after"])
    b.restart()
    assert _partition_dirs(b, "mv") == {(0, False): dest}
    got = consume(b, "mv", 0, 0, 501 + len(sent))
    assert got[-1][2] == b"after" and len(got) == 501 + len(sent)


def test_a_moved_partition_keeps_its_log_start(broker_factory, tmp_path):
    dirs = [os.path.abspath(tmp_path / "d1"), os.path.abspath(tmp_path / "d2")]
    b = broker_factory({"log.dirs": ",".join(dirs)})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for name, deleted in (("mv-some", 4), ("mv-all", 10)):
        create(b, name)
        produce(b, name, [b"x"] * 10)
        fut = admin.delete_records([TopicPartition(name, 0, deleted)])
        list(fut.values())[0].result(15)
        (source,) = _partition_dirs(b, name).values()
        dest = next(d for d in dirs if d != source)
        kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            got = kp.alter_replica_log_dirs({TopicPartitionReplica(name, 0, 0): dest})
            assert [e.errno for e in got.values()] == [0]
        finally:
            kp.close()
        wait_until(lambda name=name, dest=dest: _partition_dirs(b, name) == {(0, False): dest},
                   30, what=f"{name} in the other dir")
        w = Wire(b)
        try:
            offsets = {}
            for ts in (-2, -1):
                r = w.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
                    {"name": name, "partitions": [{"partition_index": 0, "timestamp": ts}]}]})
                offsets[ts] = r.topics[0].partitions[0].offset
        finally:
            w.close()
        assert offsets == {-2: deleted, -1: 10}
        assert produce(b, name, [b"next"]) == [10]


def test_a_move_interrupted_by_a_restart_goes_on(broker_factory, tmp_path):
    b, values, source, dest = _partition_to_move(broker_factory, tmp_path, 600)
    # What a move stopped by a crash half way leaves: the destination's future log holding
    # the first 300 records while the current log went on to 600.
    b.stop()
    copied = os.path.join(tmp_path, "copied")
    shutil.copytree(os.path.join(source, "mv-0"), copied)
    b.start()
    produce(b, "mv", values[300:])
    b.stop()
    shutil.move(copied, os.path.join(dest, "mv-0.0123456789abcdef-future"))
    b.start()
    wait_until(lambda: _partition_dirs(b, "mv") == {(0, False): dest}, 30,
               what="the resumed move completed")
    assert "resuming the move" in b.log_tail(400)
    assert not os.path.isdir(os.path.join(source, "mv-0"))
    assert [n for n in os.listdir(dest) if n.endswith("-future")] == []
    got = consume(b, "mv", 0, 0, 600)
    assert [v for _, _, v in got] == values
    assert [o for o, _, _ in got] == list(range(600))
    assert produce(b, "mv", [b"after"]) == [600]
