# fastlog/cli/dump_log.py — `fastlog dump-log`: print segment and index files, like
# Kafka's DumpLogSegments, and check them (--verify).
#
# Reads `.log` (v2 record batches; a transaction marker's type and coordinator epoch with
# --deep-iteration), `.index` (8-byte entries), `.timeindex` (12-byte entries) and
# `.txnindex` (34-byte aborted transactions) files read-only; never modifies them. Run by hand, single-threaded; the
# `fastlog` dispatcher calls add_parser() and run().
"""Dump and verify log segments and indexes."""

from __future__ import annotations

import mmap
import os
import sys

from fastlog._codec import CodecError, iter_records, scan_batches
from fastlog._index import CorruptIndexError, OffsetIndex, TimeIndex
from fastlog.server.log.txn_index import ENTRY, ENTRY_SIZE, decode_entries, end_txn_marker

_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def add_parser(subparsers):
    p = subparsers.add_parser(
        "dump-log", help="print the contents of log segments and indexes",
        description="Print .log/.index/.timeindex/.txnindex files like Kafka's "
                    "DumpLogSegments.")
    p.add_argument("files", nargs="+", metavar="FILE", help="segment or index files")
    p.add_argument("--deep-iteration", action="store_true",
                   help="print every record inside each batch")
    p.add_argument("--print-data", action="store_true",
                   help="print record keys and values (implies --deep-iteration)")
    p.add_argument("--verify", action="store_true",
                   help="check CRCs, sizes and index entries; exit 1 on corruption")
    p.set_defaults(run=run)
    return p


def _base_offset(path: str) -> int:
    name = os.path.basename(path).split(".", 1)[0]
    if not name.isdigit():
        raise ValueError(f"its name is not a base offset (like "
                         f"{0:020d}{os.path.splitext(path)[1]})")
    return int(name)


def _open_map(path: str):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)


def _show(data) -> str:
    if data is None:
        return "null"
    return bytes(data).decode("utf-8", "backslashreplace")


def dump_log_file(path: str, deep: bool, print_data: bool, verify: bool, out) -> int:
    """Print one segment's batches; returns the number of problems found."""
    buf = _open_map(path)
    base = _base_offset(path)  # before any output: a bad name is an error, not a dump
    out.write(f"Dumping {path}\n")
    out.write(f"Log starting offset: {base}\n")
    result = scan_batches(buf, verify_crc=True)
    for h in result.batches:
        ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
        last_seq = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
        out.write(
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {last_seq} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} "
            f"isControl: {str(h.is_control).lower()} position: {h.position} "
            f"{ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {_CODECS.get(h.compression, h.compression)} crc: {h.crc} "
            f"isvalid: true\n")
        if deep or print_data:
            try:
                for rec in iter_records(buf, h.position):
                    line = (f"| offset: {rec.offset} {ts_type}: {rec.timestamp} "
                            f"keySize: {-1 if rec.key is None else len(rec.key)} "
                            f"valueSize: {-1 if rec.value is None else len(rec.value)} "
                            f"headerKeys: [{','.join(k for k, _ in rec.headers)}]")
                    if h.is_control:
                        marker = end_txn_marker(rec)
                        if marker is not None:
                            line += (f" endTxnMarker: {'COMMIT' if marker[0] else 'ABORT'} "
                                     f"coordinatorEpoch: {marker[1]}")
                    if print_data:
                        line += f" key: {_show(rec.key)} payload: {_show(rec.value)}"
                    out.write(line + "\n")
            except CodecError as exc:
                out.write(f"| records of batch at {h.position} unreadable: {exc}\n")
                if verify:
                    return 1
    problems = 0
    if result.error is not None:
        problems = 1
        out.write(f"Found {len(buf) - result.valid_end} invalid bytes at position "
                  f"{result.valid_end}: {result.error}\n")
    return problems if verify else 0


def _batch_last_offsets(log_path: str) -> dict[int, int] | None:
    """{position: last offset} of the valid batches of a segment, None if absent."""
    if not os.path.exists(log_path):
        return None
    buf = _open_map(log_path)
    return {h.position: h.last_offset for h in scan_batches(buf, verify_crc=False).batches}


