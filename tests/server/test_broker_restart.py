"""Restarts: SIGTERM is a clean shutdown and data, topics, configs and producer state come
back; kill -9 in the middle of a produce loop loses no acknowledged record and the next
start recovers without help."""

import json
import signal
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from fastlog.protocol import ApiKey, Errors
from tests.server.wire import Wire, batch, create_partitions, create_topic, init_pid, produce


def create(bootstrap, name, partitions=1, config=None):
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(15)


def read_all(bootstrap, topic, partitions, timeout=30.0):
    """Every record of the topic, from the beginning to the end offsets at call time."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-check",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
                len(out[p]) < ends[p] for p in range(partitions)):
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out[m.partition()].append((m.offset(), m.value()))
        return out, ends
    finally:
        c.close()


def test_sigterm_keeps_everything(broker_factory):
    b = broker_factory({"num.partitions": "2"})
    create(b.bootstrap, "rs-clean", 2, {"retention.ms": "86400000"})
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    for i in range(100):
        p.produce("rs-clean", value=b"%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    w = Wire(b)
    pid, epoch = init_pid(w)
    first = batch([b"idem"], producer_id=pid, epoch=epoch, seq=0)
    r1 = produce(w, "rs-clean", first)
    w.close()
    assert b.stop() == 0
    assert (b.data_dir / ".kafka_cleanshutdown").exists()
    b.start()
    assert "recovered after an unclean shutdown" not in b.log_path.read_text()
    out, ends = read_all(b.bootstrap, "rs-clean", 2)
    assert ends == {0: 51, 1: 50}
    assert [v for _, v in out[1]] == [b"%d" % i for i in range(1, 100, 2)]
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource("topic", "rs-clean")
    assert a.describe_configs([res])[res].result(10)["retention.ms"].value == "86400000"
    # producer state survived: the retried batch is recognised as a duplicate
    w = Wire(b)
    dup = produce(w, "rs-clean", first)
    assert dup.error_code == Errors.NONE and dup.base_offset == r1.base_offset
    assert init_pid(w)[0] != pid  # producer ids are never handed out twice
    w.close()


def test_kill_9_during_produce_loses_no_acked_record(broker_factory):
    b = broker_factory()
    create(b.bootstrap, "rs-crash", 1)
    acked: list[int] = []
    failed: list[int] = []
    stop = threading.Event()

    def on_delivery(err, msg):
        (failed if err else acked).append(int(msg.value()))

    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 1, "message.timeout.ms": 5000, "retry.backoff.ms": 50})

    def loop():
        i = 0
        while not stop.is_set() and i < 200_000:
            try:
                p.produce("rs-crash", value=b"%d" % i, partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)

    t = threading.Thread(target=loop)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.01)
    b.kill()  # SIGKILL in the middle of the loop
    stop.set()
    t.join(30)
    p.flush(8)  # remaining deliveries time out (indeterminate), the broker is down
    snapshot = list(acked)
    assert len(snapshot) >= 1000, "the producer barely ran before the kill"
    b.start()  # recovers on its own
    assert "recovered after an unclean shutdown" in b.log_path.read_text()
    out, ends = read_all(b.bootstrap, "rs-crash", 1)
    values = [int(v) for _, v in out[0]]
    assert set(snapshot) <= set(values), f"lost {len(set(snapshot) - set(values))} acked records"
    assert len(values) == len(set(values)), "duplicates despite idempotence"
    assert values == sorted(values), "order changed"
    assert [o for o, _ in out[0]] == list(range(len(values)))
    # the restarted broker takes new writes at the recovered end
    w = Wire(b)
    r = w.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "rs-crash", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert r.topics[0].partitions[0].offset == len(values)
    w.close()


def test_producer_state_is_rebuilt_from_the_log_after_kill_9(broker_factory):
    b = broker_factory()
    w = Wire(b)
    create_topic(b, "rs-idem")
    pid, epoch = init_pid(w)
    offsets = []
    sent = []
    for seq in range(0, 10, 2):
        bt = batch([b"a", b"b"], producer_id=pid, epoch=epoch, seq=seq)
        sent.append(bt)
        r = produce(w, "rs-idem", bt)
        assert r.error_code == 0
        offsets.append(r.base_offset)
    w.close()
    b.kill()  # no snapshot was written: the state must come from the log itself
    b.start()
    w = Wire(b)
    try:
        # the last batch retried after the crash is a duplicate with its original offset
        dup = produce(w, "rs-idem", sent[-1])
        assert dup.error_code == 0 and dup.base_offset == offsets[-1]
        # the sequence continues where it was
        nxt = produce(w, "rs-idem", batch([b"c"], producer_id=pid, epoch=epoch, seq=10))
        assert nxt.error_code == 0 and nxt.base_offset == offsets[-1] + 2
        gap = produce(w, "rs-idem", batch([b"d"], producer_id=pid, epoch=epoch, seq=20))
        assert gap.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    finally:
        w.close()


def test_sigint_is_a_clean_shutdown_too(broker_factory):
    b = broker_factory()
    b.proc.send_signal(signal.SIGINT)
    assert b.proc.wait(20) == 0
    assert (b.data_dir / ".kafka_cleanshutdown").exists()


def test_log_of_no_topic_is_kept_as_stray(broker_factory):
    # A log that no topic in the metadata claims (a deletion interrupted by a crash, a
    # metadata file restored from an older copy) is set aside as a `-stray` dir with its
    # data, never deleted.
    b = broker_factory()
    create(b.bootstrap, "rs-lost", 1)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce("rs-lost", value=b"%d" % i)
    assert p.flush(30) == 0
    assert b.stop() == 0
    md = b.data_dir / "fastlog-metadata.json"
    doc = json.loads(md.read_text())
    del doc["topics"]["rs-lost"]
    md.write_text(json.dumps(doc))
    b.start()
    assert "log rs-lost-0 belongs to no topic in the metadata: kept as" in b.log_path.read_text()
    kept = [d for d in b.data_dir.iterdir() if d.name.startswith("rs-lost-0.")]
    assert len(kept) == 1 and kept[0].name.endswith("-stray")
    assert sum(f.stat().st_size for f in kept[0].glob("*.log")) > 0
    assert b.stop() == 0
    b.start()  # kept across restarts too
    assert kept[0].is_dir()


def _open_files(pid):
    import os

    return len(os.listdir(f"/proc/{pid}/fd"))


def test_many_partitions_restart_within_a_small_open_file_limit(tmp_path):
    """600 partitions under a limit of 2,000 open files (1,024 of them kept spare): each
    partition holds one descriptor (indexes are mappings), so they are created, written
    past their first index entries, and served again after SIGTERM and after SIGKILL,
    with the data of every partition, loaded on two recovery threads."""
    from fastlog.testing import BrokerProcess

    n = 600
    with BrokerProcess(tmp_path / "data", overrides={
            "num.recovery.threads.per.data.dir": "2", "log.index.interval.bytes": "100"},
            limits={"nofile": "2000:2000"}, startup_timeout=120) as b:
        create_topic(b, "many", n)
        w = Wire(b)
        try:
            for p in range(n):
                for _ in range(2):  # two batches: the second adds index entries
                    assert produce(w, "many", batch([b"x" * 200]), acks=1,
                                   partition=p).error_code == 0
        finally:
            w.close()
        assert _open_files(b.proc.pid) < 2000 - 1024
        expected = [2] * n
        for restart in (b.restart, lambda: (b.kill(), b.start())):
            restart()
            w = Wire(b)
            try:
                r = w.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [{
                    "name": "many", "partitions": [{"partition_index": p, "timestamp": -1}
                                                   for p in range(n)]}]})
                assert all(p.error_code == 0 for p in r.topics[0].partitions)
                assert [p.offset for p in r.topics[0].partitions] == expected
                assert produce(w, "many", batch([b"after"]), acks=1,
                               partition=n - 1).error_code == 0
                expected[n - 1] += 1
            finally:
                w.close()
            assert _open_files(b.proc.pid) < 2000 - 1024


def test_partitions_created_are_all_there_after_sigkill(tmp_path):
    """SIGKILL right after CreateTopics and CreatePartitions answered: after the restart
    every partition of both is served (empty, writable), each with its directory, first
    segment and leader-epoch-checkpoint, and none was set aside as a stray."""
    import os

    from fastlog.testing import BrokerProcess

    data = tmp_path / "data"
    with BrokerProcess(data, startup_timeout=120) as b:
        w = Wire(b)
        try:
            r = w.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{
                "name": "fresh", "num_partitions": 300, "replication_factor": 1,
                "assignments": [], "configs": []}], "timeout_ms": 30000,
                "validate_only": False})
            assert r.topics[0].error_code == Errors.NONE
            assert create_partitions(w, "fresh", 400).error_code == Errors.NONE
        finally:
            w.close()
        b.kill()
        for p in (0, 299, 300, 399):
            assert sorted(os.listdir(data / f"fresh-{p}")) == [
                "00000000000000000000.log", "leader-epoch-checkpoint"]
            assert (data / f"fresh-{p}" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
        b.start()
        assert not [n for n in os.listdir(data) if n.endswith("-stray")]
        w = Wire(b)
        try:
            r = w.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [{
                "name": "fresh", "partitions": [{"partition_index": p, "timestamp": -1}
                                                for p in range(400)]}]})
            assert [(p.error_code, p.offset) for p in r.topics[0].partitions] == [(0, 0)] * 400
            for p in (0, 399):
                assert produce(w, "fresh", batch([b"v"]), acks=1, partition=p).error_code == 0
        finally:
            w.close()
