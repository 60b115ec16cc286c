"""A Spark application run by tests/spark/test_standalone_cluster.py as its own driver
process against a standalone cluster (a SparkContext per process, so not in pytest's).

    python tests/spark/cluster_app.py MASTER_URL BOOTSTRAP TOPIC COPY_TOPIC WORKDIR EXECUTORS

It speaks JSON lines on stdout and reads commands from stdin:
1. batch: spark.read.format("fastlog") of the whole topic written by the fastlog sink
   into COPY_TOPIC (df.write.format("fastlog").mode("append")); prints {"event": "batch",
   "executors": {id: tasks}} (tasks per executor process, from the driver's status store:
   the partitions were read and written there, not in the driver);
2. stream: the topic into a parquet sink with a checkpoint, a few hundred records per
   micro-batch; prints {"event": "streaming"} after the first batch with rows, then waits
   for a line "drain" on stdin (the test meanwhile kills a worker and produces more),
   processes all available records, stops, and prints {"event": "done", "values": [...]}:
   the sink's values as Spark reads them back (only committed files count).
"""

import json
import os
import sys
import time


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def executor_tasks(spark) -> dict:
    """Tasks run per executor (not the driver), from the driver's status store."""
    summaries = spark.sparkContext._jsc.sc().statusStore().executorList(False)
    out = {}
    for i in range(summaries.size()):
        e = summaries.apply(i)
        if e.id() != "driver":
            out[e.id()] = e.totalTasks()
    return out


def main() -> None:
    master, bootstrap, topic, copy_topic, workdir, executors = sys.argv[1:7]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from fastlog.spark import register

    spark = (SparkSession.builder.master(master).appName("fastlog-cluster-test")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "512m")
             .config("spark.executor.memory", "512m")
             .config("spark.executor.cores", "1")
             .config("spark.cores.max", executors)
             .config("spark.pyspark.python", sys.executable)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             # jobs wait (bounded) until every executor has registered
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
             .config("spark.python.authenticate.socketTimeout", "120s")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    source = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
              "startingOffsets": "earliest"}

    (spark.read.format("fastlog").options(**source).load().select("key", "value")
     .write.format("fastlog").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", copy_topic).mode("append").save())
    emit(event="batch", executors=executor_tasks(spark))

    out = os.path.join(workdir, "sink")
    stream = (spark.readStream.format("fastlog").options(**source)
              .option("maxOffsetsPerTrigger", "300").load()
              .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
              .writeStream.format("parquet").option("path", out)
              .option("checkpointLocation", os.path.join(workdir, "ckpt"))
              .trigger(processingTime="300 milliseconds"))
    for attempt in range(3):
        q = stream.start()
        deadline = time.monotonic() + 180
        while q.isActive and not any(p["numInputRows"] for p in q.recentProgress):
            if time.monotonic() > deadline:
                raise SystemExit("no batch with rows within 180 s")
            time.sleep(0.1)
        if q.isActive:
            break
        # Spark gives the query's source runner a fixed 10 s to start; on a busy machine
        # it can miss that before any of our code runs: start again from the checkpoint.
        if "connect back" not in str(q.exception()) or attempt == 2:
            raise SystemExit(f"the query stopped: {q.exception()}")
    emit(event="streaming")
    if sys.stdin.readline().strip() != "drain":
        raise SystemExit("expected 'drain'")
    q.processAllAvailable()
    batches = len(q.recentProgress)
    q.stop()
    values = [r.value for r in spark.read.parquet(out).select("value").collect()]
    emit(event="done", values=values, batches=batches, executors=executor_tasks(spark))
    spark.stop()


if __name__ == "__main__":
    main()
