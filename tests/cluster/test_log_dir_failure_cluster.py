"""A failed log dir in a cluster (two real brokers, one real ZooKeeper): the broker tells
the controller (Kafka's /log_dir_event_notification, with its offline replicas under
/fastlog/offline_replicas/<id>), and the controller moves leadership of the replicas in
that dir to another in-sync replica and drops them from the ISR; partitions in the
broker's other dir keep their leader. The dir fails for real: a tmpfs made read-only while
the broker runs, so creating a segment there fails with EROFS."""

import pytest

from fastlog.protocol import Errors
from fastlog.testing import make_chroot, wait_until
from tests.cluster.harness import ClusterHarness
from tests.server.wire import Wire, batch, produce
from tests.tmpfs_fixture import read_only, small_tmpfs

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC = "jbod"
PARTITIONS = 4


def test_leadership_moves_off_a_failed_log_dir(zk_server, tmp_path):
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        c = ClusterHarness(tmp_path, make_chroot(zk_server.hosts), ids=(1, 2))
        b2 = c.brokers[2]
        b2.overrides["log.dirs"] = f"{b2.data_dir},{disk}"
        c.start()
        try:
            admin = AdminClient({"bootstrap.servers": c.bootstrap})
            # Broker 2 leads every partition; a segment of 100 bytes makes each append
            # after the first create a file, which is what fails on the read-only dir.
            admin.create_topics([NewTopic(TOPIC, PARTITIONS,
                                          replica_assignment=[[2, 1]] * PARTITIONS,
                                          config={"segment.bytes": "100"})],
                                operation_timeout=10)[TOPIC].result(15)
            assert c.wait_leaders(TOPIC, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 2)
            wait_until(lambda: all(sorted(c.state(TOPIC, p)["isr"]) == [1, 2]
                                   for p in range(PARTITIONS)), 15, what="full ISRs")
            on_disk = [p for p in range(PARTITIONS) if (disk / f"{TOPIC}-{p}").is_dir()]
            elsewhere = [p for p in range(PARTITIONS) if p not in on_disk]
            assert on_disk and elsewhere, on_disk
            w2 = Wire(b2)
            try:
                for p in range(PARTITIONS):   # one batch each: the next append rolls
                    assert produce(w2, TOPIC, batch([b"x" * 200]), acks=1,
                                   partition=p).error_code == Errors.NONE
                with read_only(disk):
                    bad = on_disk[0]
                    r = produce(w2, TOPIC, batch([b"y" * 200]), acks=1, partition=bad)
                    assert r.error_code == Errors.KAFKA_STORAGE_ERROR
                    # The controller hears of it and moves leadership to broker 1.
                    wait_until(lambda: c.state(TOPIC, bad)["leader"] == 1, 15,
                               what="broker 1 leading the partition of the failed dir")
                    assert c.state(TOPIC, bad)["isr"] == [1]
                    for p in on_disk:
                        wait_until(lambda p=p: c.state(TOPIC, p)["leader"] == 1, 15,
                                   what=f"partition {p} moved off the failed dir")
                    for p in elsewhere:   # the other dir's partitions keep their leader
                        assert c.state(TOPIC, p)["leader"] == 2
                        assert produce(w2, TOPIC, batch([b"z" * 200]), acks=1,
                                       partition=p).error_code == Errors.NONE
                    w1 = Wire(c.brokers[1])
                    try:
                        assert produce(w1, TOPIC, batch([b"after"]), acks=1,
                                       partition=bad).error_code == Errors.NONE
                    finally:
                        w1.close()
                    assert not c.zk.get_children("/log_dir_event_notification")
            finally:
                w2.close()
            text = b2.log_path.read_text(errors="replace")
            assert "Traceback" not in text, text[-3000:]
        finally:
            c.close()
