"""fastlog.spark.options / offsets and the reader's rate limit, without Spark (fast).

Options arrive as Spark hands them to a Python data source: keys lower-cased, values
strings. Every bad or contradictory combination must fail with one sentence naming it.
"""

import json
import logging

import pytest

from fastlog.spark.offsets import from_json_dict, parse_assign, to_json_dict
from fastlog.spark.options import OptionError, parse_read_options, parse_write_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def _read(streaming=True, **opts):
    return parse_read_options({**BOOT, **{k.lower(): v for k, v in opts.items()}}, streaming)


def test_kafka_defaults_and_names():
    o = _read(subscribe="b,a,b")
    assert o.subscribe == ("a", "b") and o.starting == "latest" and o.fail_on_data_loss
    assert _read(False, subscribe="a").starting == "earliest"
    o = _read(subscribePattern="ev.*", maxOffsetsPerTrigger="10", includeHeaders="TRUE")
    assert o.matches("events") and not o.matches("xevents")
    assert o.max_offsets_per_trigger == 10 and o.include_headers
    o = parse_read_options({"bootstrap.servers": "h:1", "assign": '{"t":[1,0]}'}, True)
    assert o.bootstrap == "h:1" and o.assign == (("t", 0), ("t", 1))
    spec = _read(startingOffsets='{"t":{"0":5,"1":-2}}', subscribe="t").starting
    assert spec == {("t", 0): 5, ("t", 1): -2}
    # kafka.isolation.level: read_uncommitted by default, as Spark's Kafka source
    assert _read(subscribe="a").isolation_level == 0
    assert _read(subscribe="a", **{"kafka.isolation.level": "read_committed"}
                 ).isolation_level == 1


@pytest.mark.parametrize("opts,streaming,message", [
    ({"subscribe": "a"}, True, None),
    ({"subscribe": "a", "subscribePattern": "b"}, True, "exactly one of the options"),
    ({}, True, "exactly one of the options"),
    ({"subscribe": "a", "endingOffsets": "latest"}, True, "not valid in streaming queries"),
    ({"subscribe": "a", "startingOffsets": "latest"}, False, "cannot be 'latest' for batch"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, False, "cannot be 'earliest' for batch"),
    ({"subscribe": "a", "startingOffsets": "{bad"}, True, "must be 'earliest', 'latest'"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, True, "is invalid"),
    ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":-5}}'}, True,
     "timestamp -5 of a-0 is invalid"),
    ({"subscribe": "a", "startingOffsetsByTimestamp": "[1]"}, True, "expected a JSON object"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "earliest"}, True,
     "must be error or latest"),
    ({"subscribe": "a", "endingOffsetsByTimestamp": '{"a":{"0":5}}'}, True,
     "not valid in streaming queries"),
    ({"subscribe": "a", "endingTimestamp": "5"}, True, "not valid in streaming queries"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, True,
     "must not be more than maxOffsetsPerTrigger"),
    ({"subscribe": "a", "maxTriggerDelay": "soon"}, True, "must be a duration"),
    ({"subscribe": "a", "kafka.max.poll.records": "5"}, True,
     "option kafka.max.poll.records is not supported by fastlog's client"),
    ({"subscribe": "a", "kafka.group.id": " "}, True, "must not be empty"),
    ({"subscribe": "a", "fetchOffset.numRetries": "x"}, True, "must be an integer"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, True, "must be true or false"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "must be at least 1"),
    ({"subscribePattern": "("}, True, "not a valid regular expression"),
    ({"assign": "[0]"}, True, "option assign must be a JSON object"),
    ({"assign": '{"a":[0]}', "startingOffsets": '{"b":{"0":1}}'}, True,
     "which option assign does not include"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, True, "set startingOffsets"),
    ({"subscribe": "a", "maxOffsetsPerTrigger.bytes": "5"}, True, "is not supported"),
    ({"subscribe": "a", "colour": "red"}, True, "unknown option 'colour'"),
    ({"subscribe": "a", "kafka.client.id": "x"}, True, None),
    ({"subscribe": "a", "kafka.isolation.level": "committed"}, True,
     "must be read_uncommitted or read_committed"),
])
def test_bad_or_contradictory_read_options_fail_with_one_sentence(opts, streaming, message):
    if message is None:
        _read(streaming, **opts)
        return
    with pytest.raises(OptionError) as err:
        _read(streaming, **opts)
    text = str(err.value)
    assert message in text and text.count(". ") == 0 and "\n" not in text


