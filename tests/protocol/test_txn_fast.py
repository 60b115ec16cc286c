"""fastlog.protocol._txn: the compiled AddPartitionsToTxn v0-v2 and EndTxn v0-v2 readers
and answers agree with the generic codec byte for byte, and step aside (None) for every
other shape."""

import struct

import pytest
from fastlog.protocol._txn import (
    LAST_VERSION,
    encode_add_partitions_to_txn_response,
    encode_end_txn_response,
    parse_txn_request,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog.protocol import (
    ApiKey,
    Errors,
    decode_request,
    decode_request_header,
    encode_request,
    encode_response,
)

VERSIONS = range(0, LAST_VERSION + 1)


def add_frame(version, *, txn_id="tx", pid=2**40 + 3, epoch=7,
              topics=(("events", (0, 5)),), client_id="rdkafka", correlation_id=9):
    return encode_request(ApiKey.ADD_PARTITIONS_TO_TXN, version, correlation_id, client_id, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": list(ps)} for t, ps in topics]})


def end_frame(version, *, txn_id="tx", pid=2**40 + 3, epoch=7, committed=True,
              client_id="rdkafka", correlation_id=9):
    return encode_request(ApiKey.END_TXN, version, correlation_id, client_id, {
        "transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
        "committed": committed})


def generic_parse(frame):
    header, offset = decode_request_header(frame)
    req = decode_request(header.api_key, header.api_version, frame, offset)
    head = (header.api_key, header.api_version, header.correlation_id, header.client_id)
    if header.api_key == ApiKey.END_TXN:
        return (*head, req.transactional_id, req.producer_id, req.producer_epoch,
                bool(req.committed))
    return (*head, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "ü" * 40])
@pytest.mark.parametrize("txn_id", ["t", "tränsactiön-ü", "x" * 3000])
def test_reads_what_the_generic_decoder_reads(version, client_id, txn_id):
    for frame in (add_frame(version, client_id=client_id, txn_id=txn_id, pid=-1, epoch=-2,
                            correlation_id=-5,
                            topics=(("a", (0, 1, 2)), ("tøpic", (2**31 - 1,)), ("a", (3,)),
                                    ("empty", ()))),
                  add_frame(version, client_id=client_id, txn_id=txn_id, topics=()),
                  end_frame(version, client_id=client_id, txn_id=txn_id, committed=False),
                  end_frame(version, client_id=client_id, txn_id=txn_id, pid=2**63 - 1,
                            epoch=32767, correlation_id=2**31 - 1)):
        fast = parse_txn_request(memoryview(frame))
        assert fast is not None
        assert fast == generic_parse(frame)


def test_end_txn_committed_is_any_nonzero_byte():
    frame = bytearray(end_frame(1, committed=True))
    frame[-1] = 2
    assert parse_txn_request(bytes(frame))[7] is True
    assert generic_parse(bytes(frame))[7] is True


def _null_at(frame, pos):
    """`frame` with the empty string at `pos` made null (length -1)."""
    assert frame[pos:pos + 2] == b"\x00\x00"
    return frame[:pos] + b"\xff\xff" + frame[pos + 2:]


@pytest.mark.parametrize("frame, why", [
    (add_frame(3), "AddPartitionsToTxn v3 (flexible)"),
    (end_frame(3), "EndTxn v3 (flexible)"),
    (encode_request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, 1, "b", {"transactions": []}),
     "a broker's batched AddPartitionsToTxn v4"),
    (encode_request(ApiKey.ADD_OFFSETS_TO_TXN, 0, 1, "c", {
        "transactional_id": "t", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}),
     "another transactional API"),
    (_null_at(add_frame(0, txn_id="", client_id="c"), 11), "a null transactional id"),
    (_null_at(end_frame(1, txn_id="", client_id="c"), 11), "a null transactional id"),
    (_null_at(add_frame(0, txn_id="", client_id="c", topics=(("", (0,)),)), 11 + 2 + 10 + 4),
     "a null topic name"),
])
def test_other_shapes_are_left_to_the_generic_path(frame, why):
    assert parse_txn_request(frame) is None, why


