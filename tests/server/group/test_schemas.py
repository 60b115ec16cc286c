"""__consumer_offsets record formats: round trips, Kafka's byte layout, the partition of a
group, and bad bytes raising SchemaError only."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog.server.group.offsets import java_string_hashcode, partition_for
from fastlog.server.group.schemas import (
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetKey,
    SchemaError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)


def test_offset_key_has_kafkas_layout():
    key = encode_offset_key("g", "t", 3)
    assert key == struct.pack(">hh1sh1si", 1, 1, b"g", 1, b"t", 3)
    assert decode_key(key) == OffsetKey("g", "t", 3)


def test_group_key_has_kafkas_layout():
    assert encode_group_key("grp") == struct.pack(">hh3s", 2, 3, b"grp")
    assert decode_key(encode_group_key("grp")) == GroupKey("grp")


def test_offset_value_v3_round_trips_metadata_and_leader_epoch():
    om = OffsetAndMetadata(42, 7, "meta-ü", 1234)
    data = encode_offset_value(om)
    assert data[:2] == b"\x00\x03"
    assert decode_offset_value(data) == om


def test_offset_value_with_expiry_is_written_as_v1():
    om = OffsetAndMetadata(5, -1, "", 10, 99)
    data = encode_offset_value(om)
    assert data[:2] == b"\x00\x01"
    assert decode_offset_value(data) == om


def test_offset_value_v0_from_kafka_decodes():
    data = struct.pack(">hqh2sq", 0, 17, 2, b"md", 555)
    assert decode_offset_value(data) == OffsetAndMetadata(17, -1, "md", 555, -1)


def test_tombstones_decode_to_none():
    assert decode_offset_value(None) is None
    assert decode_group_value(None) is None


def test_group_value_round_trips_members_and_static_ids():
    g = GroupRecord("consumer", 4, "range", "m1", 1000, [
        MemberRecord("m1", None, "c1", "/127.0.0.1", 30000, 10000, b"sub1", b"asg1"),
        MemberRecord("m2", "inst-2", "c2", "/127.0.0.1", 30000, 10000, b"", b"\x00"),
    ])
    data = encode_group_value(g)
    assert data[:2] == b"\x00\x03"
    assert decode_group_value(data) == g


def test_group_value_v0_from_kafka_decodes():
    data = (struct.pack(">hh8si", 0, 8, b"consumer", 1) + struct.pack(">h5s", 5, b"range")
            + struct.pack(">h1s", 1, b"a") + struct.pack(">i", 1)
            + struct.pack(">h1sh1sh1si", 1, b"a", 1, b"c", 1, b"h", 6000)
            + struct.pack(">i2si2s", 2, b"s1", 2, b"a1"))
    g = decode_group_value(data)
    assert g.protocol == "range" and g.generation == 1 and g.leader == "a"
    assert g.members == [MemberRecord("a", None, "c", "h", 6000, 6000, b"s1", b"a1")]


def test_java_hashcode_matches_known_values():
    # Values of "".hashCode(), "a".hashCode(), "hello".hashCode() in Java.
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("a") == 97
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)


def test_partition_for_uses_abs_of_hash_mod_count():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    h = java_string_hashcode("console-consumer-1")
    assert partition_for("console-consumer-1", 50) == abs(h) % 50


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_raises_schema_error_only(data):
    for fn in (decode_key, decode_offset_value, decode_group_value):
        try:
            fn(data)
        except SchemaError:
            pass
