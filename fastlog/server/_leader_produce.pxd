# fastlog.server._leader_produce declarations: LeaderProduce, one partition's everyday
# Produce in one compiled step (see the .pyx's module comment).

from libc.stdint cimport int64_t


cdef class LeaderProduce:
    cdef object rm               # ReplicaManager
    cdef object broker           # BrokerServer (log_config, timestamp_limits, topic_stats)
    cdef dict partitions         # the replica manager's {(topic, partition): Partition}
    cdef object fetch_purgatory
    cdef object result_type      # replica_manager.PartitionResult
    cdef object batch_type       # producer_state.BatchMetadata
    cdef object none_error       # Errors.NONE
    cdef Py_ssize_t check_bytes, decompress_bytes, gzip_bytes, write_behind_bytes
    cdef public bint enabled     # False: every request takes the Python path
    cdef readonly int64_t taken  # requests answered here (tests read it)

    cdef object _append(self, topic, partition, records, int acks, int api_version,
                        int64_t *out)
    cdef object _counted(self, topic, records, result)
    cdef int _count(self, topic, Py_ssize_t size, int64_t messages) except -1
