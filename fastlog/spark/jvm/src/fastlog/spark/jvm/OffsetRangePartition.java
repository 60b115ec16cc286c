// fastlog/spark/jvm/OffsetRangePartition.java: one Spark task of a JVM batch read, the records
// [start, end) of one topic partition and where its leader was at planning.
// Made on the driver (OffsetPlanner), serialized to an executor (RangeReader).
package fastlog.spark.jvm;

import org.apache.spark.sql.connector.read.InputPartition;

final class OffsetRangePartition implements InputPartition {
    final String bootstrap, topic, leaderHost;
    final int partition, leaderPort;
    final long start, end;

    OffsetRangePartition(String bootstrap, String topic, int partition, long start, long end,
                         String leaderHost, int leaderPort) {
        this.bootstrap = bootstrap;
        this.topic = topic;
        this.partition = partition;
        this.start = start;
        this.end = end;
        this.leaderHost = leaderHost;
        this.leaderPort = leaderPort;
    }

    @Override
    public String toString() {
        return "OffsetRange(" + topic + "-" + partition + " [" + start + ", " + end + "))";
    }
}
