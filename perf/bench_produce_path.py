"""Broker CPU per Produce request in process, tree against tree: the request path alone.

A broker (BrokerServer, single node, its data in a temporary directory) runs in this
process with a topic of --partitions partitions; Produce v10 frames of 13 keyed 100-byte
records per partition (what librdkafka sends over 1,000 partitions at linger 5 ms) go
through the broker's own instrumented request handler, as the socket server calls it, in
a shuffled order, after four unmeasured passes that give every partition its index files.
Shapes: `one` (one partition per request: librdkafka) and `all` (every partition in one
request: kafka-python, the Java client, fastlog's client). The figure is process CPU
(time.process_time) per request and per partition; no client, socket or network is in it,
so it moves less with the machine's other tenants than perf/ab_trees.py's broker CPU.

Each rep runs every tree in turn in a fresh interpreter (`--child`, with that tree first
on the path), so the trees alternate; prints one JSON line per run, then the medians and
each tree's ratio to the first one (the anchor).

    .venv/bin/python perf/bench_produce_path.py base=/tmp/base new=. --reps 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = ("one", "all")


class _Connection:
    """What the request handler reads of a socket server connection."""

    def __init__(self):
        self.state = {"listener": "PLAINTEXT"}
        self.peer = ("127.0.0.1", 1)


async def _child(opts) -> dict:
    from fastlog import _codec, protocol
    from fastlog.protocol import ApiKey
    from fastlog.server.broker import BrokerServer
    from fastlog.server.config import KafkaConfig

    rnd = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="fastlog-bench-produce-") as d:
        broker = BrokerServer(KafkaConfig({"broker.id": "1", "log.dirs": d,
                                           "listeners": "PLAINTEXT://127.0.0.1:0"}))
        await broker.startup()
        try:
            await broker.create_topic("bench", opts.partitions, 1, {})
            handle = broker.request_metrics.instrument(broker.apis.handle)
            conn = _Connection()
            now = int(time.time() * 1000)

            def records():
                return _codec.build_batch([
                    (now, b"key-%06d" % rnd.randrange(100_000), rnd.randbytes(100))
                    for _ in range(13)])

            def frame(parts) -> bytes:
                return protocol.encode_request(ApiKey.PRODUCE, 10, 1, "bench", {
                    "transactional_id": None, "acks": 1, "timeout_ms": 30_000,
                    "topic_data": [{"name": "bench", "partition_data": [
                        {"index": i, "records": records()} for i in parts]}]})

            parts = list(range(opts.partitions))
            if opts.shape == "one":
                frames = [frame([i]) for i in parts] * opts.passes
            else:
                frames = [frame(parts) for _ in range(opts.passes)]
            # Not measured: 4 x 13 records per partition (past index.interval.bytes): every
            # partition's first append and both index files are made here.
            for _ in range(4):
                for i in parts:
                    await handle(conn, memoryview(bytearray(frame([i]))))
            rnd.shuffle(frames)
            copies = [memoryview(bytearray(f)) for f in frames]   # stamped in place
            start = time.process_time()
            for f in copies:
                if await handle(conn, f) is None:
                    raise RuntimeError("a Produce request got no answer")
            cpu = time.process_time() - start
        finally:
            await broker.shutdown()
    return {"requests": len(copies),
            "cpu_us_per_request": cpu / len(copies) * 1e6,
            "cpu_us_per_partition": cpu / (opts.passes * opts.partitions) * 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", metavar="NAME=PATH")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=4, help="measured requests per partition")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shape", default="one", choices=SHAPES, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if not (1 <= opts.reps <= 50 and 1 <= opts.partitions <= 10_000
            and 1 <= opts.passes <= 100):
        print("bench_produce_path.py: --reps wants 1-50, --partitions 1-10,000, --passes "
              "1-100", file=sys.stderr)
        return 2
    if opts.child:
        print(json.dumps(asyncio.run(_child(opts))))
        return 0
    import compare  # (perf/compare.py: the NAME=PATH trees)

    trees = compare.source_trees(opts.trees or ["this=."])
    shapes = opts.shapes.split(",")
    if trees is None or not set(shapes) <= set(SHAPES):
        print(f"bench_produce_path.py: --shapes takes {','.join(SHAPES)}", file=sys.stderr)
        return 2
    per: dict[tuple[str, str], list[float]] = {}
    for rep in range(opts.reps):
        for shape in shapes:
            for name, path in trees.items():
                r = subprocess.run(
                    [sys.executable, __file__, "--child", "--shape", shape,
                     "--partitions", str(opts.partitions), "--passes", str(opts.passes)],
                    capture_output=True, text=True, timeout=600, cwd=path,
                    env=dict(os.environ, PYTHONPATH=str(path)))
                if r.returncode != 0:
                    print(f"bench_produce_path.py: {name} failed: "
                          f"{(r.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                    return 1
                out = json.loads(r.stdout.strip().splitlines()[-1])
                per.setdefault((shape, name), []).append(out["cpu_us_per_partition"])
                print(json.dumps({"rep": rep, "shape": shape, "tree": name,
                                  **{k: round(v, 2) for k, v in out.items()}}), flush=True)
    for shape in shapes:
        anchor = None
        for name in trees:
            vals = per[(shape, name)]
            med = statistics.median(vals)
            anchor = med if anchor is None else anchor
            print(json.dumps({"shape": shape, "tree": name,
                              "median_cpu_us_per_partition": round(med, 2),
                              "all": [round(v, 2) for v in vals],
                              "ratio_to_first": round(med / anchor, 3) if anchor else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
