// fastlog/spark/jvm/RangeReader.java: an executor task's columnar reader of one offset range.
//
// Owns the Fetch loop of one topic partition over [start, end): Fetch v10 at the leader the
// driver planned with, the next Fetch sent on a private thread while the previous answer is
// decoded into Spark's on-heap column vectors (reused batch after batch, ROWS rows each);
// a leader change or a missing leader is retried against fresh Metadata from the bootstrap
// servers; records deleted before they were read fail the task as the Python source does
// (failOnDataLoss is the Python source's option); no progress for POLL_TIMEOUT_MS (Spark's
// kafkaConsumer.pollTimeoutMs default) fails the task. Called by the Spark task thread
// (next / get / close); the prefetch thread only makes Fetch requests.
package fastlog.spark.jvm;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

final class RangeReader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 8192;
    static final int FETCH_BYTES = 8 << 20;
    static final int MAX_FETCH_BYTES = 256 << 20;
    static final long POLL_TIMEOUT_MS = 120000;
    static final int MAX_WAIT_MS = 200;
    static final String[] COLUMNS = {"key", "value", "topic", "partition", "offset",
            "timestamp", "timestampType"};

    private final OffsetRangePartition part;
    private final OnHeapColumnVector[] vectors;
    private final ColumnarBatch batch;
    private final RecordBatchCursor cursor;
    private final int capacity;
    private final ExecutorService fetcher;
    private KafkaConnection conn;
    private int fetchBytes = FETCH_BYTES;
    private volatile String leaderHost;
    private volatile int leaderPort;

    private Future<KafkaConnection.Fetched> inFlight;
    private long inFlightOffset = -1;
    private ByteBuffer records;          // the answer being decoded
    // Two receive buffers: the Fetch in flight reads into one while the other is decoded;
    // a buffer is handed to the next Fetch only once the cursor has left it.
    private final byte[][] buffers = new byte[2][];
    private int spare;                   // the buffer the next Fetch may read into
    private long lastProgress = System.currentTimeMillis();

    RangeReader(OffsetRangePartition part, StructType schema) {
        this.part = part;
        leaderHost = part.leaderHost;
        leaderPort = part.leaderPort;
        StructField[] fields = schema.fields();
        vectors = OnHeapColumnVector.allocateColumns(fields.length == 0 ? 0 : ROWS, schema);
        WritableColumnVector[] byName = new WritableColumnVector[COLUMNS.length];
        for (int i = 0; i < fields.length; i++) {
            int at = java.util.Arrays.asList(COLUMNS).indexOf(fields[i].name());
            if (at < 0) throw new IllegalArgumentException("no column " + fields[i].name());
            byName[at] = vectors[i];
        }
        capacity = fields.length == 0 ? Integer.MAX_VALUE / 2 : ROWS;
        batch = new ColumnarBatch(vectors.length == 0 ? new ColumnVector[0] : vectors);
        cursor = new RecordBatchCursor(part.topic, part.partition, part.start, part.end, byName);
        fetcher = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "fastlog-fetch-" + part.topic + "-" + part.partition);
            t.setDaemon(true);
            return t;
        });
    }

    @Override
    public boolean next() throws IOException {
        for (OnHeapColumnVector v : vectors) v.reset();
        int rows = 0;
        long[] counted = {0};
        while (rows + counted[0] < capacity) {
            if (cursor.pending()) {
                rows = cursor.decode(rows, capacity - (int) counted[0]);
                continue;
            }
            if (cursor.next >= cursor.end) break;
            if (records != null && cursor.nextBatch(records, counted)) continue;
            if (cursor.next >= cursor.end) break;
            if (rows + counted[0] > 0) break;       // hand over what is decoded; fetch next time
            records = fetchNext();
        }
        int n = (int) (rows + counted[0]);
        batch.setNumRows(n);
        return n > 0;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
        fetcher.shutdownNow();
        if (conn != null) conn.close();
        batch.close();
    }

    /** The answer at cursor.next (waiting for the one in flight), with the next one sent. */
    private ByteBuffer fetchNext() throws IOException {
        while (true) {
            long at = cursor.next;
            if (inFlight == null || inFlightOffset != at) {
                if (inFlight != null) await(inFlight);
                inFlight = send(at);
                inFlightOffset = at;
            }
            KafkaConnection.Fetched f = await(inFlight);
            inFlight = null;
            if (f.error != 0) {
                handleError(f.error, at);
                continue;
            }
            ByteBuffer r = f.records;
            long after = endOfWholeBatches(r);
            if (after > at) {
                lastProgress = System.currentTimeMillis();
                if (after < part.end) {
                    inFlight = send(after);
                    inFlightOffset = after;
                }
                return r;
            }
            if (r.remaining() > 0 && fetchBytes < MAX_FETCH_BYTES) {
                fetchBytes *= 2;               // one batch larger than the fetch size
                continue;
            }
            if (f.highWatermark > at && r.remaining() == 0 && f.highWatermark >= part.end) {
                // nothing at or after at below the high watermark: the range's tail is gone
                // (compacted away): the range ends here
                cursor.next = part.end;
                return r;
            }
            if (System.currentTimeMillis() - lastProgress > POLL_TIMEOUT_MS) {
                throw new IOException("no records of " + part.topic + "-" + part.partition
                        + " at offset " + at + " within " + POLL_TIMEOUT_MS + " ms (the range "
                        + "ends at " + part.end + ", the high watermark is " + f.highWatermark + ")");
            }
            sleep(MAX_WAIT_MS);
        }
    }

    /** One past the last offset of the whole batches in r (or -1 when there is none). */
    private static long endOfWholeBatches(ByteBuffer r) {
        long after = -1;
        int p = r.position();
        while (r.limit() - p >= RecordBatchCursor.HEADER) {
            int length = r.getInt(p + 8);
            if (length < RecordBatchCursor.HEADER - 12 || r.limit() - p - 12 < length) break;
            after = r.getLong(p) + r.getInt(p + 23) + 1;
            p += 12 + length;
        }
        return after;
    }

    private Future<KafkaConnection.Fetched> send(long offset) {
        int bytes = fetchBytes;
        int slot = spare;
        spare ^= 1;
        byte[] reuse = buffers[slot];
        return fetcher.submit(() -> {
            if (conn == null) conn = new KafkaConnection(leaderHost, leaderPort,
                    OffsetPlanner.CLIENT_ID, OffsetPlanner.TIMEOUT_MS);
            KafkaConnection.Fetched f = conn.fetch(part.topic, part.partition, offset, bytes,
                    MAX_WAIT_MS, reuse);
            buffers[slot] = f.records.array();   // seen by the task thread through the Future
            return f;
        });
    }

    private static KafkaConnection.Fetched await(Future<KafkaConnection.Fetched> f)
            throws IOException {
        try {
            return f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while fetching", e);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof IOException) throw (IOException) c;
            throw new IOException(c);
        }
    }

    private void handleError(short code, long at) throws IOException {
        KafkaConnection.KafkaError err = new KafkaConnection.KafkaError(code,
                "fetching " + part.topic + "-" + part.partition + " at offset " + at);
        if (code == 1) {
            throw new IOException("records of " + part.topic + "-" + part.partition + " from "
                    + "offset " + at + " are gone. Some data may have been lost because they "
                    + "are not available in fastlog any more (deleted by retention or "
                    + "DeleteRecords, or the topic was deleted). If you want your query to "
                    + "continue anyway, set the source option failOnDataLoss to false.", err);
        }
        if (!err.retriable() || System.currentTimeMillis() - lastProgress > POLL_TIMEOUT_MS) {
            throw err;
        }
        sleep(MAX_WAIT_MS);
        relocate();
    }

    /** Finds the partition's leader again (after NOT_LEADER and the like). */
    private void relocate() throws IOException {
        Map<String, Map<Integer, KafkaConnection.Leader>> topics;
        try (KafkaConnection c = KafkaConnection.bootstrap(part.bootstrap,
                OffsetPlanner.CLIENT_ID, OffsetPlanner.TIMEOUT_MS)) {
            topics = c.metadata();
        }
        Map<Integer, KafkaConnection.Leader> parts = topics.get(part.topic);
        KafkaConnection.Leader l = parts == null ? null : parts.get(part.partition);
        if (l == null) return;                 // still none: try again after a pause
        leaderHost = l.host;
        leaderPort = l.port;
        if (conn != null) {
            KafkaConnection old = conn;
            conn = null;
            fetcher.submit(old::close);
        }
    }

    private static void sleep(long ms) throws IOException {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        }
    }
}
