"""fastlog.protocol._produce: the compiled Produce v3-v11 readers and success answers (v9+
flexible; one partition, and any number of topics and partitions) agree with the generic
codec byte for byte, and step aside (None) for every other shape."""

import struct

import pytest
from fastlog.protocol._produce import (
    FIRST_VERSION,
    LAST_VERSION,
    encode_produce_partitions,
    encode_produce_response,
    parse_produce_partitions,
    parse_produce_request,
    parse_transactional_produce_request,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog.protocol import (
    ApiKey,
    decode_request,
    decode_request_header,
    encode_request,
    encode_response,
)

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)
RECORDS = bytes(range(256)) * 3


def produce_frame(version, *, topics=(("events", ((0, RECORDS),)),), transactional_id=None,
                  acks=-1, timeout_ms=30000, client_id="rdkafka", correlation_id=7):
    body = {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": name, "partition_data": [
                {"index": i, "records": r} for i, r in parts]} for name, parts in topics]}
    return encode_request(ApiKey.PRODUCE, version, correlation_id, client_id, body)


def generic_parse(frame):
    header, offset = decode_request_header(frame)
    req = decode_request(header.api_key, header.api_version, frame, offset)
    t = req.topic_data[0]
    p = t.partition_data[0]
    return (header.api_version, header.correlation_id, header.client_id, req.acks,
            req.timeout_ms, t.name, p.index, bytes(p.records))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "ü" * 40])
@pytest.mark.parametrize("topic", ["t", "events.v1_x-y", "tøpic-ü", "x" * 249])
def test_reads_what_the_generic_decoder_reads(version, client_id, topic):
    frame = memoryview(bytearray(produce_frame(
        version, topics=((topic, ((3, RECORDS),)),), client_id=client_id, acks=1,
        timeout_ms=1500, correlation_id=-5)))
    fast = parse_produce_request(frame)
    assert fast is not None
    assert fast[:7] + (bytes(fast[7]),) == generic_parse(frame)
    assert fast[:7] == (version, -5, client_id, 1, 1500, topic, 3)


def test_records_are_a_view_of_the_frame_not_a_copy():
    buf = bytearray(produce_frame(8))
    records = parse_produce_request(memoryview(buf))[7]
    assert isinstance(records, memoryview) and not records.readonly
    records[0] = 0xAB
    assert buf[len(buf) - len(RECORDS)] == 0xAB


def test_empty_records_are_read():
    fast = parse_produce_request(produce_frame(8, topics=(("t", ((0, b""),)),)))
    assert fast is not None and bytes(fast[7]) == b""


