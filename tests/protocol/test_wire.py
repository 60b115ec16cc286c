"""Headers, whole frames, the ApiVersions table and its UNSUPPORTED_VERSION reply,
zero-copy record sets, tagged-field rules and malformed input."""

import struct
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchResponse as KpFetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KpApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest as KpProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest as KpInitProducerId

from fastlog._codec import CodecError, FileRegion, Reader, Writer
from fastlog.protocol import (
    REQUESTS,
    RESPONSES,
    SUPPORTED_VERSIONS,
    ApiKey,
    Errors,
    InvalidRequestError,
    ProtocolError,
    UnsupportedVersionError,
    api_versions_response,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    unsupported_version_response,
    warm_up,
)


def kp_request(cls, version, correlation_id=11, client_id="tester", **fields):
    req = cls[version](**fields)
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True))


def produce_v7_frame(records=b"\x00" * 70):
    topic = KpProduceRequest.TopicProduceData
    part = topic.PartitionProduceData
    return kp_request(KpProduceRequest, 7, transactional_id=None, acks=-1, timeout_ms=30000,
                      topic_data=[topic(name="t", partition_data=[
                          part(index=0, records=records), part(index=1, records=None)])])


# --- headers -----------------------------------------------------------------------------

def test_request_header_v1_gives_fields_and_body_offset():
    frame = produce_v7_frame()
    header, off = decode_request_header(frame)
    assert header == (ApiKey.PRODUCE, 7, 11, "tester")
    assert off == 2 + 2 + 4 + 2 + len("tester")


def test_request_header_v2_skips_the_tag_buffer_and_keeps_client_id_non_compact():
    frame = kp_request(KpApiVersionsRequest, 3, client_software_name="x",
                       client_software_version="1")
    header, off = decode_request_header(frame)
    assert header == (ApiKey.API_VERSIONS, 3, 11, "tester")
    assert frame[10:16] == b"tester"  # int16 length 6 at 8..10, not a compact length
    assert off == 16 + 1
    req = decode_request(18, 3, frame, off)
    assert (req.client_software_name, req.client_software_version) == ("x", "1")


def test_null_client_id_is_none():
    frame = encode_request(ApiKey.METADATA, 1, 5, None, {"topics": None})
    header, _ = decode_request_header(frame)
    assert header.client_id is None


def test_unknown_api_key_still_yields_the_header():
    frame = struct.pack(">hhih", 999, 0, 42, 1) + b"c" + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as ei:
        decode_request_header(frame)
    assert ei.value.header == (999, 0, 42, "c")
    assert ei.value.body_offset == 11
    assert unsupported_version_response(ei.value.header) is None


def test_unserved_version_of_a_known_api_is_unsupported():
    frame = kp_request(KpProduceRequest, 12, transactional_id=None, acks=1, timeout_ms=1,
                       topic_data=[])
    with pytest.raises(UnsupportedVersionError) as ei:
        decode_request_header(frame)
    assert ei.value.header.api_version == 12
    assert ei.value.body_offset == 2 + 2 + 4 + 2 + len("tester") + 1  # v2 header: tag buffer
    assert unsupported_version_response(ei.value.header) is None  # Kafka closes


@pytest.mark.parametrize("cut", range(0, 10))
def test_truncated_header_is_invalid_request(cut):
    frame = produce_v7_frame()[:cut]
    with pytest.raises(InvalidRequestError) as ei:
        decode_request_header(frame)
    assert ei.value.header is None


# --- ApiVersions -------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_answers_with_our_table_and_a_v0_header(version):
    parts = encode_response(18, version, 77, api_versions_response())
    data = b"".join(parts)
    assert data[:4] == struct.pack(">i", 77)
    assert data[4:6] == b"\x00\x00"  # error_code right after the correlation id: header v0
    body = KpApiVersionsResponse[version].decode(data[4:])
    assert body.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert got == {int(k): v for k, v in SUPPORTED_VERSIONS.items()}
    if version >= 3:
        assert data[-1:] == b"\x00"  # empty tag buffer: default-valued tags never written
    cid, ours = decode_response(18, version, data)
    assert cid == 77 and ours.api_keys[0].api_key == 0


def test_api_versions_v5_gets_the_v0_format_unsupported_version_reply():
    frame = struct.pack(">hhih", 18, 5, 9, 3) + b"cli" + b"\x00" + b"\x02a\x021\x00"
    with pytest.raises(UnsupportedVersionError) as ei:
        decode_request_header(frame)
    assert ei.value.body_offset == 14  # header v2: tag buffer consumed
    data = b"".join(unsupported_version_response(ei.value.header))
    assert data[:4] == struct.pack(">i", 9)
    body = KpApiVersionsResponse[0].decode(data[4:])
    assert body.error_code == Errors.UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert keys[18] == (0, 4)
    assert len(data) == 4 + 2 + 4 + 6 * len(SUPPORTED_VERSIONS)
    framed = b"".join(unsupported_version_response(ei.value.header, framed=True))
    assert framed == struct.pack(">i", len(data)) + data


