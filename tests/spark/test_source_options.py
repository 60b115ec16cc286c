"""The "fastlog" source's Kafka options against a real broker: timestamp starts and ends
(ListOffsets by timestamp, Spark's precedence and startingOffsetsByTimestampStrategy),
minOffsetsPerTrigger with maxTriggerDelay, the lag metrics logged per batch, and the
errors that say what is wrong with an offset option.

Most tests drive the readers' driver-side calls directly (initialOffset, latestOffset,
partitions: what Spark's driver runner calls), which needs a broker but no Spark session;
the ones that need Spark itself share the module's session and keep to a few queries.
"""

import json
import logging
import os
import threading
import time

import pytest

from fastlog.spark.options import OptionError, parse_read_options
from tests.spark.conftest import create_topic, start_query, wait_until


def _reader(broker, streaming=True, **options):
    from fastlog.spark.source import FastlogBatchReader, FastlogStreamReader, kafka_schema

    opts = parse_read_options({"kafka.bootstrap.servers": broker.bootstrap,
                               **{k.lower(): str(v) for k, v in options.items()}}, streaming)
    return (FastlogStreamReader if streaming else FastlogBatchReader)(kafka_schema(False), opts)


def _produce_at(bootstrap, topic, partition, stamps, size=20):
    """One uncompressed record of `size` random bytes per timestamp (ms; None: now)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for ts in stamps:
        p.produce(topic, os.urandom(size), partition=partition,
                  **({} if ts is None else {"timestamp": ts}))
    assert p.flush(30) == 0


@pytest.fixture(scope="module")
def stamped(broker):
    """Topic 'stamped': partition 0 holds 10 records one second apart from `base`,
    partition 1 holds 5."""
    base = int(time.time() * 1000) - 60_000
    create_topic(broker.bootstrap, "stamped", 2)
    _produce_at(broker.bootstrap, "stamped", 0, [base + i * 1000 for i in range(10)])
    _produce_at(broker.bootstrap, "stamped", 1, [base + i * 1000 for i in range(5)])
    return base


def _start(reader):
    try:
        return {int(p): o for p, o in reader.initialOffset()["stamped"].items()}
    finally:
        reader.stop()


def _batch(reader):
    return sorted((r.partition, r.start, r.end) for r in reader.partitions())


def test_starting_by_timestamp_with_either_strategy_and_spark_precedence(broker, stamped):
    base = stamped
    by_ts = json.dumps({"stamped": {"0": base + 3000, "1": base + 99_000}})
    # no record of partition 1 is that late: an error naming it, by default ...
    with pytest.raises(OptionError, match=r"no record of stamped-1 has a timestamp at or "
                                          r"after \d+ \(set startingOffsetsByTimestampStrategy"):
        _start(_reader(broker, subscribe="stamped", startingOffsetsByTimestamp=by_ts))
    # ... or its end with the strategy latest
    assert _start(_reader(broker, subscribe="stamped", startingOffsetsByTimestamp=by_ts,
                          startingOffsetsByTimestampStrategy="latest")) == {0: 3, 1: 5}
    # startingTimestamp wins over startingOffsetsByTimestamp, which wins over startingOffsets
    assert _start(_reader(broker, subscribe="stamped", startingTimestamp=base + 2000,
                          startingOffsetsByTimestamp=by_ts,
                          startingOffsets="earliest")) == {0: 2, 1: 2}
    assert _start(_reader(broker, subscribe="stamped", startingOffsets="latest",
                          startingOffsetsByTimestamp=json.dumps(
                              {"stamped": {"0": base + 8500, "1": base}}))) == {0: 9, 1: 0}
    # a timestamp JSON must name every partition and only existing ones
    with pytest.raises(OptionError, match="stamped-1 has none"):
        _start(_reader(broker, subscribe="stamped",
                       startingOffsetsByTimestamp=json.dumps({"stamped": {"0": base}})))
    # batch ends: a timestamp past every record ends at the latest offset
    ends = _reader(broker, False, subscribe="stamped", startingTimestamp=base + 1000,
                   endingOffsetsByTimestamp=json.dumps(
                       {"stamped": {"0": base + 4000, "1": base + 99_000}}))
    assert _batch(ends) == [(0, 1, 4), (1, 1, 5)]
    ends = _reader(broker, False, subscribe="stamped", endingTimestamp=base + 2500,
                   endingOffsets="latest")
    assert _batch(ends) == [(0, 0, 3), (1, 0, 3)]


@pytest.mark.parametrize("options,message", [
    ({"startingOffsets": {"stamped": {"0": 0, "1": 0, "7": 0}}},
     "option startingOffsets names partition stamped-7, which does not exist"),
    ({"startingOffsets": {"stamped": {"0": 0, "1": 0}, "other": {"0": 0}}},
     "names partition other-0, which is not in the subscription"),
    ({"startingOffsets": {"stamped": {"0": 50, "1": 0}}},
     "option startingOffsets gives stamped-0 offset 50, beyond the end of its log (10)"),
    ({"startingOffsets": {"stamped": {"0": 8, "1": 0}},
      "endingOffsets": {"stamped": {"0": 4, "1": -1}}},
     "the read starts stamped-0 at offset 8, after where it ends (4)"),
    ({"endingOffsets": {"stamped": {"0": 11, "1": -1}}},
     "option endingOffsets gives stamped-0 offset 11, beyond the end of its log (10)"),
])
def test_offset_options_that_cannot_be_read_say_what_is_wrong(broker, stamped, options,
                                                               message):
    options = {k: json.dumps(v) for k, v in options.items()}
    with pytest.raises(OptionError) as err:
        _batch(_reader(broker, False, subscribe="stamped", **options))
    assert message in str(err.value), str(err.value)
    if "endingOffsets" not in options:   # a stream starts from the same offsets
        with pytest.raises(OptionError) as err:
            _start(_reader(broker, subscribe="stamped", **options))
        assert message in str(err.value)


def _end(offsets):
    return {int(p): o for p, o in offsets["trig"].items()}


def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(broker):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    create_topic(broker.bootstrap, "trig", 1)
    _produce_at(broker.bootstrap, "trig", 0, [None] * 5)
    reader = _reader(broker, subscribe="trig", startingOffsets="earliest",
                     minOffsetsPerTrigger=20, maxTriggerDelay="1h")
    try:
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMinRows(20)
        start = reader.initialOffset()
        first = reader.latestOffset(start, limit)   # a query's first trigger always runs
        assert _end(first) == {0: 5}
        _produce_at(broker.bootstrap, "trig", 0, [None] * 10)
        assert reader.latestOffset(first, limit) == first      # 10 waiting, fewer than 20
        assert _end(reader.latestOffset(first, ReadAllAvailable())) == {0: 15}
        _produce_at(broker.bootstrap, "trig", 0, [None] * 10)
        assert _end(reader.latestOffset(first, limit)) == {0: 25}   # 20 waiting
    finally:
        reader.stop()

    # with maxOffsetsPerTrigger too, Spark gets the upper bound and the reader the lower one
    reader = _reader(broker, subscribe="trig", startingOffsets="earliest",
                     minOffsetsPerTrigger=3, maxOffsetsPerTrigger=8, maxTriggerDelay="1s")
    try:
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMaxRows(8)
        end = reader.initialOffset()
        for want in (8, 16, 24):
            end = reader.latestOffset(end, limit)
            assert _end(end) == {0: want}
        assert reader.latestOffset(end, limit) == end   # 1 waiting, fewer than 3 ...
        deadline = time.monotonic() + 30
        later = end
        while later == end and time.monotonic() < deadline:
            time.sleep(0.2)   # ... until maxTriggerDelay has passed since the last batch
            later = reader.latestOffset(end, limit)
        assert _end(later) == {0: 25}
    finally:
        reader.stop()


def test_fetch_offset_retries_ride_out_a_broker_restart(tmp_path, caplog):
    """The driver's offset requests are tried fetchOffset.numRetries times,
    fetchOffset.retryIntervalMs apart, each within kafka.request.timeout.ms: a trigger
    while the broker restarts waits for it rather than failing the query."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from fastlog.testing import BrokerProcess

    with BrokerProcess(tmp_path / "data") as b:
        create_topic(b.bootstrap, "retried", 1)
        _produce_at(b.bootstrap, "retried", 0, [None] * 3)
        reader = _reader(b, subscribe="retried", startingOffsets="earliest",
                         **{"kafka.request.timeout.ms": "500", "fetchOffset.numRetries": "120",
                            "fetchOffset.retryIntervalMs": "250"})
        caplog.set_level(logging.WARNING, logger="fastlog.spark")
        try:
            start = reader.initialOffset()
            b.stop()
            restart = threading.Timer(2.0, b.start)
            restart.start()
            try:
                end = reader.latestOffset(start, ReadAllAvailable())
            finally:
                restart.join(60)
        finally:
            reader.stop()
        assert {int(p): o for p, o in end["retried"].items()} == {0: 3}
        assert any("failed (attempt 1 of 120), retrying in 250 ms" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_lag_metrics_are_logged_for_each_batch(broker, caplog):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from fastlog.spark.source import source_lag

    assert source_lag({("t", 0): 5, ("t", 1): 9}, {("t", 0): 15, ("t", 1): 10,
                                                   ("t", 2): 4}) == {
        "minOffsetsBehindLatest": 0, "maxOffsetsBehindLatest": 10,
        "avgOffsetsBehindLatest": (10 + 1 + 0) / 3}
    create_topic(broker.bootstrap, "lagging", 2)
    for p in (0, 1):
        _produce_at(broker.bootstrap, "lagging", p, [None] * 300, size=100)
    reader = _reader(broker, subscribe="lagging", startingOffsets="earliest",
                     maxOffsetsPerTrigger=100)
    caplog.set_level(logging.INFO, logger="fastlog.spark.metrics")
    try:
        start = reader.initialOffset()
        reader.latestOffset(start, ReadMaxRows(100))
    finally:
        reader.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "fastlog.spark.metrics"]
    assert lines and lines[0].startswith("fastlog source batch ending at")
    metrics = json.loads(lines[0].split(" source metrics ", 1)[1])
    assert metrics["minOffsetsBehindLatest"] == metrics["maxOffsetsBehindLatest"] == 250
    assert metrics["avgOffsetsBehindLatest"] == 250
    # 500 records of 100 random bytes behind: the estimate counts their framing too
    assert 500 * 100 <= metrics["estimatedBytesBehindLatest"] <= 500 * 200, metrics