@pytest.mark.parametrize("frame, why", [
    (produce_frame(8, transactional_id="tx"), "transactional"),
    (produce_frame(8, topics=(("a", ((0, RECORDS),)), ("b", ((0, RECORDS),)))), "two topics"),
    (produce_frame(8, topics=(("a", ((0, RECORDS), (1, RECORDS))),)), "two partitions"),
    (produce_frame(8, topics=()), "no topic"),
    (produce_frame(8, topics=(("a", ()),)), "no partition"),
    (produce_frame(8, topics=(("a", ((0, None),)),)), "null records"),
    (produce_frame(9, transactional_id="tx"), "v9 transactional"),
    (produce_frame(9, topics=(("a", ((0, RECORDS), (1, RECORDS))),)), "v9 two partitions"),
    (produce_frame(9, topics=(("a", ((0, RECORDS),)), ("b", ((0, RECORDS),)))), "v9 two topics"),
    (produce_frame(10, topics=(("a", ((0, None),)),)), "v10 null records"),
    (produce_frame(11) + b"\0", "v11 trailing byte"),
    (produce_frame(8) + b"\0", "trailing byte"),
    (produce_frame(2), "v2 (answered with an error by the handler)"),
    (produce_frame(0), "v0"),
    (encode_request(ApiKey.FETCH, 4, 1, "c", {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": []}), "another API"),
])
def test_other_shapes_are_left_to_the_generic_path(frame, why):
    assert parse_produce_request(frame) is None, why


def test_a_version_above_the_served_ones_is_left_alone():
    frame = bytearray(produce_frame(11))
    struct.pack_into(">h", frame, 2, 12)
    assert parse_produce_request(frame) is None


@pytest.mark.parametrize("version", [9, 10, 11])
def test_flexible_records_longer_than_a_one_byte_varint_are_read(version):
    records = bytes(range(256)) * 700  # 179,200 bytes: a three-byte compact length
    fast = parse_produce_request(produce_frame(version, topics=(("t", ((0, records),)),)))
    assert fast is not None and bytes(fast[7]) == records


def _tagged(frame, at):
    """`frame` with one tagged field (tag 7, 2 bytes) put in the tag buffer at `at`."""
    assert frame[at] == 0
    return frame[:at] + b"\x01\x07\x02ab" + frame[at + 1:]


@pytest.mark.parametrize("where", ["header", "partition", "topic", "request"])
def test_flexible_tagged_fields_are_left_to_the_generic_path(where):
    frame = produce_frame(9, client_id="cid")
    at = {"header": 2 + 2 + 4 + 2 + 3, "partition": len(frame) - 3,
          "topic": len(frame) - 2, "request": len(frame) - 1}[where]
    tagged = _tagged(frame, at)
    assert parse_produce_request(tagged) is None
    header, offset = decode_request_header(tagged)  # while the generic path reads it
    req = decode_request(header.api_key, header.api_version, tagged, offset)
    assert bytes(req.topic_data[0].partition_data[0].records) == RECORDS


@pytest.mark.parametrize("client_id", [None, "cid"])
def test_invalid_utf8_names_are_left_to_the_generic_path(client_id):
    frame = bytearray(produce_frame(8, topics=(("abc", ((0, RECORDS),)),), client_id=client_id))
    frame[frame.index(b"abc")] = 0xFF
    assert parse_produce_request(frame) is None
    if client_id:
        frame = bytearray(produce_frame(8, client_id=client_id))
        frame[frame.index(b"cid")] = 0xFF
        assert parse_produce_request(frame) is None


@pytest.mark.parametrize("version", [5, 9])
def test_every_truncation_is_refused(version):
    frame = produce_frame(version, client_id="cid")
    for n in range(len(frame)):
        assert parse_produce_request(frame[:n]) is None


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120), st.integers(0, 119), st.binary(min_size=1, max_size=4))
@pytest.mark.parametrize("version", [8, 9])
def test_damaged_frames_never_crash_and_never_disagree(version, tail, at, patch):
    frame = bytearray(produce_frame(version, topics=(("t", ((0, tail),)),)))
    at = min(at, len(frame) - 1)
    frame[at:at + len(patch)] = patch
    fast = parse_produce_request(bytes(frame))
    if fast is not None:
        assert fast[:7] + (bytes(fast[7]),) == generic_parse(bytes(frame))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(VERSIONS)), st.binary(max_size=64))
def test_arbitrary_bytes_after_a_produce_header_never_crash(version, body):
    frame = struct.pack(">hhih", ApiKey.PRODUCE, version, 1, -1) + body
    fast = parse_produce_request(frame)
    if fast is not None:
        assert fast[:7] + (bytes(fast[7]),) == generic_parse(frame)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("topic", ["t", "tøpic-ü", "x" * 249])
@pytest.mark.parametrize("offsets", [(0, -1, 0), (2**40, 1_700_000_000_000, 17), (-1, -1, -1)])
def test_answer_is_the_generic_encoding(version, topic, offsets):
    base_offset, append_time, start_offset = offsets
    generic = b"".join(bytes(p) for p in encode_response(ApiKey.PRODUCE, version, -9, {
        "responses": [{"name": topic, "partition_responses": [{
            "index": 4, "error_code": 0, "base_offset": base_offset,
            "log_append_time_ms": append_time, "log_start_offset": start_offset,
            "record_errors": [], "error_message": None}]}],
        "throttle_time_ms": 0}))
    assert encode_produce_response(version, -9, topic, 4, base_offset, append_time,
                                   start_offset) == generic


@pytest.mark.parametrize("version", [0, 2, 12])
def test_answer_refuses_versions_it_does_not_encode(version):
    with pytest.raises(ValueError):
        encode_produce_response(version, 1, "t", 0, 0, -1, 0)


def generic_txn_parse(frame):
    header, offset = decode_request_header(frame)
    req = decode_request(header.api_key, header.api_version, frame, offset)
    return generic_parse(frame) + (req.transactional_id,)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("txn_id", ["", "tx", "tränsactiön-ü", "x" * 200])