def test_malformed_frames_are_left_to_the_generic_path():
    for frame in (add_frame(1), end_frame(1)):
        for n in range(len(frame)):
            assert parse_txn_request(frame[:n]) is None
        assert parse_txn_request(frame + b"\0") is None
    bad_utf8 = add_frame(0, txn_id="ab").replace(b"\x00\x02ab", b"\x00\x02\xff\xfe")
    assert parse_txn_request(bad_utf8) is None
    # counts larger than the frame could hold, and negative ones, are refused unread
    body = add_frame(0, topics=())
    assert body.endswith(b"\x00\x00\x00\x00")
    for count in (2**31 - 1, 1000, -1, -2**31):
        assert parse_txn_request(body[:-4] + struct.pack(">i", count)) is None
    one = add_frame(0, topics=(("a", ()),))
    assert one.endswith(b"\x00\x00\x00\x00")
    for count in (2**31 - 1, 1, -1):
        assert parse_txn_request(one[:-4] + struct.pack(">i", count)) is None


def generic_add_answer(version, correlation_id, results):
    return b"".join(encode_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, correlation_id, {
        "throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t, "results_by_partition": [
                {"partition_index": p, "partition_error_code": e} for p, e in ps]}
            for t, ps in results]}))


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_are_the_generic_encoders_bytes(version):
    for results in ([], [("events", [(0, Errors.NONE), (5, Errors.NONE)])],
                    [("a", [(0, Errors.CONCURRENT_TRANSACTIONS)]), ("tøpic-ü", []),
                     ("x" * 249, [(2**31 - 1, Errors.OPERATION_NOT_ATTEMPTED),
                                  (-1, Errors.UNKNOWN_TOPIC_OR_PARTITION)])]):
        for corr in (0, -1, 2**31 - 1):
            assert encode_add_partitions_to_txn_response(version, corr, results) == \
                generic_add_answer(version, corr, results)
    for err in (Errors.NONE, Errors.PRODUCER_FENCED, Errors.INVALID_TXN_STATE, -1):
        assert encode_end_txn_response(version, 77, err) == b"".join(encode_response(
            ApiKey.END_TXN, version, 77, {"throttle_time_ms": 0, "error_code": err}))


def test_answers_refuse_versions_they_do_not_encode():
    with pytest.raises(ValueError):
        encode_end_txn_response(3, 1, 0)
    with pytest.raises(ValueError):
        encode_add_partitions_to_txn_response(3, 1, [])


names = st.text(min_size=0, max_size=30)


@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), txn_id=names,
       client_id=st.one_of(st.none(), names),
       pid=st.integers(-2**63, 2**63 - 1), epoch=st.integers(-2**15, 2**15 - 1),
       topics=st.lists(st.tuples(names, st.lists(st.integers(-2**31, 2**31 - 1),
                                                 max_size=4)), max_size=4),
       committed=st.booleans(), corr=st.integers(-2**31, 2**31 - 1))
def test_any_request_reads_as_the_generic_decoder_reads(version, txn_id, client_id, pid,
                                                        epoch, topics, committed, corr):
    for frame in (add_frame(version, txn_id=txn_id, client_id=client_id, pid=pid,
                            epoch=epoch, topics=topics, correlation_id=corr),
                  end_frame(version, txn_id=txn_id, client_id=client_id, pid=pid,
                            epoch=epoch, committed=committed, correlation_id=corr)):
        assert parse_txn_request(frame) == generic_parse(frame)


@settings(max_examples=200, deadline=None)
@given(frame=st.binary(max_size=64), key=st.sampled_from([24, 26]),
       version=st.integers(0, 3))
def test_any_bytes_are_read_or_refused_never_misread(frame, key, version):
    frame = struct.pack(">hh", key, version) + frame
    fast = parse_txn_request(frame)
    if fast is not None:
        assert fast == generic_parse(frame)
