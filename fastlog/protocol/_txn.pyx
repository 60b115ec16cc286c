# fastlog/protocol/_txn.pyx: a transactional producer's AddPartitionsToTxn and EndTxn,
# read and answered in compiled code.
#
# A transactional producer sends one AddPartitionsToTxn and one EndTxn per transaction
# (librdkafka 2.x: AddPartitionsToTxn v0 and EndTxn v1), so with short transactions they
# are as frequent as its Produce requests. parse_txn_request reads the request header and
# body of AddPartitionsToTxn v0-v2 and EndTxn v0-v2 straight from the frame, and
# encode_add_partitions_to_txn_response / encode_end_txn_response write their answers,
# with the bytes exactly as the generic schema-driven codec (wire.py) reads and writes
# them. Everything else (the flexible versions v3+, which also carry the brokers' batched
# v4-v5 requests, other APIs, null or non-UTF-8 strings, anything malformed) returns None
# and is left to the generic path, which also names the fault.
#
# Formats (non-flexible): request header v1 (int16 api_key, int16 api_version, int32
# correlation_id, nullable int16-length client_id); AddPartitionsToTxnRequest v0-v2
# (string transactional_id, int64 producer_id, int16 producer_epoch, [string name,
# [int32 partition]]); AddPartitionsToTxnResponse v0-v2 (int32 throttle_time_ms,
# [string name, [int32 partition_index, int16 partition_error_code]]); EndTxnRequest
# v0-v2 (string transactional_id, int64 producer_id, int16 producer_epoch, bool
# committed); EndTxnResponse v0-v2 (int32 throttle_time_ms, int16 error_code); response
# header v0 (int32 correlation_id). Arrays are int32-counted, strings int16-length. Pure
# functions, any thread (the broker's request loop calls them).

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t
from libc.string cimport memcpy

from fastlog._codec cimport fl_be16, fl_be32, fl_be64, fl_put_be16, fl_put_be32

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

ADD_PARTITIONS_TO_TXN = 24
END_TXN = 26
# The versions read here: the first flexible version (3) of both is the generic path's.
LAST_VERSION = 2


cdef object _string(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos):
    """A non-null int16-length string at pos[0], strict UTF-8, pos[0] moved past it; None
    when it is null, truncated or not UTF-8."""
    cdef Py_ssize_t at = pos[0]
    cdef int16_t size
    if at + 2 > n:
        return None
    size = <int16_t>fl_be16(p + at)
    if size < 0 or at + 2 + size > n:
        return None
    try:
        s = PyUnicode_DecodeUTF8(<const char *>p + at + 2, size, "strict")
    except UnicodeDecodeError:
        return None
    pos[0] = at + 2 + size
    return s


