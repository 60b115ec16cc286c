"""Every start checks the tail of each active segment, clean shutdown or not: a file cut
while the broker was down loses only its torn batch, and records produced afterwards land
at offsets consumers read (a real broker, a real client, real files)."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fastlog.testing import BrokerProcess


def produce_each(bootstrap, topic, values):
    """One request (one batch) per value; the acknowledged (offset, value)s."""
    acked = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})

    def done(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.value()))

    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=done)
        assert p.flush(15) == 0
    return acked


def consume_all(bootstrap, topic, timeout=30.0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail-check",
                  "enable.auto.commit": False, "check.crcs": True})
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (not out or out[-1][0] < end - 1):
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append((m.offset(), m.value()))
        return out, end
    finally:
        c.close()


def test_cut_tail_after_clean_shutdown_is_truncated_at_start(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"offsets.topic.num.partitions": "1"})
    with b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("tail", 1, 1)])["tail"].result(15)
        before = produce_each(b.bootstrap, "tail", [b"old-%d" % i for i in range(10)])
        assert [o for o, _ in before] == list(range(10))
        assert b.stop() == 0
        seg = b.data_dir / "tail-0" / "00000000000000000000.log"
        size = seg.stat().st_size
        with open(seg, "r+b") as f:
            f.truncate(size - 7)
        b.start()
        text = b.log_path.read_text()
        assert "recovery removed" in text and "from offset 9" in text, b.log_tail()
        assert "recovered after a clean shutdown" in text
        after = produce_each(b.bootstrap, "tail", [b"new-%d" % i for i in range(10)])
        # The torn batch (offset 9) is gone: the log ends at 9 and new records follow it.
        assert [o for o, _ in after] == list(range(9, 19))
        out, end = consume_all(b.bootstrap, "tail")
        assert end == 19
        assert out == before[:9] + after
