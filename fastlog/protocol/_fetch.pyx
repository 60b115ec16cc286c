# fastlog/protocol/_fetch.pyx: Fetch v4-v17 in a consumer's everyday shape, read and
# answered in compiled code.
#
# A consumer of one partition sends one Fetch per poll, and librdkafka's carry one topic,
# one partition, no fetch session (session id 0, epoch -1: librdkafka never uses
# sessions) and no rack. For those, parse_fetch_request reads the request header and
# body straight from the frame, and encode_fetch_response writes the answer of one
# partition read without error, with the bytes exactly as the generic schema-driven codec
# (wire.py) reads and writes them. Everything else — other APIs and versions, replicas,
# fetch sessions, several topics or partitions, forgotten topics, a rack id, anything
# malformed — returns None and is left to the generic path (KafkaApis.handle_fetch), which
# also answers every error and every fetch that waits for data. Why: the generic path
# builds and walks a request object, a fetch context and a dict per partition, and
# encodes through the schema (about a third of a one-partition fetch's broker CPU that
# is not the sendfile); this path touches a handful of objects.
#
# Formats. v4-v11: request header v1 (int16 api_key, int16 api_version, int32
# correlation_id, nullable int16-length client_id); FetchRequest v4-v11 (int32
# replica_id, int32 max_wait_ms, int32 min_bytes, int32 max_bytes, int8 isolation_level,
# v7+: int32 session_id, int32 session_epoch; [topic string, [int32 partition, v9+: int32
# current_leader_epoch, int64 fetch_offset, v5+: int64 log_start_offset, int32
# partition_max_bytes]], v7+: [forgotten topics], v11+: string rack_id); response header
# v0 and FetchResponse v4-v11 (int32 throttle_time_ms, v7+: int16 error_code, int32
# session_id; [topic string, [int32 partition_index, int16 error_code, int64
# high_watermark, int64 last_stable_offset, v5+: int64 log_start_offset, nullable [int64
# producer_id, int64 first_offset] aborted_transactions, v11+: int32
# preferred_read_replica, nullable int32-length records]]). v12 (flexible, KIP-482):
# request header v2 (v1 + a tag buffer); the same fields plus int32 last_fetched_epoch
# after fetch_offset, with strings, arrays and records as compact ones (unsigned varint
# length + 1, 0 for null) and a tag buffer after each struct; response header v1 (+ a tag
# buffer). Only empty tag buffers are read here (a request's cluster_id is a tag: it goes
# to the generic path), and the answer has none (its partition's tagged diverging_epoch,
# current_leader and snapshot_id are absent from an answer without error or divergence;
# KafkaApis._fetch_one leaves a fetch whose last_fetched_epoch diverges to the generic
# path). v13-v17: as v12 but the topic is its 16-byte id (uuid) in place of its compact
# name, in the request and the answer (the caller resolves the id; KafkaApis._topic_name);
# v15 drops replica_id from the body (a replica names itself in the tagged replica_state:
# a tag, so the generic path); v16's answer adds the tagged node_endpoints (only with
# leader hints, never here); v17 adds a partition's tagged replica_directory_id (a tag).
# Pure functions, any thread.

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from fastlog._codec cimport (
    fl_be16,
    fl_be32,
    fl_be64,
    fl_client_id_and_name,
    fl_put_be16,
    fl_put_be32,
    fl_put_be64,
    fl_put_one_partition,
    fl_request_header,
    read_uvarint32,
    uvarint_size,
    write_uvarint,
)

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

# The versions this path reads: the ones served (protocol/versions.py).
FIRST_VERSION = 4
LAST_VERSION = 17
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13        # the topic named by its 16-byte id, not its name
FIRST_REPLICA_STATE = 15   # replica_id moves into the tagged replica_state
cdef uint16_t FETCH_KEY = 1


