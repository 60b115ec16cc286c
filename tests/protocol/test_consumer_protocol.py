"""The "consumer" embedded protocol: v0 bytes as kafka-python writes and reads them, later
versions read by their common prefix, bad bytes raising CodecError only."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog._codec import CodecError
from fastlog.protocol.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def test_v0_bytes_match_kafka_python():
    from kafka.protocol.old.consumer_protocol import (
        ConsumerProtocolMemberAssignment_v0,
        ConsumerProtocolMemberMetadata_v0,
    )

    assert encode_subscription(["x", "y"]) == \
        ConsumerProtocolMemberMetadata_v0(0, ["x", "y"], b"").encode()
    assert encode_assignment([("t", 2), ("t", 0), ("a", 1)]) == \
        ConsumerProtocolMemberAssignment_v0(0, [("a", [1]), ("t", [0, 2])], b"").encode()


def test_later_versions_are_read_by_their_common_prefix():
    # Subscription v1: topics, user data, then owned partitions [topic, [partition]].
    sub_v1 = (struct.pack(">hih1s", 1, 1, 1, b"t") + struct.pack(">i", -1)
              + struct.pack(">ih1sii", 1, 1, b"t", 1, 0))
    assert decode_subscription(sub_v1) == ["t"]
    # Assignment v1 has the v0 layout.
    assign_v1 = struct.pack(">hih1siii", 1, 1, 1, b"t", 2, 4, 5) + struct.pack(">i", -1)
    assert decode_assignment(assign_v1) == [("t", 4), ("t", 5)]


def test_empty_assignment_is_no_partitions():
    assert decode_assignment(b"") == []


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64))
def test_bad_bytes_raise_codec_error_only(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except CodecError:
            pass


@settings(max_examples=150, deadline=None)
@given(st.sets(st.tuples(st.sampled_from(["a", "bb", "c-1"]), st.integers(0, 1 << 20))))
def test_assignment_round_trips(pairs):
    assert sorted(decode_assignment(encode_assignment(pairs))) == sorted(pairs)


def test_truncated_subscription_raises():
    with pytest.raises(CodecError):
        decode_subscription(encode_subscription(["topic"])[:-6])