def test_timestamp_options_take_precedence_as_in_spark():
    """startingTimestamp over startingOffsetsByTimestamp over startingOffsets (and the
    same for the ending options of a batch read); Spark does not call them contradictory."""
    o = _read(subscribe="a", startingOffsets="earliest", startingTimestamp="7",
              startingOffsetsByTimestamp='{"a":{"0":5}}')
    assert o.starting_timestamp == 7 and o.starting_by_timestamp == {("a", 0): 5}
    assert o.timestamp_strategy == "error"
    o = _read(False, subscribe="a", endingOffsets='{"a":{"0":9}}',
              endingOffsetsByTimestamp='{"a":{"0":5}}', startingOffsetsByTimestampStrategy="LATEST")
    assert o.ending_by_timestamp == {("a", 0): 5} and o.ending_timestamp is None
    assert o.timestamp_strategy == "latest"


def test_trigger_limits_and_client_settings(caplog):
    o = _read(subscribe="a")
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (None, 15 * 60 * 1000)
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (3, 1000)
    o = _read(subscribe="a", minOffsetsPerTrigger="10", maxOffsetsPerTrigger="10",
              maxTriggerDelay="30s", **{"fetchOffset.numRetries": "0",
                                        "fetchOffset.retryIntervalMs": "5"})
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (10, 30000)
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (0, 5)
    for text, ms in (("250", 250), ("250ms", 250), ("2m", 120000), ("1h", 3600000)):
        assert _read(subscribe="a", maxTriggerDelay=text).max_trigger_delay_ms == ms
    o = _read(subscribe="a", **{"kafka.request.timeout.ms": "5000",
                                "kafka.max.partition.fetch.bytes": "4096",
                                "kafka.fetch.max.bytes": "65536", "kafka.fetch.min.bytes": "0",
                                "kafka.fetch.max.wait.ms": "50", "kafka.client.id": "job-7",
                                "kafka.group.id": "g", "groupIdPrefix": "p"})
    assert (o.request_timeout_ms, o.max_partition_fetch_bytes, o.fetch_max_bytes,
            o.fetch_min_bytes, o.fetch_max_wait_ms, o.client_id) == (
        5000, 4096, 65536, 0, 50, "job-7")
    # one option map for a read and a write: each side accepts the other's client keys,
    # with a warning (once) that it ignores them
    with caplog.at_level(logging.WARNING, logger="fastlog.spark"):
        _read(subscribe="a", **{"kafka.acks": "all", "kafka.linger.ms": "1"})
        _read(subscribe="a", **{"kafka.acks": "all"})
    warned = [r.getMessage() for r in caplog.records if "kafka.acks" in r.getMessage()]
    assert warned == ["option kafka.acks is a producer setting: the fastlog source ignores "
                      "it, as a Kafka consumer does"]
    w = parse_write_options({**BOOT, "kafka.isolation.level": "read_committed",
                             "kafka.request.timeout.ms": "7000", "kafka.client.id": "sink-1",
                             "kafka.max.request.size": "2097152"})
    assert (w.request_timeout_ms, w.client_id, w.max_request_size) == (7000, "sink-1", 2097152)


def test_bootstrap_is_required():
    with pytest.raises(OptionError, match="kafka.bootstrap.servers is required"):
        parse_read_options({"subscribe": "a"}, True)


def test_write_options():
    o = parse_write_options({**BOOT, "topic": "t", "compression": "LZ4"})
    assert (o.topic, o.compression) == ("t", "lz4")
    assert parse_write_options({**BOOT, "kafka.compression.type": "zstd"}).compression == "zstd"
    for bad, message in [({"compression": "brotli"}, "compression must be one of"),
                         ({"kafka.acks": "2"}, "kafka.acks must be 0, 1 or all"),
                         ({"bogus": "1"}, "unknown option 'bogus'"),
                         ({"topic": "bad topic!"}, "option topic is an invalid topic name"),
                         ({"topic": ".."}, "option topic is an invalid topic name"),
                         ({"kafka.retries": "3"}, "option kafka.retries is not supported")]:
        with pytest.raises(OptionError, match=message):
            parse_write_options({**BOOT, **bad})


