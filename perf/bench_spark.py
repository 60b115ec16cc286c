"""Spark source throughput: rows/s delivered into Spark micro-batches by format "fastlog".

    .venv/bin/python perf/bench_spark.py [--records 1000000] [--value-bytes 100] [--runs 2]

A real fastlog-server is started on a free port and a 2-partition topic is pre-filled
with --records records (8-byte key, --value-bytes value, uncompressed). Then, in one
local[2] SparkSession, two streaming queries run alternately into the `noop` sink with
trigger(availableNow=True), each taking everything in one micro-batch:

1. fastlog: spark.readStream.format("fastlog") over the topic (executors fetch from the
   broker and decode record batches into Arrow in compiled code);
2. memory (the anchor): a trivial Python data source yielding rows of the same shape
   (same columns, same key/value sizes, 2 partitions) as ready-made Arrow batches from
   memory -- the ceiling of the Python Data Source path.

rows/s of a run = input rows / the micro-batches' triggerExecution time (from Spark's
query progress); each source is warmed up once (worker start) and then its best of
--runs is kept.

Then two batch queries over the same rows, each against a local parquet copy of exactly
those rows (written by Spark from the fastlog read, so the same columns and values), in
the same session, alternately:

3. scan: spark.read.format("fastlog")...agg(sum(length(value))) vs the same on parquet;
4. count: ...count() vs parquet's count().

With the JVM reader's jar built (scripts/build-spark-jar.sh), the session loads it
(spark.jars) and both queries also run through it (format "fastlog" then takes the JVM
reader; the Python source above is format "fastlog-python"): jvm_vs_parquet and
jvm_count_vs_parquet.

The memory source runs both as a batch read too (scan_memory_vs_parquet,
count_memory_vs_parquet): how close any Python data source comes to parquet here, since
pyspark 4.3 hands a Python source's Arrow batches to Spark as rows, every column (no
column pruning, no columnar scan).

rows/s = rows / wall time of the action (collect), best of --runs after one warm-up.
CPU seconds of each action are counted too (the Spark JVM with its Python daemon and
workers, plus the broker for fastlog), lowest of --runs: on a shared machine wall time
wanders with other work, CPU much less (cpu_vs_parquet = parquet CPU / fastlog CPU).

With --only start, each source instead runs one availableNow query over the topic in a
fresh local[2] SparkSession per run (cold Python workers and streaming source process),
the sources alternating: seconds from start() to the query's end, whose one micro-batch
is mostly Python worker start, and first_batch_vs_memory per run (fastlog / memory).

The last line printed is a JSON object with rows_per_s (fastlog streaming),
vs_memory_source (fastlog / memory), and scan_rows_per_s / count_rows_per_s with
vs_parquet (scan) and count_vs_parquet. Needs only the package's [spark] extra.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from fastlog.spark import JVM_PYTHON_NAME, jar_path, jvm_reader_loaded  # noqa: E402
from fastlog.spark.source import kafka_schema  # noqa: E402

BATCH_ROWS = 65536


class MemoryPartition(InputPartition):
    def __init__(self, partition: int, start: int, end: int, value_bytes: int):
        super().__init__((partition, start, end))
        self.partition, self.start, self.end, self.value_bytes = (partition, start, end,
                                                                  value_bytes)


class MemoryStreamReader(DataSourceStreamReader):
    """Offsets {"mem": {"0": n, "1": n}} jump from 0 to the record count in one batch."""

    def __init__(self, schema, options):
        self.schema = schema
        self.records = int(options.get("records", "1000000"))
        self.value_bytes = int(options.get("valuebytes", "100"))

    def initialOffset(self):
        return {"mem": {"0": 0, "1": 0}}

    def latestOffset(self, start=None, limit=None):
        half = self.records // 2
        return {"mem": {"0": half, "1": self.records - half}}

    def partitions(self, start, end):
        return [MemoryPartition(int(p), start["mem"][p], end["mem"][p], self.value_bytes)
                for p in ("0", "1") if end["mem"][p] > start["mem"][p]]

    def read(self, part):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(self.schema, timezone="UTC")
        vb = part.value_bytes
        # Built once per task, then sliced: the cost left is Spark's own.
        n = BATCH_ROWS
        key_offsets = pa.py_buffer(b"".join(i.to_bytes(4, "little") for i in range(0, 8 * n + 1, 8)))
        val_offsets = pa.py_buffer(b"".join(i.to_bytes(4, "little")
                                            for i in range(0, vb * n + 1, vb)))
        keys = pa.Array.from_buffers(pa.binary(), n, [None, key_offsets,
                                                      pa.py_buffer(b"k" * (8 * n))])
        values = pa.Array.from_buffers(pa.binary(), n, [None, val_offsets,
                                                        pa.py_buffer(b"v" * (vb * n))])
        topic = pa.repeat(pa.scalar("mem", pa.string()), n)
        partition = pa.repeat(pa.scalar(part.partition, pa.int32()), n)
        ts = pa.repeat(pa.scalar(1_700_000_000_000_000, schema.field("timestamp").type), n)
        ts_type = pa.repeat(pa.scalar(0, pa.int32()), n)
        pos = part.start
        while pos < part.end:
            m = min(n, part.end - pos)
            offsets = pa.array(range(pos, pos + m), pa.int64())
            yield pa.RecordBatch.from_arrays(
                [keys.slice(0, m), values.slice(0, m), topic.slice(0, m),
                 partition.slice(0, m), offsets, ts.slice(0, m), ts_type.slice(0, m)],
                schema=schema)
            pos += m


class MemoryBatchReader(DataSourceReader):
    """The same rows as one batch read: two partitions of half the records each."""

    def __init__(self, schema, options):
        self.stream = MemoryStreamReader(schema, options)

    def partitions(self):
        s = self.stream
        return s.partitions(s.initialOffset(), s.latestOffset())

    def read(self, part):
        return self.stream.read(part)


class MemorySource(DataSource):
    @classmethod
    def name(cls):
        return "fastlog_bench_memory"

    def schema(self):
        return kafka_schema(False)

    def streamReader(self, schema):
        return MemoryStreamReader(schema, self.options)

    def reader(self, schema):
        return MemoryBatchReader(schema, self.options)


def prefill(bootstrap: str, topic: str, records: int, value_bytes: int) -> None:
    import asyncio

    from fastlog.client import Admin, Producer

    async def fill():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic, 2, 1)
        value = b"v" * value_bytes
        per_batch = max(1, (512 << 10) // (value_bytes + 20))
        async with Producer(bootstrap, linger_ms=0) as producer:
            futures = []
            now = int(time.time() * 1000)
            for p in (0, 1):
                todo = records // 2 if p == 0 else records - records // 2
                while todo:
                    n = min(per_batch, todo)
                    recs = [(now, b"%08d" % i, value, ()) for i in range(n)]
                    futures.append(await producer.send_batch(topic, p, recs))
                    todo -= n
            await producer.flush()
            for f in futures:
                await f

    asyncio.run(fill())


def run_query(spark, fmt: str, options: dict) -> tuple[int, float]:
    """(input rows, seconds of triggerExecution) of one availableNow query into noop."""
    reader = spark.readStream.format(fmt)
    for k, v in options.items():
        reader = reader.option(k, v)
    q = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"{fmt} query failed: {q.exception()}")
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    ms = sum(p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress
             if p["numInputRows"])
    parts = {}
    for p in q.recentProgress:
        if p["numInputRows"]:
            for k, v in p["durationMs"].items():
                parts[k] = parts.get(k, 0) + v
    print(f"    {fmt}: durationMs {parts}", flush=True)
    return rows, ms / 1000.0


CLK_TCK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU of root and every live descendant, with the children each already reaped."""
    children: dict[int, list[int]] = {}
    own: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        own[pid] = sum(int(x) for x in fields[11:15]) / CLK_TCK  # u/s time, reaped cu/cs
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += own.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def batch_scans(spark, broker, records: int, value_bytes: int, runs: int,
                parquet_dir: str) -> dict:
    """Best rows/s of a full scan and a count(): fastlog, a parquet copy of the same rows,
    and the memory source (the ceiling of a Python data source)."""
    from pyspark.sql import functions as F

    jvm = spark.sparkContext._gateway.proc.pid

    def kafka_df(fmt):
        return (spark.read.format(fmt).option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", "bench").option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").load())

    fastlog_df = kafka_df(python_format(spark))
    fastlog_df.write.mode("overwrite").parquet(parquet_dir)
    parquet_df = spark.read.parquet(parquet_dir)
    queries = {
        "scan": lambda df: df.agg(F.sum(F.length("value"))).collect()[0][0],
        "count": lambda df: df.count(),
    }
    memory_df = (spark.read.format("fastlog_bench_memory").option("records", str(records))
                 .option("valueBytes", str(value_bytes)).load())
    frames = {"fastlog": fastlog_df, "parquet": parquet_df, "memory": memory_df}
    if jvm_reader_loaded(spark):
        frames["jvm"] = kafka_df("fastlog")
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    answers: dict[str, set] = {}
    for run in range(runs + 1):
        for qname, query in queries.items():
            for src, df in frames.items():
                c0 = tree_cpu_seconds(jvm) + tree_cpu_seconds(broker.proc.pid)
                t0 = time.perf_counter()
                answer = query(df)
                secs = time.perf_counter() - t0
                used = tree_cpu_seconds(jvm) + tree_cpu_seconds(broker.proc.pid) - c0
                if src != "memory":  # same row count and sizes, other bytes
                    answers.setdefault(qname, set()).add(answer)
                label = "warm-up" if run == 0 else f"run {run}"
                print(f"{qname:5s} {src:8s} {label:8s} {secs:.2f} s: "
                      f"{records / secs / 1e6:.2f} M rows/s, {used:.2f} CPU s", flush=True)
                if run > 0:
                    key = f"{qname}_{src}"
                    best[key] = max(best.get(key, 0.0), records / secs)
                    cpu[key] = min(cpu.get(key, float("inf")), max(used, 0.01))
    for qname, got in answers.items():
        if len(got) != 1:
            raise RuntimeError(f"{qname}: fastlog and parquet disagree: {sorted(got)}")
    jvm_report = {}
    if "jvm" in frames:
        jvm_report = {
            "jvm_scan_rows_per_s": round(best["scan_jvm"]),
            "jvm_vs_parquet": round(best["scan_jvm"] / best["scan_parquet"], 3),
            "jvm_count_rows_per_s": round(best["count_jvm"]),
            "jvm_count_vs_parquet": round(best["count_jvm"] / best["count_parquet"], 3),
            "jvm_scan_cpu_vs_parquet": round(cpu["scan_parquet"] / cpu["scan_jvm"], 3),
            "jvm_count_cpu_vs_parquet": round(cpu["count_parquet"] / cpu["count_jvm"], 3),
        }
    return jvm_report | {
        "scan_rows_per_s": round(best["scan_fastlog"]),
        "scan_parquet_rows_per_s": round(best["scan_parquet"]),
        "vs_parquet": round(best["scan_fastlog"] / best["scan_parquet"], 3),
        "count_rows_per_s": round(best["count_fastlog"]),
        "count_parquet_rows_per_s": round(best["count_parquet"]),
        "count_vs_parquet": round(best["count_fastlog"] / best["count_parquet"], 3),
        "scan_memory_vs_parquet": round(best["scan_memory"] / best["scan_parquet"], 3),
        "count_memory_vs_parquet": round(best["count_memory"] / best["count_parquet"], 3),
        "scan_cpu_s": {k[5:]: round(v, 2) for k, v in cpu.items() if k.startswith("scan_")},
        "count_cpu_s": {k[6:]: round(v, 2) for k, v in cpu.items() if k.startswith("count_")},
        "scan_cpu_vs_parquet": round(cpu["scan_parquet"] / cpu["scan_fastlog"], 3),
        "count_cpu_vs_parquet": round(cpu["count_parquet"] / cpu["count_fastlog"], 3),
    }


