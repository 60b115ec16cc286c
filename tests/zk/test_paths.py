"""Znode payload codecs: round trips, and any bytes give a result or ZkDataError."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog.zk import paths
from fastlog.zk.paths import BrokerInfo, EndPoint, LeaderAndIsr, TopicAssignment, ZkDataError

PROPS = settings(max_examples=100, deadline=None)
ids = st.integers(0, 2**31 - 1)
names = st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True)


@PROPS
@given(ids, st.lists(st.tuples(st.from_regex(r"[A-Z_]{1,10}", fullmatch=True),
                               st.sampled_from(["127.0.0.1", "broker-1.example", "::1"]),
                               st.integers(0, 65535)), min_size=1, max_size=3,
                     unique_by=lambda e: e[0]),
       st.none() | names)
def test_broker_round_trip(broker_id, eps, rack):
    info = BrokerInfo(broker_id, tuple(EndPoint(n, h, p, "PLAINTEXT") for n, h, p in eps),
                      rack=rack)
    back = paths.decode_broker(broker_id, paths.encode_broker(info))
    assert back.endpoints == info.endpoints and back.rack == rack and back.version == 5


@PROPS
@given(names, st.dictionaries(st.integers(0, 500), st.lists(ids, min_size=1, max_size=5),
                              max_size=20), st.none() | names)
def test_topic_round_trip(topic, parts, topic_id):
    a = TopicAssignment(topic, parts, topic_id)
    assert paths.decode_topic(topic, paths.encode_topic(a)) == a


@PROPS
@given(st.integers(-1, 2**31 - 1), st.integers(0, 2**31 - 1), st.lists(ids, max_size=5),
       st.integers(0, 2**31 - 1), st.integers(0, 1))
def test_partition_state_round_trip(leader, epoch, isr, ctrl_epoch, recovery):
    s = LeaderAndIsr(leader, epoch, tuple(isr), ctrl_epoch, 7, recovery)
    assert paths.decode_partition_state("t", 0, paths.encode_partition_state(s), 7) == s
    obj = json.loads(paths.encode_partition_state(s))
    assert ("leader_recovery_state" in obj) == bool(recovery)


DECODERS = [
    lambda b: paths.decode_broker(1, b),
    lambda b: paths.decode_topic("t", b),
    lambda b: paths.decode_partition_state("t", 0, b),
    paths.decode_controller,
    paths.decode_controller_epoch,
    paths.decode_cluster_id,
    lambda b: paths.decode_entity_config("/config/topics/t", b),
    lambda b: paths.decode_config_change("/config/changes/x", b),
    lambda b: paths.decode_partition_list("/isr_change_notification/x", b),
    paths.decode_feature,
    paths.decode_producer_id_block,
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["version", "id", "brokerid", "leader", "isr",
                                       "leader_epoch", "controller_epoch", "partitions",
                                       "endpoints", "host", "port", "jmx_port", "config",
                                       "entity_path", "status", "features", "topic",
                                       "partition", "block_start", "block_end", "rack",
                                       "listener_security_protocol_map", "topic_id", "0"]),
                      children, max_size=6),
    max_leaves=12)


@PROPS
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_payload_decodes_or_raises_zk_data_error(data):
    for decode in DECODERS:
        try:
            decode(data)
        except ZkDataError:
            pass


def test_bare_integer_controller_payloads():
    assert paths.decode_controller(b"3") == 3
    for bad in (b"--5", b"-", b"5x", b"99999999999"):
        with pytest.raises(ZkDataError):
            paths.decode_controller(bad)


def test_ipv6_endpoint_is_bracketed_and_parsed_back():
    ep = EndPoint("PLAINTEXT", "::1", 9092)
    assert ep.connection_string() == "PLAINTEXT://[::1]:9092"
    assert EndPoint.parse("PLAINTEXT://[::1]:9092", {"PLAINTEXT": "PLAINTEXT"}) == ep
