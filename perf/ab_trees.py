"""Broker CPU per record of two (or more) fastlog source trees, side by side.

For a change to the produce path, the figure that survives this shared machine's noise
is the broker's own CPU per record with the load alternating between trees: each rep
starts a fresh broker from each tree in turn (its data in a temporary directory), drives
it with `fastlog perf produce --client confluent` (librdkafka, 1 partition, 100 B records,
linger.ms=5), reads utime+stime from /proc, and stops it. Every tree must be built in
place (`python setup.py build_ext --inplace` inside it); the load generator is this
checkout's. Prints one JSON line per run, then the medians.

`--workload consume` measures the read side instead: the records are produced first (not
measured), then read from the beginning with `fastlog perf consume --client confluent`;
`--fetch-bytes N` sets librdkafka's max.partition.fetch.bytes and the producer's
batch.size (small ones make many fetches, so the per-fetch cost shows). Consume rows
also give the broker CPU per Fetch (the Fetch requests counted by the broker's own metrics) and the share of them answered
in compiled code (fastlog_fetch_compiled_requests_total, where the tree has it).

    git worktree add /tmp/base HEAD~1 && (cd /tmp/base && ../path/.venv/bin/python \\
        setup.py build_ext --inplace -q)
    .venv/bin/python perf/ab_trees.py base=/tmp/base new=. --reps 4 --compression none,lz4

`--partitions N` spreads the produce load over N partitions (random keys), after two
unmeasured passes that give every partition its files, as perf/scale.py's peer figure
does (librdkafka then sends about one partition per Produce request); `--client fastlog`
drives it with fastlog's own client instead, which sends every partition of a broker in
one request as kafka-python and the Java client do. Produce rows also give the broker CPU
per Produce request (the broker's own request count).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402  (perf/compare.py: broker process and load helpers)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", metavar="NAME=PATH")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--compression", default="none", help="comma-separated codecs")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all"])
    ap.add_argument("--num-records", type=int, default=1_000_000)
    ap.add_argument("--workload", default="produce", choices=["produce", "consume"])
    ap.add_argument("--client", default="confluent", choices=["confluent", "fastlog"],
                    help="produce: the load's client (fastlog's own sends every partition "
                         "of a broker in one request, as kafka-python and the Java client do)")
    ap.add_argument("--partitions", type=int, default=1,
                    help="produce: keyed records spread over this many partitions, after "
                         "two unmeasured passes that give each its files (perf/scale.py's "
                         "peer figure)")
    ap.add_argument("--fetch-bytes", type=int, default=None,
                    help="consume: librdkafka's max.partition.fetch.bytes")
    opts = ap.parse_args(argv)
    trees = compare.source_trees(opts.trees)
    if trees is None:
        return 2
    if (not 1 <= opts.reps <= 50 or not 1_000 <= opts.num_records <= 10_000_000
            or not 1 <= opts.partitions <= 10_000):
        print("ab_trees.py: --reps wants 1-50, --num-records 1,000-10,000,000 and "
              "--partitions 1-10,000", file=sys.stderr)
        return 2
    if (opts.partitions > 1 or opts.client != "confluent") and opts.workload != "produce":
        print("ab_trees.py: --partitions and --client are for --workload produce",
              file=sys.stderr)
        return 2
    per: dict[tuple[str, str], list[float]] = {}
    per_request: dict[tuple[str, str], list[float]] = {}
    for rep in range(opts.reps):
        for codec in opts.compression.split(","):
            for name, path in trees.items():
                with tempfile.TemporaryDirectory(prefix="fastlog-ab-") as d:
                    broker = compare.start_fastlog(Path(d), name, tree=path)
                    try:
                        args = ["produce", "--bootstrap-server", broker.bootstrap,
                                "--topic", "ab", "--num-records", opts.num_records,
                                "--record-size", 100, "--acks", opts.acks,
                                "--compression", codec, "--linger-ms", 5,
                                "--client", opts.client]
                        if opts.partitions > 1:
                            args += ["--partitions", opts.partitions, "--key-distribution",
                                     "random", "--key-count", 100_000]
                            # about 6 KiB per partition per pass, not measured
                            warm = max(opts.partitions * 60, opts.num_records // 20)
                            for _ in range(2):
                                compare.fastlog_perf([*args[:6], warm, *args[7:]], 300)
                        extra = {}
                        if opts.workload == "consume":
                            if opts.fetch_bytes:   # batches no larger than a fetch
                                args += ["-X", f"batch.size={opts.fetch_bytes}"]
                            compare.fastlog_perf(args, 300)
                            args = ["consume", "--bootstrap-server", broker.bootstrap,
                                    "--topic", "ab", "--num-records", opts.num_records,
                                    "--client", "confluent"]
                            if opts.fetch_bytes:
                                args += ["-X", f"max.partition.fetch.bytes={opts.fetch_bytes}"]
                        before = _request_counts(broker, opts.workload)
                        out, cpu, _ = compare.measure(
                            broker, lambda args=args: compare.fastlog_perf(args, 300))
                        after = _request_counts(broker, opts.workload)
                        if opts.workload == "produce":
                            requests = after[0] - before[0]
                            extra = {"requests": requests,
                                     "cpu_us_per_request": round(cpu / max(requests, 1) * 1e6, 1)}
                        else:
                            fetches = after[0] - before[0]
                            extra = {"fetches": fetches,
                                     "cpu_us_per_fetch": round(cpu / max(fetches, 1) * 1e6, 1),
                                     "compiled_share": round((after[1] - before[1])
                                                             / max(fetches, 1), 3)}
                    finally:
                        broker.stop()
                us = cpu / out["records"] * 1e6
                per.setdefault((codec, name), []).append(us)
                if "cpu_us_per_request" in extra:
                    per_request.setdefault((codec, name), []).append(extra["cpu_us_per_request"])
                print(json.dumps({"rep": rep, "workload": opts.workload,
                                  "compression": codec, "tree": name,
                                  "records_per_s": round(out["records_per_s"]),
                                  "cpu_us_per_record": round(us, 3), **extra,
                                  "other_cpu_pct": compare.MEASURED_OTHER[-1]}), flush=True)
    for (codec, name), vals in sorted(per.items()):
        extra = {}
        if (codec, name) in per_request:
            extra = {"median_cpu_us_per_request": statistics.median(per_request[codec, name]),
                     "all_per_request": per_request[codec, name]}
        print(json.dumps({"compression": codec, "tree": name,
                          "median_cpu_us_per_record": round(statistics.median(vals), 3),
                          "all": [round(v, 3) for v in vals], **extra}))
    return 0


def _request_counts(broker, workload: str) -> tuple[float, float]:
    """(Produce or Fetch requests, of the fetches those answered in compiled code) so
    far, from the broker's metrics (0 for a series the tree does not have)."""
    api = "Produce" if workload == "produce" else "Fetch"
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        text = r.read().decode()
    count = compiled = 0.0
    for line in text.splitlines():
        if line.startswith(f'kafka_network_requestmetrics_requests_total{{request="{api}"'):
            count += float(line.rsplit(" ", 1)[1])
        elif line.startswith("fastlog_fetch_compiled_requests_total "):
            compiled = float(line.rsplit(" ", 1)[1])
    return count, compiled


if __name__ == "__main__":
    sys.exit(main())