def test_supported_versions_are_all_described():
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for table in (REQUESTS, RESPONSES):
            assert table[key].valid[0] <= lo and hi <= table[key].valid[1]
    # client-compatibility.md §5.2: these must be advertised from v0
    for key in (ApiKey.PRODUCE, ApiKey.API_VERSIONS, ApiKey.FIND_COORDINATOR,
                ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
                ApiKey.INIT_PRODUCER_ID):
        assert SUPPORTED_VERSIONS[key][0] == 0
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_COMMIT][0] <= 2
    assert SUPPORTED_VERSIONS[ApiKey.FETCH] == (4, 17)


# --- response headers and tagged fields --------------------------------------------------

def test_flexible_response_gets_header_v1_with_an_empty_tag_buffer():
    data = b"".join(encode_response(22, 4, 3, {"producer_id": 5, "producer_epoch": 1}))
    assert data[:5] == struct.pack(">i", 3) + b"\x00"
    assert data[5:9] == b"\x00\x00\x00\x00"  # throttle_time_ms defaulted to 0
    assert data[-1:] == b"\x00"
    cid, body = decode_response(22, 4, data)
    assert (cid, body.producer_id, body.producer_epoch, body.error_code) == (3, 5, 1, 0)


def test_non_default_tagged_field_is_written_and_read_back():
    body = dict(api_versions_response(), finalized_features_epoch=12)
    data = b"".join(encode_response(18, 3, 1, body))
    assert KpApiVersionsResponse[3].decode(data[4:]).finalized_features_epoch == 12
    assert decode_response(18, 3, data)[1].finalized_features_epoch == 12


def test_unknown_tagged_fields_in_a_request_are_skipped():
    frame = bytearray(kp_request(KpInitProducerId, 4, transactional_id=None,
                                 transaction_timeout_ms=100, producer_id=7, producer_epoch=2))
    assert frame[-1] == 0
    frame[-1:] = b"\x01\x07\x03abc"  # one tagged field, tag 7, 3 bytes
    header, off = decode_request_header(bytes(frame))
    req = decode_request(22, 4, bytes(frame), off)
    assert (req.producer_id, req.producer_epoch, req.transaction_timeout_ms) == (7, 2, 100)


def test_missing_fields_take_spec_defaults():
    data = b"".join(encode_response(1, 11, 1, {"responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 5}]}]}))
    body = KpFetchResponse[11].decode(data[4:])
    p = body.responses[0].partitions[0]
    assert (p.last_stable_offset, p.log_start_offset, p.preferred_read_replica) == (-1, -1, -1)
    assert p.records == b"" and body.session_id == 0  # empty, not null, when omitted


# --- zero copy ---------------------------------------------------------------------------

def test_produce_records_decode_as_a_view_of_the_frame():
    records = bytes(range(70))
    frame = produce_v7_frame(records)
    header, off = decode_request_header(frame)
    req = decode_request(0, 7, frame, off)
    view = req.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and view.obj is frame and bytes(view) == records
    assert req.topic_data[0].partition_data[1].records is None
    assert req.acks == -1 and req.transactional_id is None


def test_fetch_response_appends_file_regions_uncopied():
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 10 + b"BATCH-ONE" + b"BATCH-TWO!")
        f.flush()
        r1, r2 = FileRegion(f, 10, 9), FileRegion(f, 19, 10)
        body = {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "high_watermark": 9, "records": ([r1, r2], 19)},
            {"partition_index": 1, "high_watermark": 0, "records": r1},
            {"partition_index": 2, "records": memoryview(b"mv-bytes")},
            {"partition_index": 3, "records": None},
            {"partition_index": 4, "records": [r2, b"+tail"]}]}]}
        parts = encode_response(1, 11, 8, body, framed=True)
        assert sum(p is r1 for p in parts) == 2 and sum(p is r2 for p in parts) == 2
        data = b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)
    assert struct.unpack(">i", data[:4])[0] == len(data) - 4
    got = KpFetchResponse[11].decode(data[8:])
    recs = [p.records for p in got.responses[0].partitions]
    assert recs == [b"BATCH-ONEBATCH-TWO!", b"BATCH-ONE", b"mv-bytes", None,
                    b"BATCH-TWO!+tail"]


