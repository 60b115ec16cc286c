"""fastlog's PySpark Python data source: format "fastlog", Spark's Kafka schema and options.

    from fastlog.spark import register
    register(spark)       # once per SparkSession
    df = spark.readStream.format("fastlog").option("kafka.bootstrap.servers", "...") \\
        .option("subscribe", "events").load()

pyspark and pyarrow are imported only when this package's source is used, so that
``import fastlog`` never needs them.
"""


def register(spark) -> None:
    """Register format "fastlog" with a SparkSession."""
    from fastlog.spark.source import FastlogDataSource
    spark.dataSource.register(FastlogDataSource)


def __getattr__(name):
    if name == "FastlogDataSource":
        from fastlog.spark.source import FastlogDataSource
        return FastlogDataSource
    raise AttributeError(name)
