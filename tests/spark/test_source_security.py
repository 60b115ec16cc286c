"""The "fastlog" Spark source and sink on a real broker's SASL_PLAINTEXT listener: the
kafka.-prefixed security options Spark's Kafka source takes reach every client (the
driver's admin, the executors' fetchers, the sink's producers); an option fastlog cannot
honour fails at load() with one sentence."""

import secrets

import pytest

from tests.security.test_sasl_broker import running_sasl_broker, sasl_address
from tests.spark.conftest import create_topic, start_query

USER, PASSWORD = "spark", secrets.token_urlsafe(16)
SASL = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  f'required username="{USER}" password="{PASSWORD}";'}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    with running_sasl_broker(tmp_path_factory.mktemp("spark-sasl") / "data",
                             secrets.token_urlsafe(16),
                             {("SCRAM-SHA-256", USER): PASSWORD}) as b:
        yield b


def test_batch_write_and_streaming_read_authenticate(spark, sasl_broker, tmp_path):
    create_topic(sasl_broker.bootstrap, "secure", 2)
    rows = [(f"k{i}", f"v{i}") for i in range(100)]
    df = spark.createDataFrame(rows, "key string, value string")
    writer = df.write.format("fastlog").mode("append").option("topic", "secure")
    for k, v in {"kafka.bootstrap.servers": sasl_address(sasl_broker), **SASL}.items():
        writer = writer.option(k, v)
    writer.save()

    reader = spark.readStream.format("fastlog").option("subscribe", "secure") \
        .option("startingOffsets", "earliest")
    for k, v in {"kafka.bootstrap.servers": sasl_address(sasl_broker), **SASL}.items():
        reader = reader.option(k, v)
    got = []

    def collect(batch_df, batch_id):
        got.extend((r.key, r.value) for r in batch_df.collect())

    q = start_query(lambda: reader.load().writeStream.foreachBatch(collect)
                    .option("checkpointLocation", str(tmp_path / "cp"))
                    .trigger(availableNow=True).start())
    assert q.awaitTermination(240), "availableNow query did not finish"
    assert q.exception() is None, q.exception()
    assert sorted(got) == sorted((k.encode(), v.encode()) for k, v in rows)


def test_security_option_fastlog_cannot_honour_fails_at_load(spark, sasl_broker):
    reader = spark.readStream.format("fastlog").option("subscribe", "secure")
    for k, v in {"kafka.bootstrap.servers": sasl_address(sasl_broker), **SASL,
                 "kafka.sasl.mechanism": "GSSAPI"}.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as failure:
        reader.load()
    assert "sasl.mechanism GSSAPI is not supported" in str(failure.value)
    assert PASSWORD not in str(failure.value)
