"""Produce latency while the log cleaner compacts a large topic, by interpreter switch interval.

The log cleaner runs Python on its own thread. While it runs, the broker's request loop
must win the interpreter lock back after each of its syscalls, and Python hands it over
only every switch interval (`fastlog.gil.switch.interval.ms`). For each interval given
(default: 5 ms, Python's own default, and 0.1 ms, fastlog's), this script starts a
fastlog broker on a free 127.0.0.1 port and:

  1. fills topic `c` (cleanup.policy=delete, --segment-mib segments) with --records keyed
     100-byte records (librdkafka, 100,000 random keys: most records are superseded);
  2. waits 2 s, sends a 1 s warm-up probe, then measures produce latency to topic `t`
     at a fixed --rate (linger.ms=0, acks=1) for --probe-seconds with nothing else
     running: the idle figure;
  3. alters `c` to cleanup.policy=compact (min.cleanable.dirty.ratio 0.01) and measures
     the same probe at once, while the cleaner's pass over `c` runs. The pass's end is
     seen in the log dir's cleaner-offset-checkpoint; the fraction of the probe it
     overlapped is printed (below 1: the pass was shorter than the probe).

Prints per interval the idle and cleaning p50/p99/max and the pass's length, and as the
last line (--json: every line is JSON) the p99 during cleaning over the idle p99 for each
interval, both measured in one broker run. Other tenants of a shared machine still move
the tails by tens of ms from run to run; the effect of the interval is the p50 during the
pass (seconds at 5 ms). Every load is bounded by its record count and a timeout.

Usage: .venv/bin/python perf/cleaner_latency.py [--records N] [--segment-mib M] [--rate R]
                                                [--probe-seconds S] [--intervals 5,0.1]
                                                [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from compare import fastlog_perf, latency_probe, start_fastlog  # noqa: E402

from fastlog.client import SyncAdmin  # noqa: E402
from fastlog.server.log.checkpoint import OffsetCheckpointFile  # noqa: E402
from fastlog.server.log.cleaner import CLEANER_OFFSET_CHECKPOINT  # noqa: E402

TOPIC, PROBE_TOPIC = "c", "t"
SETTLE_S = 2.0


def _cleaned_offset(data_dir: Path) -> int | None:
    """The cleaner's checkpointed offset of c-0: None before its first pass ends (the file
    is replaced by a rename, so it is never read half-written)."""
    return OffsetCheckpointFile(str(data_dir / CLEANER_OFFSET_CHECKPOINT)).read().get((TOPIC, 0))


def _watch_pass(data_dir: Path, done: dict, stop: threading.Event) -> None:
    """Note when the first cleaning pass of c-0 is checkpointed."""
    while not stop.is_set():
        if _cleaned_offset(data_dir) is not None:
            done["at"] = time.monotonic()
            return
        time.sleep(0.02)


def run_one(interval_ms: float, opts, emit) -> dict:
    with tempfile.TemporaryDirectory(prefix="fastlog-cleaner-latency-") as tmp:
        name = f"si-{interval_ms:g}"
        broker = start_fastlog(Path(tmp), name, extra=(
            "log.cleaner.backoff.ms=200", f"fastlog.gil.switch.interval.ms={interval_ms}"))
        data_dir = Path(tmp) / f"{name}-data"
        segment_bytes = str(opts.segment_mib << 20)
        try:
            with SyncAdmin(broker.bootstrap) as admin:
                admin.create_topic(TOPIC, 1, 1, {"cleanup.policy": "delete",
                                                 "segment.bytes": segment_bytes})
                admin.create_topic(PROBE_TOPIC, 1, 1)
                fastlog_perf(["produce", "--bootstrap-server", broker.bootstrap,
                              "--topic", TOPIC, "--num-records", opts.records,
                              "--record-size", 100, "--key-distribution", "random",
                              "--key-count", 100_000, "--acks", "1", "--linger-ms", 5,
                              "--client", "confluent"], timeout=600)
                # Let the fill's tail settle (segment flushes on the I/O worker), and let a
                # first short probe take the probe topic's first-use costs.
                time.sleep(SETTLE_S)
                latency_probe(broker.bootstrap, PROBE_TOPIC, opts.rate, 1.0)
                idle = latency_probe(broker.bootstrap, PROBE_TOPIC, opts.rate, opts.probe_seconds)
                done: dict = {}
                stop = threading.Event()
                watcher = threading.Thread(target=_watch_pass, args=(data_dir, done, stop),
                                           daemon=True)
                watcher.start()
                start = time.monotonic()
                admin.alter_configs(TOPIC, {"cleanup.policy": "compact",
                                            "min.cleanable.dirty.ratio": "0.01",
                                            "segment.bytes": segment_bytes})
                cleaning = latency_probe(broker.bootstrap, PROBE_TOPIC, opts.rate, opts.probe_seconds)
                end = time.monotonic()
                watcher.join(timeout=max(0.0, 120 - (end - start)))
                stop.set()
        finally:
            broker.stop()
    pass_end = done.get("at")
    # No pass seen within 120 s: overlap unknown (a pass that long, or none at all).
    overlap = None if pass_end is None else min(1.0, (pass_end - start) / (end - start))
    result = {"switch_interval_ms": interval_ms, "idle": idle, "cleaning": cleaning,
              "pass_s": None if pass_end is None else round(pass_end - start, 2),
              "probe_overlap": None if overlap is None else round(overlap, 2),
              "p99_cleaning_vs_idle": round(cleaning["p99_ms"] / max(idle["p99_ms"], 1e-3), 2)}
    emit(result)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=3_000_000,
                    help="keyed records in the compacted topic (default 3,000,000)")
    ap.add_argument("--segment-mib", type=int, default=8,
                    help="segment.bytes of the compacted topic, MiB (default 8)")
    ap.add_argument("--rate", type=int, default=2000, help="probe records/s (default 2000)")
    ap.add_argument("--probe-seconds", type=float, default=8.0,
                    help="length of each latency probe (default 8)")
    ap.add_argument("--intervals", default="5,0.1",
                    help="switch intervals to compare, ms (default 5,0.1)")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    opts = ap.parse_args(argv)
    try:
        intervals = [float(x) for x in opts.intervals.split(",") if x.strip()]
    except ValueError:
        print(f"cleaner_latency: --intervals takes numbers separated by commas, not "
              f"{opts.intervals!r}", file=sys.stderr)
        return 2
    if (not intervals or opts.records < 1 or opts.rate < 1 or opts.probe_seconds <= 0
            or opts.segment_mib < 1):
        print("cleaner_latency: --records, --segment-mib, --rate and --probe-seconds must be "
              "positive and --intervals not empty", file=sys.stderr)
        return 2

    def emit(r):
        if opts.json:
            print(json.dumps(r), flush=True)
            return
        i, c = r["idle"], r["cleaning"]
        seen = ("no pass seen in 120 s" if r["pass_s"] is None else
                f"{r['pass_s']} s, {r['probe_overlap']:.0%} of the probe")
        print(f"switch interval {r['switch_interval_ms']:g} ms: idle p50/p99/max "
              f"{i['p50_ms']:.2f}/{i['p99_ms']:.2f}/{i['max_ms']:.1f} ms; during the "
              f"cleaning pass ({seen}) "
              f"{c['p50_ms']:.2f}/{c['p99_ms']:.2f}/{c['max_ms']:.1f} ms; "
              f"p99 x{r['p99_cleaning_vs_idle']}", flush=True)

    results = [run_one(ms, opts, emit) for ms in intervals]
    print(json.dumps({f"p99_cleaning_vs_idle_{r['switch_interval_ms']:g}ms":
                      r["p99_cleaning_vs_idle"] for r in results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
