"""fastlog's PySpark data source: format "fastlog", Spark's Kafka schema and options.

    from fastlog.spark import register
    register(spark)       # once per SparkSession
    df = spark.readStream.format("fastlog").option("kafka.bootstrap.servers", "...") \\
        .option("subscribe", "events").load()

Batch reads at columnar speed come from the JVM reader in ``jar_path()``: put it on the
session's classpath (``.config("spark.jars", fastlog.spark.jar_path())``) and
``spark.read.format("fastlog")`` reads with it whenever the options allow (docs/spark.md).

pyspark and pyarrow are imported only when this package's source is used, so that
``import fastlog`` never needs them.
"""

from pathlib import Path

# The JVM provider (fastlog/spark/jvm/src) and the name it expects the Python source under.
JVM_PROVIDER = "fastlog.spark.jvm.FastlogProvider"
JVM_PYTHON_NAME = "fastlog-python"


def jar_path() -> str:
    """The JVM reader's jar (built by scripts/build-spark-jar.sh, `make build`), for
    spark.jars. FileNotFoundError when it has not been built."""
    jar = Path(__file__).resolve().parent / "jvm" / "fastlog-spark.jar"
    if not jar.is_file():
        raise FileNotFoundError(f"{jar} is not built: run scripts/build-spark-jar.sh (needs a "
                                f"JDK's javac) or `make build`")
    return str(jar)


def jvm_reader_loaded(spark) -> bool:
    """Whether the session's driver can load the JVM provider (its jar is in spark.jars).
    False for a Spark Connect session, which has no JVM in this process."""
    try:
        jvm = spark._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(JVM_PROVIDER, False, loader)
        return True
    except Exception:  # noqa: BLE001 - no JVM, or the class is not there
        return False


def register(spark) -> None:
    """Register format "fastlog" with a SparkSession.

    Without the JVM reader the Python data source is "fastlog". With it, the JVM provider
    is "fastlog" (pyspark refuses to register a Python source under a JVM source's name:
    DATA_SOURCE_ALREADY_EXISTS) and the
    Python source is registered as "fastlog-python", which the provider hands every
    stream, write and option it does not read itself."""
    from fastlog.spark.source import FastlogDataSource, FastlogPythonDataSource
    if jvm_reader_loaded(spark):
        spark.dataSource.register(FastlogPythonDataSource)
    else:
        spark.dataSource.register(FastlogDataSource)


def __getattr__(name):
    if name == "FastlogDataSource":
        from fastlog.spark.source import FastlogDataSource
        return FastlogDataSource
    raise AttributeError(name)
