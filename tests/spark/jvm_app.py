"""A Spark driver run by tests/spark/test_jvm_reader.py in its own process: a local[2]
session with the JVM reader's jar in spark.jars (a SparkContext per process, so not in
pytest's, whose session has no jar).

    python tests/spark/jvm_app.py JAR BOOTSTRAP CASES_JSON

CASES_JSON is a list of {"name", "kind", "options"}; for each case one JSON line is printed
with what format "fastlog" (the JVM reader, or the Python source it hands the read to) and
format "fastlog-python" (the Python source) give:
- rows: every row of each, ordered by (topic, partition, offset), as JSON-safe lists, and
  the physical plan of the "fastlog" read;
- count: count() of each and the plan of the "fastlog" count;
- stream: an availableNow stream of "fastlog" into a memory sink, its rows;
- agg: per partition, count, offsets, sum of value lengths and of their CRC-32s, of each
  (for ranges too large to compare row by row);
- columns: the column names of the "fastlog" DataFrame;
- error: the error message of the "fastlog" read (null when it reads).
"""

import json
import os
import sys


def rows_of(df) -> list:
    out = []
    for r in df.orderBy("topic", "partition", "offset").collect():
        out.append([None if r.key is None else bytes(r.key).hex(),
                    None if r.value is None else bytes(r.value).hex(),
                    r.topic, r.partition, r.offset, r.timestamp.isoformat(), r.timestampType])
    return out


def plan_of(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def main() -> None:
    jar, bootstrap, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from fastlog.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("fastlog-jvm-reader-tests")
             .config("spark.jars", jar).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.python.authenticate.socketTimeout", "120s").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    def read(fmt, options):
        return spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap) \
            .options(**options).load()

    for case in cases:
        opts, kind = case["options"], case["kind"]
        got = {"name": case["name"]}
        if kind == "rows":
            df = read("fastlog", opts)
            got.update(jvm=rows_of(df), python=rows_of(read("fastlog-python", opts)),
                       plan=plan_of(df))
        elif kind == "count":
            df = read("fastlog", opts)
            got.update(jvm=df.count(), python=read("fastlog-python", opts).count(),
                       plan=plan_of(df.groupBy().count()))
        elif kind == "agg":
            from pyspark.sql import functions as F

            def agg(df):
                rows = df.groupBy("partition").agg(
                    F.count("*"), F.min("offset"), F.max("offset"),
                    F.sum(F.length("value")), F.sum(F.crc32("value"))).orderBy("partition")
                return [list(r) for r in rows.collect()]
            got.update(jvm=agg(read("fastlog", opts)), python=agg(read("fastlog-python", opts)))
        elif kind == "stream":
            reader = spark.readStream.format("fastlog").option("kafka.bootstrap.servers",
                                                               bootstrap)
            q = (reader.options(**opts).load().writeStream.format("memory")
                 .queryName(case["name"]).trigger(availableNow=True).start())
            q.awaitTermination(240)
            got.update(exception=None if q.exception() is None else str(q.exception()),
                       jvm=rows_of(spark.table(case["name"])))
        elif kind == "columns":
            got.update(columns=read("fastlog", opts).columns)
        elif kind == "error":
            try:
                read("fastlog", opts).collect()
                got.update(error=None)
            except Exception as exc:  # noqa: BLE001 - the message is the result
                got.update(error=str(exc)[:20000])   # a task failure's cause is further down
        print(json.dumps(got), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
