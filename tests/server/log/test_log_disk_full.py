"""A full disk is recoverable through Kafka's API (a real broker on a 20 MiB tmpfs):
writes are refused with KAFKA_STORAGE_ERROR, DeleteTopics, DeleteRecords, retention and
topic config changes still work and free space, produce works again afterwards, and
SIGTERM while full is a clean exit (code 0, no traceback)."""

import signal
import time

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from fastlog.protocol import Errors
from fastlog.server.log import CLEAN_SHUTDOWN_FILE
from fastlog.server.log.log_manager import SPACE_RESERVE_FILE
from fastlog.testing import BrokerProcess
from tests.server.wire import Wire, batch, produce
from tests.tmpfs_fixture import small_tmpfs

OVERRIDES = {
    "offsets.topic.num.partitions": "1",
    "log.segment.bytes": str(1 << 20),
    "log.segment.delete.delay.ms": "0",
    "log.retention.check.interval.ms": "200",
}
VALUE = b"x" * (60 * 1024)


def fill_until_refused(b, topic, limit=1000):
    """Produce 60 KiB batches until the broker refuses one, then smaller ones down to a
    few bytes, so that no page is left; the error code of the first refusal."""
    w = Wire(b)
    first = None
    try:
        for size in (len(VALUE), 4096, 512, 16):
            for _ in range(limit):
                r = produce(w, topic, batch([VALUE[:size]]), acks=1)
                if r.error_code != Errors.NONE:
                    first = r.error_code if first is None else first
                    break
            else:
                raise AssertionError(f"{limit} batches of {size} bytes fit a 20 MiB disk")
        return first
    finally:
        w.close()


def produces_ok(b, topic):
    """A 60 KiB batch is taken (on a full disk less than that is left)."""
    w = Wire(b)
    try:
        return produce(w, topic, batch([VALUE]), acks=1).error_code == Errors.NONE
    finally:
        w.close()


def create(admin, name, config=None):
    admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(15)


def test_full_disk_delete_topics_frees_space_and_sigterm_is_clean(tmp_path):
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        # (the data dir is the mount itself: the broker's own log file stays outside)
        b = BrokerProcess(disk, OVERRIDES)
        with b:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            create(admin, "filler")
            create(admin, "other")
            assert fill_until_refused(b, "filler") == Errors.KAFKA_STORAGE_ERROR
            assert not produces_ok(b, "other")
            # Topic config changes and DeleteRecords still answer on a full disk.
            res = ConfigResource("topic", "filler")
            res.set_config("retention.ms", "86400000")
            admin.alter_configs([res])[res].result(15)
            deleted = admin.delete_records([TopicPartition("filler", 0, 5)])
            assert deleted[TopicPartition("filler", 0, 5)].result(15).low_watermark == 5
            assert "released the 1048576-byte space reserve" in b.log_path.read_text()
            # DeleteTopics frees the space: produce works again, and a retention pass
            # allocates the space reserve again.
            admin.delete_topics(["filler"])["filler"].result(15)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not (
                    (disk / SPACE_RESERVE_FILE).exists() and produces_ok(b, "other")):
                time.sleep(0.2)
            assert produces_ok(b, "other")
            assert (disk / SPACE_RESERVE_FILE).exists()
            # Full again, then SIGTERM: a clean exit, one line per failed write.
            create(admin, "filler2")
            assert fill_until_refused(b, "filler2") == Errors.KAFKA_STORAGE_ERROR
            b.proc.send_signal(signal.SIGTERM)
            code = b.proc.wait(30)
            text = b.log_path.read_text()
            assert code == 0, text[-3000:]
            assert "Traceback" not in text, text[-3000:]
            # The checkpoints at shutdown used the reserve: a clean shutdown, and a
            # refused append left nothing behind for the next start to cut.
            assert (disk / CLEAN_SHUTDOWN_FILE).exists()
            b.start()
            assert "recovery removed" not in b.log_path.read_text()
            assert fill_until_refused(b, "filler2") == Errors.KAFKA_STORAGE_ERROR
