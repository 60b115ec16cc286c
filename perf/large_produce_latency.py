"""Small-request latency while another client sends large compressed produce requests.

Every connection's requests are handled on one request loop, so a request whose checks
take long (decompressing and walking every record of a big gzip or zstd batch) would
delay every other client. fastlog checks such batches on a worker pool with the GIL
released. This script starts a fastlog broker on a free 127.0.0.1 port and:

  1. measures produce latency to topic `t` at a fixed --rate (librdkafka, linger.ms=0,
     acks=1, 100-byte records) for --probe-seconds with nothing else running: the idle
     figure;
  2. starts --streams raw connections, each sending, one after the other, Produce
     requests of one --codec batch of --batch-records records (--record-size bytes of
     text-like data each) to topic `big`, and measures the same probe meanwhile. The
     streams are bounded by --probe-seconds (plus a margin) and stop by themselves.

Prints the idle and loaded p50/p99/max, the large requests answered and their
decompressed bytes per second, and as the last line (--json: every line is JSON) the
loaded p99 over the idle p99, both measured in one broker run (goal: at most 2).
--tree runs another built checkout's broker instead of this one (an A/B of two trees).

Usage: .venv/bin/python perf/large_produce_latency.py [--codec gzip] [--batch-records N]
           [--record-size B] [--streams S] [--rate R] [--probe-seconds S] [--tree DIR]
           [--override KEY=VALUE ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from compare import latency_probe, start_fastlog  # noqa: E402

from fastlog import _codec, protocol  # noqa: E402
from fastlog.client import SyncAdmin  # noqa: E402
from fastlog.compression import CODEC_NAMES  # noqa: E402
from fastlog.protocol import ApiKey  # noqa: E402

PROBE_TOPIC, BIG_TOPIC = "t", "big"
CODECS = {name: codec for codec, name in CODEC_NAMES.items() if codec}
WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf", b"hotel",
         b"india", b"juliet", b"kilo", b"lima", b"mike", b"november", b"oscar", b"papa"]


def _big_request(codec: int, records: int, size: int) -> bytes:
    """One framed Produce v8 request: a batch of text-like records (compresses ~4:1)."""
    rng = random.Random(size)
    values = []
    for _ in range(records):
        words = []
        n = 0
        while n < size:
            w = rng.choice(WORDS) + b"%d " % rng.randrange(1000)
            words.append(w)
            n += len(w)
        values.append(b"".join(words)[:size])
    now = int(time.time() * 1000)
    records_blob = _codec.build_batch([(now, None, v) for v in values], compression=codec)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": BIG_TOPIC, "partition_data": [
                {"index": 0, "records": records_blob}]}]}
    return protocol.encode_request(ApiKey.PRODUCE, 8, 1, "large-produce", body, framed=True)


def _stream(port: int, request: bytes, stop: threading.Event, counts: list) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        while not stop.is_set():
            s.sendall(request)
            head = _recv(s, 4)
            if head is None:
                return
            if _recv(s, struct.unpack(">i", head)[0]) is None:
                return
            counts.append(1)


def _recv(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def run(opts, emit) -> dict:
    codec = CODECS[opts.codec]
    request = _big_request(codec, opts.batch_records, opts.record_size)
    raw_bytes = opts.batch_records * opts.record_size
    with tempfile.TemporaryDirectory(prefix="fastlog-large-produce-") as tmp:
        broker = start_fastlog(Path(tmp), "fastlog", tree=opts.tree,
                               extra=("log.segment.bytes=268435456", *opts.override))
        try:
            with SyncAdmin(broker.bootstrap) as admin:
                admin.create_topic(PROBE_TOPIC, 1, 1)
                admin.create_topic(BIG_TOPIC, 1, 1, {"max.message.bytes": str(64 << 20),
                                                     "retention.bytes": str(256 << 20),
                                                     "segment.bytes": str(64 << 20)})
            latency_probe(broker.bootstrap, PROBE_TOPIC, opts.rate, 1.0)   # first-use costs
            idle = latency_probe(broker.bootstrap, PROBE_TOPIC, opts.rate, opts.probe_seconds)
            stop = threading.Event()
            counts: list = []
            port = int(broker.bootstrap.rsplit(":", 1)[1])
            streams = [threading.Thread(target=_stream, args=(port, request, stop, counts),
                                        daemon=True) for _ in range(opts.streams)]
            start = time.monotonic()
            for t in streams:
                t.start()
            try:
                loaded = latency_probe(broker.bootstrap, PROBE_TOPIC, opts.rate, opts.probe_seconds)
            finally:
                stop.set()
                elapsed = time.monotonic() - start
                for t in streams:
                    t.join(timeout=60)
        finally:
            broker.stop()
    result = {"codec": opts.codec, "batch_bytes": len(request), "batch_raw_bytes": raw_bytes,
              "streams": opts.streams, "idle": idle, "loaded": loaded,
              "large_requests": len(counts),
              "large_raw_mb_per_s": round(len(counts) * raw_bytes / elapsed / 1e6, 1),
              "p99_loaded_vs_idle": round(loaded["p99_ms"] / max(idle["p99_ms"], 1e-3), 2)}
    emit(result)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codec", default="gzip", choices=sorted(CODECS),
                    help="codec of the large batches (default gzip)")
    ap.add_argument("--batch-records", type=int, default=20_000,
                    help="records per large batch (default 20,000)")
    ap.add_argument("--record-size", type=int, default=1000,
                    help="bytes per record of the large batches (default 1000)")
    ap.add_argument("--streams", type=int, default=1,
                    help="connections sending large batches (default 1)")
    ap.add_argument("--rate", type=int, default=1000, help="probe records/s (default 1000)")
    ap.add_argument("--probe-seconds", type=float, default=8.0,
                    help="length of each latency probe (default 8)")
    ap.add_argument("--tree", type=Path, default=None,
                    help="run the broker of this built checkout instead")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config key for the run (repeatable), e.g. "
                         "num.network.threads=2")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    opts = ap.parse_args(argv)
    if (opts.batch_records < 1 or opts.record_size < 1 or not 1 <= opts.streams <= 16
            or opts.rate < 1 or not 0 < opts.probe_seconds <= 300
            or opts.batch_records * opts.record_size > (60 << 20)):
        print("large_produce_latency: --batch-records, --record-size, --rate and "
              "--probe-seconds (at most 300) must be positive, --streams 1 to 16, and a "
              "batch at most 60 MiB of records", file=sys.stderr)
        return 2
    if opts.tree is not None and not (opts.tree / "fastlog").is_dir():
        print(f"large_produce_latency: {opts.tree} is not a fastlog checkout", file=sys.stderr)
        return 2

    def emit(r):
        if opts.json:
            print(json.dumps(r), flush=True)
            return
        i, lo = r["idle"], r["loaded"]
        print(f"{r['codec']} batches of {r['batch_bytes'] / 1e6:.1f} MB "
              f"({r['batch_raw_bytes'] / 1e6:.0f} MB of records), {r['streams']} stream(s): "
              f"{r['large_requests']} answered, {r['large_raw_mb_per_s']} MB/s of records; "
              f"probe idle p50/p99/max {i['p50_ms']:.2f}/{i['p99_ms']:.2f}/{i['max_ms']:.1f} "
              f"ms, loaded {lo['p50_ms']:.2f}/{lo['p99_ms']:.2f}/{lo['max_ms']:.1f} ms",
              flush=True)

    r = run(opts, emit)
    print(json.dumps({"p99_loaded_vs_idle": r["p99_loaded_vs_idle"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
