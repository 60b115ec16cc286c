# fastlog.server._leader_produce declarations: LeaderProduce, one partition's everyday
# Produce in one compiled step (see the .pyx's module comment).

from libc.stdint cimport int64_t


cdef class TopicFacts:
    # One topic's settings and counters as the step reads them, in C fields. Valid while
    # the broker's dicts still hold the very objects they were read from (LogConfig is
    # frozen; a change of settings or a deletion replaces or removes the entry).
    cdef object cfg              # the broker's LogConfig of the topic
    cdef object limits           # its (before.max.ms, after.max.ms) tuple
    cdef object stats            # its TopicStats
    cdef bint log_append_time, compact
    cdef int min_insync_replicas
    cdef int target_codec        # the codec stored under; -1: the producer's
    cdef object max_batch_size   # max.message.bytes (an int, as validate_record_set takes it)
    cdef int64_t before_max, after_max
    cdef list parts              # its Partitions hosted here by partition number (or None)


cdef class LeaderProduce:
    cdef object rm               # ReplicaManager
    cdef object broker           # BrokerServer (log_config, timestamp_limits, topic_stats)
    cdef dict partitions         # the replica manager's {(topic, partition): Partition}
    cdef object fetch_purgatory
    cdef object result_type      # replica_manager.PartitionResult
    cdef object batch_type       # producer_state.BatchMetadata
    cdef object none_error       # Errors.NONE
    cdef dict log_configs        # the broker's {topic: LogConfig}
    cdef dict timestamp_limits   # the broker's {topic: (before.max.ms, after.max.ms)}
    cdef object topic_stats      # the broker's BrokerTopicStats
    cdef dict stats_topics       # its {topic: TopicStats}
    cdef object all_stats        # its all_topics
    cdef dict facts              # {topic: TopicFacts}
    cdef Py_ssize_t check_bytes, decompress_bytes, gzip_bytes, write_behind_bytes
    cdef public bint enabled     # False: every request takes the Python path
    cdef readonly int64_t taken  # requests answered here (tests read it)
    cdef readonly int64_t facts_read  # topic settings read from the broker (tests read it)

    cdef TopicFacts _kept(self, topic)
    cdef TopicFacts _facts(self, topic)
    cdef object _append(self, topic, partition, records, int acks, int api_version,
                        int64_t *out)
    cdef object _counted(self, topic, records, result)
    cdef int _count(self, TopicFacts t, Py_ssize_t size, int64_t messages) except -1