def test_offsets_json_is_canonical_whatever_the_input_order():
    a = {("b", 10): 1, ("a", 2): 5, ("a", 10): 7, ("b", 1): 0}
    b = dict(reversed(list(a.items())))
    assert json.dumps(to_json_dict(a)) == json.dumps(to_json_dict(b)) == \
        '{"a": {"2": 5, "10": 7}, "b": {"1": 0, "10": 1}}'
    assert from_json_dict(json.loads(json.dumps(to_json_dict(a)))) == a
    assert parse_assign('{"x":[2,0,2]}') == [("x", 0), ("x", 2)]


def test_rate_limit_never_exceeds_the_limit_and_always_progresses():
    pytest.importorskip("pyspark")
    from fastlog.spark.source import _rate_limit

    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 1000, ("t", 1): 101, ("t", 2): 8, ("t", 3): 50}
    fresh = {("t", 3): 0}
    for limit in (1, 2, 3, 7, 100, 999, 5000):
        end = _rate_limit(start, fresh, latest, limit)
        begins = {**fresh, **start}
        taken = sum(end[tp] - begins[tp] for tp in end)
        assert taken == min(limit, 1000 + 1 + 3 + 50)
        assert all(begins[tp] <= end[tp] <= latest[tp] for tp in end)


SASL = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  'required username="sam" password="s3cret";'}


def test_security_options_become_client_security_keys_on_read_and_write():
    read = parse_read_options({**BOOT, "subscribe": "a", **SASL}, True)
    write = parse_write_options({**BOOT, **SASL})
    want = tuple(sorted((k[len("kafka."):], v) for k, v in SASL.items()))
    assert read.security == write.security == want
    assert "s3cret" not in repr(read) and "s3cret" not in repr(write)


def test_pem_truststore_and_keystore_map_to_ca_and_certificate(tmp_path):
    import subprocess
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj",
                    "/CN=test", "-days", "1", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(tmp_path / "c.pem")], check=True, capture_output=True,
                   timeout=60)
    both = tmp_path / "keystore.pem"
    both.write_bytes((tmp_path / "k.pem").read_bytes() + (tmp_path / "c.pem").read_bytes())
    opts = parse_write_options({**BOOT, "kafka.security.protocol": "SSL",
                                "kafka.ssl.truststore.type": "PEM",
                                "kafka.ssl.truststore.location": str(tmp_path / "c.pem"),
                                "kafka.ssl.keystore.location": str(both)})
    assert dict(opts.security) == {"security.protocol": "SSL",
                                   "ssl.ca.location": str(tmp_path / "c.pem"),
                                   "ssl.certificate.location": str(both),
                                   "ssl.key.location": str(both)}


@pytest.mark.parametrize("extra, message", [
    ({"kafka.ssl.truststore.type": "JKS", "kafka.ssl.truststore.location": "/x.jks"},
     "kafka.ssl.truststore.type JKS is not supported"),
    ({"kafka.ssl.truststore.location": "STORE"}, "is not a PEM file"),
    ({"kafka.ssl.truststore.location": "/nonexistent/ca.pem"}, "cannot read"),
    ({"kafka.ssl.keystore.type": "PEM"}, "needs kafka.ssl.keystore.location"),
    ({"kafka.sasl.kerberos.service.name": "kafka"},
     "option kafka.sasl.kerberos.service.name is not supported"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism GSSAPI is not supported"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"},
     "needs sasl.username and sasl.password"),
    ({"kafka.security.protocol": "TLS"}, "security.protocol must be one of"),
])
def test_security_options_fastlog_cannot_honour_fail_with_one_sentence(extra, message,
                                                                       tmp_path):
    store = tmp_path / "store.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    extra = {k: str(store) if v == "STORE" else v for k, v in extra.items()}
    for parse in (lambda o: parse_read_options({**o, "subscribe": "a"}, False),
                  parse_write_options):
        with pytest.raises(OptionError) as err:
            parse({**BOOT, **extra})
        text = str(err.value)
        assert message in text and "\n" not in text
