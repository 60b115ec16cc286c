# fastlog/protocol/_produce.pyx: Produce v3-v8 in its everyday shape, read and answered
# in compiled code.
#
# A producer sends one Produce request per linger interval, and almost all of them carry
# one topic, one partition and no transactional id (one partition leader per connection,
# one batch per partition). For those, parse_produce_request reads the request header and
# body straight from the frame and encode_produce_response writes the success answer,
# with the bytes exactly as the generic schema-driven codec (wire.py) reads and writes
# them. Everything else — other APIs, other versions, several partitions, transactions,
# null records, anything malformed, and every error answer — returns None / is left to
# the generic path, which also names the fault. Why: the generic path touches hundreds of
# Python objects per request, and after the few milliseconds a producer lingers between
# requests those are all cache misses; this path touches a handful.
#
# Formats (non-flexible versions only, so no tagged fields): request header v1 (int16
# api_key, int16 api_version, int32 correlation_id, nullable int16-length client_id);
# ProduceRequest v3-v8 (nullable string transactional_id, int16 acks, int32 timeout_ms,
# [topic string, [int32 partition, nullable int32-length records]]); response header v0
# and ProduceResponse v3-v8. Pure functions, any thread.

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t

from fastlog._codec cimport (
    fl_be16,
    fl_be32,
    fl_put_be16,
    fl_put_be32,
    fl_put_be64,
    fl_put_one_partition,
    fl_request_header,
)

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

# The versions this path reads; Produce v0-v2 are answered with an error by the handler
# and v9+ are flexible (not served).
FIRST_VERSION = 3
LAST_VERSION = 8
cdef uint16_t PRODUCE_KEY = 0


def parse_produce_request(frame):
    """(api_version, correlation_id, client_id, acks, timeout_ms, topic, partition,
    records) for a
    Produce v3-v8 request with no transactional id and exactly one topic holding exactly
    one partition with non-null records, all of ``frame`` consumed; None for anything
    else. ``records`` is a slice of ``frame`` (no copy)."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t n, pos, name_len, name_pos, rec_len
    cdef int16_t api_version, acks, client_id_len
    cdef int32_t correlation_id, timeout_ms, partition
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        n = view.len
        # header v1 (8 fixed bytes + client_id) and the body's fixed fields up to the
        # topic array: nullable transactional_id (2) + acks (2) + timeout (4) + count (4)
        pos = fl_request_header(p, n, PRODUCE_KEY, FIRST_VERSION, LAST_VERSION,
                                &api_version, &correlation_id, &client_id_len)
        if pos < 0 or pos + 12 > n:
            return None
        if <int16_t>fl_be16(p + pos) != -1:
            return None   # transactional (or malformed): the handler answers it
        acks = <int16_t>fl_be16(p + pos + 2)
        timeout_ms = <int32_t>fl_be32(p + pos + 4)
        if fl_be32(p + pos + 8) != 1:
            return None
        pos += 12
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
        try:
            client_id = (PyUnicode_DecodeUTF8(<const char *>p + 10, client_id_len, "strict")
                         if client_id_len >= 0 else None)
            topic = PyUnicode_DecodeUTF8(<const char *>p + name_pos, name_len, "strict")
        except UnicodeDecodeError:
            return None
        return (api_version, correlation_id, client_id, acks, timeout_ms, topic, partition,
                frame[pos:n])
    finally:
        PyBuffer_Release(&view)


def encode_produce_response(int api_version, int32_t correlation_id, str topic,
                            int32_t partition, int64_t base_offset, int64_t log_append_time,
                            int64_t log_start_offset):
    """Response header v0 + a ProduceResponse v3-v8 answering one partition of one topic
    without error (no record errors, null error message, no throttling), as bytes."""
    cdef Py_ssize_t name_len
    cdef const char *name = PyUnicode_AsUTF8AndSize(topic, &name_len)
    cdef Py_ssize_t size
    cdef unsigned char *q
    if api_version < FIRST_VERSION or api_version > LAST_VERSION:
        raise ValueError(f"Produce v{api_version} is not encoded here")
    if name_len > 0x7fff:
        raise ValueError("topic name too long")
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