def test_a_transactional_id_is_read_by_its_own_reader(version, txn_id):
    frame = produce_frame(version, transactional_id=txn_id, client_id="c", acks=-1,
                          timeout_ms=900, correlation_id=3, topics=(("t", ((2, RECORDS),)),))
    fast = parse_transactional_produce_request(memoryview(frame))
    assert fast is not None
    assert fast[:7] + (bytes(fast[7]), fast[8]) == generic_txn_parse(frame)
    assert fast[8] == txn_id
    # each reader takes only its own shape
    assert parse_produce_request(frame) is None
    assert parse_transactional_produce_request(produce_frame(version)) is None


@pytest.mark.parametrize("version", [5, 9])
def test_transactional_truncations_and_bad_ids_are_refused(version):
    frame = produce_frame(version, transactional_id="tid", client_id="cid")
    for n in range(len(frame)):
        assert parse_transactional_produce_request(frame[:n]) is None
    bad = bytearray(frame)
    bad[bad.index(b"tid")] = 0xFF
    assert parse_transactional_produce_request(bytes(bad)) is None
    two = produce_frame(version, transactional_id="tid",
                        topics=(("a", ((0, RECORDS), (1, RECORDS))),))
    assert parse_transactional_produce_request(two) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60), st.integers(0, 119), st.binary(min_size=1, max_size=4))
@pytest.mark.parametrize("version", [8, 9])
def test_damaged_transactional_frames_never_disagree(version, tail, at, patch):
    frame = bytearray(produce_frame(version, transactional_id="txn",
                                    topics=(("t", ((0, tail),)),)))
    at = min(at, len(frame) - 1)
    frame[at:at + len(patch)] = patch
    for parse, generic in ((parse_transactional_produce_request, generic_txn_parse),
                           (parse_produce_request, generic_parse)):
        fast = parse(bytes(frame))
        if fast is not None:
            assert fast[:7] + (bytes(fast[7]),) + fast[8:] == generic(bytes(frame))


# ---- many partitions (parse_produce_partitions / encode_produce_partitions)

def generic_parse_all(frame):
    header, offset = decode_request_header(frame)
    req = decode_request(header.api_key, header.api_version, frame, offset)
    return (header.api_version, header.correlation_id, header.client_id, req.acks,
            req.timeout_ms, [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data])
                             for t in req.topic_data])


def _plain(fast):
    """parse_produce_partitions' answer with its record views as bytes."""
    return fast[:5] + ([(t, [(i, bytes(r)) for i, r in parts]) for t, parts in fast[5]],)


MANY = (("a", ((0, RECORDS), (7, b"xy"), (2, b""))), ("tøpic-ü", ((1, RECORDS[:9]),)),
        ("x" * 249, tuple((i, bytes([i]) * i) for i in range(150))))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "", "kafka-python", "ü" * 40])
@pytest.mark.parametrize("topics", [MANY, (("t", ((3, RECORDS),)),), MANY[2:] * 130],
                         ids=["three-topics", "one-partition", "130-topics"])
def test_many_partitions_are_read_as_the_generic_decoder_reads_them(version, client_id, topics):
    frame = memoryview(bytearray(produce_frame(version, topics=topics, client_id=client_id,
                                               acks=1, timeout_ms=1500, correlation_id=-5)))
    fast = parse_produce_partitions(frame)
    assert fast is not None
    assert _plain(fast) == generic_parse_all(frame)
    assert fast[:5] == (version, -5, client_id, 1, 1500)


def test_many_partitions_records_are_views_of_the_frame():
    buf = bytearray(produce_frame(9, topics=(("a", ((0, b"one"), (1, b"two"))),)))
    records = parse_produce_partitions(memoryview(buf))[5][0][1][1][1]
    assert isinstance(records, memoryview) and not records.readonly
    records[0] = ord("T")
    assert b"Two" in buf


