"""A running count per key, from one fastlog topic into another, with Spark.

    .venv/bin/python examples/spark_running_count.py --bootstrap 127.0.0.1:9092 \
        --source events --sink event-counts --checkpoint /tmp/running-count-ckpt

Reads `--source` with format "fastlog" (the options are Spark's Kafka source options),
counts records per key, and after each micro-batch writes the count of every key to
`--sink` as a record whose key is the key and whose value is the count in decimal
(complete output mode: Spark gives Python sinks no update mode, so the latest record per
key is its current count). The job is the one you would write for
Spark's Kafka connector with format("kafka"); only the format name differs. Stop it with
Ctrl-C; started again with the same --checkpoint it resumes where it stopped.
"""

import argparse
import os
import signal
import sys


def build_query(spark, bootstrap: str, source: str, sink: str, checkpoint: str,
                trigger: dict | None = None):
    """Start the streaming query (the pipeline itself; also used by the tests)."""
    counts = (spark.readStream.format("fastlog")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .load()
              .groupBy("key").count()
              .selectExpr("key", "CAST(count AS STRING) AS value"))
    return (counts.writeStream.format("fastlog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("compression", "lz4")
            .option("checkpointLocation", checkpoint)
            .outputMode("complete")
            .trigger(**(trigger or {"processingTime": "2 seconds"}))
            .start())


def main() -> None:
    ap = argparse.ArgumentParser(description="running count per key, topic to topic")
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--source", default="events")
    ap.add_argument("--sink", default="event-counts")
    ap.add_argument("--checkpoint", default="/tmp/fastlog-running-count-ckpt")
    ap.add_argument("--available-now", action="store_true",
                    help="process what is there now, then stop")
    args = ap.parse_args()

    # Spark's Python workers must run this interpreter (it has pyarrow and fastlog).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from fastlog.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("fastlog-running-count")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    register(spark)
    trigger = {"availableNow": True} if args.available_now else None
    query = build_query(spark, args.bootstrap, args.source, args.sink, args.checkpoint,
                        trigger)
    # Ctrl-C sets a flag instead of interrupting a call into the JVM half-way (which leaves
    # py4j and Spark printing pages of tracebacks); the query is then stopped in order.
    stopping = []
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    while not stopping and not query.awaitTermination(1):
        pass
    if stopping:
        spark.sparkContext.setLogLevel("ERROR")   # stopping mid-batch is expected here
        query.stop()
        print(f"stopped; run again with --checkpoint {args.checkpoint} to continue",
              file=sys.stderr)
    spark.stop()


if __name__ == "__main__":
    main()
