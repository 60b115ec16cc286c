# fastlog/protocol/_produce.pyx: Produce v3-v11 in its everyday shape, read and answered
# in compiled code.
#
# A producer sends one Produce request per linger interval, and almost all of them carry
# one topic, one partition and no transactional id (one partition leader per connection,
# one batch per partition). For those, parse_produce_request reads the request header and
# body straight from the frame (parse_transactional_produce_request the same shape with a
# transactional id: a transactional producer's one Produce per short transaction) and
# encode_produce_response writes the success answer,
# with the bytes exactly as the generic schema-driven codec (wire.py) reads and writes
# them. kafka-python and the Java client send one request per broker carrying every
# partition it leads: parse_produce_partitions and encode_produce_partitions do the same
# for any number of topics and partitions (without a transactional id). Everything else —
# other APIs, other versions, null records, tagged fields, anything malformed, and every
# error answer — returns None / is left to the generic path, which also names the fault.
# Why: the generic path touches hundreds of Python objects per request, and after the few
# milliseconds a producer lingers between requests those are all cache misses; this path
# touches a handful.
#
# Formats. v3-v8: request header v1 (int16 api_key, int16 api_version, int32
# correlation_id, nullable int16-length client_id); ProduceRequest (nullable string
# transactional_id, int16 acks, int32 timeout_ms, [topic string, [int32 partition,
# nullable int32-length records]]); response header v0 and ProduceResponse v3-v8.
# v9-v11 (flexible, KIP-482): request header v2 (v1 + a tag buffer); strings, arrays and
# records as compact ones (unsigned varint length + 1, 0 for null) and a tag buffer after
# each struct; response header v1 (+ a tag buffer). Only empty tag buffers (the single
# byte 0, what clients send) are read here. Pure functions, any thread.

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from fastlog._codec cimport (
    fl_be16,
    fl_be32,
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

# The versions this path reads; Produce v0-v2 are answered with an error by the handler.
FIRST_VERSION = 3
LAST_VERSION = 11
FIRST_FLEXIBLE = 9
cdef uint16_t PRODUCE_KEY = 0


def parse_produce_request(frame):
    """(api_version, correlation_id, client_id, acks, timeout_ms, topic, partition,
    records) for a
    Produce v3-v11 request with no transactional id and exactly one topic holding exactly
    one partition with non-null records (and, v9+, no tagged fields), all of ``frame``
    consumed; None for anything else. ``records`` is a slice of ``frame`` (no copy)."""
    return _parse(frame, False, False)


def parse_transactional_produce_request(frame):
    """The same for a Produce request with a (non-null) transactional id, which follows
    the other fields: (api_version, ..., records, transactional_id); None for anything
    else, also for a request without a transactional id."""
    return _parse(frame, True, False)


cdef object _parse(object frame, bint transactional, bint many):
    """The readers: the request header, then parse_produce_request's body (with
    ``transactional``, parse_transactional_produce_request's) or, with ``many``,
    parse_produce_partitions'."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t n, pos, name_len, name_pos, rec_len, txn_pos = 0
    cdef int16_t api_version, acks, client_id_len, txn_len
    cdef int32_t correlation_id, timeout_ms, partition
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        n = view.len
        # header v1 (8 fixed bytes + client_id) and the body's fixed fields up to the
        # topic array: nullable transactional_id (2 + its bytes) + acks (2) + timeout (4)
        # + count (4)
        pos = fl_request_header(p, n, PRODUCE_KEY, FIRST_VERSION, LAST_VERSION,
                                &api_version, &correlation_id, &client_id_len)
        if pos < 0:
            return None
        if many:
            return _parse_many(frame, p, n, pos, api_version, correlation_id,
                               client_id_len)
        if api_version >= FIRST_FLEXIBLE:
            return _parse_flexible(frame, p, n, pos, api_version, correlation_id,
                                   client_id_len, transactional)
        if pos + 2 > n:
            return None
        txn_len = <int16_t>fl_be16(p + pos)
        if transactional != (txn_len != -1) or txn_len < -1:
            return None   # (a transactional id where none is wanted, or malformed)
        txn_pos = pos + 2
        pos = txn_pos + max(txn_len, 0)
        if pos + 10 > n:
            return None
        acks = <int16_t>fl_be16(p + pos)
        timeout_ms = <int32_t>fl_be32(p + pos + 2)
        if fl_be32(p + pos + 6) != 1:
            return None
        pos += 10
        if pos + 2 > n:
            return None
        name_len = <int16_t>fl_be16(p + pos)
        name_pos = pos + 2
        pos = name_pos + name_len
        # name, partition count (4), partition index (4), records length (4)
        if name_len < 0 or pos + 12 > n or fl_be32(p + pos) != 1:
            return None
        partition = <int32_t>fl_be32(p + pos + 4)
        rec_len = <int32_t>fl_be32(p + pos + 8)
        pos += 12
        if rec_len < 0 or pos + rec_len != n:
            return None
        return _parsed(frame, p, api_version, correlation_id, client_id_len, acks,
                       timeout_ms, name_pos, name_len, partition, pos, n, txn_pos, txn_len)
    finally:
        PyBuffer_Release(&view)


cdef object _parse_flexible(object frame, const unsigned char *p, Py_ssize_t n,
                            Py_ssize_t pos, int16_t api_version, int32_t correlation_id,
                            int16_t client_id_len, bint transactional):
    """_parse's v9+ body, from ``pos`` (after the header's client id)."""
    cdef uint32_t name_n, rec_n, txn_n
    cdef Py_ssize_t name_pos, name_len, rec_pos, rec_len, txn_pos = 0
    cdef int16_t acks, txn_len = -1
    cdef int32_t timeout_ms, partition
    # header tag buffer (0), transactional_id (null: 0), acks (2), timeout (4), one topic
    # (2)
    if pos + 2 > n or p[pos] != 0:
        return None
    pos += 1
    if not transactional:
        if p[pos] != 0:
            return None
        pos += 1
    else:
        txn_pos = read_uvarint32(p, pos, n, &txn_n)
        if txn_pos < 0 or txn_n == 0 or txn_n - 1 > 0x7fff:
            return None   # truncated, null or too long an id
        txn_len = <int16_t>(txn_n - 1)
        pos = txn_pos + txn_len
    if pos + 8 > n:
        return None
    acks = <int16_t>fl_be16(p + pos)
    timeout_ms = <int32_t>fl_be32(p + pos + 2)
    if p[pos + 6] != 2:
        return None
    name_pos = read_uvarint32(p, pos + 7, n, &name_n)
    if name_pos < 0 or name_n == 0 or name_n - 1 > 0x7fff:
        return None   # truncated, null or too long a name: the generic path says which
    name_len = name_n - 1
    pos = name_pos + name_len
    # one partition (1), its index (4), then the records' compact length
    if pos + 5 >= n or p[pos] != 2:
        return None
    partition = <int32_t>fl_be32(p + pos + 1)
    rec_pos = read_uvarint32(p, pos + 5, n, &rec_n)
    if rec_pos < 0 or rec_n == 0 or rec_n - 1 > <uint32_t>(n - rec_pos):
        return None
    rec_len = rec_n - 1
    pos = rec_pos + rec_len
    # the partition's, the topic's and the request's empty tag buffers end the frame
    if pos + 3 != n or p[pos] != 0 or p[pos + 1] != 0 or p[pos + 2] != 0:
        return None
    return _parsed(frame, p, api_version, correlation_id, client_id_len, acks, timeout_ms,
                   name_pos, name_len, partition, rec_pos, pos, txn_pos, txn_len)


cdef object _parsed(object frame, const unsigned char *p, int16_t api_version,
                    int32_t correlation_id, int16_t client_id_len, int16_t acks,
                    int32_t timeout_ms, Py_ssize_t name_pos, Py_ssize_t name_len,
                    int32_t partition, Py_ssize_t rec_start, Py_ssize_t rec_end,
                    Py_ssize_t txn_pos, int16_t txn_len):
    """_parse's answer once the frame's shape is checked (the transactional id, when
    txn_len >= 0, last); None for names that are not UTF-8."""
    names = fl_client_id_and_name(p, client_id_len, name_pos, name_len)
    if names is None:
        return None
    if txn_len < 0:
        return (api_version, correlation_id, names[0], acks, timeout_ms, names[1],
                partition, frame[rec_start:rec_end])
    try:
        txn_id = PyUnicode_DecodeUTF8(<const char *>p + txn_pos, txn_len, "strict")
    except UnicodeDecodeError:
        return None
    return (api_version, correlation_id, names[0], acks, timeout_ms, names[1], partition,
            frame[rec_start:rec_end], txn_id)


def encode_produce_response(int api_version, int32_t correlation_id, str topic,
                            int32_t partition, int64_t base_offset, int64_t log_append_time,
                            int64_t log_start_offset):
    """The response header (v0; v1 from Produce v9) + a ProduceResponse v3-v11 answering
    one partition of one topic without error (no record errors, null error message, no
    throttling, no tagged fields), as bytes."""
    cdef Py_ssize_t name_len
    cdef const char *name = PyUnicode_AsUTF8AndSize(topic, &name_len)
    cdef Py_ssize_t size
    cdef unsigned char *q
    if api_version < FIRST_VERSION or api_version > LAST_VERSION:
        raise ValueError(f"Produce v{api_version} is not encoded here")
    if name_len > 0x7fff:
        raise ValueError("topic name too long")
    if api_version >= FIRST_FLEXIBLE:
        return _encode_flexible(correlation_id, name, name_len, partition, base_offset,
                                log_append_time, log_start_offset)
    # correlation id, topic count, name, partition count, index, error, base offset,
    # log_append_time (v2+), log_start_offset (v5+), record_errors + error_message (v8),
    # throttle_time_ms (v1+)
    size = 4 + 4 + 2 + name_len + 4 + 4 + 2 + 8 + 8 + 4
    if api_version >= 5:
        size += 8
    if api_version >= 8:
        size += 4 + 2
    out = PyBytes_FromStringAndSize(NULL, size)
    q = <unsigned char *>PyBytes_AS_STRING(out)
    fl_put_be32(q, <uint32_t>correlation_id)
    q = fl_put_one_partition(q + 4, name, name_len, partition)
    fl_put_be64(q, <uint64_t>base_offset)
    fl_put_be64(q + 8, <uint64_t>log_append_time)
    q += 16
    if api_version >= 5:
        fl_put_be64(q, <uint64_t>log_start_offset)
        q += 8
    if api_version >= 8:
        fl_put_be32(q, 0)                 # record_errors: empty array
        fl_put_be16(q + 4, 0xffff)        # error_message: null
        q += 6
    fl_put_be32(q, 0)                     # throttle_time_ms
    return out


cdef bytes _encode_flexible(int32_t correlation_id, const char *name, Py_ssize_t name_len,
                            int32_t partition, int64_t base_offset, int64_t log_append_time,
                            int64_t log_start_offset):
    """encode_produce_response for v9-v11: header v1 and the compact body."""
    cdef int name_n = uvarint_size(<uint64_t>name_len + 1)
    # correlation id + header tags (5), one topic (1), name, one partition (1), index,
    # error, base offset, log_append_time, log_start_offset (30), no record errors (1),
    # null error message (1), partition tags (1), topic tags (1), throttle (4), tags (1)
    cdef Py_ssize_t size = 5 + 1 + name_n + name_len + 1 + 30 + 1 + 1 + 1 + 1 + 4 + 1
    out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char *q = <unsigned char *>PyBytes_AS_STRING(out)
    fl_put_be32(q, <uint32_t>correlation_id)
    q[4] = 0
    q[5] = 2
    q += 6 + write_uvarint(q + 6, <uint64_t>name_len + 1)
    memcpy(q, name, name_len)
    q += name_len
    q[0] = 2
    fl_put_be32(q + 1, <uint32_t>partition)
    fl_put_be16(q + 5, 0)
    fl_put_be64(q + 7, <uint64_t>base_offset)
    fl_put_be64(q + 15, <uint64_t>log_append_time)
    fl_put_be64(q + 23, <uint64_t>log_start_offset)
    q[31] = 1                             # record_errors: empty
    q[32] = 0                             # error_message: null
    q[33] = 0                             # partition tags
    q[34] = 0                             # topic tags
    fl_put_be32(q + 35, 0)                # throttle_time_ms
    q[39] = 0                             # tags
    return out


# ---- many partitions: kafka-python and the Java client put every partition of a broker
# into one request.

def parse_produce_partitions(frame):
    """(api_version, correlation_id, client_id, acks, timeout_ms, topics) for a Produce
    v3-v11 request with no transactional id, at least one topic, each with at least one
    partition, every partition with non-null records (and, v9+, no tagged fields), all of
    ``frame`` consumed; None for anything else. ``topics`` is a list of (topic, [(partition,
    records), ...]) in the request's order; each ``records`` a slice of ``frame``. Counts
    are checked against the bytes left before anything is made for them."""
    return _parse(frame, False, True)


cdef object _parse_many(object frame, const unsigned char *p, Py_ssize_t n, Py_ssize_t pos,
                        int16_t api_version, int32_t correlation_id, int16_t client_id_len):
    """parse_produce_partitions' body from ``pos`` (after the header's client id)."""
    client_id = None
    if client_id_len >= 0:
        client_id = _utf8(p, 10, client_id_len)
        if client_id is None:
            return None
    return _parse_partitions(frame, p, n, pos, api_version >= FIRST_FLEXIBLE, api_version,
                             correlation_id, client_id)


cdef object _utf8(const unsigned char *p, Py_ssize_t pos, Py_ssize_t size):
    """Strict UTF-8 of `size` bytes at `pos` (checked to be in the frame), or None."""
    try:
        return PyUnicode_DecodeUTF8(<const char *>p + pos, size, "strict")
    except UnicodeDecodeError:
        return None


cdef Py_ssize_t _read_count(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos,
                            bint flexible, Py_ssize_t *count) noexcept nogil:
    """An array's element count at `pos` (int32, or v9+ an unsigned varint of count + 1):
    the position after it, or -1 when truncated, null, empty or longer than the bytes
    left could hold (each element takes at least 4 bytes)."""
    cdef uint32_t raw
    if flexible:
        pos = read_uvarint32(p, pos, n, &raw)
        if pos < 0 or raw < 2:
            return -1
        count[0] = raw - 1
    else:
        if pos + 4 > n:
            return -1
        raw = fl_be32(p + pos)
        if <int32_t>raw < 1:
            return -1
        count[0] = <int32_t>raw
        pos += 4
    if count[0] > (n - pos) // 4:
        return -1
    return pos


cdef object _parse_partitions(object frame, const unsigned char *p, Py_ssize_t n,
                              Py_ssize_t pos, bint flexible, int16_t api_version,
                              int32_t correlation_id, object client_id):
    """parse_produce_partitions' body from ``pos`` (after the header's client id)."""
    cdef int16_t acks
    cdef int32_t timeout_ms, partition
    cdef Py_ssize_t n_topics, n_parts, _t, _i, name_len, rec_len
    cdef uint32_t raw
    if flexible:
        # header tag buffer (0), null transactional_id (0)
        if pos + 8 > n or p[pos] != 0 or p[pos + 1] != 0:
            return None
        pos += 2
    else:
        if pos + 8 > n or <int16_t>fl_be16(p + pos) != -1:
            return None   # transactional (or malformed): the handler answers it
        pos += 2
    acks = <int16_t>fl_be16(p + pos)
    timeout_ms = <int32_t>fl_be32(p + pos + 2)
    pos = _read_count(p, n, pos + 6, flexible, &n_topics)
    if pos < 0:
        return None
    topics = []
    for _t in range(n_topics):
        if flexible:
            pos = read_uvarint32(p, pos, n, &raw)
            if pos < 0 or raw == 0 or raw - 1 > 0x7fff:
                return None   # truncated, null or too long a name
            name_len = raw - 1
        else:
            if pos + 2 > n:
                return None
            name_len = <int16_t>fl_be16(p + pos)
            pos += 2
            if name_len < 0:
                return None
        if pos + name_len > n:
            return None
        name = _utf8(p, pos, name_len)
        if name is None:
            return None
        pos = _read_count(p, n, pos + name_len, flexible, &n_parts)
        if pos < 0:
            return None
        parts = []
        for _i in range(n_parts):
            if pos + 4 > n:
                return None
            partition = <int32_t>fl_be32(p + pos)
            pos += 4
            if flexible:
                pos = read_uvarint32(p, pos, n, &raw)
                if pos < 0 or raw == 0 or raw - 1 > <uint32_t>(n - pos):
                    return None
                rec_len = raw - 1
            else:
                if pos + 4 > n:
                    return None
                rec_len = <int32_t>fl_be32(p + pos)
                pos += 4
                if rec_len < 0 or rec_len > n - pos:
                    return None
            parts.append((partition, frame[pos:pos + rec_len]))
            pos += rec_len
            if flexible:   # the partition's empty tag buffer
                if pos >= n or p[pos] != 0:
                    return None
                pos += 1
        if flexible:       # the topic's
            if pos >= n or p[pos] != 0:
                return None
            pos += 1
        topics.append((name, parts))
    if flexible:           # the request's
        if pos >= n or p[pos] != 0:
            return None
        pos += 1
    if pos != n:
        return None
    return (api_version, correlation_id, client_id, acks, timeout_ms, topics)


def encode_produce_partitions(int api_version, int32_t correlation_id, list answers):
    """The response header (v0; v1 from Produce v9) + a ProduceResponse v3-v11 answering
    every partition of ``answers`` without error, as bytes: ``answers`` is a list of
    (topic, [(partition, base_offset, log_append_time, log_start_offset), ...]) in the
    request's order (no record errors, null error messages, no throttling, no tagged
    fields)."""
    cdef bint flexible = api_version >= FIRST_FLEXIBLE
    cdef Py_ssize_t size, name_len, n_parts, per_part
    cdef const char *name
    cdef unsigned char *q
    cdef int32_t partition
    cdef int64_t base_offset, log_append_time, log_start_offset
    if api_version < FIRST_VERSION or api_version > LAST_VERSION:
        raise ValueError(f"Produce v{api_version} is not encoded here")
    # index, error, base offset, log_append_time (26), log_start_offset (v5+),
    # record_errors + error_message (v8+; flexible: 1 + 1 + the tag buffer)
    per_part = 4 + 2 + 8 + 8
    if api_version >= 5:
        per_part += 8
    if flexible:
        per_part += 3
    elif api_version >= 8:
        per_part += 6
    # correlation id (+ header tags), topic count, throttle_time_ms (+ tags)
    size = 4 + 4 + 4 if not flexible else 5 + uvarint_size(len(answers) + 1) + 4 + 1
    for topic, parts in answers:
        name = PyUnicode_AsUTF8AndSize(topic, &name_len)
        if name_len > 0x7fff:
            raise ValueError("topic name too long")
        n_parts = len(parts)
        if flexible:
            size += uvarint_size(name_len + 1) + name_len + uvarint_size(n_parts + 1) + 1
        else:
            size += 2 + name_len + 4
        size += n_parts * per_part
    out = PyBytes_FromStringAndSize(NULL, size)
    q = <unsigned char *>PyBytes_AS_STRING(out)
    fl_put_be32(q, <uint32_t>correlation_id)
    q += 4
    if flexible:
        q[0] = 0
        q += 1 + write_uvarint(q + 1, <uint64_t>len(answers) + 1)
    else:
        fl_put_be32(q, <uint32_t>len(answers))
        q += 4
    for topic, parts in answers:
        name = PyUnicode_AsUTF8AndSize(topic, &name_len)
        n_parts = len(parts)
        if flexible:
            q += write_uvarint(q, <uint64_t>name_len + 1)
        else:
            fl_put_be16(q, <uint16_t>name_len)
            q += 2
        memcpy(q, name, name_len)
        q += name_len
        if flexible:
            q += write_uvarint(q, <uint64_t>n_parts + 1)
        else:
            fl_put_be32(q, <uint32_t>n_parts)
            q += 4
        for partition, base_offset, log_append_time, log_start_offset in parts:
            fl_put_be32(q, <uint32_t>partition)
            fl_put_be16(q + 4, 0)
            fl_put_be64(q + 6, <uint64_t>base_offset)
            fl_put_be64(q + 14, <uint64_t>log_append_time)
            q += 22
            if api_version >= 5:
                fl_put_be64(q, <uint64_t>log_start_offset)
                q += 8
            if flexible:
                q[0] = 1                  # record_errors: empty
                q[1] = 0                  # error_message: null
                q[2] = 0                  # partition tags
                q += 3
            elif api_version >= 8:
                fl_put_be32(q, 0)         # record_errors: empty array
                fl_put_be16(q + 4, 0xffff)  # error_message: null
                q += 6
        if flexible:
            q[0] = 0                      # topic tags
            q += 1
    fl_put_be32(q, 0)                     # throttle_time_ms
    if flexible:
        q[4] = 0                          # tags
    return out
