"""`fastlog dump-log`: output for a small segment and its indexes, --verify on damage."""

import argparse
import io
import subprocess
import sys

from fastlog._codec import build_batch, build_control_batch, scan_batches
from fastlog.cli import dump_log
from fastlog.server.log.txn_index import AbortedTxn
from tests.server.log.conftest import append_n, open_log


def _run(*argv):
    parser = argparse.ArgumentParser()
    dump_log.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dump-log", *map(str, argv)])
    out = io.StringIO()
    code = dump_log.run(args, out)
    return code, out.getvalue()


def _segment(tmp_path):
    log = open_log(tmp_path / "t-0", index_interval_bytes=100)
    append_n(log, 4, records=2, value_size=3, epoch=5)
    log.close()
    return tmp_path / "t-0" / "00000000000000000000"


def test_dump_segment_batches_and_records(tmp_path):
    stem = _segment(tmp_path)
    code, out = _run(f"{stem}.log", "--print-data")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == f"Dumping {stem}.log" and lines[1] == "Log starting offset: 0"
    batches = [ln for ln in lines if ln.startswith("baseOffset:")]
    assert len(batches) == 4
    assert batches[1].startswith("baseOffset: 2 lastOffset: 3 count: 2 ")
    assert "partitionLeaderEpoch: 5" in batches[1] and "CreateTime: 1002" in batches[1]
    assert "compresscodec: none" in batches[1] and "isvalid: true" in batches[1]
    records = [ln for ln in lines if ln.startswith("| offset:")]
    assert len(records) == 8
    assert records[3] == ("| offset: 3 CreateTime: 1002 keySize: 1 valueSize: 3 headerKeys: [] "
                          "key: k payload: BBB")


def test_dump_indexes(tmp_path):
    stem = _segment(tmp_path)
    code, out = _run(f"{stem}.index", f"{stem}.timeindex", "--verify")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Dumping {stem}.index"
    assert any(ln.startswith("offset: ") and " position: " in ln for ln in lines)
    assert any(ln.startswith("timestamp: ") for ln in lines)
    assert lines[-1] == "No corruption found"


def test_verify_reports_corruption(tmp_path):
    stem = _segment(tmp_path)
    data = bytearray(stem.with_suffix(".log").read_bytes())
    data[-5] ^= 0x10
    stem.with_suffix(".log").write_bytes(bytes(data))
    code, out = _run(f"{stem}.log", "--verify")
    assert code == 1
    assert "invalid bytes at position" in out and "CRC" in out
    assert out.count("baseOffset:") == 3
    index = stem.with_suffix(".index")
    entries = bytearray(index.read_bytes())
    entries[7] ^= 0x01  # the first entry's position no longer names a batch start
    index.write_bytes(bytes(entries))
    code, out = _run(f"{stem}.index", "--verify")
    assert code == 1 and "Index offset mismatch" in out


def test_bad_file_name_is_one_clear_error(tmp_path):
    (tmp_path / "x.txt").write_text("hi")
    proc = subprocess.run([sys.executable, "-m", "fastlog.cli.dump_log", str(tmp_path / "x.txt")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "is not a .log, .index, .timeindex or .txnindex file" in proc.stderr


def test_dump_transaction_markers_and_txn_index(tmp_path):
    log = open_log(tmp_path / "t-0")
    data = bytearray(build_batch([(1000, None, b"x")], producer_id=7, producer_epoch=2,
                                 base_sequence=0, is_transactional=True))
    log.append(data, scan_batches(data).batches, leader_epoch=0)
    for commit in (False, True):
        mk = bytearray(build_control_batch(commit, 7, 2, 0, 1001, coordinator_epoch=4))
        log.append(mk, scan_batches(mk).batches, leader_epoch=0)
    log.append_aborted_txn(AbortedTxn(7, 0, 1, 2))
    log.close()
    stem = tmp_path / "t-0" / "00000000000000000000"
    code, out = _run(f"{stem}.log", "--deep-iteration")
    assert code == 0
    records = [ln for ln in out.splitlines() if ln.startswith("| offset:")]
    assert records[0].endswith("headerKeys: []")
    assert records[1].endswith("endTxnMarker: ABORT coordinatorEpoch: 4")
    assert records[2].endswith("endTxnMarker: COMMIT coordinatorEpoch: 4")
    assert "isTransactional: true isControl: true" in out
    code, out = _run(f"{stem}.txnindex", "--verify")
    assert code == 0
    assert out.splitlines() == [
        f"Dumping {stem}.txnindex",
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 1 lastStableOffset: 2",
        "No corruption found"]
    with open(f"{stem}.txnindex", "ab") as f:
        f.write(b"\x00\x01")
    code, out = _run(f"{stem}.txnindex", "--verify")
    assert code == 1 and "Corrupt transaction index" in out
