// fastlog/spark/jvm/ReadOptions.java: the options of a batch read the JVM reader takes.
//
// Owns the decision "JVM reader or Python source": parse() returns null for anything but
// kafka.bootstrap.servers, subscribe or assign, and startingOffsets / endingOffsets as
// earliest, latest or a JSON of offsets (-2 earliest, -1 latest) that a batch read accepts;
// every other option, and any malformed value, is left to the Python data source, which
// reads or refuses it as it always has (with its own messages). Pure; any thread.
package fastlog.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Iterator;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

final class ReadOptions implements Serializable {
    private static final Set<String> KEYS = new HashSet<>(Arrays.asList(
            "kafka.bootstrap.servers", "subscribe", "assign", "startingoffsets", "endingoffsets"));

    final String bootstrap;
    final TreeSet<String> subscribe;             // null with assign
    final TreeSet<TopicPartition> assign;        // null with subscribe
    /** null = earliest / latest by the word; else the JSON's offsets (-2 / -1 allowed). */
    final String starting, ending;
    final TreeMap<TopicPartition, Long> startingJson, endingJson;

    private ReadOptions(String bootstrap, TreeSet<String> subscribe,
                        TreeSet<TopicPartition> assign, String starting,
                        TreeMap<TopicPartition, Long> startingJson, String ending,
                        TreeMap<TopicPartition, Long> endingJson) {
        this.bootstrap = bootstrap;
        this.subscribe = subscribe;
        this.assign = assign;
        this.starting = starting;
        this.startingJson = startingJson;
        this.ending = ending;
        this.endingJson = endingJson;
    }

    /** The options (keys lower-cased, as Spark's CaseInsensitiveStringMap has them), or
     *  null when the Python source should handle the read. */
    static ReadOptions parse(Map<String, String> options) {
        Map<String, String> o = new TreeMap<>();
        for (Map.Entry<String, String> e : options.entrySet()) {
            o.put(e.getKey().toLowerCase(java.util.Locale.ROOT), e.getValue());
        }
        if (!KEYS.containsAll(o.keySet())) return null;
        String bootstrap = o.get("kafka.bootstrap.servers");
        if (bootstrap == null || bootstrap.trim().isEmpty()) return null;
        TreeSet<String> subscribe = null;
        TreeSet<TopicPartition> assign = null;
        if (o.containsKey("subscribe") == o.containsKey("assign")) return null;
        if (o.containsKey("subscribe")) {
            subscribe = new TreeSet<>(KafkaConnection.splitTopics(o.get("subscribe")));
            if (subscribe.isEmpty()) return null;
        } else {
            assign = parseAssign(o.get("assign"));
            if (assign == null) return null;
        }
        String starting = o.getOrDefault("startingoffsets", "earliest").trim();
        String ending = o.getOrDefault("endingoffsets", "latest").trim();
        TreeMap<TopicPartition, Long> startingJson = null, endingJson = null;
        if (!starting.equalsIgnoreCase("earliest")) {
            startingJson = parseOffsets(starting, -1);   // latest: the Python source refuses it
            if (startingJson == null) return null;
        }
        if (!ending.equalsIgnoreCase("latest")) {
            endingJson = parseOffsets(ending, -2);       // earliest: likewise
            if (endingJson == null) return null;
        }
        if (assign != null && (startingJson != null && !assign.containsAll(startingJson.keySet())
                || endingJson != null && !assign.containsAll(endingJson.keySet()))) {
            return null;
        }
        return new ReadOptions(bootstrap, subscribe, assign,
                startingJson == null ? "earliest" : null, startingJson,
                endingJson == null ? "latest" : null, endingJson);
    }

    private static JsonNode json(String text) {
        try {
            return new ObjectMapper().readTree(text);
        } catch (Exception e) {
            return null;
        }
    }

    private static TreeSet<TopicPartition> parseAssign(String text) {
        JsonNode root = json(text);
        if (root == null || !root.isObject() || root.size() == 0) return null;
        TreeSet<TopicPartition> out = new TreeSet<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> t = it.next();
            if (!t.getValue().isArray()) return null;
            for (JsonNode p : t.getValue()) {
                if (!p.isInt() || p.asInt() < 0) return null;
                out.add(new TopicPartition(t.getKey(), p.asInt()));
            }
        }
        return out;
    }

    /** {"topic": {"0": 23, "1": -2}} with no offset below -2 and none equal to refused. */
    private static TreeMap<TopicPartition, Long> parseOffsets(String text, long refused) {
        JsonNode root = json(text);
        if (root == null || !root.isObject() || root.size() == 0) return null;
        TreeMap<TopicPartition, Long> out = new TreeMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> t = it.next();
            if (!t.getValue().isObject()) return null;
            for (Iterator<Map.Entry<String, JsonNode>> ps = t.getValue().fields(); ps.hasNext(); ) {
                Map.Entry<String, JsonNode> p = ps.next();
                int partition;
                try {
                    partition = Integer.parseInt(p.getKey());
                } catch (NumberFormatException e) {
                    return null;
                }
                JsonNode v = p.getValue();
                if (!v.isIntegralNumber() || v.asLong() < -2 || v.asLong() == refused) return null;
                out.put(new TopicPartition(t.getKey(), partition), v.asLong());
            }
        }
        return out.isEmpty() ? null : out;
    }

    /** A topic partition, ordered by topic then partition (as the Python source sorts). */
    static final class TopicPartition implements Comparable<TopicPartition>, Serializable {
        final String topic;
        final int partition;

        TopicPartition(String topic, int partition) {
            this.topic = topic;
            this.partition = partition;
        }

        @Override
        public int compareTo(TopicPartition o) {
            int c = topic.compareTo(o.topic);
            return c != 0 ? c : Integer.compare(partition, o.partition);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof TopicPartition && compareTo((TopicPartition) o) == 0;
        }

        @Override
        public int hashCode() {
            return topic.hashCode() * 31 + partition;
        }

        @Override
        public String toString() {
            return topic + "-" + partition;
        }
    }
}