def test_warm_up_compiles_every_served_plan():
    warm_up()
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        assert set(range(lo, hi + 1)) <= set(REQUESTS[key]._decoders)
        assert set(range(lo, hi + 1)) <= set(RESPONSES[key]._encoders)


# --- malformed input ---------------------------------------------------------------------

def _frames():
    yield produce_v7_frame()
    yield kp_request(KpInitProducerId, 4, transactional_id="tx", transaction_timeout_ms=5,
                     producer_id=-1, producer_epoch=-1)
    yield encode_request(3, 8, 1, "c", {"topics": [{"name": "a"}, {"name": "b"}],
                                        "allow_auto_topic_creation": True})
    yield encode_request(11, 5, 1, "c", {"group_id": "g", "session_timeout_ms": 10,
                                         "rebalance_timeout_ms": 10, "member_id": "",
                                         "group_instance_id": None, "protocol_type": "consumer",
                                         "protocols": [{"name": "range", "metadata": b"m"}]})
    yield encode_request(1, 11, 1, "c", {"max_wait_ms": 5, "min_bytes": 1, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 3,
                                       "partition_max_bytes": 100}]}], "rack_id": ""})


@pytest.mark.parametrize("frame", list(_frames()), ids=["produce7", "initpid4", "metadata8",
                                                         "joingroup5", "fetch11"])
def test_truncation_at_every_byte_raises_invalid_request(frame):
    header, off = decode_request_header(frame)
    decode_request(header.api_key, header.api_version, frame, off)  # whole frame is fine
    for cut in range(off, len(frame)):
        with pytest.raises(InvalidRequestError):
            decode_request(header.api_key, header.api_version, frame[:cut], off)


def test_huge_array_count_in_a_small_body_raises_without_allocating():
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 8
    with pytest.raises(InvalidRequestError):
        decode_request(0, 3, body, 0)
    flex = b"\x00" + b"\xff\xff\xff\xff\x07" + b"\x00" * 4  # compact string len ~2^31
    with pytest.raises(InvalidRequestError):
        decode_request(22, 4, flex, 0)


def test_null_for_a_non_nullable_array_is_invalid():
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", -1)
    with pytest.raises(InvalidRequestError):
        decode_request(0, 3, body, 0)


def test_bad_utf8_is_invalid():
    body = struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">i", 0)  # FindCoordinator v0
    with pytest.raises(InvalidRequestError):
        decode_request(10, 0, body, 0)


@settings(max_examples=150, deadline=None)
@given(key_version=st.sampled_from([(0, 3), (0, 8), (1, 4), (1, 11), (3, 0), (3, 8), (8, 7),
                                    (11, 5), (14, 3), (18, 3), (19, 4), (22, 4), (32, 3),
                                    (44, 1)]),
       data=st.binary(max_size=120))
def test_random_bodies_decode_or_raise_invalid_request(key_version, data):
    key, version = key_version
    try:
        decode_request(key, version, data, 0)
    except InvalidRequestError:
        pass


def test_protocol_errors_are_codec_errors():
    assert issubclass(InvalidRequestError, ProtocolError)
    assert issubclass(ProtocolError, CodecError)
    with pytest.raises(ProtocolError):
        decode_response(3, 8, b"\x00\x00\x00\x01\x00")


# --- error codes -------------------------------------------------------------------------

def test_error_codes_match_kafka_numbers_and_retriable_flags():
    import kafka.errors as ke

    theirs = {c.errno: c for c in vars(ke).values()
              if isinstance(c, type) and issubclass(c, ke.BrokerResponseError)
              and getattr(c, "errno", None) is not None}
    for e in Errors:
        assert e.value in theirs, e
        if e is not Errors.CORRUPT_MESSAGE:  # retriable in Java, not in kafka-python
            assert e.retriable == theirs[e.value].retriable, e
    assert Errors.CORRUPT_MESSAGE.retriable
    assert Errors.NONE == 0 and Errors.UNSUPPORTED_VERSION == 35
    assert Errors.of(9999) is Errors.UNKNOWN_SERVER_ERROR


def test_struct_objects_have_defaults_and_round_trip_through_dicts():
    resp = RESPONSES[3].new(brokers=[{"node_id": 1, "host": "h", "port": 9092, "rack": None}])
    assert resp.throttle_time_ms == 0 and resp.topics == [] and resp.controller_id == -1
    w = Writer()
    RESPONSES[3].encoder(8)(w, resp)
    back = RESPONSES[3].decoder(8)(Reader(w.getvalue()))
    assert back.brokers[0].host == "h" and back.cluster_authorized_operations == -2**31
    assert back.to_dict()["brokers"][0]["port"] == 9092