@pytest.mark.parametrize("frame, why", [
    (produce_frame(8, transactional_id="tx", topics=MANY), "transactional"),
    (produce_frame(9, transactional_id="tx", topics=MANY), "v9 transactional"),
    (produce_frame(8, topics=()), "no topic"),
    (produce_frame(9, topics=()), "v9 no topic"),
    (produce_frame(8, topics=(("a", ((0, RECORDS),)), ("b", ()))), "a topic of no partition"),
    (produce_frame(10, topics=(("a", ((0, RECORDS),)), ("b", ()))), "v10 no partition"),
    (produce_frame(8, topics=(("a", ((0, RECORDS), (1, None))),)), "null records"),
    (produce_frame(11, topics=(("a", ((0, RECORDS), (1, None))),)), "v11 null records"),
    (produce_frame(11, topics=MANY) + b"\0", "v11 trailing byte"),
    (produce_frame(8, topics=MANY) + b"\0", "trailing byte"),
    (produce_frame(2, topics=MANY), "v2"),
    (encode_request(ApiKey.FETCH, 4, 1, "c", {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": []}), "another API"),
])
def test_other_shapes_of_many_partitions_are_left_to_the_generic_path(frame, why):
    assert parse_produce_partitions(frame) is None, why


@pytest.mark.parametrize("where", ["header", "partition", "topic", "request"])
def test_many_partitions_with_tagged_fields_are_left_to_the_generic_path(where):
    frame = produce_frame(9, client_id="cid", topics=(("a", ((0, b"r0"), (1, RECORDS))),))
    at = {"header": 2 + 2 + 4 + 2 + 3, "partition": len(frame) - 3,
          "topic": len(frame) - 2, "request": len(frame) - 1}[where]
    assert parse_produce_partitions(_tagged(frame, at)) is None


def test_many_partitions_with_a_name_not_utf8_are_left_to_the_generic_path():
    frame = bytearray(produce_frame(8, topics=(("ok", ((0, b"r"),)), ("abc", ((0, b"r"),)))))
    frame[frame.index(b"abc")] = 0xFF
    assert parse_produce_partitions(frame) is None


@pytest.mark.parametrize("version", [5, 9])
def test_every_truncation_of_many_partitions_is_refused(version):
    frame = produce_frame(version, client_id="cid", topics=MANY[:2])
    for n in range(len(frame)):
        assert parse_produce_partitions(frame[:n]) is None


@pytest.mark.parametrize("version", [8, 9])
def test_counts_larger_than_the_frame_are_refused_before_anything_is_made(version):
    frame = bytearray(produce_frame(version, topics=(("t", ((0, b"r"),)),), client_id=None))
    # the topic count: after the header (10 bytes, v9+ and its tag buffer), the null
    # transactional id (2 bytes, v9+ 1), acks and timeout
    at = 10 + 2 + 6
    assert _plain(parse_produce_partitions(bytes(frame)))[5] == [("t", [(0, b"r")])]
    assert frame[at:at + (4 if version < 9 else 1)] == (b"\0\0\0\1" if version < 9 else b"\2")
    if version < 9:
        struct.pack_into(">i", frame, at, 0x7FFFFFFF)
    else:
        frame[at:at + 1] = b"\xff\xff\xff\xff\x07"
    assert parse_produce_partitions(bytes(frame)) is None


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40), st.binary(max_size=40), st.integers(0, 200),
       st.binary(min_size=1, max_size=4))
@pytest.mark.parametrize("version", [8, 9])
def test_damaged_frames_of_many_partitions_never_crash_and_never_disagree(version, r1, r2, at,
                                                                         patch):
    frame = bytearray(produce_frame(version, topics=(("t", ((0, r1), (5, r2))),
                                                     ("u", ((1, r1),)))))
    at = min(at, len(frame) - 1)
    frame[at:at + len(patch)] = patch
    fast = parse_produce_partitions(bytes(frame))
    if fast is not None:
        assert _plain(fast) == generic_parse_all(bytes(frame))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("topics", [
    [("t", [(4, 0, -1, 0)])],
    [("a", [(0, 2**40, 1_700_000_000_000, 17), (9, -1, -1, -1)]), ("tøpic-ü", [(1, 5, -1, 0)])],
    [("x" * 249, [(i, i * 10, -1, i) for i in range(150)])] * 130,
], ids=["one", "two-topics", "130-topics-of-150"])
def test_answer_of_many_partitions_is_the_generic_encoding(version, topics):
    generic = b"".join(bytes(p) for p in encode_response(ApiKey.PRODUCE, version, -9, {
        "responses": [{"name": name, "partition_responses": [{
            "index": i, "error_code": 0, "base_offset": base, "log_append_time_ms": at,
            "log_start_offset": start, "record_errors": [], "error_message": None}
            for i, base, at, start in parts]} for name, parts in topics],
        "throttle_time_ms": 0}))
    assert encode_produce_partitions(version, -9, topics) == generic


@pytest.mark.parametrize("version", [0, 2, 12])
def test_answer_of_many_partitions_refuses_versions_it_does_not_encode(version):
    with pytest.raises(ValueError):
        encode_produce_partitions(version, 1, [("t", [(0, 0, -1, 0)])])
