"""The aborted-transaction index (.txnindex): Kafka's 34-byte entries, one file per
segment with aborted transactions (created with the first), collected for read_committed
fetches, truncated, deleted with its segment, and rebuilt from the log when damaged, or
missing where the segment needs one."""

import logging
import os
import struct

import pytest
from fastlog._index import CorruptIndexError

from fastlog._codec import build_batch, build_control_batch, scan_batches
from fastlog.server.log import Log, LogConfig
from fastlog.server.log.txn_index import AbortedTxn, decode_entries
from tests.server.log.conftest import append_n, open_log


def txn_data(log, pid, n=1, epoch=0):
    buf = bytearray(build_batch([(1000, None, b"v%d" % i) for i in range(n)], producer_id=pid,
                                producer_epoch=epoch, base_sequence=0, is_transactional=True))
    return log.append(buf, scan_batches(buf).batches, leader_epoch=0).first_offset


def marker(log, pid, commit, epoch=0):
    buf = bytearray(build_control_batch(commit, pid, epoch, 0, 1000, coordinator_epoch=1))
    return log.append(buf, scan_batches(buf).batches, leader_epoch=0).first_offset


def index_path(log, base):
    return os.path.join(log.dir, f"{base:020d}.txnindex")


def aborted_log(tmp_path):
    """Three segments; producer 1 aborts (0..3), producer 2 commits, producer 3 aborts
    across a segment boundary while producer 4's transaction stays open."""
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    first1 = txn_data(log, 1)
    txn_data(log, 2)
    txn_data(log, 1)
    end1 = marker(log, 1, False)
    log.append_aborted_txn(AbortedTxn(1, first1, end1, first1 + 1))  # (2's still open)
    marker(log, 2, True)
    first3 = txn_data(log, 3, n=5)
    first4 = txn_data(log, 4)
    log.roll()
    append_n(log, 1)
    end3 = marker(log, 3, False)
    log.append_aborted_txn(AbortedTxn(3, first3, end3, first4))
    return log, [AbortedTxn(1, first1, end1, first1 + 1), AbortedTxn(3, first3, end3, first4)]


def test_entry_format_is_kafkas():
    txn = AbortedTxn(producer_id=7, first_offset=100, last_offset=250, last_stable_offset=120)
    raw = txn.encode()
    assert len(raw) == 34
    assert raw == struct.pack(">hqqqq", 0, 7, 100, 250, 120)
    assert decode_entries(raw * 1) == [txn]
    with pytest.raises(CorruptIndexError):
        decode_entries(raw[:-1])
    with pytest.raises(CorruptIndexError):
        decode_entries(struct.pack(">hqqqq", 1, 7, 100, 250, 120))
    with pytest.raises(CorruptIndexError):   # offsets must increase
        decode_entries(raw + raw)


def test_entries_are_written_collected_and_survive_reopen(tmp_path):
    log, expected = aborted_log(tmp_path)
    active = log.segments[-1].base_offset
    assert [s.txn_index.entries for s in log.segments][-1] == [expected[1]]
    raw = open(index_path(log, active), "rb").read()
    assert raw == expected[1].encode()
    assert open(index_path(log, 0), "rb").read() == expected[0].encode()
    # a fetch from 0 up to the end sees both; from after the first abort only the second
    assert log.collect_aborted_txns(0, log.log_end_offset) == expected
    assert log.collect_aborted_txns(expected[0].last_offset + 1, log.log_end_offset) == [expected[1]]
    # a fetch that stops before producer 3's transaction began does not
    assert log.collect_aborted_txns(0, expected[1].first_offset) == [expected[0]]
    log.close()
    back = open_log(tmp_path / "t-0", segment_bytes=400)
    assert back.collect_aborted_txns(0, back.log_end_offset) == expected


@pytest.mark.parametrize("damage", ["delete", "garbage", "beyond"])
def test_missing_or_damaged_index_is_rebuilt_from_the_log(tmp_path, caplog, damage):
    log, expected = aborted_log(tmp_path)
    bases = [s.base_offset for s in log.segments]
    listed = log.txn_index_bases()
    log.close()
    path = index_path(log, bases[0])
    if damage == "delete":
        os.unlink(path)
    elif damage == "garbage":
        with open(path, "ab") as f:
            f.write(b"\x00\x07garbage")
    else:   # an entry for a marker the segment does not hold
        with open(path, "ab") as f:
            f.write(AbortedTxn(9, 10_000, 10_001, 10_002).encode())
    with caplog.at_level(logging.WARNING, logger="fastlog.server.log.log"):
        back = open_log(tmp_path / "t-0", segment_bytes=400)
        # (the broker passes its producer-state snapshot's list of segments with aborts)
        back.check_txn_indexes(listed)
    lines = [r for r in caplog.records if "transaction index" in r.getMessage()]
    assert len(lines) == 1
    assert back.collect_aborted_txns(0, back.log_end_offset) == expected
    assert open(path, "rb").read() == expected[0].encode()


