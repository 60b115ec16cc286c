"""__transaction_state record formats: round trips, Kafka's byte layout, v1 (flexible)
values, tombstones, and arbitrary bytes (SchemaError only)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlog.server.group.schemas import SchemaError
from fastlog.server.txn.schemas import (
    TxnRecord,
    TxnState,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)


def test_key_layout_and_round_trip():
    key = encode_txn_key("tx-1")
    assert key == b"\x00\x00" + b"\x00\x04tx-1"
    assert decode_txn_key(key) == "tx-1"


def test_value_v0_layout():
    rec = TxnRecord(1000, 3, 60000, TxnState.ONGOING, {("b", 1), ("a", 0), ("a", 2)},
                    last_update_ms=111, start_ms=100)
    expected = (struct.pack(">hqhib", 0, 1000, 3, 60000, 1) + struct.pack(">i", 2)
                + b"\x00\x01a" + struct.pack(">iii", 2, 0, 2)
                + b"\x00\x01b" + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 111, 100))
    assert encode_txn_value(rec) == expected
    assert decode_txn_value(expected) == rec


def test_value_v1_flexible_is_read():
    # v1: compact strings/arrays (length + 1), a tagged field section per partition
    # entry and at the end (here: tag 0, previous producer id, 8 bytes).
    value = (struct.pack(">hqhib", 1, 7, 0, 1000, 4) + b"\x02"
             + b"\x02t" + b"\x03" + struct.pack(">ii", 0, 5) + b"\x00"
             + struct.pack(">qq", 9, 8) + b"\x01\x00\x08" + struct.pack(">q", 6))
    rec = decode_txn_value(value)
    assert rec.state is TxnState.COMPLETE_COMMIT and rec.partitions == {("t", 0), ("t", 5)}
    assert (rec.producer_id, rec.producer_epoch, rec.last_update_ms, rec.start_ms) == (7, 0, 9, 8)


def test_null_partitions_and_tombstone():
    value = struct.pack(">hqhib", 0, 5, 1, 10, 0) + struct.pack(">i", -1) + struct.pack(">qq", 1, 1)
    assert decode_txn_value(value).partitions == set()
    assert decode_txn_value(None) is None


def test_state_names_follow_kafka():
    assert [s.kafka_name for s in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert TxnState.from_name("PrepareCommit") is TxnState.PREPARE_COMMIT
    assert TxnState.from_name("nope") is None


@pytest.mark.parametrize("bad", [b"", b"\x00", b"\x00\x05\x00\x01x",
                                 struct.pack(">hqhib", 0, 1, 1, 1, 42) + b"\xff\xff\xff\xff"])
def test_bad_records_raise_schema_error(bad):
    with pytest.raises(SchemaError):
        decode_txn_value(bad) if len(bad) > 6 else decode_txn_key(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_arbitrary_bytes_only_schema_error(data):
    for fn in (decode_txn_key, decode_txn_value):
        try:
            fn(data)
        except SchemaError:
            pass


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**62), st.integers(-1, 32767), st.integers(1, 2**31 - 1),
       st.sampled_from(list(TxnState)),
       st.sets(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 100)), max_size=6))
def test_round_trip(pid, epoch, timeout, state, parts):
    rec = TxnRecord(pid, epoch, timeout, state, parts, 5, 4)
    assert decode_txn_value(encode_txn_value(rec)) == rec