def python_format(spark) -> str:
    """The Python data source's format name in this session (see fastlog.spark.register)."""
    return JVM_PYTHON_NAME if jvm_reader_loaded(spark) else "fastlog"


def new_session():
    from pyspark.sql import SparkSession

    from fastlog.spark import register

    builder = SparkSession.builder
    try:
        builder = builder.config("spark.jars", jar_path())
    except FileNotFoundError as exc:
        print(f"without the JVM reader: {exc}", flush=True)
    spark = (builder.master("local[2]").appName("bench_spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.authenticate.socketTimeout", "120s")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(MemorySource)
    return spark


IMPORTS = "fastlog.spark.source, fastlog.spark.fetch, fastlog.spark._arrow"


def worker_costs(bootstrap: str, runs: int, tasks: int = 30) -> dict:
    """What a Python worker pays for the fastlog reader outside Spark: importing the
    executor-side modules after pyspark and pyarrow (fresh interpreters, --runs of them),
    and read() of a one-record range of a one-record partition as successive tasks of one
    process (first, median of the next ones): the per-task setup."""
    import statistics
    import subprocess

    code = ("import time, pyspark.sql.datasource, pyspark.sql.pandas.types, pyarrow\n"
            f"t = time.perf_counter(); import {IMPORTS}\n"
            "print(time.perf_counter() - t)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    imports = [float(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                    capture_output=True, text=True, timeout=120).stdout)
               for _ in range(max(3, runs))]
    from fastlog.spark.source import FastlogDataSource
    prefill(bootstrap, "bench-task", 2, 10)     # one record per partition
    source = FastlogDataSource({"kafka.bootstrap.servers": bootstrap,
                                "subscribe": "bench-task", "startingOffsets": "earliest",
                                "endingOffsets": '{"bench-task":{"0":1,"1":0}}'})
    reader = source.reader(source.schema())
    part, = reader.partitions()
    times = []
    for _ in range(tasks):
        t0 = time.perf_counter()
        if sum(rb.num_rows for rb in reader.read(part)) != 1:
            raise RuntimeError("the one-record range did not read one record")
        times.append(time.perf_counter() - t0)
    out = {"import_ms": [round(t * 1000) for t in imports],
           "first_task_ms": round(times[0] * 1000, 1),
           "next_task_median_ms": round(statistics.median(times[1:]) * 1000, 2)}
    print(f"worker costs: {out}", flush=True)
    return out


def first_batches(sources: dict, records: int, runs: int) -> dict:
    """Seconds from start() to the end of an availableNow query's one micro-batch, each in
    a fresh SparkSession (cold Python workers and source process), sources alternating."""
    times: dict[str, list[float]] = {}
    for run in range(runs + 1):
        order = list(sources) if run % 2 == 0 else list(sources)[::-1]
        for name in order:
            fmt, options = sources[name]
            spark = new_session()
            try:
                reader = spark.readStream.format(fmt)
                for k, v in options.items():
                    reader = reader.option(k, v)
                t0 = time.perf_counter()
                q = (reader.load().writeStream.format("noop")
                     .trigger(availableNow=True).start())
                q.awaitTermination()
                secs = time.perf_counter() - t0
                if q.exception() is not None:
                    raise RuntimeError(f"{fmt} query failed: {q.exception()}")
                rows = sum(p["numInputRows"] for p in q.recentProgress)
                if rows != records:
                    raise RuntimeError(f"{name} delivered {rows} rows, expected {records}")
                parts = {k: v for p in q.recentProgress if p["numInputRows"]
                         for k, v in p["durationMs"].items()}
            finally:
                spark.stop()
            label = "warm-up" if run == 0 else f"run {run}"
            print(f"first batch {name:8s} {label:8s} {secs:.2f} s, durationMs {parts}",
                  flush=True)
            if run > 0:
                times.setdefault(name, []).append(secs)
    return {
        "first_batch_s": {k: [round(t, 2) for t in v] for k, v in times.items()},
        "first_batch_vs_memory": [round(a / b, 2)
                                  for a, b in zip(times["fastlog"], times["memory"], strict=True)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--only", choices=("stream", "batch", "start"),
                    help="run only the streaming (vs memory) or the batch (vs parquet) "
                         "part, or only the first micro-batch of fresh sessions (start)")
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from fastlog.testing import BrokerProcess

    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        t0 = time.perf_counter()
        prefill(broker.bootstrap, "bench", args.records, args.value_bytes)
        print(f"prefilled {args.records} records in {time.perf_counter() - t0:.1f} s",
              flush=True)
        sources = {
            "fastlog": ("fastlog", {"kafka.bootstrap.servers": broker.bootstrap,
                                    "subscribe": "bench", "startingOffsets": "earliest"}),
            "memory": ("fastlog_bench_memory", {"records": str(args.records),
                                                "valueBytes": str(args.value_bytes)}),
        }
        if args.only == "start":
            report = worker_costs(broker.bootstrap, args.runs)
            report.update(first_batches(sources, args.records, args.runs))
            report.update({"records": args.records, "value_bytes": args.value_bytes})
            print(json.dumps(report))
            return
        spark = new_session()
        sources["fastlog"] = (python_format(spark), sources["fastlog"][1])
        best: dict[str, float] = {}
        for run in range(args.runs + 1 if args.only != "batch" else 0):
            for name, (fmt, options) in sources.items():
                rows, secs = run_query(spark, fmt, options)
                if rows != args.records:
                    raise RuntimeError(f"{name} delivered {rows} rows, expected {args.records}")
                rate = rows / secs if secs else 0.0
                label = "warm-up" if run == 0 else f"run {run}"
                print(f"{name:8s} {label:8s} {rows} rows in {secs:.2f} s: "
                      f"{rate / 1e6:.2f} M rows/s", flush=True)
                if run > 0:
                    best[name] = max(best.get(name, 0.0), rate)
        report = {}
        if best:
            report.update({"rows_per_s": round(best["fastlog"]),
                           "memory_rows_per_s": round(best["memory"]),
                           "vs_memory_source": round(best["fastlog"] / best["memory"], 3)})
        if args.only != "stream":
            report.update(batch_scans(spark, broker, args.records,
                                      args.value_bytes, args.runs, str(Path(tmp) / "parquet")))
        spark.stop()
    report.update({"records": args.records, "value_bytes": args.value_bytes})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
