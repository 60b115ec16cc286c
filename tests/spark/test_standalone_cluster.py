"""The fastlog source on a real Spark standalone cluster: a master and two workers, each a
separate JVM from PySpark's own distribution (tests/spark/standalone.py), and a driver in
its own process (tests/spark/cluster_app.py). Partitions are read, and written by the
fastlog sink, in the executors' Python workers, which import fastlog from this tree; a
streaming query into a parquet
sink with a checkpoint keeps running when one worker (JVM, executor and Python workers)
is SIGKILLed, and the sink then holds every record exactly once.

One cluster and one driver serve both checks (starting them is most of the ~60 s)."""

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce
from tests.spark.standalone import ROOT, SparkStandalone

pytestmark = [pytest.mark.slow, pytest.mark.spark_cluster]

APP = Path(__file__).with_name("cluster_app.py")


class Driver:
    """The driver process: JSON lines out, commands in; every read is bounded."""

    def __init__(self, args, env, log_path):
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, str(APP), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env,
                                     cwd=log_path.parent)
        self.log_path = log_path
        self._buf = b""

    def next_event(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                if line.startswith(b"{"):
                    return json.loads(line)
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
                raise AssertionError(f"no event from the driver within {timeout:.0f} s "
                                     f"(exit {self.proc.poll()}):\n{tail}")
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if ready:
                self._buf += os.read(self.proc.stdout.fileno(), 65536)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.log.close()


def consume_values(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    """Every value of the topic, read with confluent-kafka (stops after 5 idle polls)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values, idle = [], 0
    deadline = time.monotonic() + 60
    while idle < 5 and len(values) < expect and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            idle += 1
            continue
        assert msg.error() is None, msg.error()
        values.append(msg.value())
    consumer.close()
    return values


def test_stream_on_standalone_cluster_survives_losing_a_worker(broker, tmp_path):
    topic, copy = "standalone-events", "standalone-copy"
    create_topic(broker.bootstrap, topic, 4)
    create_topic(broker.bootstrap, copy, 2)
    first = [(b"k%d" % i, b"v%05d" % i) for i in range(2000)]
    produce(broker.bootstrap, topic, first)

    cluster = SparkStandalone(tmp_path / "spark", workers=2)
    driver = None
    try:
        cluster.start(wait_workers=False)
        env = dict(cluster.env(), PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        driver = Driver([cluster.url, broker.bootstrap, topic, copy, str(tmp_path), "2"],
                        env, tmp_path / "driver.log")
        cluster.wait_workers()

        batch = driver.next_event(240)
        assert batch["event"] == "batch"
        # both executors (separate processes from the driver) ran read and write tasks
        assert len(batch["executors"]) == 2 and all(batch["executors"].values()), batch
        assert sorted(consume_values(broker.bootstrap, copy, 2000)) == [v for _, v in first]

        assert driver.next_event(180)["event"] == "streaming"
        cluster.kill_worker(0)
        second = [(b"k%d" % i, b"v%05d" % i) for i in range(2000, 3000)]
        produce(broker.bootstrap, topic, second)
        driver.send("drain")

        done = driver.next_event(240)
        assert done["event"] == "done"
        values = done["values"]
        expected = [v.decode() for _, v in first + second]
        assert len(values) == len(expected), "lost or duplicated records"
        assert sorted(values) == sorted(expected)
        assert done["batches"] > 2
    finally:
        if driver is not None:
            driver.close()
        cluster.stop()
