"""fastlog.protocol._fetch: the compiled Fetch v4-v17 reader and answer agree with the
generic codec byte for byte, and step aside (None) for every other shape."""

import hashlib
import struct

import pytest
from fastlog.protocol._fetch import (
    FIRST_VERSION,
    LAST_VERSION,
    encode_fetch_response,
    parse_fetch_request,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog._codec import FileRegion
from fastlog.protocol import (
    ApiKey,
    decode_request,
    decode_request_header,
    encode_request,
    encode_response,
)

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)


def topic_id(name):
    """A 16-byte topic id for `name` (Fetch v13+ names topics by id)."""
    return hashlib.md5(name.encode()).digest()


def topic_of(version, name):
    """How Fetch `version` names the topic `name`: the name, or from v13 its id."""
    return topic_id(name) if version >= 13 else name


def fetch_frame(version, *, topics=(("events", ((0, 1234),)),), replica_id=-1,
                max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=0,
                session_id=0, session_epoch=-1, forgotten=(), rack_id="", leader_epoch=-1,
                client_id="rdkafka", correlation_id=7, last_fetched_epoch=-1,
                partition_tags=None, **tagged):
    body = {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": isolation_level,
            "session_id": session_id, "session_epoch": session_epoch,
            "topics": [{"topic": name, "topic_id": topic_id(name), "partitions": [
                {"partition": i, "current_leader_epoch": leader_epoch, "fetch_offset": off,
                 "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
                 "partition_max_bytes": 1048576, **(partition_tags or {})}
                for i, off in parts]} for name, parts in topics],
            "forgotten_topics_data": [{"topic": t, "topic_id": topic_id(t), "partitions": [0]}
                                      for t in forgotten],
            "rack_id": rack_id, **tagged}
    return encode_request(ApiKey.FETCH, version, correlation_id, client_id, body)


def generic_parse(frame):
    header, offset = decode_request_header(frame)
    req = decode_request(header.api_key, header.api_version, frame, offset)
    t = req.topics[0]
    p = t.partitions[0]
    return (header.api_version, header.correlation_id, header.client_id, req.max_wait_ms,
            req.min_bytes, req.max_bytes, req.isolation_level,
            t.topic_id if header.api_version >= 13 else t.topic, p.partition,
            p.current_leader_epoch if header.api_version >= 9 else -1, p.fetch_offset,
            p.partition_max_bytes, p.last_fetched_epoch if header.api_version >= 12 else -1)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "ü" * 40])
@pytest.mark.parametrize("topic", ["t", "tøpic-ü", "x" * 249])
def test_reads_what_the_generic_decoder_reads(version, client_id, topic):
    frame = fetch_frame(version, topics=((topic, ((3, 2**40),)),), client_id=client_id,
                        max_wait_ms=100, min_bytes=7, max_bytes=9999, isolation_level=1,
                        leader_epoch=5, correlation_id=-5, last_fetched_epoch=4)
    fast = parse_fetch_request(memoryview(frame))
    assert fast is not None
    assert fast == generic_parse(frame)
    assert fast[:9] == (version, -5, client_id, 100, 7, 9999, 1, topic_of(version, topic), 3)
    assert fast[12] == (4 if version >= 12 else -1)


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 12])
def test_flexible_names_of_every_compact_length_are_read(version):
    """Names whose compact length takes one, two and three varint bytes."""
    for topic in ("a" * 126, "b" * 127, "c" * 16383, "d" * 16384):
        frame = fetch_frame(version, topics=((topic, ((0, 5),)),))
        fast = parse_fetch_request(frame)
        assert fast is not None and fast == generic_parse(frame)


def _with_tag(frame, tags_at):
    """`frame` with one unknown tagged field (tag 9, one byte) in the (empty) tag buffer
    at `tags_at` (a negative index from the end)."""
    frame = bytearray(frame)
    assert frame[tags_at] == 0
    frame[tags_at:len(frame) + tags_at + 1] = b"\x01\x09\x01\x2a"
    return bytes(frame)


SHAPES = [
    (dict(replica_id=2), "a replica"),
    (dict(session_id=5, session_epoch=0), "a session"),
    (dict(session_id=0, session_epoch=0), "a new session"),
    (dict(forgotten=("a",)), "forgotten topics"),
    (dict(rack_id="r1"), "a rack"),
    (dict(isolation_level=2), "an unknown isolation level"),
    (dict(topics=(("a", ((0, 0),)), ("b", ((0, 0),)))), "two topics"),
    (dict(topics=(("a", ((0, 0), (1, 0))),)), "two partitions"),
    (dict(topics=()), "no topic"),
    (dict(topics=(("a", ()),)), "no partition"),
]


@pytest.mark.parametrize("version", [11, 12, 13, 15, 17])
@pytest.mark.parametrize("shape, why", SHAPES)
def test_other_shapes_are_left_to_the_generic_path(version, shape, why):
    if version >= 15 and why == "a replica":
        shape = dict(replica_state={"replica_id": 2, "replica_epoch": 1})   # (a tag)
    assert parse_fetch_request(fetch_frame(version, **shape)) is None, why


