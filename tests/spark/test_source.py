"""The "fastlog" Spark data source against a real broker and a real local[2] Spark.

Few tests, each covering a whole behaviour with one or two queries (Spark queries cost
seconds each): exact counts and exactly-once restart from a checkpoint, admission control,
batch reads over offset ranges, pattern subscriptions picking up new topics and
partitions, data loss, option errors at load(), and the sink read back by Kafka clients.
"""

import json
import time

import pytest

from tests.spark.conftest import create_topic, produce, start_query, wait_until


def _stream(spark, broker, **options):
    reader = spark.readStream.format("fastlog").option("kafka.bootstrap.servers",
                                                       broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _run_available_now(df, checkpoint, sink_rows):
    """Run df to the end with availableNow; foreachBatch appends (batch, rows) to sink_rows."""
    def collect(batch_df, batch_id):
        sink_rows.append((batch_id, [(r.partition, r.offset, r.key, r.value)
                                     for r in batch_df.collect()]))

    q = start_query(lambda: df.writeStream.foreachBatch(collect)
                    .option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True).start())
    assert q.awaitTermination(240), "availableNow query did not finish"


def test_stream_counts_exactly_restarts_from_checkpoint_and_bounds_batches(spark, broker,
                                                                           tmp_path):
    topic = "counts"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [(f"k{i % 7}".encode(), f"v{i}".encode())
                                      for i in range(1000)])
    df = _stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                 maxOffsetsPerTrigger="300")
    first: list = []
    _run_available_now(df, tmp_path / "ckpt", first)
    rows1 = [r for _, rows in first for r in rows]
    assert len(rows1) == 1000
    assert all(len(rows) <= 300 for _, rows in first), [len(r) for _, r in first]
    assert sorted(r[3] for r in rows1) == sorted(f"v{i}".encode() for i in range(1000))
    # Offsets in the checkpoint: Spark's Kafka JSON, keys in a stable order.
    last = max(int(p.name) for p in (tmp_path / "ckpt" / "offsets").iterdir()
               if p.name.isdigit())
    line = (tmp_path / "ckpt" / "offsets" / str(last)).read_text().splitlines()[-1]
    ends = json.loads(line)
    assert list(ends) == [topic] and list(ends[topic]) == ["0", "1"]
    assert sum(ends[topic].values()) == 1000

    # More data, then a restart from the same checkpoint: exactly the new records.
    time.sleep(0.05)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker.bootstrap, topic, [(b"late", f"w{i}".encode()) for i in range(500)])
    second: list = []
    _run_available_now(df, tmp_path / "ckpt", second)
    rows2 = [r for _, rows in second for r in rows]
    assert sorted(r[3] for r in rows2) == sorted(f"w{i}".encode() for i in range(500))
    assert min(b for b, _ in second) > max(b for b, _ in first)
    seen = {(r[0], r[1]) for r in rows1 + rows2}
    assert len(seen) == 1500  # neither skipped nor repeated

    # Batch read of an offset range: [10, 20) of partition 0 and [0, 5) of partition 1.
    batch = (spark.read.format("fastlog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic)
             .option("startingOffsets", json.dumps({topic: {"0": 10, "1": -2}}))
             .option("endingOffsets", json.dumps({topic: {"0": 20, "1": 5}})).load())
    got = sorted((r.partition, r.offset) for r in batch.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
    # ... and from a timestamp: exactly the records produced after it (all in one
    # partition: the other one, without a record that late, starts at its end).
    late = (spark.read.format("fastlog").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("startingTimestamp", str(between))
            .option("startingOffsetsByTimestampStrategy", "latest").load())
    assert sorted(r.value for r in late.select("value").collect()) == \
        sorted(f"w{i}".encode() for i in range(500))


def test_pattern_subscription_picks_up_new_topics_and_partitions(spark, broker):
    create_topic(broker.bootstrap, "pat-a", 1)
    produce(broker.bootstrap, "pat-a", [(None, b"a%d" % i) for i in range(50)])
    df = _stream(spark, broker, subscribePattern="pat-.*", startingOffsets="earliest")
    q = start_query(lambda: df.selectExpr("topic", "partition", "offset").writeStream
                    .format("memory").queryName("pattern_rows")
                    .trigger(processingTime="1 second").start())
    try:
        def count(where):
            return spark.sql(f"select count(*) c from pattern_rows where {where}").first().c

        wait_until(lambda: count("topic = 'pat-a'") == 50, 120, "pat-a's records")
        create_topic(broker.bootstrap, "pat-b", 1)
        produce(broker.bootstrap, "pat-b", [(None, b"b%d" % i) for i in range(30)])
        wait_until(lambda: count("topic = 'pat-b'") == 30, 120, "the new topic's records")
        from fastlog.client import SyncAdmin
        with SyncAdmin(broker.bootstrap) as admin:
            admin.create_partitions("pat-a", 2)
        produce(broker.bootstrap, "pat-a", [(None, b"n%d" % i) for i in range(20)], partition=1)
        wait_until(lambda: count("topic = 'pat-a' and partition = 1") == 20, 120,
                   "the new partition's records")
        assert q.exception() is None
        assert count("true") == 100
        offsets = [r.offset for r in spark.sql(
            "select offset from pattern_rows where partition = 1 order by offset").collect()]
        assert offsets == list(range(20))  # read from its start
    finally:
        q.stop()


def test_data_loss_fails_by_default_and_warns_when_allowed(spark, broker, tmp_path):
    topic = "lossy"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [(None, b"x%d" % i) for i in range(100)])
    from fastlog.client import SyncAdmin, TopicPartition
    with SyncAdmin(broker.bootstrap) as admin:
        admin.delete_records({TopicPartition(topic, 0): 60})
    start = json.dumps({topic: {"0": 0}})
    strict = _stream(spark, broker, subscribe=topic, startingOffsets=start)
    with pytest.raises(Exception) as failure:
        _run_available_now(strict, tmp_path / "strict", [])
    assert "failOnDataLoss" in str(failure.value)
    lenient = _stream(spark, broker, subscribe=topic, startingOffsets=start,
                      failOnDataLoss="false")
    rows: list = []
    _run_available_now(lenient, tmp_path / "lenient", rows)
    assert sorted(r[1] for _, b in rows for r in b) == list(range(60, 100))


@pytest.mark.parametrize("options,message", [
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of the options subscribe"),
    ({"subscribe": "a", "startingOffset": "earliest"}, "unknown option 'startingoffset'"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "many"},
     "option maxOffsetsPerTrigger must be an integer"),
])
def test_bad_option_fails_at_load_with_one_sentence(spark, broker, options, message):
    with pytest.raises(Exception) as failure:
        _stream(spark, broker, **options)
    assert message in str(failure.value)


