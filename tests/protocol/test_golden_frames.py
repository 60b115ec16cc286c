"""Request frames captured from real clients (tests/data/frames/<client>/<api>_v<ver>.bin,
written by tests/data/frames/capture.py) decode, and re-encode to the identical bytes."""

import pathlib

import pytest

from fastlog.protocol import ApiKey, decode_request, decode_request_header, encode_request

FRAMES = pathlib.Path(__file__).resolve().parent.parent / "data" / "frames"
ALL = sorted(FRAMES.glob("*/*.bin"))


def test_every_client_left_frames():
    clients = {p.parent.name for p in ALL}
    assert clients == {"kafka-python", "aiokafka", "confluent"}
    assert len(ALL) >= 30


@pytest.mark.parametrize("path", ALL, ids=[f"{p.parent.name}/{p.stem}" for p in ALL])
def test_golden_frame_decodes_and_reencodes_identically(path):
    frame = path.read_bytes()
    header, off = decode_request_header(frame)
    api, _, version = path.stem.rpartition("_v")
    assert ApiKey(header.api_key).name.lower() == api
    assert header.api_version == int(version)
    req = decode_request(header.api_key, header.api_version, frame, off)
    again = encode_request(header.api_key, header.api_version, header.correlation_id,
                           header.client_id, req)
    assert again == frame


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_produce_frames_carry_idempotent_v2_batches_uncopied(client):
    (path,) = (FRAMES / client).glob("produce_v*.bin")
    frame = path.read_bytes()
    header, off = decode_request_header(frame)
    req = decode_request(header.api_key, header.api_version, frame, off)
    assert req.acks == -1
    (topic,) = req.topic_data
    assert topic.name == "golden"
    records = topic.partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is frame
    assert records[16] == 2  # magic byte of a v2 record batch
    producer_id = int.from_bytes(records[43:51], "big", signed=True)
    assert producer_id == 4242  # the id the capture broker's InitProducerId handed out


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_join_group_frames_offer_consumer_protocols(client):
    (path,) = (FRAMES / client).glob("join_group_v*.bin")
    frame = path.read_bytes()
    header, off = decode_request_header(frame)
    req = decode_request(header.api_key, header.api_version, frame, off)
    assert req.protocol_type == "consumer"
    names = {p.name for p in req.protocols}
    assert names & {"range", "roundrobin"}
