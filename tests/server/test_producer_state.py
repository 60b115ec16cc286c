"""Idempotent and transactional producer state: duplicates, sequence gaps, epochs, open
transactions and the last stable offset, markers and their fencing, snapshots."""

import struct

import crc32c
import pytest

from fastlog import _codec
from fastlog.server.producer_state import (
    INT32_MAX,
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
    ProducerStateManager,
    TransactionCoordinatorFenced,
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


# ---------------------------------------------------------------------------- transactions
def txn_appended(ps, pid, epoch, seq, count, offset):
    assert ps.check(pid, epoch, seq, count, True) is None
    ps.update(pid, epoch, seq, count, offset, offset + count - 1, 1000, True)


def test_open_transactions_hold_the_last_stable_offset():
    ps = ProducerStateManager("t", 0)
    appended(ps, 1, 0, 0, 2, 0)              # plain idempotent data: stable at once
    assert ps.last_stable_offset(2) == 2
    txn_appended(ps, 2, 0, 0, 2, 2)          # producer 2 opens a transaction at 2
    txn_appended(ps, 3, 0, 0, 1, 4)          # producer 3 at 4
    txn_appended(ps, 2, 0, 2, 1, 5)          # (still the one that started at 2)
    assert ps.has_ongoing_txn(2) and ps.has_ongoing_txn(3) and not ps.has_ongoing_txn(1)
    assert ps.last_stable_offset(6) == 2
    assert ps.last_stable_offset(1) == 1     # never above the high watermark
    # a plain batch while the producer's transaction is open
    with pytest.raises(InvalidTxnState):
        ps.check(2, 0, 3, 1, False)
    done = ps.complete_txn(2, 0, False, 7, 6, 1000)   # ABORT marker at 6
    assert (done.producer_id, done.first_offset, done.last_offset, done.aborted) == (2, 2, 6, True)
    assert done.last_stable_offset == 4      # producer 3's transaction is still open
    assert not ps.has_ongoing_txn(2)
    # the marker is not below the high watermark yet: it still holds the LSO back
    assert ps.last_stable_offset(6) == 2
    assert ps.last_stable_offset(7) == 4
    done = ps.complete_txn(3, 0, True, 7, 7, 1000)     # COMMIT at 7
    assert not done.aborted and done.last_stable_offset == 8
    assert ps.last_stable_offset(8) == 8
    # a marker without data ends nothing
    assert ps.complete_txn(1, 0, True, 7, 8, 1000) is None


def test_markers_fence_older_producer_and_coordinator_epochs():
    ps = ProducerStateManager("t", 0)
    txn_appended(ps, 5, 1, 0, 1, 0)
    ps.check_marker(5, 1, 3)
    # a marker of a newer producer epoch ends the transaction and fences the old epoch
    ps.complete_txn(5, 2, False, 3, 1, 1000)
    with pytest.raises(InvalidProducerEpoch):
        ps.check(5, 1, 1, 1, True)
    with pytest.raises(InvalidProducerEpoch):
        ps.check_marker(5, 1, 3)
    with pytest.raises(TransactionCoordinatorFenced):
        ps.check_marker(5, 2, 2)
    ps.check_marker(5, 2, 4)
    # the new epoch starts at sequence 0
    assert ps.check(5, 2, 0, 1, True) is None


def test_epoch_bump_keeps_the_open_transaction():
    ps = ProducerStateManager("t", 0)
    txn_appended(ps, 5, 1, 0, 1, 10)
    txn_appended(ps, 5, 2, 0, 1, 11)
    assert ps.last_stable_offset(12) == 10
    assert ps.complete_txn(5, 2, True, 0, 12, 1000).first_offset == 10


def test_snapshot_keeps_open_transactions_and_reads_version_1(tmp_path):
    ps = ProducerStateManager("t", 0)
    txn_appended(ps, 1, 0, 0, 2, 0)
    appended(ps, 2, 0, 0, 1, 2)
    ps.complete_txn(2, 0, True, 9, 3, 1000)
    ps.update_map_end_offset(4)
    ps.write_snapshot(str(tmp_path))
    back = ProducerStateManager("t", 0)
    assert back.load_latest_snapshot(str(tmp_path), 4) == 4
    assert back.has_ongoing_txn(1) and back.last_stable_offset(4) == 0
    assert back.producers[2].coordinator_epoch == 9
    with pytest.raises(TransactionCoordinatorFenced):
        back.check_marker(2, 0, 8)
    # version 1: b"FLPS", int16 1, crc, count, then pid/epoch/last ts/batch count + batches
    body = struct.pack(">i", 1) + struct.pack(">qhqb", 7, 3, 1000, 1) + \
        struct.pack(">iiqqq", 0, 4, 10, 14, 1000)
    old = b"FLPS" + struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    (tmp_path / f"{20:020d}.snapshot").write_bytes(old)
    v1 = ProducerStateManager("t", 0)
    assert v1.load_latest_snapshot(str(tmp_path), 20) == 20
    e = v1.producers[7]
    assert (e.epoch, e.last_seq, e.coordinator_epoch, e.current_txn_first_offset) == (3, 4, -1, -1)
    assert v1.check(7, 3, 5, 1) is None


def test_snapshot_lists_the_segments_with_aborted_transactions_and_reads_version_2(tmp_path):
    ps = ProducerStateManager("t", 0)
    appended(ps, 2, 0, 0, 1, 2)
    ps.update_map_end_offset(3)
    ps.write_snapshot(str(tmp_path), [0, 1200])
    back = ProducerStateManager("t", 0)
    assert back.load_latest_snapshot(str(tmp_path), 3) == 3
    assert back.txn_index_bases == [0, 1200] and back.producers[2].last_seq == 0
    # version 2: the producers as version 3 writes them, no segment list
    body = struct.pack(">i", 1) + struct.pack(">qhqiqb", 7, 3, 1000, 4, -1, 1) + \
        struct.pack(">iiqqq", 0, 4, 10, 14, 1000)
    (tmp_path / f"{20:020d}.snapshot").write_bytes(
        b"FLPS" + struct.pack(">hI", 2, crc32c.crc32c(body)) + body)
    v2 = ProducerStateManager("t", 0)
    assert v2.load_latest_snapshot(str(tmp_path), 20) == 20
    assert v2.txn_index_bases == [] and v2.producers[7].coordinator_epoch == 4
    # a list cut short is a damaged snapshot (ignored, as any other)
    data = ps.encode_snapshot([5, 6])
    body = data[10:-8]
    cut = b"FLPS" + struct.pack(">hI", 3, crc32c.crc32c(body)) + body
    with pytest.raises(ValueError):
        ProducerStateManager("t", 0).decode_snapshot(cut)


def test_replay_applies_data_and_markers():
    ps = ProducerStateManager("t", 0)
    data = bytearray(_codec.build_batch([(1000, None, b"x")], producer_id=4, producer_epoch=0,
                                        base_sequence=0, is_transactional=True))
    marker = bytearray(_codec.build_control_batch(False, 4, 0, 1, 1001, coordinator_epoch=6))
    buf = data + marker
    batches = _codec.scan_batches(buf).batches
    assert ps.load_batch(buf, batches[0]) is None
    assert ps.has_ongoing_txn(4)
    done = ps.load_batch(buf, batches[1])
    assert (done.first_offset, done.last_offset, done.aborted) == (0, 1, True)
    assert ps.producers[4].coordinator_epoch == 6
