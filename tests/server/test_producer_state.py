"""Idempotent producer state: duplicates, sequence gaps, epochs, snapshots."""

import pytest

from fastlog.server.producer_state import (
    INT32_MAX,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerStateManager,
    UnknownProducerId,
    increment_sequence,
    list_snapshots,
)


def appended(ps, pid, epoch, seq, count, offset):
    assert ps.check(pid, epoch, seq, count) is None
    ps.update(pid, epoch, seq, count, offset, offset + count - 1, 1000)


def test_in_order_batches_are_accepted_and_duplicate_gets_original_offset():
    ps = ProducerStateManager("t", 0)
    appended(ps, 7, 0, 0, 2, 100)
    appended(ps, 7, 0, 2, 3, 102)
    dup = ps.check(7, 0, 0, 2)
    assert dup is not None and dup.first_offset == 100
    assert ps.check(7, 0, 2, 3).first_offset == 102


def test_only_last_five_batches_are_remembered():
    ps = ProducerStateManager("t", 0)
    for i in range(6):
        appended(ps, 1, 0, i, 1, i)
    assert ps.check(1, 0, 1, 1).first_offset == 1
    with pytest.raises(OutOfOrderSequence):
        ps.check(1, 0, 0, 1)


def test_gap_is_out_of_order():
    ps = ProducerStateManager("t", 0)
    appended(ps, 1, 0, 0, 1, 0)
    with pytest.raises(OutOfOrderSequence):
        ps.check(1, 0, 5, 1)


def test_unknown_producer_must_start_at_zero():
    ps = ProducerStateManager("t", 0)
    with pytest.raises(UnknownProducerId):
        ps.check(9, 0, 3, 1)
    assert ps.check(9, 0, 0, 1) is None


def test_old_epoch_is_fenced_and_new_epoch_restarts_sequences():
    ps = ProducerStateManager("t", 0)
    appended(ps, 1, 3, 0, 1, 0)
    with pytest.raises(InvalidProducerEpoch):
        ps.check(1, 2, 1, 1)
    with pytest.raises(OutOfOrderSequence):
        ps.check(1, 4, 1, 1)
    appended(ps, 1, 4, 0, 1, 1)


def test_sequence_wraps_at_int32_max():
    assert increment_sequence(INT32_MAX, 1) == 0
    ps = ProducerStateManager("t", 0)
    ps.update(1, 0, INT32_MAX - 1, 2, 0, 1, 0)
    assert ps.check(1, 0, 0, 1) is None


def test_non_idempotent_batches_are_not_tracked():
    ps = ProducerStateManager("t", 0)
    assert ps.check(-1, -1, -1, 5) is None
    ps.update(-1, -1, -1, 5, 0, 4, 0)
    assert ps.producers == {}


def test_snapshot_round_trip_and_corrupt_snapshot_ignored(tmp_path):
    ps = ProducerStateManager("t", 0)
    appended(ps, 1, 0, 0, 2, 0)
    appended(ps, 2, 1, 0, 1, 2)
    ps.update_map_end_offset(3)
    ps.write_snapshot(str(tmp_path))
    assert [o for o, _ in list_snapshots(str(tmp_path))] == [3]
    back = ProducerStateManager("t", 0)
    assert back.load_latest_snapshot(str(tmp_path), 3) == 3
    assert back.check(1, 0, 0, 2).first_offset == 0
    assert back.check(2, 1, 1, 1) is None
    # a snapshot beyond the log end (log truncated) is dropped
    assert ProducerStateManager("t", 0).load_latest_snapshot(str(tmp_path), 2) == -1
    # a damaged snapshot is ignored
    ps.write_snapshot(str(tmp_path))
    path = list_snapshots(str(tmp_path))[-1][1]
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))
    assert ProducerStateManager("t", 0).load_latest_snapshot(str(tmp_path), 10) == -1