def parse_fetch_request(frame):
    """(api_version, correlation_id, client_id, max_wait_ms, min_bytes, max_bytes,
    isolation_level, topic, partition, current_leader_epoch, fetch_offset,
    partition_max_bytes, last_fetched_epoch) for a Fetch v4-v17 request of a consumer
    (replica id -1; v15+: no replica_state) without a fetch session, naming exactly one
    partition of one topic, no forgotten topics and no rack id (and, v12+, no tagged
    fields), all of ``frame`` consumed; None for anything else. last_fetched_epoch is -1
    before v12; from v13 ``topic`` is the topic's 16 raw id bytes."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t n, pos, name_len, name_pos
    cdef int16_t api_version, client_id_len
    cdef int32_t correlation_id, max_wait_ms, min_bytes, max_bytes, partition
    cdef int32_t leader_epoch = -1, partition_max_bytes
    cdef int8_t isolation
    cdef int64_t fetch_offset
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        n = view.len
        pos = fl_request_header(p, n, FETCH_KEY, FIRST_VERSION, LAST_VERSION,
                                &api_version, &correlation_id, &client_id_len)
        if pos < 0:
            return None
        if api_version >= FIRST_FLEXIBLE:
            if pos >= n or p[pos] != 0:
                return None   # the header's tag buffer: only an empty one is read here
            pos += 1
        # replica id (before v15), max wait, min bytes, max bytes (12), isolation level
        # (1), session id and epoch (8, v7+), the topic count (4; v12+: 1, then the topic)
        if (pos + (4 if api_version < FIRST_REPLICA_STATE else 0) + 17
                + (8 if api_version >= 7 else 0) > n):
            return None
        if api_version < FIRST_REPLICA_STATE:
            if <int32_t>fl_be32(p + pos) != -1:
                return None   # a replica (or a client posing as one): the handler checks it
            pos += 4
        max_wait_ms = <int32_t>fl_be32(p + pos)
        min_bytes = <int32_t>fl_be32(p + pos + 4)
        max_bytes = <int32_t>fl_be32(p + pos + 8)
        isolation = <int8_t>p[pos + 12]
        if isolation != 0 and isolation != 1:
            return None
        pos += 13
        if api_version >= 7:
            if fl_be32(p + pos) != 0 or <int32_t>fl_be32(p + pos + 4) != -1:
                return None   # a fetch session
            pos += 8
        if api_version >= FIRST_FLEXIBLE:
            return _parse_flexible(p, n, pos, api_version, correlation_id, client_id_len,
                                   max_wait_ms, min_bytes, max_bytes, isolation)
        if fl_be32(p + pos) != 1:
            return None
        pos += 4
        if pos + 2 > n:
            return None
        name_len = <int16_t>fl_be16(p + pos)
        name_pos = pos + 2
        pos = name_pos + name_len
        # name, partition count (4), partition (4)
        if name_len < 0 or pos + 8 > n or fl_be32(p + pos) != 1:
            return None
        partition = <int32_t>fl_be32(p + pos + 4)
        pos += 8
        # current leader epoch (v9+), fetch offset, log start offset (v5+), max bytes
        if pos + (4 if api_version >= 9 else 0) + 8 + (8 if api_version >= 5 else 0) + 4 > n:
            return None
        if api_version >= 9:
            leader_epoch = <int32_t>fl_be32(p + pos)
            pos += 4
        fetch_offset = <int64_t>fl_be64(p + pos)
        pos += 8
        if api_version >= 5:
            pos += 8   # (a consumer's log start offset is not used)
        partition_max_bytes = <int32_t>fl_be32(p + pos)
        pos += 4
        if api_version >= 7:
            if pos + 4 > n or fl_be32(p + pos) != 0:
                return None   # forgotten topics
            pos += 4
        if api_version >= 11:
            if pos + 2 > n or fl_be16(p + pos) != 0:
                return None   # a rack id (KIP-392), or malformed
            pos += 2
        if pos != n:
            return None
        return _parsed(p, api_version, correlation_id, client_id_len, max_wait_ms,
                       min_bytes, max_bytes, isolation, name_pos, name_len, partition,
                       leader_epoch, fetch_offset, partition_max_bytes, -1)
    finally:
        PyBuffer_Release(&view)


cdef object _parse_flexible(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos,
                            int16_t api_version, int32_t correlation_id,
                            int16_t client_id_len, int32_t max_wait_ms, int32_t min_bytes,
                            int32_t max_bytes, int8_t isolation):
    """parse_fetch_request's v12+ topics and what follows them, from ``pos`` (after the
    session epoch; at least 1 byte is there)."""
    cdef uint32_t name_n
    cdef Py_ssize_t name_pos, name_len
    cdef int32_t partition, leader_epoch, last_fetched_epoch, partition_max_bytes
    cdef int64_t fetch_offset
    if p[pos] != 2:
        return None   # not exactly one topic
    if api_version >= FIRST_TOPIC_ID:
        name_pos = pos + 1
        name_len = 16   # the topic id
    else:
        name_pos = read_uvarint32(p, pos + 1, n, &name_n)
        if name_pos < 0 or name_n == 0 or name_n - 1 > 0x7fff:
            return None   # truncated, null or too long a name: the generic path says which
        name_len = name_n - 1
    pos = name_pos + name_len
    # one partition (1), its index, current leader epoch (8), fetch offset (8), last
    # fetched epoch (4), log start offset (8), max bytes (4), the partition's (v17: its
    # replica_directory_id is a tag) and the topic's tag buffers (2), no forgotten topics
    # (1), an empty rack id (1), the request's tag buffer (1; v15+: replica_state is a
    # tag): the frame's end
    if pos + 38 != n or p[pos] != 2:
        return None
    partition = <int32_t>fl_be32(p + pos + 1)
    leader_epoch = <int32_t>fl_be32(p + pos + 5)
    fetch_offset = <int64_t>fl_be64(p + pos + 9)
    last_fetched_epoch = <int32_t>fl_be32(p + pos + 17)
    # (a consumer's log start offset, at pos + 21, is not used)
    partition_max_bytes = <int32_t>fl_be32(p + pos + 29)
    if (p[pos + 33] != 0 or p[pos + 34] != 0 or p[pos + 35] != 1 or p[pos + 36] != 1
            or p[pos + 37] != 0):
        return None   # tagged fields, forgotten topics, a rack id (KIP-392), or malformed
    return _parsed(p, api_version, correlation_id, client_id_len, max_wait_ms, min_bytes,
                   max_bytes, isolation, name_pos, name_len, partition, leader_epoch,
                   fetch_offset, partition_max_bytes, last_fetched_epoch)


cdef object _parsed(const unsigned char *p, int16_t api_version, int32_t correlation_id,
                    int16_t client_id_len, int32_t max_wait_ms, int32_t min_bytes,
                    int32_t max_bytes, int8_t isolation, Py_ssize_t name_pos,
                    Py_ssize_t name_len, int32_t partition, int32_t leader_epoch,
                    int64_t fetch_offset, int32_t partition_max_bytes,
                    int32_t last_fetched_epoch):
    """parse_fetch_request's answer once the frame's shape is checked; None for names
    that are not UTF-8. From v13 the topic is its 16 raw id bytes."""
    if api_version >= FIRST_TOPIC_ID:
        names = fl_client_id_and_name(p, client_id_len, name_pos, 0)
        if names is None:
            return None
        topic = PyBytes_FromStringAndSize(<const char *>p + name_pos, 16)
    else:
        names = fl_client_id_and_name(p, client_id_len, name_pos, name_len)
        if names is None:
            return None
        topic = names[1]
    return (api_version, correlation_id, names[0], max_wait_ms, min_bytes, max_bytes,
            isolation, topic, partition, leader_epoch, fetch_offset, partition_max_bytes,
            last_fetched_epoch)


def encode_fetch_response(int api_version, int32_t correlation_id, topic,
                          int32_t partition, int64_t high_watermark,
                          int64_t last_stable_offset, int64_t log_start_offset,
                          list aborted, list regions, int64_t size):
    """Response header v0 (v1 from Fetch v12) + a FetchResponse v4-v17 answering one
    partition of one topic (its name, a str; from v13 its 16-byte id) without error (no
    throttling, no session, no preferred replica, no tagged fields), as a list of parts:
    the bytes, then `regions` (the FileRegions read, `size` bytes in all) uncopied (v12:
    then the closing tag buffers).
    `aborted`: the (producer id, first offset) pairs of a read_committed fetch, None for
    read_uncommitted (a null array)."""
    cdef Py_ssize_t name_len
    cdef const char *name
    cdef Py_ssize_t size_out, n_aborted = 0, i
    cdef unsigned char *q
    cdef int64_t pid, first
    if api_version < FIRST_VERSION or api_version > LAST_VERSION:
        raise ValueError(f"Fetch v{api_version} is not encoded here")
    if api_version >= FIRST_TOPIC_ID:
        if type(topic) is not bytes or len(<bytes>topic) != 16:
            raise ValueError("a topic id is 16 bytes")
        name = PyBytes_AS_STRING(topic)
        name_len = 16
    else:
        name = PyUnicode_AsUTF8AndSize(topic, &name_len)
    if name_len > 0x7fff:
        raise ValueError("topic name too long")
    if size < 0 or size > 0x7fffffff or (size > 0 and not regions):
        raise ValueError(f"bad records size {size}")
    if aborted is not None:
        n_aborted = len(aborted)
    if api_version >= FIRST_FLEXIBLE:
        return _encode_flexible(correlation_id, api_version >= FIRST_TOPIC_ID, name, name_len,
                                partition, high_watermark, last_stable_offset,
                                log_start_offset, aborted, n_aborted, regions, size)
    # correlation id, throttle time, (v7+ error code, session id), topic count, name,
    # partition count, index, error, high watermark, last stable offset, (v5+ log start
    # offset), aborted count and entries, (v11+ preferred read replica), records length
    size_out = 4 + 4 + 4 + 2 + name_len + 4 + 4 + 2 + 8 + 8 + 4 + 16 * n_aborted + 4
    if api_version >= 7:
        size_out += 6
    if api_version >= 5:
        size_out += 8
    if api_version >= 11:
        size_out += 4
    out = PyBytes_FromStringAndSize(NULL, size_out)
    q = <unsigned char *>PyBytes_AS_STRING(out)
    fl_put_be32(q, <uint32_t>correlation_id)
    fl_put_be32(q + 4, 0)                     # throttle_time_ms
    q += 8
    if api_version >= 7:
        fl_put_be16(q, 0)                     # error_code
        fl_put_be32(q + 2, 0)                 # session_id
        q += 6
    q = fl_put_one_partition(q, name, name_len, partition)
    fl_put_be64(q, <uint64_t>high_watermark)
    fl_put_be64(q + 8, <uint64_t>last_stable_offset)
    q += 16
    if api_version >= 5:
        fl_put_be64(q, <uint64_t>log_start_offset)
        q += 8
    if aborted is None:
        fl_put_be32(q, 0xffffffff)
        q += 4
    else:
        fl_put_be32(q, <uint32_t>n_aborted)
        q += 4
        for i in range(n_aborted):
            pid, first = aborted[i]
            fl_put_be64(q, <uint64_t>pid)
            fl_put_be64(q + 8, <uint64_t>first)
            q += 16
    if api_version >= 11:
        fl_put_be32(q, 0xffffffff)            # preferred_read_replica: -1
        q += 4
    fl_put_be32(q, <uint32_t>size)
    if size == 0:
        return [out]
    return [out, *regions]


# What ends a v12 answer after its records: the partition's, the topic's and the
# response's (empty) tag buffers.
cdef bytes _FLEXIBLE_TAIL = b"\0\0\0"


cdef list _encode_flexible(int32_t correlation_id, bint by_id, const char *name,
                           Py_ssize_t name_len,
                           int32_t partition, int64_t high_watermark,
                           int64_t last_stable_offset, int64_t log_start_offset,
                           list aborted, Py_ssize_t n_aborted, list regions, int64_t size):
    """encode_fetch_response for v12+: header v1 and the compact body (``by_id``: v13+,
    the topic's 16-byte id in place of its compact name; v16's tagged node_endpoints are
    absent from an answer without error)."""
    cdef Py_ssize_t i, size_out
    cdef int64_t pid, first
    cdef unsigned char *q
    # correlation id + header tags (5), throttle, error code, session id (10), one topic
    # (1), name (v13+: id), one partition (1), index, error, high watermark, last stable offset, log
    # start offset (30), the aborted transactions' compact length and entries (17 each:
    # two int64 and a tag buffer), preferred read replica (4), the records' compact length
    size_out = (5 + 10 + 1 + (0 if by_id else uvarint_size(<uint64_t>name_len + 1))
                + name_len + 1 + 30
                + (uvarint_size(<uint64_t>n_aborted + 1) + 17 * n_aborted
                   if aborted is not None else 1)
                + 4 + uvarint_size(<uint64_t>size + 1))
    if size == 0:
        size_out += 3   # the closing tag buffers, in the same bytes
    out = PyBytes_FromStringAndSize(NULL, size_out)
    q = <unsigned char *>PyBytes_AS_STRING(out)
    fl_put_be32(q, <uint32_t>correlation_id)
    q[4] = 0                                  # header tags
    fl_put_be32(q + 5, 0)                     # throttle_time_ms
    fl_put_be16(q + 9, 0)                     # error_code
    fl_put_be32(q + 11, 0)                    # session_id
    q[15] = 2                                 # one topic
    q += 16
    if not by_id:
        q += write_uvarint(q, <uint64_t>name_len + 1)
    memcpy(q, name, name_len)
    q += name_len
    q[0] = 2                                  # one partition
    fl_put_be32(q + 1, <uint32_t>partition)
    fl_put_be16(q + 5, 0)                     # error_code
    fl_put_be64(q + 7, <uint64_t>high_watermark)
    fl_put_be64(q + 15, <uint64_t>last_stable_offset)
    fl_put_be64(q + 23, <uint64_t>log_start_offset)
    q += 31
    if aborted is None:
        q[0] = 0                              # aborted_transactions: null
        q += 1
    else:
        q += write_uvarint(q, <uint64_t>n_aborted + 1)
        for i in range(n_aborted):
            pid, first = aborted[i]
            fl_put_be64(q, <uint64_t>pid)
            fl_put_be64(q + 8, <uint64_t>first)
            q[16] = 0                         # the entry's tags
            q += 17
    fl_put_be32(q, 0xffffffff)                # preferred_read_replica: -1
    q += 4
    q += write_uvarint(q, <uint64_t>size + 1)
    if size == 0:
        q[0] = q[1] = q[2] = 0
        return [out]
    return [out, *regions, _FLEXIBLE_TAIL]
