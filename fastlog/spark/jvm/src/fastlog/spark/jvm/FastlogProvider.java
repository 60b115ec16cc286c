// fastlog/spark/jvm/FastlogProvider.java: format "fastlog" on the JVM, a Spark DataSource V2
// provider whose batch reads are columnar and whose every other use is the Python source's.
//
// Owns the routing and the Spark V2 glue (Table, ScanBuilder with column pruning, Scan /
// Batch, the columnar PartitionReaderFactory). When the options are ones ReadOptions takes,
// the table's batch scan is the JVM reader (one task per topic partition, ColumnarBatch of
// on-heap vectors); a streaming read of the same options is handed to the Python source's
// own scan. With any other option, and for every write, getTable returns the Python
// source's table itself (PythonDataSourceV2 over the Python data source registered under
// PYTHON_NAME by fastlog.spark.register), so it behaves exactly as without this jar.
// Found by Spark's ServiceLoader lookup of DataSourceRegister (META-INF/services) when the
// jar is on the session's classpath (spark.jars). Runs on the driver's planning thread;
// the reader factory and partitions are serialized to executors.
package fastlog.spark.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

public final class FastlogProvider implements TableProvider, DataSourceRegister {
    /** The name fastlog.spark.register gives the Python data source when this jar is loaded. */
    public static final String PYTHON_NAME = "fastlog-python";

    /** Spark's Kafka source schema (without headers: includeHeaders is the Python source's). */
    static final StructType KAFKA_SCHEMA = new StructType(new StructField[]{
            DataTypes.createStructField("key", DataTypes.BinaryType, true),
            DataTypes.createStructField("value", DataTypes.BinaryType, true),
            DataTypes.createStructField("topic", DataTypes.StringType, true),
            DataTypes.createStructField("partition", DataTypes.IntegerType, true),
            DataTypes.createStructField("offset", DataTypes.LongType, true),
            DataTypes.createStructField("timestamp", DataTypes.TimestampType, true),
            DataTypes.createStructField("timestampType", DataTypes.IntegerType, true)});

    @Override
    public String shortName() {
        return "fastlog";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        if (ReadOptions.parse(options) == null) return python().inferSchema(options);
        return KAFKA_SCHEMA;
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning,
                          Map<String, String> properties) {
        ReadOptions opts = ReadOptions.parse(properties);
        if (opts == null || schema != null && !schema.equals(KAFKA_SCHEMA)) {
            return python().getTable(schema, partitioning, properties);
        }
        return new FastlogTable(opts, () -> python().getTable(schema, partitioning, properties));
    }

    static PythonDataSourceV2 python() {
        boolean registered = SparkSession.getActiveSession().isDefined()
                && SparkSession.getActiveSession().get().sessionState().dataSourceManager()
                        .dataSourceExists(PYTHON_NAME);
        if (!registered) {
            throw new IllegalStateException("format fastlog hands streams, writes and reads "
                    + "with options beyond kafka.bootstrap.servers, subscribe/assign and "
                    + "startingOffsets/endingOffsets to its Python data source, which is not "
                    + "registered in this session: call fastlog.spark.register(spark) first");
        }
        PythonDataSourceV2 p = new PythonDataSourceV2();
        p.setShortName(PYTHON_NAME);
        return p;
    }

    /** A batch read by the JVM reader; a streaming read by the Python source's scan. */
    static final class FastlogTable implements SupportsRead {
        private final ReadOptions opts;
        private final Supplier<Table> python;

        FastlogTable(ReadOptions opts, Supplier<Table> python) {
            this.opts = opts;
            this.python = python;
        }

        @Override
        public String name() {
            return "fastlog";
        }

        @Override
        public StructType schema() {
            return KAFKA_SCHEMA;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new FastlogScan(opts, KAFKA_SCHEMA, () -> ((SupportsRead) python.get())
                    .newScanBuilder(options).build());
        }
    }

    /** Scan builder, scan and batch at once: columns pruned, then one task per partition. */
    static final class FastlogScan implements ScanBuilder, SupportsPushDownRequiredColumns,
            Scan, Batch {
        private final ReadOptions opts;
        private final Supplier<Scan> python;
        private StructType schema;
        private Scan streaming;
        private InputPartition[] planned;

        FastlogScan(ReadOptions opts, StructType schema, Supplier<Scan> python) {
            this.opts = opts;
            this.schema = schema;
            this.python = python;
        }

        @Override
        public void pruneColumns(StructType required) {
            schema = required;
        }

        @Override
        public Scan build() {
            return this;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return streaming != null ? streaming.description() : "fastlog JVM reader";
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            streaming = python.get();
            return streaming.toMicroBatchStream(checkpointLocation);
        }

        @Override
        public CustomMetric[] supportedCustomMetrics() {
            return streaming != null ? streaming.supportedCustomMetrics() : new CustomMetric[0];
        }

        @Override
        public ColumnarSupportMode columnarSupportMode() {
            return streaming != null ? streaming.columnarSupportMode()
                    : ColumnarSupportMode.SUPPORTED;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            if (planned == null) {
                try {
                    List<OffsetRangePartition> ranges = new OffsetPlanner(opts).plan();
                    planned = ranges.toArray(new InputPartition[0]);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }
            return planned;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ReaderFactory(schema);
        }
    }

    /** Serialized to executors: a RangeReader per task. */
    static final class ReaderFactory implements PartitionReaderFactory {
        private final StructType schema;

        ReaderFactory(StructType schema) {
            this.schema = schema;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("the fastlog JVM reader reads columnar");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new RangeReader((OffsetRangePartition) partition, schema);
        }
    }
}
