# fastlog/server/_leader_produce.pyx — LeaderProduce: one partition's everyday Produce, in
# one compiled step (Kafka's ReplicaManager.appendRecords -> Partition.appendRecordsToLeader
# for the common case).
#
# Owns no format and no state of record (only copies, below): it reads the replica
# manager's partitions, the broker's topic settings and each partition's producer state
# (ProducerStateEntry, whose last batches it extends as ProducerStateManager.update does),
# appends through the log's LeaderAppend (fastlog.server.log._append: the bytes the
# producer sent, offsets and leader epoch stamped), bumps the topic counters the metrics
# read (BrokerTopicStats' TopicStats) and writes the success answer with
# fastlog.protocol._produce.
#
# What it reads of a topic's settings and counters every request it keeps in C fields
# (TopicFacts, one per topic), checked each request against the broker's own dicts: kept
# while they hold the very LogConfig, timestamp limits and TopicStats they were read from
# (a change of the topic's or the broker's settings, or a deletion, replaces or drops
# them there), and with them the topic's Partition objects by partition number; all of it
# goes whenever a partition comes or goes in the replica manager's dict (hosted_changed,
# which ReplicaManager calls wherever it adds or removes one). Everything else of a
# partition and its log is read from them each request.
#
# The common case, taken here: a Produce request of one partition of one topic without a
# transactional id (what librdkafka sends to a partition leader over many partitions;
# `one` answers it), or one partition of a request of several (`partition`), to the
# partition's leader (single node; or in a cluster while its ZooKeeper session lives),
# acks 0, 1 or -1 (the ISR meets min.insync.replicas), one plain or idempotent v2 batch
# that passes Kafka's checks on the loop (headers, sizes, CRC, the records' walk; small
# enough for the loop and for an inline write), stored under the producer's codec, with
# CreateTime timestamps within the topic's limits, and for an idempotent batch a known
# producer at its current epoch sending the next sequence (no duplicate, no gap, no open
# transaction, no sequence wrap). Everything else -- an unknown partition, a new producer
# or epoch, a retried duplicate, an out-of-order sequence, LogAppendTime, a codec to
# recompress to, a roll of the segment, a write-behind append, not the leader -- returns
# None before anything has changed, and the caller takes KafkaApis' Python path, which
# answers it as before (and names any fault). After the append, the outcomes that still
# need the Python answer path come back as a PartitionResult (counted already): a failed
# write (KAFKA_STORAGE_ERROR), a flush.messages fsync the answer waits for, and acks=all
# on a replicated partition (the answer waits for the ISR).
#
# Threads: the broker's asyncio API loop only (KafkaApis.handle), as the replica manager.

from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from libc.stdint cimport INT32_MAX, int32_t, int64_t
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from fastlog._codec cimport BatchHeader
from fastlog.server.log._append cimport AppendResult, LeaderAppend

from fastlog._codec import CodecError, validate_record_set, verify_batch_records
from fastlog.protocol._produce import encode_produce_response

cdef extern from "Python.h":
    Py_ssize_t PyLong_AsSsize_t(object o)   # (-1 and an error set past a Py_ssize_t)

cdef enum:
    MAX_KEPT_PARTITIONS = 1 << 17   # partition numbers past this are looked up every time
    NO_PRODUCER_ID = -1
    CODEC_MASK = 0x07
    CODEC_GZIP = 1
    CODEC_ZSTD = 4
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    ATTR_LOG_APPEND_TIME = 0x08