@pytest.mark.parametrize("frame, why", [
    (fetch_frame(11) + b"\0", "trailing byte"),
    (fetch_frame(12) + b"\0", "trailing byte"),
    (fetch_frame(12, cluster_id="cluster-1"), "a cluster id (a tagged field)"),
    (_with_tag(fetch_frame(12), -1), "a tag in the request's tag buffer"),
    (_with_tag(fetch_frame(12), -4), "a tag in the topic's tag buffer"),
    (_with_tag(fetch_frame(12), -5), "a tag in the partition's tag buffer"),
    (fetch_frame(13) + b"\0", "trailing byte"),
    (fetch_frame(13)[:-1], "missing byte"),
    (fetch_frame(15, cluster_id="cluster-1"), "a cluster id (a tagged field)"),
    (fetch_frame(15, replica_state={"replica_id": -1, "replica_epoch": -1}),
     "a replica state (a tagged field)"),
    (fetch_frame(17, partition_tags={"replica_directory_id": bytes(range(16))}),
     "a replica directory id (a tagged field)"),
    (_with_tag(fetch_frame(17), -1), "a tag in the request's tag buffer"),
    (_with_tag(fetch_frame(16), -4), "a tag in the topic's tag buffer"),
    (_with_tag(fetch_frame(13), -5), "a tag in the partition's tag buffer"),
    (encode_request(ApiKey.PRODUCE, 8, 1, "c", {
        "transactional_id": None, "acks": 1, "timeout_ms": 0, "topic_data": []}),
     "another API"),
])
def test_other_frames_are_left_to_the_generic_path(frame, why):
    if "tag" in why:
        generic_parse(frame)   # (a frame the generic decoder reads)
    assert parse_fetch_request(frame) is None, why


def test_a_header_tag_is_left_to_the_generic_path():
    frame = bytearray(fetch_frame(12, client_id="cid"))
    at = frame.index(b"cid") + 3
    frame[at:at + 1] = b"\x01\x09\x01\x2a"
    generic_parse(bytes(frame))
    assert parse_fetch_request(bytes(frame)) is None


@pytest.mark.parametrize("version", [3, 18])
def test_versions_not_read_here_are_left_alone(version):
    frame = bytearray(fetch_frame(11))   # (v3 has no isolation level; v18 is not served)
    struct.pack_into(">h", frame, 2, version)
    assert parse_fetch_request(frame) is None


def test_invalid_utf8_names_are_left_to_the_generic_path():
    for version in (11, 12):
        frame = bytearray(fetch_frame(version, topics=(("abc", ((0, 0),)),), client_id="cid"))
        frame[frame.index(b"abc")] = 0xFF
        assert parse_fetch_request(bytes(frame)) is None
        frame = bytearray(fetch_frame(version, client_id="cid"))
        frame[frame.index(b"cid")] = 0xFF
        assert parse_fetch_request(bytes(frame)) is None


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15, 17])
def test_every_truncation_is_refused(version):
    frame = fetch_frame(version, client_id="cid")
    for n in range(len(frame)):
        assert parse_fetch_request(frame[:n]) is None


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(list(VERSIONS)), st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_damaged_frames_never_crash_and_never_disagree(version, at, patch):
    frame = bytearray(fetch_frame(version))
    at = min(at, len(frame) - 1)
    frame[at:at + len(patch)] = patch
    fast = parse_fetch_request(bytes(frame))
    if fast is not None:
        assert fast == generic_parse(bytes(frame))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(VERSIONS)), st.binary(max_size=80))
def test_arbitrary_bytes_after_a_fetch_header_never_crash(version, body):
    frame = struct.pack(">hhih", ApiKey.FETCH, version, 1, -1) + body
    fast = parse_fetch_request(frame)
    if fast is not None:
        assert fast == generic_parse(frame)


def _flat(parts):
    """Bytes parts joined, each FileRegion as a marker (the same object must appear)."""
    out = []
    for p in parts:
        if isinstance(p, FileRegion):
            out.append(p)
        elif out and isinstance(out[-1], bytes):
            out[-1] += bytes(p)
        else:
            out.append(bytes(p))
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("topic", ["t", "tøpic-ü", "x" * 249])
@pytest.mark.parametrize("aborted", [None, [], [(7, 100), (2**40, -1)]])
@pytest.mark.parametrize("sizes", [(), (5,), (3, 4096)])
def test_answer_is_the_generic_encoding(tmp_path, version, topic, aborted, sizes):
    path = tmp_path / "seg.log"
    path.write_bytes(b"x" * 8192)
    with open(path, "rb") as f:
        regions = [FileRegion(f.fileno(), 10 * i, n) for i, n in enumerate(sizes)]
        size = sum(sizes)
        generic = encode_response(ApiKey.FETCH, version, -9, {
            "throttle_time_ms": 0, "error_code": 0, "session_id": 0, "node_endpoints": [],
            "responses": [{"topic": topic, "topic_id": topic_id(topic), "partitions": [{
                    "partition_index": 4, "error_code": 0, "high_watermark": 2**33,
                    "last_stable_offset": 17, "log_start_offset": 3,
                    "aborted_transactions": None if aborted is None else [
                        {"producer_id": pid, "first_offset": first} for pid, first in aborted],
                    "preferred_read_replica": -1,
                    "records": (regions, size) if regions else b""}]}]})
        fast = encode_fetch_response(version, -9, topic_of(version, topic), 4, 2**33, 17, 3, aborted,
                                     regions or None, size)
        assert _flat(fast) == _flat(generic)


@pytest.mark.parametrize("version", [3, 18])
def test_answer_refuses_versions_it_does_not_encode(version):
    with pytest.raises(ValueError):
        encode_fetch_response(version, 1, "t", 0, 0, 0, 0, None, None, 0)


@pytest.mark.parametrize("topic", ["t", b"short", bytes(17)])
def test_answer_from_v13_takes_a_16_byte_topic_id(topic):
    with pytest.raises(ValueError):
        encode_fetch_response(13, 1, topic, 0, 0, 0, 0, None, None, 0)
