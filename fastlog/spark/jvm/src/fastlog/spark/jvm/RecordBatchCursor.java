// fastlog/spark/jvm/RecordBatchCursor.java: Kafka record batches (magic 2) into Spark column
// vectors, one record at a time, resumable at any record.
//
// Owns the record batch v2 format (Kafka's DefaultRecordBatch / DefaultRecord): the 61-byte
// batch header, zigzag varint records, control batches (commit / abort markers) skipped,
// LogAppendTime batches stamped with their max timestamp, and the compressed forms
// (attributes & 7: 1 gzip, 2 snappy in xerial framing or raw, 3 lz4 frame, 4 zstd),
// inflated with the libraries Spark ships. Only the offsets [start, end) become rows; a batch
// wholly inside the range is counted without decoding when no column is wanted (count()).
// Every length read from a batch is checked against the bytes present before use.
// Used by one executor task thread (RangeReader).
package fastlog.spark.jvm;

import com.github.luben.zstd.ZstdInputStream;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.zip.GZIPInputStream;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.xerial.snappy.SnappyInputStream;

final class RecordBatchCursor {
    static final int HEADER = 61;
    private static final int LENGTH_AT = 8, MAGIC_AT = 16, ATTRIBUTES_AT = 21,
            LAST_DELTA_AT = 23, BASE_TS_AT = 27, MAX_TS_AT = 35, COUNT_AT = 57;

    /** The output columns; null where the column is not wanted. */
    final WritableColumnVector key, value, topic, partition, offset, timestamp, timestampType;
    final boolean anyColumn;
    private final byte[] topicBytes;
    private final int partitionId;
    final long start, end;

    /** The next offset to read: the start, then one past the last batch consumed. */
    long next;

    // The batch being decoded (records left in it, from pos in data).
    private byte[] data;
    private int pos, limit, left;
    private long baseOffset, baseTs, maxTs;
    private boolean logAppendTime;

    RecordBatchCursor(String topicName, int partitionId, long start, long end,
                      WritableColumnVector[] cols) {
        this.topicBytes = topicName.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        this.partitionId = partitionId;
        this.start = start;
        this.next = start;
        this.end = end;
        key = cols[0]; value = cols[1]; topic = cols[2]; partition = cols[3];
        offset = cols[4]; timestamp = cols[5]; timestampType = cols[6];
        boolean any = false;
        for (WritableColumnVector c : cols) any |= c != null;
        anyColumn = any;
    }

    boolean done() {
        return next >= end && left == 0;
    }

    /** Whether records of the current batch wait to be decoded. */
    boolean pending() {
        return left > 0;
    }

    /**
     * Takes the next whole batch from records (a Fetch answer's bytes), or returns false
     * when none is left there (a trailing partial batch is left for the next Fetch).
     * Adds rows: when the batch can be counted without decoding, the count is returned
     * through the long[] counter, otherwise the batch becomes the current one.
     */
    boolean nextBatch(ByteBuffer records, long[] counted) throws IOException {
        while (records.remaining() >= HEADER) {
            int at = records.position();
            long base = records.getLong(at);
            int length = records.getInt(at + LENGTH_AT);
            if (length < HEADER - 12) throw new IOException("record batch of length " + length);
            if (records.remaining() - 12 < length) return false;   // partial last batch
            records.position(at + 12 + length);
            byte magic = records.get(at + MAGIC_AT);
            if (magic != 2) {
                throw new IOException("record batch magic " + magic + " is not 2 (legacy "
                        + "message format)");
            }
            short attributes = records.getShort(at + ATTRIBUTES_AT);
            long last = base + records.getInt(at + LAST_DELTA_AT);
            if (last < next) continue;            // before the range (a fetch starts mid-batch)
            if (base >= end) {                    // past the range: stop here
                next = end;
                return false;
            }
            boolean control = (attributes & 0x20) != 0;
            int count = records.getInt(at + COUNT_AT);
            if (control || count <= 0) {
                next = last + 1;
                continue;
            }
            if (!anyColumn && base >= next && last < end) {
                counted[0] += count;
                next = last + 1;
                return true;
            }
            baseOffset = base;
            baseTs = records.getLong(at + BASE_TS_AT);
            maxTs = records.getLong(at + MAX_TS_AT);
            logAppendTime = (attributes & 0x08) != 0;
            int codec = attributes & 7;
            int bodyAt = records.arrayOffset() + at + HEADER;
            int bodyLen = length + 12 - HEADER;
            if (codec == 0) {
                data = records.array();
                pos = bodyAt;
                limit = bodyAt + bodyLen;
            } else {
                data = inflate(codec, records.array(), bodyAt, bodyLen);
                pos = 0;
                limit = data.length;
            }
            left = count;
            next = last + 1;
            return true;
        }
        return false;
    }

