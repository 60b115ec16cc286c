# fastlog/_codec.pxd: the C-level face of the record codec for other compiled modules.
#
# Big-endian loads/stores, varints and the CRC-32C kernel as inline helpers (no GIL, no
# Python objects), plus the declarations of the cdef classes that cimporters may type
# against. Everything here is reentrant: any thread may call it, with or without the GIL.

from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from cpython.buffer cimport Py_buffer
from cpython.unicode cimport PyUnicode_DecodeUTF8

cdef extern from *:
    """
    #include <string.h>
    #include <stdint.h>
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #define FL_BSWAP16(x) (x)
    #define FL_BSWAP32(x) (x)
    #define FL_BSWAP64(x) (x)
    #else
    #define FL_BSWAP16(x) __builtin_bswap16(x)
    #define FL_BSWAP32(x) __builtin_bswap32(x)
    #define FL_BSWAP64(x) __builtin_bswap64(x)
    #endif
    static inline uint16_t fl_be16(const unsigned char *p) {
        uint16_t v; memcpy(&v, p, 2); return FL_BSWAP16(v);
    }
    static inline uint32_t fl_be32(const unsigned char *p) {
        uint32_t v; memcpy(&v, p, 4); return FL_BSWAP32(v);
    }
    static inline uint64_t fl_be64(const unsigned char *p) {
        uint64_t v; memcpy(&v, p, 8); return FL_BSWAP64(v);
    }
    static inline void fl_put_be16(unsigned char *p, uint16_t v) {
        v = FL_BSWAP16(v); memcpy(p, &v, 2);
    }
    static inline void fl_put_be32(unsigned char *p, uint32_t v) {
        v = FL_BSWAP32(v); memcpy(p, &v, 4);
    }
    static inline void fl_put_be64(unsigned char *p, uint64_t v) {
        v = FL_BSWAP64(v); memcpy(p, &v, 8);
    }
    """
    uint16_t fl_be16(const unsigned char *p) noexcept nogil
    uint32_t fl_be32(const unsigned char *p) noexcept nogil
    uint64_t fl_be64(const unsigned char *p) noexcept nogil
    void fl_put_be16(unsigned char *p, uint16_t v) noexcept nogil
    void fl_put_be32(unsigned char *p, uint32_t v) noexcept nogil
    void fl_put_be64(unsigned char *p, uint64_t v) noexcept nogil


cdef inline Py_ssize_t fl_request_header(const unsigned char *p, Py_ssize_t n,
                                         uint16_t api_key, int first_version,
                                         int last_version, int16_t *api_version,
                                         int32_t *correlation_id,
                                         int16_t *client_id_len) noexcept nogil:
    # A request header v1 (int16 api_key, int16 api_version, int32 correlation_id,
    # nullable int16-length client_id) of `api_key` at a version in [first_version,
    # last_version] (Produce's and Fetch's compiled readers): the position after it (the
    # client id's bytes are not checked to be there), or -1 for any other header.
    if n < 10 or fl_be16(p) != api_key:
        return -1
    api_version[0] = <int16_t>fl_be16(p + 2)
    if api_version[0] < first_version or api_version[0] > last_version:
        return -1
    correlation_id[0] = <int32_t>fl_be32(p + 4)
    client_id_len[0] = <int16_t>fl_be16(p + 8)
    if client_id_len[0] < -1:
        return -1
    return 10 + (client_id_len[0] if client_id_len[0] > 0 else 0)


cdef inline unsigned char *fl_put_one_partition(unsigned char *q, const char *name,
                                                Py_ssize_t name_len,
                                                int32_t partition) noexcept nogil:
    # A response's topic array holding one topic (`name`, name_len bytes, a non-flexible
    # string) of one partition: both counts, the name, the partition index and a zero
    # error code (Produce's and Fetch's compiled answers). Returns the position after.
    fl_put_be32(q, 1)
    fl_put_be16(q + 4, <uint16_t>name_len)
    memcpy(q + 6, name, name_len)
    q += 6 + name_len
    fl_put_be32(q, 1)
    fl_put_be32(q + 4, <uint32_t>partition)
    fl_put_be16(q + 8, 0)
    return q + 10


cdef inline tuple fl_client_id_and_name(const unsigned char *p, int16_t client_id_len,
                                        Py_ssize_t name_pos, Py_ssize_t name_len):
    # The client id of a request header v1/v2 (client_id_len bytes from byte 10, -1 for
    # null) and a topic name (name_len bytes at name_pos), both checked to be in the
    # frame, decoded as strict UTF-8: (client_id, name), or None when either is not
    # UTF-8 (Produce's and Fetch's compiled readers, whose generic path names the fault).
    try:
        client_id = (PyUnicode_DecodeUTF8(<const char *>p + 10, client_id_len, "strict")
                     if client_id_len >= 0 else None)
        name = PyUnicode_DecodeUTF8(<const char *>p + name_pos, name_len, "strict")
    except UnicodeDecodeError:
        return None
    return client_id, name


# Varint readers return the position after the varint, or VARINT_TRUNCATED /
# VARINT_TOO_LONG; raise_varint_error() turns those codes into the codec's exceptions.
cdef enum:
    VARINT_TRUNCATED = -1
    VARINT_TOO_LONG = -2


cdef inline Py_ssize_t read_uvarint32(const unsigned char *buf, Py_ssize_t pos,
                                      Py_ssize_t end, uint32_t *out) noexcept nogil:
    cdef uint32_t value = 0
    cdef unsigned int shift = 0
    cdef unsigned char b
    while True:
        if pos >= end:
            return VARINT_TRUNCATED
        b = buf[pos]
        pos += 1
        value |= (<uint32_t>(b & 0x7F)) << shift
        if b < 0x80:
            out[0] = value
            return pos
        shift += 7
        if shift > 28:
            return VARINT_TOO_LONG


