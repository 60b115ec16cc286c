"""Every API and version we serve, both directions, checked against kafka-python's own
encoders/decoders (an independent implementation of the same Kafka specs): what we encode
they decode to the same values and re-encode to the same bytes, and what they encode we
decode to the same values."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog._codec import Reader, Writer
from fastlog.protocol import REQUESTS, RESPONSES
from fastlog.protocol.schema import _in
from tests.protocol.protocol_helpers import all_cases, make_value, normalize, restrict


def _ours(kind, key):
    return (REQUESTS if kind == "request" else RESPONSES)[key]


def _their_names(key, kind, value):
    # kafka-python renames Metadata's and DescribeCluster's ClusterAuthorizedOperations to
    # authorized_operations
    if key in (3, 60) and kind == "response":
        if "authorized_operations" in value:
            value["cluster_authorized_operations"] = value.pop("authorized_operations")
        for topic in value.get("topics") or ():  # (Metadata v11+ has only the topics')
            if "authorized_operations" in topic:
                topic["topic_authorized_operations"] = topic.pop("authorized_operations")
    return value


def _fields(fields):
    for f in fields:
        yield f
        if f.fields:
            yield from _fields(f.fields)


def _encode_ours(msg, version, value):
    w = Writer()
    msg.encoder(version)(w, value)
    return w.getvalue()


@pytest.mark.parametrize("rich", [True, False], ids=["rich", "sparse"])
@pytest.mark.parametrize(("kind", "key", "version"), list(all_cases()))
def test_ours_and_kafka_python_agree(kind, key, version, rich, kp_classes):
    msg = _ours(kind, key)
    theirs = kp_classes[(key, kind)][version]
    value = make_value(msg, version, rich)
    if key == 18 and kind == "response":
        value["error_code"] = 0  # kafka-python re-reads error replies as v0 (KIP-511)
    data = _encode_ours(msg, version, value)

    # ours -> ours
    r = Reader(data)
    decoded = msg.decoder(version)(r)
    assert r.remaining == 0
    expected = restrict(normalize(value), msg.fields, version)
    assert restrict(normalize(decoded), msg.fields, version) == expected

    # ours -> theirs, and theirs re-encodes the same bytes
    their_obj = theirs.decode(data)
    their_obj._header = None  # kafka-python leaves it unset after a bare body decode
    assert restrict(_their_names(key, kind, normalize(their_obj)), msg.fields, version) == expected
    assert bytes(their_obj.encode(version=version)) == data

    # theirs -> ours: an object of theirs encoded by them, decoded by us
    their_bytes = bytes(their_obj.encode(version=version))
    again = msg.decoder(version)(Reader(their_bytes))
    assert restrict(normalize(again), msg.fields, version) == expected

    # our encoder also takes their objects (attribute access) and gives the same bytes;
    # except where kafka-python turns int32 authorized-operations into Python sets, or
    # uuids (ours are 16 raw bytes) into uuid.UUID
    if not any(f.name.endswith("authorized_operations") for f in _fields(msg.fields)) and \
            not any(f.elem == "uuid" for f in _fields(msg.fields) if _in(f.versions, version)):
        assert _encode_ours(msg, version, their_obj) == data


_CASES = [p.values for p in all_cases()]


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(_CASES), seed=st.integers(0, 10**6), rich=st.booleans())
def test_random_values_round_trip_through_our_codec(case, seed, rich):
    kind, key, version = case
    msg = _ours(kind, key)
    value = make_value(msg, version, rich, seed)
    data = _encode_ours(msg, version, value)
    r = Reader(data)
    decoded = msg.decoder(version)(r)
    assert r.remaining == 0
    assert restrict(normalize(decoded), msg.fields, version) == restrict(
        normalize(value), msg.fields, version)
    assert _encode_ours(msg, version, decoded) == data
