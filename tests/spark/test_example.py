"""examples/spark_running_count.py end to end: fastlog stream -> count per key -> writeStream
into another topic (the streaming sink), the latest count per key read back with
confluent-kafka."""

import importlib.util
from pathlib import Path

from tests.spark.conftest import create_topic, produce, start_query

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_running_count.py"


def _example():
    spec = importlib.util.spec_from_file_location("spark_running_count", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_running_count_example_writes_counts_through_the_stream_sink(spark, broker, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    create_topic(broker.bootstrap, "rc-events", 2)
    create_topic(broker.bootstrap, "rc-counts", 1)
    records = [(f"user{i % 4}".encode(), b"click") for i in range(103)]
    produce(broker.bootstrap, "rc-events", records)
    example = _example()
    q = start_query(lambda: example.build_query(spark, broker.bootstrap, "rc-events",
                                                "rc-counts", str(tmp_path / "ckpt"),
                                                {"availableNow": True}))
    assert q.awaitTermination(240)

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rc-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("rc-counts", 0, 0)])
    latest = {}
    idle = 0
    while idle < 5:
        msg = consumer.poll(1.0)
        if msg is None:
            idle += 1
            continue
        assert msg.error() is None
        latest[msg.key()] = int(msg.value())
    consumer.close()
    expected = {}
    for key, _ in records:
        expected[key] = expected.get(key, 0) + 1
    assert latest == expected
