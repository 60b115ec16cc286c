"""Shared fixtures of the Spark tests: ONE local[2] SparkSession and ONE broker per run.

Starting Spark costs ~10 s and each query's Python workers a few more, so the whole
folder shares a session (tests use their own topics and checkpoint folders). Workers must
run this venv's interpreter (PYSPARK_PYTHON), or they would not find pyarrow / fastlog.

With FASTLOG_SPARK_TESTS_JAR=1 the session also loads the JVM reader's jar (it must be
built), so every test runs with format "fastlog" routed as users with the jar get it:
simple batch reads by the JVM reader, the rest handed to the Python source.
"""

import os
import sys
import time

import pytest

from fastlog.testing import BrokerProcess

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data",
                      overrides={"num.partitions": "2", "log.retention.check.interval.ms": "200"})
    b.start()
    yield b
    if b.alive():
        b.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from fastlog.spark import register

    builder = SparkSession.builder
    if os.environ.get("FASTLOG_SPARK_TESTS_JAR") == "1":
        from fastlog.spark import jar_path
        builder = builder.config("spark.jars", jar_path())
    session = (builder.master("local[2]").appName("fastlog-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.stopTimeout", "20s")
               .config("spark.driver.memory", "1g")
               # the machine may be busy: give Python workers time to connect back
               .config("spark.python.authenticate.socketTimeout", "120s")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def produce(bootstrap, topic, records, partition=None):
    """Produce (key, value) pairs with confluent-kafka (a real Kafka client) and flush."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                  "compression.type": "lz4"})
    for key, value in records:
        kw = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, value=value, key=key, **kw)
                break
            except BufferError:
                p.poll(0.1)
    left = p.flush(30)
    assert left == 0, f"{left} records not delivered"


def create_topic(bootstrap, topic, partitions=2, configs=None):
    from fastlog.client import SyncAdmin

    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1, configs or {})


def wait_until(cond, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def worker_start_failed(exc) -> bool:
    """Spark gives the query's source runner a fixed 10 s to start (createSimpleWorker);
    on a machine busy with other work that can run out before any of our code runs."""
    return exc is not None and "connect back" in str(exc)


def start_query(start, attempts=3):
    """Start a streaming query with start(); retry if its Python runner failed to start.

    Waits for the first progress (or the end of an availableNow query) before returning.
    """
    for attempt in range(attempts):
        q = start()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if q.lastProgress is not None or not q.isActive:
                break
            time.sleep(0.2)
        exc = q.exception() if not q.isActive else None
        if worker_start_failed(exc) and attempt + 1 < attempts:
            continue
        return q
    return q