cdef inline int64_t _now_ms() noexcept:
    """Wall-clock milliseconds, as replica_manager._now_ms (int(time.time() * 1000))."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef class LeaderProduce:
    """The compiled everyday Produce of one partition (see the module comment). Made by
    the ReplicaManager; `one` is called by KafkaApis.handle. Loop thread only."""

    def __init__(self, rm, result_type, batch_type, none_error, Py_ssize_t check_bytes,
                 Py_ssize_t decompress_bytes, Py_ssize_t gzip_bytes,
                 Py_ssize_t write_behind_bytes):
        self.rm = rm
        self.broker = rm.broker
        self.partitions = rm.partitions
        self.fetch_purgatory = rm.fetch_purgatory
        self.result_type = result_type
        self.batch_type = batch_type
        self.none_error = none_error
        broker = rm.broker
        self.log_configs = broker._log_configs
        self.timestamp_limits = broker._timestamp_limits
        self.topic_stats = broker.topic_stats
        self.stats_topics = self.topic_stats.topics
        self.all_stats = self.topic_stats.all_topics
        self.facts = {}
        self.check_bytes = check_bytes
        self.decompress_bytes = decompress_bytes
        self.gzip_bytes = gzip_bytes
        self.write_behind_bytes = write_behind_bytes
        self.enabled = True
        self.taken = 0
        self.facts_read = 0

    def one(self, tuple fast):
        """`fast`: parse_produce_request's tuple (api_version, correlation_id, client_id,
        acks, timeout_ms, topic, partition, records). The response parts (a list), False
        for acks=0 (no answer goes back), a PartitionResult that the caller still
        completes and answers (already counted), or None: not the common case, nothing
        changed."""
        cdef int64_t out[3]
        if not self.enabled or len(fast) != 8:
            return None
        cdef int api_version = fast[0]
        cdef int acks = fast[3]
        topic = fast[5]
        partition = fast[6]
        r = self._append(topic, partition, fast[7], acks, api_version, out)
        if r is not True:
            return r
        if acks == 0:
            return False
        return [encode_produce_response(api_version, fast[1], topic, partition, out[0], -1,
                                        out[1])]

    def partition(self, topic, partition, records, int acks, int api_version):
        """One partition of a Produce request of several (KafkaApis._produce_many): its
        PartitionResult (counted), or None: not the common case, nothing changed."""
        cdef int64_t out[3]
        if not self.enabled:
            return None
        r = self._append(topic, partition, records, acks, api_version, out)
        if r is not True:
            return r
        return self.result_type(self.none_error, out[0], -1, out[1], required_offset=out[2])

    cdef object _append(self, topic, partition, records, int acks, int api_version,
                        int64_t *out):
        """The step (see the module comment): True when appended and counted (`out`: the
        first offset, the log start offset and the offset after the last), a
        PartitionResult that still needs the Python answer path (counted), or None
        (nothing changed)."""
        if acks != 0 and acks != 1 and acks != -1:
            return None
        if type(records) is not memoryview:
            return None
        cdef Py_ssize_t size = len(records)
        if size == 0 or size > self.check_bytes or size >= self.write_behind_bytes:
            return None
        # The partition: from the topic's kept ones while no partition came or went here
        cdef TopicFacts t = self._kept(topic)
        cdef list parts
        cdef Py_ssize_t i = -1
        p = None
        if type(partition) is int:
            i = PyLong_AsSsize_t(partition)
            if i == -1 and PyErr_Occurred():
                PyErr_Clear()   # (past a Py_ssize_t: not kept)
            if i >= MAX_KEPT_PARTITIONS:
                i = -1
        if t is not None and i >= 0 and i < len(t.parts):
            p = t.parts[i]
        if p is None:
            p = self.partitions.get((topic, partition))
            if p is None:
                return None
            if t is None:
                t = self._facts(topic)   # (a topic hosted here: its counters may be made)
            if i >= 0:
                parts = t.parts
                if i >= len(parts):
                    parts.extend([None] * (i + 1 - len(parts)))
                parts[i] = p
        if p.offline or p.fenced:
            return None
        # cluster mode: the leader, while its ZooKeeper session lives (KafkaApis._led_partition)
        cdef bint replicated = p.local_id is not None
        if replicated and (p.leader_id != p.local_id or self.broker.session_expired):
            return None
        log_ = p.log
        if log_ is None or log_.pending_append is not None:
            return None
        if t.log_append_time:
            return None
        if acks == -1 and len(p.isr) < t.min_insync_replicas:
            return None
        # Kafka's checks of a client record set (ReplicaManager.check_records, on the loop)
        cdef BatchHeader b
        try:
            batches = validate_record_set(records, max_batch_size=t.max_batch_size,
                                          allow_zstd=api_version >= 7)
            if type(batches) is not list or len(<list>batches) != 1:
                return None
            b = <BatchHeader?>(<list>batches)[0]
            if b.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL | ATTR_LOG_APPEND_TIME):
                return None
            if b.producer_id != NO_PRODUCER_ID and b.base_sequence < 0:
                return None
            verify_batch_records(records, b,
                                 self.gzip_bytes if (b.attributes & CODEC_MASK) == CODEC_GZIP
                                 else self.decompress_bytes,
                                 False, t.compact)
        except CodecError:
            return None
        if t.target_codec >= 0 and t.target_codec != (b.attributes & CODEC_MASK):
            return None
        cdef int64_t now = _now_ms()
        if (b.max_timestamp >= 0 and b.max_timestamp - now > t.after_max) or (
                0 <= b.first_timestamp and b.first_timestamp < now - t.before_max):
            return None
        # The idempotent producer's sequence: its next batch at its current epoch only.
        cdef int64_t pid = b.producer_id
        cdef int32_t first_seq = b.base_sequence, last_seq = -1
        entry = None
        if pid != NO_PRODUCER_ID:
            entry = p.producer_state.producers.get(pid)
            if entry is None or entry.epoch != b.producer_epoch:
                return None
            kept = entry.batches
            if not kept or entry.current_txn_first_offset >= 0:
                return None
            if first_seq == 0 or first_seq - 1 != <int32_t>kept[len(kept) - 1].last_seq:
                return None   # a wrap, a gap or a retried batch: the Python path
            if first_seq > INT32_MAX - (b.record_count - 1):
                return None
            last_seq = first_seq + b.record_count - 1
        cdef AppendResult appended
        try:
            flush = (<LeaderAppend?>log_._fast).append_c(
                log_, records, batches, p.leader_epoch, now, &appended)
        except OSError as e:
            return self._counted(topic, records, self.rm._storage_error(p, e))
        if flush is None:
            return None   # a roll, a new leader epoch, ...: Log.append's own path
        cdef int64_t first_offset = appended.first_offset, last_offset = appended.last_offset
        # ReplicaManager._appended: producer state, the high watermark, parked fetches
        if (b.attributes & CODEC_MASK) == CODEC_ZSTD:
            p.has_zstd = True
        ps = p.producer_state
        if entry is not None:
            entry.batches.append(self.batch_type(first_seq, last_seq, first_offset,
                                                 last_offset, b.max_timestamp))
            if b.max_timestamp > entry.last_timestamp:
                entry.last_timestamp = b.max_timestamp
        ps.map_end_offset = last_offset + 1
        if (replicated or log_.high_watermark != log_.log_end_offset
                or self.fetch_purgatory.watchers):
            self.rm._after_append(p)
        cdef int64_t log_start = appended.log_start_offset
        self.taken += 1
        if flush is not False or (replicated and acks == -1):
            # the answer waits for the fsync, or for the ISR (ReplicaManager.completion)
            return self._counted(topic, records, self.result_type(
                self.none_error, first_offset, -1, log_start,
                flush_future=None if flush is False else flush,
                required_offset=last_offset + 1))
        self._count(t, size, last_offset + 1 - first_offset)
        out[0] = first_offset
        out[1] = log_start
        out[2] = last_offset + 1
        return True

    def hosted_changed(self):
        """The replica manager added or removed a partition (ReplicaManager.partitions):
        every kept TopicFacts goes (with the Partition objects it holds), and each topic's
        are read again at its next request."""
        self.facts = {}

    cdef TopicFacts _kept(self, topic):
        """The topic's kept TopicFacts while the broker's dicts still hold the objects they
        were read from (its settings unchanged, the topic not deleted), else None."""
        cdef TopicFacts t = self.facts.get(topic)
        if (t is not None and self.log_configs.get(topic) is t.cfg
                and self.timestamp_limits.get(topic) is t.limits
                and self.stats_topics.get(topic) is t.stats):
            return t
        return None

    cdef TopicFacts _facts(self, topic):
        """The topic's TopicFacts read again through the broker (BrokerServer.log_config,
        timestamp_limits, BrokerTopicStats.topic_stats), kept when the broker keeps what it
        returned. Called for a partition this broker has, so the topic exists."""
        cdef TopicFacts t = TopicFacts.__new__(TopicFacts)
        t.parts = []
        self.facts_read += 1
        t.cfg = cfg = self.broker.log_config(topic)
        t.limits = limits = self.broker.timestamp_limits(topic)
        t.stats = self.topic_stats.topic_stats(topic)
        t.log_append_time = cfg.log_append_time
        t.compact = cfg.compact
        t.min_insync_replicas = cfg.min_insync_replicas
        t.target_codec = -1 if cfg.target_codec is None else cfg.target_codec
        t.max_batch_size = cfg.max_message_bytes
        t.before_max, t.after_max = limits
        if self.log_configs.get(topic) is cfg and self.timestamp_limits.get(topic) is limits:
            if len(self.facts) > 2 * len(self.log_configs) + 64:
                # deleted topics' facts go (the broker dropped their settings)
                self.facts = {k: v for k, v in self.facts.items() if k in self.log_configs}
            self.facts[topic] = t
        else:
            self.facts.pop(topic, None)   # (the broker keeps no settings of it: read each time)
        return t

    cdef object _counted(self, topic, records, result):
        """BrokerTopicStats.produce_done of a result that goes back to the Python path."""
        return self.broker.topic_stats.produce_done(topic, records, result)

    cdef int _count(self, TopicFacts t, Py_ssize_t size, int64_t messages) except -1:
        """BrokerTopicStats.produce_done of a successful append, spelled out."""
        s = t.stats
        a = self.all_stats
        s.total_produce_requests += 1
        a.total_produce_requests += 1
        s.messages_in += messages
        a.messages_in += messages
        s.bytes_in += size
        a.bytes_in += size
        return 0
