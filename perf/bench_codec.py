"""Codec micro-benchmark: fastlog._codec against aiokafka's compiled record code and the
bare crc32c call, in one run on the same data.

Measures, for batches of 1,000 records of 100 bytes and of 16 records of 64 KiB:
  parse   - CRC check + iterate every record, touching key and value (records/s)
  build   - append every record + build the batch bytes (records/s)
  validate- header + CRC-32C validation of the uncompressed batch (GB/s), against
            crc32c.crc32c over the same bytes (the physical limit of validation).
  scan    - scan_batches over 64 MiB of 16 KiB batches in one call (log recovery), against
            one crc32c.crc32c call over the whole 64 MiB.
Prints a table, then as the LAST line a JSON object with the ratios. Not a test: timings
on a shared machine are noisy; compare ratios measured in the same run.

    .venv/bin/python perf/bench_codec.py [--reps 15] [--quick]
"""

import argparse
import json
import statistics
import sys
import time

import crc32c
from aiokafka.record import default_records as aio

from fastlog import _codec as c

if not aio.DefaultRecordBatch.__module__.endswith("_crecords.default_records"):
    sys.exit("aiokafka's compiled record code is not the one loaded; the comparison is void")

TS = 1_700_000_000_000


def _calibrate(fn, min_time):
    loops = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - t0 >= min_time or loops >= 1 << 20:
            return loops
        loops *= 2


def measure_pair(fn_a, fn_b, reps, min_time=0.05):
    """Per-call seconds [(min, median) of a, (min, median) of b].

    The two are measured alternately, rep by rep, so that load from other processes on
    a shared machine hits both alike.
    """
    loops_a = _calibrate(fn_a, min_time)
    loops_b = _calibrate(fn_b, min_time)
    a, b = [], []
    for _ in range(reps):
        for fn, loops, out in ((fn_a, loops_a, a), (fn_b, loops_b, b)):
            t0 = time.perf_counter()
            for _ in range(loops):
                fn()
            out.append((time.perf_counter() - t0) / loops)
    return (min(a), statistics.median(a)), (min(b), statistics.median(b))


def dataset(count, size):
    return [(TS + i, None, bytes([65 + i % 26]) * size) for i in range(count)]


def bench_set(name, records, reps):
    n = len(records)

    def build_ours():
        b = c.BatchBuilder()
        for ts, k, v in records:
            b.append(ts, k, v)
        return b.build()

    def build_aio():
        b = aio.DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i, (ts, k, v) in enumerate(records):
            b.append(i, ts, k, v, [])
        return b.build()

    ours_bytes = build_ours()
    aio_bytes = bytes(build_aio())
    # Same input for both parsers: the batch aiokafka built (both read it identically).
    data = aio_bytes
    assert [r.value for r in c.read_records(data)] == [r[2] for r in records]
    assert [r.value for r in c.read_records(ours_bytes)] == [r[2] for r in records]

    def parse_ours():
        for r in c.read_records(data):
            r.key  # noqa: B018 - a consumer reads both
            r.value  # noqa: B018

    def parse_aio():
        batch = aio.DefaultRecordBatch(data)
        if not batch.validate_crc():
            raise AssertionError
        for r in batch:
            r.key  # noqa: B018
            r.value  # noqa: B018

    view = memoryview(data)
    body = view[21:]

    def validate_ours():
        c.validate_batch(view)

    def crc_bare():
        crc32c.crc32c(body)

    rows = []
    results = {}
    for op, ours_fn, ref_fn, ref_name, unit in [
        ("parse", parse_ours, parse_aio, "aiokafka", "rec/s"),
        ("build", build_ours, build_aio, "aiokafka", "rec/s"),
        ("validate", validate_ours, crc_bare, "crc32c", "GB/s"),
    ]:
        (o_min, o_med), (r_min, r_med) = measure_pair(ours_fn, ref_fn, reps)
        scale = n if unit == "rec/s" else len(data) / 1e9
        rows.append((name, op, unit, scale / o_min, scale / o_med, ref_name, scale / r_min,
                     scale / r_med, r_med / o_med))
        results[op] = r_med / o_med
    return rows, results, len(data)


def bench_scan(reps):
    """scan_batches over 64 MiB of 16 KiB batches (log recovery) vs one crc32c call over
    the whole 64 MiB (the bare checksum speed, no per-batch work at all)."""
    one = c.build_batch([(TS + i, None, b"s" * 1000, None) for i in range(16)])
    blob = one * (64 * 1024 * 1024 // len(one))
    view = memoryview(blob)

    def scan():
        result = c.scan_batches(view)
        if result.error is not None:
            raise result.error

    def crc_whole():
        crc32c.crc32c(view)

    (o_min, o_med), (r_min, r_med) = measure_pair(scan, crc_whole, max(3, reps // 3))
    gb = len(blob) / 1e9
    return ("64 MiB, 16 KiB", "scan", "GB/s", gb / o_min, gb / o_med, "crc32c", gb / r_min,
            gb / r_med, r_med / o_med)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="5 repetitions only")
    args = parser.parse_args()
    reps = 5 if args.quick else args.reps

    all_rows = []
    small_rows, small, small_size = bench_set("1000 x 100 B", dataset(1000, 100), reps)
    big_rows, big, big_size = bench_set("16 x 64 KiB", dataset(16, 64 * 1024), reps)
    scan_row = bench_scan(reps)
    all_rows += small_rows + big_rows + [scan_row]

    print(f"crc32c kernel called directly: {c.CRC32C_DIRECT}; "
          f"batch sizes {small_size} B and {big_size} B; {reps} reps; best / median")
    header = (f"{'data':<14} {'op':<9} {'fastlog best':>14} {'fastlog med':>13} "
              f"{'anchor':<9} {'anchor best':>13} {'anchor med':>12} {'ratio(med)':>10}")
    print(header)
    print("-" * len(header))
    for name, op, unit, ob, om, ref, rb, rm, ratio in all_rows:
        def fmt(v, unit=unit):
            return f"{v / 1e6:9.3f}M {unit}" if unit == "rec/s" else f"{v:8.2f} {unit}"

        print(f"{name:<14} {op:<9} {fmt(ob):>14} {fmt(om):>13} {ref:<9} {fmt(rb):>13} "
              f"{fmt(rm):>12} {ratio:9.2f}x")
    print(json.dumps({
        "parse_vs_aiokafka": round(small["parse"], 3),
        "build_vs_aiokafka": round(small["build"], 3),
        "validate_vs_crc32c": round(small["validate"], 3),
        "parse_vs_aiokafka_64k": round(big["parse"], 3),
        "build_vs_aiokafka_64k": round(big["build"], 3),
        "validate_vs_crc32c_64k": round(big["validate"], 3),
        "scan_vs_crc32c": round(scan_row[-1], 3),
    }))


if __name__ == "__main__":
    main()