def test_kafka_fetch_settings_reach_the_executor_reads(broker):
    """kafka.max.partition.fetch.bytes and kafka.fetch.max.bytes far below the data: every
    Fetch answers at least one record batch (as Kafka's), so the range is still read whole,
    a few batches per Fetch."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from fastlog.spark.fetch import fetch_settings, read_range
    from fastlog.spark.source import kafka_schema

    create_topic(broker.bootstrap, "small-fetch", 1)
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.size": 300})
    for i in range(200):
        p.produce("small-fetch", b"%03d" % i + os.urandom(97), partition=0)
    assert p.flush(30) == 0
    opts = parse_read_options({"kafka.bootstrap.servers": broker.bootstrap,
                               "subscribe": "small-fetch",
                               "kafka.max.partition.fetch.bytes": "512",
                               "kafka.fetch.max.bytes": "1024", "kafka.fetch.max.wait.ms": "10",
                               "kafka.request.timeout.ms": "5000",
                               "kafka.client.id": "small-fetcher"}, False)
    settings = fetch_settings(opts)
    assert (settings.partition_max_bytes, settings.max_bytes, settings.max_wait_ms,
            settings.request_timeout_ms, settings.client_id) == (512, 1024, 10, 5000,
                                                                 "small-fetcher")
    batches = list(read_range(broker.bootstrap, "small-fetch", 0, 0, 200,
                              include_headers=False, fail_on_data_loss=True, timeout_ms=30000,
                              arrow_schema=to_arrow_schema(kafka_schema(False), timezone="UTC"),
                              settings=settings))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    values = [v[:3] for b in batches for v in b.column("value").to_pylist()]
    assert offsets == list(range(200)) and values == [b"%03d" % i for i in range(200)]


def _collect_available_now(df, checkpoint):
    rows = []

    def collect(batch_df, batch_id):
        rows.extend((r.partition, r.offset) for r in batch_df.collect())

    q = start_query(lambda: df.writeStream.foreachBatch(collect)
                    .option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True).start())
    assert q.awaitTermination(240), "availableNow query did not finish"
    assert q.exception() is None, q.exception()
    return sorted(rows)


def test_timestamp_options_and_refusals_in_spark(spark, broker, stamped, tmp_path):
    base = stamped

    def source(stream, **options):
        reader = (spark.readStream if stream else spark.read).format("fastlog") \
            .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", "stamped")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    # a stream from a timestamp: partition 1 has no record that late and starts at its end
    df = source(True, startingTimestamp=str(base + 7000),
                startingOffsetsByTimestampStrategy="latest")
    assert _collect_available_now(df, tmp_path / "ckpt") == [(0, 7), (0, 8), (0, 9)]
    # Spark takes ReadMinRows as the default limit; availableNow reads to its end regardless
    df = source(True, startingOffsets="earliest", minOffsetsPerTrigger="1000",
                maxTriggerDelay="1h")
    assert _collect_available_now(df, tmp_path / "min") == \
        [(0, o) for o in range(10)] + [(1, o) for o in range(5)]
    # a batch between two timestamps
    df = source(False, startingOffsetsByTimestamp=json.dumps(
        {"stamped": {"0": base + 8000, "1": base + 3000}}),
        endingOffsetsByTimestamp=json.dumps({"stamped": {"0": base + 9000, "1": base + 9000}}))
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(0, 8), (1, 3), (1, 4)]
    # endingOffsets on a stream: one sentence, without pyspark's follow-on error
    df = source(True, endingOffsets="latest")
    with pytest.raises(Exception) as failure:
        q = df.writeStream.format("noop").trigger(availableNow=True).start()
        q.awaitTermination(240)
        raise AssertionError(f"the query ran: {q.exception()}")
    text = str(failure.value)
    assert "option endingOffsets is not valid in streaming queries" in text, text
    assert "UnboundLocalError" not in text, text
    # a batch whose start lies after its end
    df = source(False, startingOffsets=json.dumps({"stamped": {"0": 6, "1": 0}}),
                endingOffsets=json.dumps({"stamped": {"0": 2, "1": -1}}))
    with pytest.raises(Exception) as failure:
        df.collect()
    assert "the read starts stamped-0 at offset 6, after where it ends (2)" in str(failure.value)


def test_min_offsets_per_trigger_in_a_running_query(spark, broker):
    """processingTime triggers: the first batch runs at once, later triggers are skipped
    while fewer than minOffsetsPerTrigger records wait (maxTriggerDelay is an hour), and
    the batch comes once enough have arrived."""
    create_topic(broker.bootstrap, "min-live", 1)
    _produce_at(broker.bootstrap, "min-live", 0, [None] * 5)
    df = (spark.readStream.format("fastlog").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", "min-live").option("startingOffsets", "earliest")
          .option("minOffsetsPerTrigger", "50").option("maxTriggerDelay", "1h").load())
    q = start_query(lambda: df.selectExpr("offset").writeStream.format("memory")
                    .queryName("min_live").trigger(processingTime="300 milliseconds").start())
    try:
        def rows():
            return spark.sql("select count(*) c from min_live").first().c

        wait_until(lambda: rows() == 5, 120, "the first batch")
        _produce_at(broker.bootstrap, "min-live", 0, [None] * 10)
        time.sleep(3)        # about ten triggers ...
        assert rows() == 5   # ... with 10 records waiting: none ran a batch
        _produce_at(broker.bootstrap, "min-live", 0, [None] * 40)
        wait_until(lambda: rows() == 55, 120, "the batch of 50")
        assert q.exception() is None
    finally:
        q.stop()


def test_sink_topic_option_and_column_partition_column_and_save_modes(spark, broker):
    from kafka import KafkaConsumer, TopicPartition

    create_topic(broker.bootstrap, "sink-opts", 2)
    df = spark.createDataFrame([(f"v{i}", "other-topic", 1) for i in range(20)],
                               "value string, topic string, partition int")

    def write(frame, mode="append", **options):
        writer = frame.write.format("fastlog").option("kafka.bootstrap.servers",
                                                      broker.bootstrap)
        if mode is not None:
            writer = writer.mode(mode)
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.save()

    # the topic option overrides the topic column; the partition column places each row
    write(df, topic="sink-opts")
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000, enable_auto_commit=False)
    consumer.assign([TopicPartition("sink-opts", p) for p in (0, 1)])
    got = sorted((m.partition, m.value) for m in consumer)
    consumer.close()
    assert got == sorted((1, f"v{i}".encode()) for i in range(20))
    from fastlog.client import SyncAdmin
    with SyncAdmin(broker.bootstrap) as admin:
        assert "other-topic" not in admin.list_topics()

    # invalid topic names: from the option at save(), from a row in the task
    with pytest.raises(Exception) as failure:
        write(df, topic="no spaces")
    assert "option topic is an invalid topic name" in str(failure.value)
    bad = spark.createDataFrame([("v", "bad/topic")], "value string, topic string")
    with pytest.raises(Exception) as failure:
        write(bad)
    text = str(failure.value)
    assert "has an invalid topic name 'bad/topic'" in text and "does not exist" not in text
    # a partition the topic does not have
    bad = spark.createDataFrame([("v", 2)], "value string, partition int")
    with pytest.raises(Exception) as failure:
        write(bad, topic="sink-opts")
    assert "names partition 2 of topic 'sink-opts', which has partitions 0 to 1" in \
        str(failure.value)

    # save modes: overwrite is refused as by Spark's Kafka sink; the default ErrorIfExists,
    # which Kafka's sink takes, is refused by pyspark for every Python data source
    with pytest.raises(Exception) as failure:
        write(df, mode="overwrite", topic="sink-opts")
    assert "save mode overwrite is not allowed for the fastlog sink" in str(failure.value)
    with pytest.raises(Exception) as failure:
        write(df, mode=None, topic="sink-opts")
    assert "ErrorIfExists" in str(failure.value)