def parse_txn_request(frame):
    """For an AddPartitionsToTxn v0-v2 request: (24, api_version, correlation_id,
    client_id, transactional_id, producer_id, producer_epoch, [(topic, partition), ...]
    in request order); for an EndTxn v0-v2 request: (26, api_version, correlation_id,
    client_id, transactional_id, producer_id, producer_epoch, committed). All of
    ``frame`` consumed; None for anything else."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t n, pos
    cdef uint16_t api_key
    cdef int16_t api_version, client_id_len, producer_epoch
    cdef int32_t correlation_id, topics, partitions, _i, _j
    cdef int64_t producer_id
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        n = view.len
        if n < 10:
            return None
        api_key = fl_be16(p)
        if api_key != ADD_PARTITIONS_TO_TXN and api_key != END_TXN:
            return None
        api_version = <int16_t>fl_be16(p + 2)
        if api_version < 0 or api_version > LAST_VERSION:
            return None
        correlation_id = <int32_t>fl_be32(p + 4)
        client_id_len = <int16_t>fl_be16(p + 8)
        if client_id_len < -1 or 10 + max(client_id_len, 0) > n:
            return None
        try:
            client_id = (PyUnicode_DecodeUTF8(<const char *>p + 10, client_id_len, "strict")
                         if client_id_len >= 0 else None)
        except UnicodeDecodeError:
            return None
        pos = 10 + max(client_id_len, 0)
        txn_id = _string(p, n, &pos)
        if txn_id is None or pos + 10 > n:
            return None
        producer_id = <int64_t>fl_be64(p + pos)
        producer_epoch = <int16_t>fl_be16(p + pos + 8)
        pos += 10
        if api_key == END_TXN:
            if pos + 1 != n:
                return None
            return (END_TXN, api_version, correlation_id, client_id, txn_id, producer_id,
                    producer_epoch, p[pos] != 0)
        if pos + 4 > n:
            return None
        topics = <int32_t>fl_be32(p + pos)
        pos += 4
        # every topic takes at least 6 bytes (name length, partition count): a count the
        # frame cannot hold is malformed, found before anything is built for it
        if topics < 0 or topics > (n - pos) // 6:
            return None
        wanted = []
        for _i in range(topics):
            name = _string(p, n, &pos)
            if name is None or pos + 4 > n:
                return None
            partitions = <int32_t>fl_be32(p + pos)
            pos += 4
            if partitions < 0 or partitions > (n - pos) // 4:
                return None
            for _j in range(partitions):
                wanted.append((name, <int32_t>fl_be32(p + pos)))
                pos += 4
        if pos != n:
            return None
        return (ADD_PARTITIONS_TO_TXN, api_version, correlation_id, client_id, txn_id,
                producer_id, producer_epoch, wanted)
    finally:
        PyBuffer_Release(&view)


def encode_add_partitions_to_txn_response(int api_version, int32_t correlation_id,
                                          list results):
    """The response header (v0) + an AddPartitionsToTxnResponse v0-v2 without throttling:
    ``results`` is [(topic, [(partition, error_code), ...]), ...] in answer order."""
    cdef Py_ssize_t size = 4 + 4 + 4, name_len
    cdef const char *name
    cdef unsigned char *q
    cdef list parts
    if api_version < 0 or api_version > LAST_VERSION:
        raise ValueError(f"AddPartitionsToTxn v{api_version} is not encoded here")
    for topic, parts in results:
        name = PyUnicode_AsUTF8AndSize(topic, &name_len)
        if name_len > 0x7fff:
            raise ValueError("topic name too long")
        size += 2 + name_len + 4 + 6 * len(parts)
    out = PyBytes_FromStringAndSize(NULL, size)
    q = <unsigned char *>PyBytes_AS_STRING(out)
    fl_put_be32(q, <uint32_t>correlation_id)
    fl_put_be32(q + 4, 0)                       # throttle_time_ms
    fl_put_be32(q + 8, <uint32_t>len(results))
    q += 12
    for topic, parts in results:
        name = PyUnicode_AsUTF8AndSize(topic, &name_len)
        fl_put_be16(q, <uint16_t>name_len)
        memcpy(q + 2, name, name_len)
        q += 2 + name_len
        fl_put_be32(q, <uint32_t>len(parts))
        q += 4
        for partition, error in parts:
            fl_put_be32(q, <uint32_t><int32_t>partition)
            fl_put_be16(q + 4, <uint16_t><int16_t>error)
            q += 6
    return out


def encode_end_txn_response(int api_version, int32_t correlation_id, int16_t error_code):
    """The response header (v0) + an EndTxnResponse v0-v2 without throttling."""
    cdef unsigned char *q
    if api_version < 0 or api_version > LAST_VERSION:
        raise ValueError(f"EndTxn v{api_version} is not encoded here")
    out = PyBytes_FromStringAndSize(NULL, 10)
    q = <unsigned char *>PyBytes_AS_STRING(out)
    fl_put_be32(q, <uint32_t>correlation_id)
    fl_put_be32(q + 4, 0)                       # throttle_time_ms
    fl_put_be16(q + 8, <uint16_t>error_code)
    return out