cdef inline Py_ssize_t read_uvarint64(const unsigned char *buf, Py_ssize_t pos,
                                      Py_ssize_t end, uint64_t *out) noexcept nogil:
    cdef uint64_t value = 0
    cdef unsigned int shift = 0
    cdef unsigned char b
    while True:
        if pos >= end:
            return VARINT_TRUNCATED
        b = buf[pos]
        pos += 1
        value |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            out[0] = value
            return pos
        shift += 7
        if shift > 63:
            return VARINT_TOO_LONG


cdef inline Py_ssize_t read_varint32(const unsigned char *buf, Py_ssize_t pos,
                                     Py_ssize_t end, int32_t *out) noexcept nogil:
    cdef uint32_t raw = 0
    cdef Py_ssize_t nxt
    if end > pos:
        # One- and two-byte fast paths, without a loop: the lengths, deltas and value
        # sizes of records up to 8 KiB. Fewer mispredicted branches than the loop. The
        # one-byte path needs one byte of room only: a record's last field (its header
        # count) ends exactly at the record's end.
        raw = buf[pos]
        if raw < 0x80:
            out[0] = <int32_t>((raw >> 1) ^ (<uint32_t>0 - (raw & 1)))
            return pos + 1
        if end - pos >= 2 and buf[pos + 1] < 0x80:
            raw = (raw & 0x7F) | (<uint32_t>buf[pos + 1] << 7)
            out[0] = <int32_t>((raw >> 1) ^ (<uint32_t>0 - (raw & 1)))
            return pos + 2
        raw = 0
    nxt = read_uvarint32(buf, pos, end, &raw)
    if nxt >= 0:
        out[0] = <int32_t>((raw >> 1) ^ (<uint32_t>0 - (raw & 1)))
    return nxt


cdef inline Py_ssize_t read_varint64(const unsigned char *buf, Py_ssize_t pos,
                                     Py_ssize_t end, int64_t *out) noexcept nogil:
    cdef uint64_t raw = 0
    cdef Py_ssize_t nxt
    if end > pos:
        raw = buf[pos]
        if raw < 0x80:
            out[0] = <int64_t>((raw >> 1) ^ (<uint64_t>0 - (raw & 1)))
            return pos + 1
        if end - pos >= 2 and buf[pos + 1] < 0x80:
            raw = (raw & 0x7F) | (<uint64_t>buf[pos + 1] << 7)
            out[0] = <int64_t>((raw >> 1) ^ (<uint64_t>0 - (raw & 1)))
            return pos + 2
        raw = 0
    nxt = read_uvarint64(buf, pos, end, &raw)
    if nxt >= 0:
        out[0] = <int64_t>((raw >> 1) ^ (<uint64_t>0 - (raw & 1)))
    return nxt


cdef inline uint32_t zigzag32(int32_t v) noexcept nogil:
    return (<uint32_t>v << 1) ^ <uint32_t>(v >> 31)


cdef inline uint64_t zigzag64(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline int uvarint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline int write_uvarint(unsigned char *p, uint64_t v) noexcept nogil:
    """Write v at p (room for 10 bytes needed) and return the byte count."""
    cdef int n = 0
    while v >= 0x80:
        p[n] = <unsigned char>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    p[n] = <unsigned char>v
    return n + 1


# CRC-32C (Castagnoli) with Kafka's conventions (initial 0, result not pre-inverted by the
# caller): crc32c_update(0, p, n) equals crc32c.crc32c(bytes(p[:n])). No GIL needed.
cdef uint32_t crc32c_update(uint32_t crc, const unsigned char *data, size_t length) noexcept nogil
cdef int raise_varint_error(Py_ssize_t code, Py_ssize_t pos, str what) except -1
# fastlog.compression.decompress(codec, data, limit), imported once (per batch, with GIL).
cdef object decompress_records(int codec, object data, Py_ssize_t limit)
# Write baseOffset and partitionLeaderEpoch of each batch (headers found in data) in place;
# the offset after the last record.
cdef int64_t stamp_batch_headers(unsigned char *data, Py_ssize_t length, list batches,
                                 int64_t first_offset, int32_t leader_epoch) except -1


cdef class FileRegion:
    cdef readonly object file
    cdef readonly Py_ssize_t position
    cdef readonly Py_ssize_t length


cdef class Reader:
    cdef Py_buffer _view
    cdef bint _has_view
    cdef const unsigned char *_data
    cdef Py_ssize_t _pos
    cdef Py_ssize_t _end
    cdef object _obj
    cdef object _mv
    cdef const unsigned char *_take(self, Py_ssize_t n, str what) except NULL
    cdef uint32_t _uvarint(self) except? 0xFFFFFFFF
    cdef object _utf8(self, Py_ssize_t n, str what)
    cdef Py_ssize_t _bytes_len(self, bint nullable, bint compact) except -2
    cdef object _copy(self, Py_ssize_t n)
    cdef object _view_of(self, Py_ssize_t n)


cdef class Writer:
    cdef unsigned char *_buf
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef list _externals
    cdef Py_ssize_t _external_len
    cdef int _grow(self, Py_ssize_t need) except -1
    cdef unsigned char *_room(self, Py_ssize_t n) except NULL
    cdef int _uvarint(self, uint64_t v) except -1
    cdef int _raw(self, const void *p, Py_ssize_t n) except -1
    cdef int _text(self, s, bint compact, bint nullable) except -1
    cdef int _blob(self, b, bint compact, bint nullable) except -1


cdef class BatchHeader:
    cdef readonly Py_ssize_t position
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count