    private static byte[] inflate(int codec, byte[] src, int at, int len) throws IOException {
        InputStream raw = new ByteArrayInputStream(src, at, len);
        InputStream in;
        switch (codec) {
            case 1: in = new GZIPInputStream(raw, 1 << 16); break;
            case 2: in = new SnappyInputStream(raw); break;
            case 3: in = new LZ4FrameInputStream(raw); break;
            case 4: in = new ZstdInputStream(raw); break;
            default: throw new IOException("record batch compression codec " + codec + " unknown");
        }
        try (InputStream s = in) {
            byte[] out = s.readNBytes(MAX_DECOMPRESSED + 1);
            if (out.length > MAX_DECOMPRESSED) {
                throw new IOException("a record batch decompresses to more than "
                        + MAX_DECOMPRESSED + " bytes");
            }
            return out;
        }
    }

    /** The most bytes one batch may decompress to: the broker's own bound on what it
     *  accepts (fastlog._codec.DEFAULT_DECOMPRESS_LIMIT), so a damaged or hostile batch
     *  cannot take an executor's memory. */
    static final int MAX_DECOMPRESSED = 64 * 1024 * 1024;

    /**
     * Decodes records of the current batch into rows from row on, up to capacity rows;
     * returns the row count after. Records outside [start, end) are skipped.
     */
    int decode(int row, int capacity) throws IOException {
        while (left > 0 && row < capacity) {
            left--;
            int length = varint();
            if (length < 1 || length > limit - pos) throw corrupt("record length");
            int recordEnd = pos + length;
            pos++;                                   // record attributes
            long tsDelta = timestamp != null ? varlong() : skipVarint();
            long off = baseOffset + varint();
            int keyLen = varint();
            if (keyLen < -1 || keyLen > recordEnd - pos) throw corrupt("key length");
            int keyAt = pos;
            if (keyLen > 0) pos += keyLen;
            int valueLen = varint();
            if (valueLen < -1 || valueLen > recordEnd - pos) throw corrupt("value length");
            int valueAt = pos;
            if (valueLen > 0) pos += valueLen;
            pos = recordEnd;                         // headers are not a column here
            if (off < start || off >= end) continue;
            if (key != null) {
                if (keyLen < 0) key.putNull(row);
                else key.putByteArray(row, data, keyAt, keyLen);
            }
            if (value != null) {
                if (valueLen < 0) value.putNull(row);
                else value.putByteArray(row, data, valueAt, valueLen);
            }
            if (topic != null) topic.putByteArray(row, topicBytes, 0, topicBytes.length);
            if (partition != null) partition.putInt(row, partitionId);
            if (offset != null) offset.putLong(row, off);
            if (timestamp != null) {
                timestamp.putLong(row, (logAppendTime ? maxTs : baseTs + tsDelta) * 1000L);
            }
            if (timestampType != null) timestampType.putInt(row, logAppendTime ? 1 : 0);
            row++;
        }
        if (left > 0 && pos >= limit) throw corrupt("record count");
        return row;
    }

    private IOException corrupt(String what) {
        left = 0;
        return new IOException("corrupt record batch at offset " + baseOffset + ": bad " + what);
    }

    private int varint() throws IOException {
        // most varints of a record (attributes aside: its timestamp and offset deltas, key
        // and value lengths) take one or two bytes: those without the general loop
        if (limit - pos >= 2) {
            int b = data[pos];
            if (b >= 0) {
                pos++;
                return (b >>> 1) ^ -(b & 1);
            }
            int c = data[pos + 1];
            if (c >= 0) {
                pos += 2;
                int raw = (b & 0x7f) | (c << 7);
                return (raw >>> 1) ^ -(raw & 1);
            }
        }
        long v = varlong();
        if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) throw corrupt("varint");
        return (int) v;
    }

    /** Steps over a varint whose value is not wanted; returns 0. */
    private long skipVarint() throws IOException {
        for (int n = 0; n < 10; n++) {
            if (pos >= limit) throw corrupt("varint");
            if (data[pos++] >= 0) return 0;
        }
        throw corrupt("varint");
    }

    private long varlong() throws IOException {
        long raw = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos >= limit) throw corrupt("varint");
            byte b = data[pos++];
            raw |= (long) (b & 0x7f) << shift;
            if (b >= 0) return (raw >>> 1) ^ -(raw & 1);
        }
        throw corrupt("varint");
    }
}
