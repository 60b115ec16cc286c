// fastlog/spark/jvm/KafkaConnection.java: one blocking Kafka protocol connection and the
// three requests the JVM batch reader makes.
//
// Owns the wire: request header v1 (api key, version, correlation id, client id), response
// header v0, and the bodies of Metadata v1 (leaders), ListOffsets v1 (earliest / latest) and
// Fetch v10 (one partition, read_uncommitted, no fetch session; v10 is the newest
// non-flexible version and zstd batches need v10 or later), versions every Kafka 2.1+
// compatible broker serves. A response length is checked against a bound before anything is allocated.
// Used by one thread at a time: the driver while planning (FastlogBatch), an executor task
// while reading (RangeReader).
package fastlog.spark.jvm;

import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

final class KafkaConnection implements Closeable {
    static final short FETCH = 1, LIST_OFFSETS = 2, METADATA = 3;
    static final long EARLIEST = -2, LATEST = -1;
    /** The largest response accepted: a Fetch answer is bounded by the request's max_bytes
     *  (at most RangeReader.MAX_FETCH_BYTES, grown only for a batch larger than the fetch
     *  size) plus headers; anything larger is a broken stream. */
    static final int MAX_RESPONSE = (256 << 20) + (1 << 20);

    final String host;
    final int port;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private final String clientId;
    private int correlation;