def test_sink_output_read_back_by_a_kafka_client(spark, broker):
    from kafka import KafkaConsumer, TopicPartition

    create_topic(broker.bootstrap, "sink-out", 2)
    rows = [(f"k{i}", f"value-{i}", "sink-out", [("h", bytes([i]))]) for i in range(200)]
    df = spark.createDataFrame(
        rows, "key string, value string, topic string, headers array<struct<key:string,value:binary>>")
    (df.write.format("fastlog").mode("append").option("kafka.bootstrap.servers",
                                                      broker.bootstrap)
     .option("compression", "lz4").save())
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, enable_auto_commit=False)
    consumer.assign([TopicPartition("sink-out", p) for p in (0, 1)])
    got = {(m.key, m.value, tuple(m.headers)) for m in consumer}
    consumer.close()
    assert got == {(k.encode(), v.encode(), (("h", h[0][1]),)) for k, v, _, h in rows}
    # ... and by the fastlog source itself, headers included (includeHeaders).
    back = (spark.read.format("fastlog").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", "sink-out").option("includeHeaders", "true").load())
    assert {(r.key, r.value, tuple((h.key, bytes(h.value)) for h in r.headers))
            for r in back.collect()} == got

    # A row without a topic (and no topic option) fails the task with a clear message.
    bad = spark.createDataFrame([("v", None)], "value string, topic string")
    with pytest.raises(Exception) as failure:
        bad.write.format("fastlog").mode("append").option(
            "kafka.bootstrap.servers", broker.bootstrap).save()
    assert "has no topic" in str(failure.value)


def test_isolation_level_read_committed_and_read_uncommitted(spark, broker, tmp_path):
    """A partition holding committed, aborted and open transactions between plain records:
    read_committed ends at the open transaction (the LSO) and never shows the aborted
    records; read_uncommitted (the default) shows every data record; markers are never
    rows."""
    from confluent_kafka import Producer

    topic = "isolation"
    create_topic(broker.bootstrap, topic, 1)
    conf = {"bootstrap.servers": broker.bootstrap}
    txn = Producer({**conf, "transactional.id": "spark-isolation-done"})
    txn.init_transactions(30)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
        txn.begin_transaction()
        for v in values:
            txn.produce(topic, v, partition=0)
        assert txn.flush(10) == 0   # written before the abort, which would drop queued ones
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    produce(broker.bootstrap, topic, [(None, b"p0")], partition=0)
    open_ = Producer({**conf, "transactional.id": "spark-isolation-open"})
    open_.init_transactions(30)
    open_.begin_transaction()
    open_.produce(topic, b"o1", partition=0)
    assert open_.flush(10) == 0
    produce(broker.bootstrap, topic, [(None, b"p1")], partition=0)

    def read(**extra):
        reader = (spark.read.format("fastlog").option("kafka.bootstrap.servers",
                                                      broker.bootstrap)
                  .option("subscribe", topic))
        for k, v in extra.items():
            reader = reader.option(k, v)
        return [bytes(r.value) for r in reader.load().orderBy("offset").collect()]

    committed = read(**{"kafka.isolation.level": "read_committed"})
    assert committed == [b"c1", b"c2", b"c3", b"p0"]
    # a stream's batches end at the LSO too
    rows: list = []
    _run_available_now(_stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                               **{"kafka.isolation.level": "read_committed"}),
                       tmp_path / "ckpt", rows)
    assert [r[3] for _, batch in rows for r in sorted(batch)] == committed
    assert read() == [b"c1", b"c2", b"a1", b"a2", b"c3", b"p0", b"o1", b"p1"]
    open_.commit_transaction(30)
    assert read(**{"kafka.isolation.level": "read_committed"}) == [
        b"c1", b"c2", b"c3", b"p0", b"o1", b"p1"]