def test_truncation_and_retention_keep_the_index_consistent(tmp_path):
    log, expected = aborted_log(tmp_path)
    # a follower truncation below the second abort's marker drops its entry
    log.truncate_to(expected[1].last_offset)
    assert log.collect_aborted_txns(0, log.log_end_offset) == [expected[0]]
    # retention deletes a segment's .txnindex with it
    first = log.segments[0].base_offset
    log.delete_records_before(log.segments[1].base_offset)
    assert log.delete_old_segments() >= 1
    assert log.collect_aborted_txns(log.log_start_offset, log.log_end_offset) == []
    assert not os.path.exists(index_path(log, first))


def test_segments_without_aborts_have_no_file_and_need_none(tmp_path, caplog):
    """As Kafka's: no aborted transaction, no .txnindex file (a fresh partition costs one
    inode less); a log without them (or from before transactions) opens without a word."""
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    append_n(log, 12)
    txn_data(log, 5)
    marker(log, 5, True)   # a commit needs no entry either
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert log.txn_index_bases() == []
    log.close()
    assert not any(name.endswith(".txnindex") for name in os.listdir(tmp_path / "t-0"))
    with caplog.at_level(logging.INFO, logger="fastlog.server.log.log"):
        back = open_log(tmp_path / "t-0", segment_bytes=300)
        back.check_txn_indexes([])
    assert not [r for r in caplog.records if "transaction index" in r.getMessage()]
    assert back.load_report.rebuilt_segments == 0
    assert back.collect_aborted_txns(0, back.log_end_offset) == []
    assert not any(name.endswith(".txnindex") for name in os.listdir(tmp_path / "t-0"))


def test_the_file_comes_with_the_first_abort_and_is_listed(tmp_path):
    log, expected = aborted_log(tmp_path)
    bases = [s.base_offset for s in log.segments]
    # producer 1 aborted in the first segment, producer 3 in the last; the middle has none
    assert log.txn_index_bases() == [bases[0], bases[-1]]
    assert [os.path.exists(index_path(log, b)) for b in bases] == [
        b in (bases[0], bases[-1]) for b in bases]


def test_a_lost_index_of_a_segment_without_aborts_needs_no_rebuild(tmp_path, caplog):
    log, expected = aborted_log(tmp_path)
    bases = [s.base_offset for s in log.segments]
    log.close()
    with caplog.at_level(logging.WARNING, logger="fastlog.server.log.log"):
        back = open_log(tmp_path / "t-0", segment_bytes=400)
        back.check_txn_indexes([bases[0], bases[-1], 10_000])   # (one no longer in the log)
    assert not [r for r in caplog.records if "transaction index" in r.getMessage()]
    assert back.collect_aborted_txns(0, back.log_end_offset) == expected


def test_a_read_bounds_the_aborted_transactions_it_needs(tmp_path):
    log, expected = aborted_log(tmp_path)
    segs = log.segments
    info = log.read(0, 1 << 20)
    assert info.upper_bound_offset == segs[1].base_offset
    want = [t for t in expected if t.first_offset < info.upper_bound_offset]
    assert log.collect_aborted_txns(0, info.upper_bound_offset) == want
    # bounded by the read's own limit too (the last stable offset for read_committed)
    assert log.read(0, 1 << 20, max_position=2).upper_bound_offset == 2
    last = log.read(segs[-1].base_offset, 1 << 20)
    assert last.upper_bound_offset == log.log_end_offset


def test_recovery_after_an_unclean_shutdown_restores_a_lost_entry(tmp_path):
    log, expected = aborted_log(tmp_path)
    active = log.segments[-1].base_offset
    log.close()
    open(index_path(log, active), "wb").close()   # the entry's write never reached the disk
    back = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=400), recovery_point=active,
                    clean_shutdown=False)
    assert back.collect_aborted_txns(0, back.log_end_offset) == expected
