"""A failed log dir is taken offline as Kafka's JBOD handling does (a real broker with two
log dirs, one on a tmpfs made read-only while the broker runs, so writes there fail with
EROFS, an I/O error that is not a full disk): the partition there answers
KAFKA_STORAGE_ERROR to produce, fetch and ListOffsets, Metadata reports it offline, the
partition in the other dir is served as before, and a restart with the dir writable
serves both. With its only dir failed, the broker exits with code 1 and one sentence."""

import signal

from confluent_kafka import Producer

from fastlog._codec import scan_batches
from fastlog.protocol import ApiKey, Errors
from fastlog.testing import BrokerProcess
from tests.server.wire import Wire, batch, create_topic, fetch_body, produce
from tests.tmpfs_fixture import read_only, small_tmpfs

OVERRIDES = {"offsets.topic.num.partitions": "1"}
# Every batch after the first starts a new segment: a file created in the dir.
TOPIC_CONFIGS = {"segment.bytes": "100"}


def metadata(w, topic):
    r = w.call(ApiKey.METADATA, 8, {"topics": [{"name": topic}],
                                    "allow_auto_topic_creation": False,
                                    "include_cluster_authorized_operations": False,
                                    "include_topic_authorized_operations": False})
    return {p.partition_index: p for p in r.topics[0].partitions}


def fetch(w, topic, partition, offset=0):
    r = w.call(ApiKey.FETCH, 11, fetch_body(topic, offset, 0, partition=partition))
    p = r.responses[0].partitions[0]
    values = []
    if p.records:
        data = bytes(p.records)
        values = [h.base_offset for h in scan_batches(data, verify_crc=True).batches]
    return p.error_code, values


def fetch_offsets(w, topic, partition):
    """Every batch's base offset, reading from 0 (each segment holds one batch here)."""
    offsets = []
    for _ in range(100):
        err, got = fetch(w, topic, partition, offsets[-1] + 1 if offsets else 0)
        assert err == Errors.NONE, err
        if not got:
            return offsets
        offsets += got
    raise AssertionError(f"more than 100 reads: {offsets}")


def list_latest(w, topic, partition):
    r = w.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
    p = r.topics[0].partitions[0]
    return p.error_code, p.offset


def exit_log(b, expected_code):
    """The broker's log once it exited (within 30 s) with `expected_code`, no traceback."""
    code = b.proc.wait(30)
    text = b.log_path.read_text()
    assert code == expected_code, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    return text


def placement(disk, topic):
    """(partition on the tmpfs, partition in the other dir)."""
    on_disk = [p for p in (0, 1) if (disk / f"{topic}-{p}").is_dir()]
    assert len(on_disk) == 1, on_disk
    return on_disk[0], 1 - on_disk[0]


def test_failed_dir_goes_offline_and_the_other_dir_is_served(tmp_path):
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        good_dir = tmp_path / "data"
        b = BrokerProcess(good_dir, {**OVERRIDES, "log.dirs": f"{good_dir},{disk}"})
        with b:
            create_topic(b, "ldf", partitions=2, configs=TOPIC_CONFIGS)
            failing, healthy = placement(disk, "ldf")
            w = Wire(b)
            try:
                for p in (failing, healthy):
                    assert produce(w, "ldf", batch([b"before"]), partition=p).error_code == 0
                with read_only(disk):
                    r = produce(w, "ldf", batch([b"lost"]), partition=failing)
                    assert r.error_code == Errors.KAFKA_STORAGE_ERROR
                    # offline from now on: every request for it, the connection kept
                    for _ in range(3):
                        r = produce(w, "ldf", batch([b"again"]), partition=failing)
                        assert r.error_code == Errors.KAFKA_STORAGE_ERROR
                    assert fetch(w, "ldf", failing)[0] == Errors.KAFKA_STORAGE_ERROR
                    assert list_latest(w, "ldf", failing)[0] == Errors.KAFKA_STORAGE_ERROR
                    md = metadata(w, "ldf")
                    assert md[failing].error_code == Errors.KAFKA_STORAGE_ERROR
                    assert md[failing].leader_id == -1
                    assert list(md[failing].offline_replicas) == [0]
                    assert md[healthy].error_code == Errors.NONE
                    assert md[healthy].leader_id == 0 and not md[healthy].offline_replicas
                    # DescribeLogDirs: the failed dir answers KAFKA_STORAGE_ERROR
                    ld = w.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
                    codes = {r.log_dir: r.error_code for r in ld.results}
                    assert codes == {str(disk): Errors.KAFKA_STORAGE_ERROR,
                                     str(good_dir): Errors.NONE}
                    # The other dir: produce (a real client, too) and consume as before.
                    for _ in range(3):
                        assert produce(w, "ldf", batch([b"ok"]), partition=healthy).error_code == 0
                    delivered = []
                    prod = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
                    prod.produce("ldf", b"client", partition=healthy,
                                 on_delivery=lambda err, m: delivered.append(err))
                    assert prod.flush(15) == 0 and delivered == [None]
                    assert fetch_offsets(w, "ldf", healthy) == [0, 1, 2, 3, 4]
                    assert list_latest(w, "ldf", healthy) == (Errors.NONE, 5)
                    b.proc.send_signal(signal.SIGTERM)
                    text = exit_log(b, 0)
            finally:
                w.close()
            failed_lines = [ln for ln in text.splitlines() if "log dir failed" in ln]
            assert len(failed_lines) == 1 and str(disk) in failed_lines[0], text[-3000:]
            # Writable again: a restart serves both dirs, the failed one's data kept.
            b.start()
            w = Wire(b)
            try:
                for p in (failing, healthy):
                    assert produce(w, "ldf", batch([b"after"]), partition=p).error_code == 0
                assert fetch_offsets(w, "ldf", failing) == [0, 1]
                assert fetch_offsets(w, "ldf", healthy) == [0, 1, 2, 3, 4, 5]
                md = metadata(w, "ldf")
                assert all(md[p].error_code == 0 and not md[p].offline_replicas for p in md)
            finally:
                w.close()


def test_broker_exits_when_its_only_dir_fails(tmp_path):
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        b = BrokerProcess(disk, OVERRIDES)
        with b:
            create_topic(b, "only", configs=TOPIC_CONFIGS)
            w = Wire(b)
            try:
                assert produce(w, "only", batch([b"one"])).error_code == 0
                with read_only(disk):
                    r = produce(w, "only", batch([b"two"]))
                    assert r.error_code == Errors.KAFKA_STORAGE_ERROR
                    text = exit_log(b, 1)
            finally:
                w.close()
            assert text.count("every log dir has failed") == 1, text[-3000:]
            assert "stopped cleanly" not in text