def _sanity(idx, what: str, out) -> int:
    try:
        idx.sanity_check()
    except CorruptIndexError as exc:
        out.write(f"Corrupt {what}: {exc}\n")
        return 1
    return 0


def dump_index_file(path: str, verify: bool, out) -> int:
    base = _base_offset(path)
    log_path = path[: -len(".index")] + ".log"
    idx = OffsetIndex(path, base, writable=False)
    out.write(f"Dumping {path}\n")
    problems = 0
    batches = _batch_last_offsets(log_path) if verify else None
    try:
        for n in range(idx.entries):
            offset, position = idx.entry(n)
            if n > 0 and offset == base:
                break  # the zero-filled tail of a preallocated (active) index
            out.write(f"offset: {offset} position: {position}\n")
            if batches is not None and batches.get(position) != offset:
                problems += 1
                out.write(f"Index offset mismatch: entry {n} says offset {offset} at position "
                          f"{position}, the segment has "
                          f"{'no batch there' if position not in batches else batches[position]}\n")
        if verify:
            problems += _sanity(idx, "index", out)
    finally:
        idx.close_handler()
    return problems


def dump_time_index_file(path: str, verify: bool, out) -> int:
    base = _base_offset(path)
    idx = TimeIndex(path, base, writable=False)
    out.write(f"Dumping {path}\n")
    problems = 0
    try:
        for n in range(idx.entries):
            ts, offset = idx.entry(n)
            if n > 0 and ts == 0 and offset == base:
                break
            out.write(f"timestamp: {ts} offset: {offset}\n")
        if verify:
            problems += _sanity(idx, "time index", out)
    finally:
        idx.close_handler()
    return problems


def dump_txn_index_file(path: str, verify: bool, out) -> int:
    """Print a .txnindex's aborted transactions (Kafka's lines), each whole entry as it
    is; --verify checks them (version, offsets within the segment and increasing)."""
    base = _base_offset(path)
    with open(path, "rb") as f:
        data = f.read()
    out.write(f"Dumping {path}\n")
    for pos in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        out.write(f"version: {version} producerId: {pid} firstOffset: {first} "
                  f"lastOffset: {last} lastStableOffset: {lso}\n")
    if not verify:
        return 0
    try:
        decode_entries(data, base)
    except CorruptIndexError as exc:
        out.write(f"Corrupt transaction index: {exc}\n")
        return 1
    return 0


def run(args, out=None) -> int:
    """0: all good; 1: --verify found corruption; 2: a file could not be read."""
    out = out or sys.stdout
    problems = 0
    for path in args.files:
        try:
            if path.endswith((".log", ".index", ".timeindex", ".txnindex")):
                open(path, "rb").close()  # a missing file is reported as such, not by its name
            if path.endswith(".log"):
                problems += dump_log_file(path, args.deep_iteration, args.print_data,
                                          args.verify, out)
            elif path.endswith(".index"):
                problems += dump_index_file(path, args.verify, out)
            elif path.endswith(".timeindex"):
                problems += dump_time_index_file(path, args.verify, out)
            elif path.endswith(".txnindex"):
                problems += dump_txn_index_file(path, args.verify, out)
            else:
                print(f"fastlog dump-log: {path} is not a .log, .index, .timeindex or "
                      f".txnindex file", file=sys.stderr)
                return 2
        except (OSError, ValueError) as exc:
            # strerror alone: str(OSError) repeats the path and shows the errno.
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            print(f"fastlog dump-log: cannot read {path}: {why[:1].lower()}{why[1:]}",
                  file=sys.stderr)
            return 2
    if args.verify:
        out.write("No corruption found\n" if problems == 0 else
                  f"Found {problems} problem(s)\n")
    return 1 if problems else 0


def main(argv=None) -> int:
    """Run dump-log on its own (python -m fastlog.cli.dump_log FILE...)."""
    import argparse

    parser = argparse.ArgumentParser(prog="fastlog")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["dump-log", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