    KafkaConnection(String host, int port, String clientId, int timeoutMs) throws IOException {
        this.host = host;
        this.port = port;
        this.clientId = clientId;
        socket = new Socket();
        socket.setTcpNoDelay(true);
        // no SO_RCVBUF: setting it turns off Linux's receive buffer autotuning, which grows
        // the window past a fixed size for multi-MiB Fetch answers
        socket.connect(new InetSocketAddress(host, port), timeoutMs);
        socket.setSoTimeout(timeoutMs);
        in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 1 << 16));
        out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 1 << 12));
    }

    /** host:port of "h1:9092,h2:9092" entries, tried in order until one connects. */
    static KafkaConnection bootstrap(String servers, String clientId, int timeoutMs)
            throws IOException {
        IOException last = null;
        for (String entry : servers.split(",")) {
            String s = entry.trim();
            int colon = s.lastIndexOf(':');
            if (s.isEmpty() || colon < 0) continue;
            try {
                return new KafkaConnection(s.substring(0, colon),
                        Integer.parseInt(s.substring(colon + 1)), clientId, timeoutMs);
            } catch (IOException | NumberFormatException e) {
                last = e instanceof IOException ? (IOException) e : new IOException(e);
            }
        }
        throw new IOException("cannot connect to any of kafka.bootstrap.servers " + servers, last);
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }

    /** Sends one request and returns the response body (after the correlation id). */
    ByteBuffer call(short apiKey, short version, byte[] body) throws IOException {
        return call(apiKey, version, body, null);
    }

    /** The same, reading the body into reuse when it is large enough (a reader's receive
     *  buffer, so that a scan does not allocate one per Fetch). */
    ByteBuffer call(short apiKey, short version, byte[] body, byte[] reuse) throws IOException {
        int id = ++correlation;
        byte[] cid = clientId.getBytes(StandardCharsets.UTF_8);
        out.writeInt(2 + 2 + 4 + 2 + cid.length + body.length);
        out.writeShort(apiKey);
        out.writeShort(version);
        out.writeInt(id);
        out.writeShort(cid.length);
        out.write(cid);
        out.write(body);
        out.flush();
        int size = in.readInt();
        if (size < 4 || size > MAX_RESPONSE) {
            throw new IOException("broker " + host + ":" + port + " sent a response of " + size
                    + " bytes");
        }
        int got = in.readInt();
        if (got != id) {
            throw new IOException("broker " + host + ":" + port + " answered correlation id "
                    + got + " to request " + id);
        }
        byte[] data = reuse != null && reuse.length >= size - 4 ? reuse : new byte[size - 4];
        in.readFully(data, 0, size - 4);
        return ByteBuffer.wrap(data, 0, size - 4).slice();
    }

    // ---- request bodies ----------------------------------------------------------------

    static final class Body {
        final ByteArrayOutputStream bytes = new ByteArrayOutputStream(64);
        final DataOutputStream data = new DataOutputStream(bytes);

        Body i8(int v) throws IOException { data.writeByte(v); return this; }
        Body i16(int v) throws IOException { data.writeShort(v); return this; }
        Body i32(int v) throws IOException { data.writeInt(v); return this; }
        Body i64(long v) throws IOException { data.writeLong(v); return this; }
        Body str(String s) throws IOException {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            data.writeShort(b.length);
            data.write(b);
            return this;
        }
        byte[] done() { return bytes.toByteArray(); }
    }

    static String str(ByteBuffer b) {
        int n = b.getShort();
        if (n < 0) return null;
        if (n > b.remaining()) throw new java.nio.BufferUnderflowException();
        String s = new String(b.array(), b.arrayOffset() + b.position(), n, StandardCharsets.UTF_8);
        b.position(b.position() + n);
        return s;
    }

    /** Skips `count` entries of `width` bytes (a count from the wire: checked against the
     *  bytes left before any arithmetic, so a huge one cannot wrap around). */
    static void skip(ByteBuffer b, int count, int width) {
        if (count <= 0) return;
        if (count > b.remaining() / width) throw new java.nio.BufferUnderflowException();
        b.position(b.position() + count * width);
    }

    // ---- Metadata v1 ---------------------------------------------------------------------

    /** A partition's leader, or null while it has none. */
    static final class Leader {
        final String host;
        final int port;
        Leader(String host, int port) { this.host = host; this.port = port; }
    }

    /** Every non-internal topic's partitions and leaders: topic -> partition -> leader. */
    Map<String, Map<Integer, Leader>> metadata() throws IOException {
        ByteBuffer b = call(METADATA, (short) 1, new Body().i32(-1).done());
        Map<Integer, Leader> brokers = new HashMap<>();
        for (int i = 0, n = b.getInt(); i < n; i++) {
            int node = b.getInt();
            String h = str(b);
            int p = b.getInt();
            str(b);   // rack
            brokers.put(node, new Leader(h, p));
        }
        b.getInt();   // controller id
        Map<String, Map<Integer, Leader>> topics = new HashMap<>();
        for (int i = 0, n = b.getInt(); i < n; i++) {
            short error = b.getShort();
            String name = str(b);
            boolean internal = b.get() != 0;
            Map<Integer, Leader> parts = new HashMap<>();
            for (int j = 0, m = b.getInt(); j < m; j++) {
                b.getShort();   // partition error: a partition without leader has leader -1
                int partition = b.getInt();
                int leader = b.getInt();
                for (int k = 0; k < 2; k++) {                // replicas, isr
                    skip(b, b.getInt(), 4);
                }
                parts.put(partition, brokers.get(leader));
            }
            if (error == 0 && !internal) topics.put(name, parts);
        }
        return topics;
    }

    // ---- ListOffsets v1 ------------------------------------------------------------------

    /** EARLIEST / LATEST offsets of partitions this broker leads: {topic: {partition: spec}}. */
    Map<String, Map<Integer, Long>> listOffsets(Map<String, Map<Integer, Long>> specs)
            throws IOException {
        Body body = new Body().i32(-1).i32(specs.size());
        for (Map.Entry<String, Map<Integer, Long>> t : specs.entrySet()) {
            body.str(t.getKey()).i32(t.getValue().size());
            for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
                body.i32(p.getKey()).i64(p.getValue());
            }
        }
        ByteBuffer b = call(LIST_OFFSETS, (short) 1, body.done());
        Map<String, Map<Integer, Long>> out = new HashMap<>();
        for (int i = 0, n = b.getInt(); i < n; i++) {
            String topic = str(b);
            Map<Integer, Long> parts = out.computeIfAbsent(topic, k -> new HashMap<>());
            for (int j = 0, m = b.getInt(); j < m; j++) {
                int partition = b.getInt();
                short error = b.getShort();
                b.getLong();   // timestamp
                long offset = b.getLong();
                if (error != 0) {
                    throw new KafkaError(error, "listing offsets of " + topic + "-" + partition);
                }
                parts.put(partition, offset);
            }
        }
        return out;
    }

    // ---- Fetch v10 ------------------------------------------------------------------------

    /** One partition's part of a Fetch answer. */
    static final class Fetched {
        short error;
        long highWatermark;
        ByteBuffer records;   // the record batches (position..limit), maybe a partial last one
    }

    Fetched fetch(String topic, int partition, long offset, int maxBytes, int maxWaitMs,
                  byte[] reuse) throws IOException {
        // v10: no fetch session (id 0, epoch -1), no leader epoch, no forgotten topics
        byte[] body = new Body().i32(-1).i32(maxWaitMs).i32(1).i32(maxBytes).i8(0)
                .i32(0).i32(-1)
                .i32(1).str(topic).i32(1).i32(partition).i32(-1).i64(offset).i64(-1)
                .i32(maxBytes).i32(0).done();
        ByteBuffer b = call(FETCH, (short) 10, body, reuse);
        b.getInt();   // throttle time
        short top = b.getShort();
        if (top != 0) throw new KafkaError(top, "fetching " + topic + "-" + partition);
        b.getInt();   // session id
        Fetched got = null;
        for (int i = 0, n = b.getInt(); i < n; i++) {
            String t = str(b);
            for (int j = 0, m = b.getInt(); j < m; j++) {
                Fetched f = new Fetched();
                int p = b.getInt();
                f.error = b.getShort();
                f.highWatermark = b.getLong();
                b.getLong();   // last stable offset
                b.getLong();   // log start offset
                skip(b, b.getInt(), 16);   // aborted transactions
                int size = b.getInt();
                if (size < 0) size = 0;
                if (size > b.remaining()) throw new IOException("truncated Fetch response");
                ByteBuffer records = b.slice();
                records.limit(size);
                b.position(b.position() + size);
                f.records = records;
                if (t.equals(topic) && p == partition) got = f;
            }
        }
        if (got == null) throw new IOException("Fetch response without " + topic + "-" + partition);
        return got;
    }

    /** A Kafka error code from a broker, with what was being done. */
    static final class KafkaError extends IOException {
        final short code;
        KafkaError(short code, String what) {
            super(what + ": Kafka error " + code + " (" + name(code) + ")");
            this.code = code;
        }

        static String name(short code) {
            switch (code) {
                case 1: return "OFFSET_OUT_OF_RANGE";
                case 3: return "UNKNOWN_TOPIC_OR_PARTITION";
                case 5: return "LEADER_NOT_AVAILABLE";
                case 6: return "NOT_LEADER_OR_FOLLOWER";
                case 7: return "REQUEST_TIMED_OUT";
                case 29: return "TOPIC_AUTHORIZATION_FAILED";
                case 76: return "UNSUPPORTED_COMPRESSION_TYPE";
                default: return "see Kafka's protocol error codes";
            }
        }

        boolean retriable() {
            return code == 3 || code == 5 || code == 6 || code == 7;
        }
    }

    static List<String> splitTopics(String subscribe) {
        List<String> out = new ArrayList<>();
        for (String t : subscribe.split(",")) if (!t.trim().isEmpty()) out.add(t.trim());
        return out;
    }
}
