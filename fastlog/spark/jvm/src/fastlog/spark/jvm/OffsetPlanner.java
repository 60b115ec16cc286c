// fastlog/spark/jvm/OffsetPlanner.java: the driver's plan of a batch read, one offset range
// per topic partition.
//
// Owns what the Python source's FastlogBatchReader.partitions() does for the options the
// JVM reader takes, with the same rules and messages: the subscription's partitions from
// Metadata (internal topics skipped), earliest / latest through ListOffsets at each leader,
// a JSON of offsets naming exactly the subscription's partitions, a JSON offset beyond the
// log end refused, a start after its end refused, empty ranges dropped. Runs on the driver
// thread that plans the scan (FastlogScan.planInputPartitions).
package fastlog.spark.jvm;

import fastlog.spark.jvm.KafkaConnection.Leader;
import fastlog.spark.jvm.ReadOptions.TopicPartition;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

final class OffsetPlanner {
    static final String CLIENT_ID = "fastlog-spark-jvm";
    static final int TIMEOUT_MS = 30000;

    private final ReadOptions opts;
    private Map<String, Map<Integer, Leader>> topics;

    OffsetPlanner(ReadOptions opts) {
        this.opts = opts;
    }

    List<OffsetRangePartition> plan() throws IOException {
        try {
            return planOn();
        } finally {
            for (KafkaConnection c : connections.values()) c.close();
        }
    }

    /** The planning's connections by host:port, the bootstrap one first: every request of
     *  the plan goes over one connection per broker. */
    private final Map<String, KafkaConnection> connections = new HashMap<>();

    private KafkaConnection connection(String host, int port) throws IOException {
        String key = host + ":" + port;
        KafkaConnection c = connections.get(key);
        if (c == null) {
            c = new KafkaConnection(host, port, CLIENT_ID, TIMEOUT_MS);
            connections.put(key, c);
        }
        return c;
    }

    private List<OffsetRangePartition> planOn() throws IOException {
        KafkaConnection boot = KafkaConnection.bootstrap(opts.bootstrap, CLIENT_ID, TIMEOUT_MS);
        connections.put(boot.host + ":" + boot.port, boot);
        topics = boot.metadata();
        TreeSet<TopicPartition> tps = new TreeSet<>();
        if (opts.assign != null) {
            tps.addAll(opts.assign);
        } else {
            for (String t : opts.subscribe) {
                Map<Integer, Leader> parts = topics.get(t);
                if (parts == null) continue;
                for (int p : parts.keySet()) tps.add(new TopicPartition(t, p));
            }
        }
        Map<TopicPartition, Long> start = resolve(tps, true);
        Map<TopicPartition, Long> end = resolve(tps, false);
        List<OffsetRangePartition> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            long s = start.get(tp), e = end.get(tp);
            if (s > e) {
                throw new IllegalArgumentException("the read starts " + tp + " at offset " + s
                        + ", after where it ends (" + e + "): check startingOffsets and "
                        + "endingOffsets (or their timestamp forms)");
            }
            if (s == e) continue;
            Leader l = leader(tp);
            out.add(new OffsetRangePartition(opts.bootstrap, tp.topic, tp.partition, s, e,
                    l.host, l.port));
        }
        return out;
    }

    private Leader leader(TopicPartition tp) throws IOException {
        Map<Integer, Leader> parts = topics.get(tp.topic);
        Leader l = parts == null ? null : parts.get(tp.partition);
        if (l == null) {
            throw new KafkaConnection.KafkaError((short) (parts == null ? 3 : 5),
                    "finding the leader of " + tp);
        }
        return l;
    }

    private Map<TopicPartition, Long> resolve(TreeSet<TopicPartition> tps, boolean starting)
            throws IOException {
        String word = starting ? opts.starting : opts.ending;
        if (word != null) return listOffsets(tps, starting ? KafkaConnection.EARLIEST
                : KafkaConnection.LATEST);
        TreeMap<TopicPartition, Long> spec = starting ? opts.startingJson : opts.endingJson;
        String what = starting ? "startingOffsets" : "endingOffsets";
        for (TopicPartition tp : tps) {
            if (!spec.containsKey(tp)) {
                throw new IllegalArgumentException("option " + what + " must give every "
                        + "partition of the subscription, but " + tp + " has none");
            }
        }
        for (TopicPartition tp : spec.keySet()) {
            if (!tps.contains(tp)) {
                boolean subscribed = opts.subscribe != null && opts.subscribe.contains(tp.topic)
                        || tps.stream().anyMatch(x -> x.topic.equals(tp.topic));
                throw new IllegalArgumentException("option " + what + " names partition " + tp
                        + ", which " + (subscribed ? "does not exist" : "is not in the subscription"));
            }
        }
        TreeSet<TopicPartition> earliest = new TreeSet<>();
        for (TopicPartition tp : tps) if (spec.get(tp) == KafkaConnection.EARLIEST) earliest.add(tp);
        Map<TopicPartition, Long> out = new TreeMap<>(listOffsets(earliest, KafkaConnection.EARLIEST));
        Map<TopicPartition, Long> latest = listOffsets(tps, KafkaConnection.LATEST);
        for (TopicPartition tp : tps) {
            long off = spec.get(tp);
            if (off >= 0) {
                if (off > latest.get(tp)) {
                    throw new IllegalArgumentException("option " + what + " gives " + tp
                            + " offset " + off + ", beyond the end of its log (" + latest.get(tp) + ")");
                }
                out.put(tp, off);
            } else if (off == KafkaConnection.LATEST) {
                out.put(tp, latest.get(tp));
            }
        }
        return out;
    }

    /** EARLIEST or LATEST offsets of tps, one ListOffsets per leader. */
    private Map<TopicPartition, Long> listOffsets(TreeSet<TopicPartition> tps, long which)
            throws IOException {
        Map<String, Map<String, Map<Integer, Long>>> byLeader = new HashMap<>();
        Map<String, Leader> leaders = new HashMap<>();
        for (TopicPartition tp : tps) {
            Leader l = leader(tp);
            String key = l.host + ":" + l.port;
            leaders.put(key, l);
            byLeader.computeIfAbsent(key, k -> new HashMap<>())
                    .computeIfAbsent(tp.topic, k -> new HashMap<>()).put(tp.partition, which);
        }
        Map<TopicPartition, Long> out = new TreeMap<>();
        for (Map.Entry<String, Map<String, Map<Integer, Long>>> e : byLeader.entrySet()) {
            Leader l = leaders.get(e.getKey());
            KafkaConnection c = connection(l.host, l.port);
            for (Map.Entry<String, Map<Integer, Long>> t : c.listOffsets(e.getValue()).entrySet()) {
                for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
                    out.put(new TopicPartition(t.getKey(), p.getKey()), p.getValue());
                }
            }
        }
        return out;
    }
}
