# fastlog/spark/_arrow.pyx: fetched v2 record batches -> Arrow column buffers for Spark.
#
# Owns the decoding of a Fetch answer's records bytes (Kafka record batch v2: 61-byte
# header, varint records, optionally compressed) straight into the byte layouts of Arrow
# arrays for Spark's Kafka schema: offset (int64), timestamp (int64 microseconds),
# timestampType (int32), key / value (binary: validity bitmap + int32 offsets + data) and,
# when asked, headers (list<struct<key string, value binary>>). No Python object is made
# per record: everything lands in malloc'ed buffers that finish() hands over as
# OwnedBuffer objects (buffer protocol, freed with their last reference), which pyarrow
# wraps without a copy (pyarrow is used only from Python, so this builds without it).
#
# Callers: fastlog.spark.source's executor-side read(), one ColumnBuilder per task (not
# thread-safe). Compressed batches are inflated by fastlog.compression (GIL released
# inside the C libraries); CRC-32C and varints come from fastlog._codec's C helpers.

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset

from fastlog._codec cimport (
    crc32c_update,
    fl_be16,
    fl_be32,
    fl_be64,
    raise_varint_error,
    read_varint32,
    read_varint64,
)

from fastlog._codec import CorruptRecordError, InvalidRecordError

DEFAULT_DECOMPRESS_LIMIT = 64 * 1024 * 1024

# Kafka's DefaultRecordBatch layout (byte offsets inside a batch).
cdef enum:
    B_LENGTH = 8
    B_MAGIC = 16
    B_CRC = 17
    B_ATTRIBUTES = 21
    B_LAST_OFFSET_DELTA = 23
    B_FIRST_TIMESTAMP = 27
    B_MAX_TIMESTAMP = 35
    B_RECORD_COUNT = 57
    B_HEADER = 61
    B_OVERHEAD = 12
    B_MIN_LENGTH = 49
    A_CODEC = 0x07
    A_LOG_APPEND = 0x08
    A_CONTROL = 0x20


# ---------------------------------------------------------------------------------------
# Growable buffers

cdef inline int gb_reserve(GrowBuf *b, Py_ssize_t extra) except -1:
    """Make room for extra more bytes; new bytes are zeroed (bitmaps rely on it)."""
    cdef Py_ssize_t need = b.len + extra
    cdef Py_ssize_t cap
    cdef unsigned char *p
    if need <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 4096
    while cap < need:
        cap *= 2
    p = <unsigned char *>realloc(b.data, cap)
    if p == NULL:
        raise MemoryError(f"cannot grow an Arrow buffer to {cap} bytes")
    memset(p + b.cap, 0, cap - b.cap)
    b.data = p
    b.cap = cap
    return 0


cdef inline void gb_free(GrowBuf *b) noexcept:
    free(b.data)
    b.data = NULL
    b.len = 0
    b.cap = 0


cdef inline void gb_i64(GrowBuf *b, int64_t v) noexcept nogil:
    memcpy(b.data + b.len, &v, 8)
    b.len += 8


cdef inline void gb_i32(GrowBuf *b, int32_t v) noexcept nogil:
    memcpy(b.data + b.len, &v, 4)
    b.len += 4


cdef inline void gb_bytes(GrowBuf *b, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    memcpy(b.data + b.len, p, n)
    b.len += n


cdef inline int gb_bitmap(GrowBuf *b, Py_ssize_t bits) except -1:
    """Make b a zeroed bitmap of at least bits bits (len counts its bytes)."""
    cdef Py_ssize_t need = bits // 8 + 1
    if need > b.len:
        gb_reserve(b, need - b.len)
        b.len = need
    return 0


cdef inline int gb_zero_start(GrowBuf *b) except -1:
    """An offsets buffer starts with a single 0."""
    gb_reserve(b, 4)
    gb_i32(b, 0)
    return 0


cdef inline void set_bit(GrowBuf *b, Py_ssize_t i) noexcept nogil:
    b.data[i >> 3] |= <unsigned char>(1 << (i & 7))


@cython.final
cdef class OwnedBuffer:
    """Read-only bytes owned by this object (malloc'ed), exposed by the buffer protocol."""
    cdef unsigned char *data
    cdef Py_ssize_t length

    def __dealloc__(self):
        free(self.data)

    def __len__(self):
        return self.length

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.data, self.length, 1, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass


cdef OwnedBuffer take(GrowBuf *b, Py_ssize_t length):
    """Hand b's bytes (the first length of them) to a new OwnedBuffer; b becomes empty."""
    cdef OwnedBuffer out = OwnedBuffer.__new__(OwnedBuffer)
    if b.data == NULL:
        gb_reserve(b, 8)
    out.data = b.data
    out.length = length
    b.data = NULL
    b.len = 0
    b.cap = 0
    return out


# ---------------------------------------------------------------------------------------
# The builder

cdef object _decompress_fn = None


cdef object _inflate(int codec, object region, Py_ssize_t limit):
    global _decompress_fn
    if _decompress_fn is None:
        from fastlog.compression import decompress
        _decompress_fn = decompress
    return _decompress_fn(codec, region, limit)


cdef int _bad(str what, Py_ssize_t where) except -1:
    raise InvalidRecordError(f"{what} (batch at byte {where} of the fetch answer)", where)


cdef inline Py_ssize_t _nullable_blob(const unsigned char *d, Py_ssize_t q, Py_ssize_t rend,
                                      int32_t *length, str what, Py_ssize_t where) except -1:
    """Read a varint length (-1: null) at q; return where its bytes start."""
    cdef Py_ssize_t nxt = read_varint32(d, q, rend, length)
    if nxt < 0:
        raise_varint_error(nxt, where, f"{what} length")
    if length[0] < -1 or length[0] > rend - nxt:
        _bad(f"invalid {what} length {length[0]}", where)
    return nxt


cdef inline int _append_binary(GrowBuf *valid, GrowBuf *offsets, GrowBuf *data,
                               Py_ssize_t row, const unsigned char *p,
                               int32_t length) noexcept nogil:
    """Append one binary value (length -1: null) to an Arrow binary column; 1 if null."""
    cdef int null = 1
    if length >= 0:
        set_bit(valid, row)
        gb_bytes(data, p, length)
        null = 0
    gb_i32(offsets, <int32_t>data.len)
    return null


@cython.final
cdef class ColumnBuilder:
    """Accumulates Spark's Kafka columns from record batches of one partition.

    add(buf, start, stop) decodes every complete batch of buf and keeps the records whose
    offsets lie in [start, stop); finish() returns the column buffers and starts over.
    """

    def __cinit__(self, bint include_headers=False):
        self.include_headers = include_headers
        self._reset()

    def __dealloc__(self):
        gb_free(&self.offsets)
        gb_free(&self.timestamps)
        gb_free(&self.ts_types)
        gb_free(&self.key_valid)
        gb_free(&self.key_offsets)
        gb_free(&self.key_data)
        gb_free(&self.value_valid)
        gb_free(&self.value_offsets)
        gb_free(&self.value_data)
        self._free_headers()

    cdef void _free_headers(self) noexcept:
        gb_free(&self.hdr_valid)
        gb_free(&self.hdr_offsets)
        gb_free(&self.hk_offsets)
        gb_free(&self.hk_data)
        gb_free(&self.hv_valid)
        gb_free(&self.hv_offsets)
        gb_free(&self.hv_data)

    cdef int _reset(self) except -1:
        self.rows = 0
        self.key_nulls = self.value_nulls = self.header_nulls = 0
        self.header_value_nulls = self.header_count = 0
        gb_zero_start(&self.key_offsets)
        gb_zero_start(&self.value_offsets)
        gb_zero_start(&self.hdr_offsets)
        gb_zero_start(&self.hk_offsets)
        gb_zero_start(&self.hv_offsets)
        return 0

    @property
    def data_bytes(self):
        """Bytes of key, value and header data accumulated so far."""
        return (self.key_data.len + self.value_data.len + self.hk_data.len
                + self.hv_data.len)

    def add(self, buf, int64_t start, int64_t stop, *, bint verify_crc=True,
            Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
        """Decode the complete batches of buf, keeping offsets in [start, stop).

        Returns the offset to fetch next: after the last complete batch read (at least
        start), or stop when a batch reaching stop was seen. A partial batch at the end
        of buf (a fetch answer cut at its size limit) is left for the next fetch.
        """
        cdef Py_buffer view
        cdef const unsigned char *data
        cdef Py_ssize_t pos = 0, avail, size, rlen
        cdef int64_t base, last, nxt = start
        cdef int32_t length, count
        cdef int attrs, codec
        cdef uint32_t crc
        cdef Py_buffer rview
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            data = <const unsigned char *>view.buf
            while nxt < stop:
                avail = view.len - pos
                if avail < B_OVERHEAD + 5:
                    break
                length = <int32_t>fl_be32(data + pos + B_LENGTH)
                if length < B_MIN_LENGTH:
                    _bad(f"invalid batch length {length}", pos)
                size = <Py_ssize_t>length + B_OVERHEAD
                if size > avail:
                    break  # partial batch at the end of the answer
                if data[pos + B_MAGIC] != 2:
                    _bad(f"record batch magic {data[pos + B_MAGIC]} is not 2 (legacy message "
                         f"sets are not read by the Spark source)", pos)
                if verify_crc:
                    crc = crc32c_update(0, data + pos + B_ATTRIBUTES, size - B_ATTRIBUTES)
                    if crc != fl_be32(data + pos + B_CRC):
                        raise CorruptRecordError(
                            f"CRC mismatch in the record batch at byte {pos} of the fetch "
                            f"answer", pos)
                base = <int64_t>fl_be64(data + pos)
                last = base + <int32_t>fl_be32(data + pos + B_LAST_OFFSET_DELTA)
                attrs = fl_be16(data + pos + B_ATTRIBUTES)
                count = <int32_t>fl_be32(data + pos + B_RECORD_COUNT)
                if last >= start and not (attrs & A_CONTROL) and count > 0:
                    codec = attrs & A_CODEC
                    if codec == 0:
                        self._add_records(data + pos + B_HEADER, size - B_HEADER, base, count,
                                          <int64_t>fl_be64(data + pos + B_FIRST_TIMESTAMP),
                                          <int64_t>fl_be64(data + pos + B_MAX_TIMESTAMP),
                                          (attrs & A_LOG_APPEND) != 0, start, stop, pos)
                    else:
                        region = _inflate(codec, memoryview(buf)[pos + B_HEADER:pos + size],
                                          decompress_limit)
                        PyObject_GetBuffer(region, &rview, PyBUF_SIMPLE)
                        try:
                            rlen = rview.len
                            self._add_records(<const unsigned char *>rview.buf, rlen, base,
                                              count,
                                              <int64_t>fl_be64(data + pos + B_FIRST_TIMESTAMP),
                                              <int64_t>fl_be64(data + pos + B_MAX_TIMESTAMP),
                                              (attrs & A_LOG_APPEND) != 0, start, stop, pos)
                        finally:
                            PyBuffer_Release(&rview)
                if last + 1 > nxt:
                    nxt = last + 1
                pos += size
            return stop if nxt > stop else nxt
        finally:
            PyBuffer_Release(&view)

    cdef int _add_records(self, const unsigned char *d, Py_ssize_t end, int64_t base_offset,
                          int32_t count, int64_t first_ts, int64_t max_ts, bint log_append,
                          int64_t start, int64_t stop, Py_ssize_t where) except -1:
        cdef Py_ssize_t p = 0, q, rend, row, kpos, vpos
        cdef int32_t i, rec_len = 0, odelta = 0, klen = 0, vlen = 0, hcount = 0, _j
        cdef int32_t hk = 0, hv = 0
        cdef int64_t tdelta = 0, offset
        cdef bint headers = self.include_headers
        # Per batch, reserve the most this batch can add, so the loop below never checks.
        if count > end:
            _bad(f"record count {count} exceeds the batch size", where)
        gb_reserve(&self.offsets, <Py_ssize_t>count * 8)
        gb_reserve(&self.timestamps, <Py_ssize_t>count * 8)
        gb_reserve(&self.ts_types, <Py_ssize_t>count * 4)
        gb_reserve(&self.key_offsets, <Py_ssize_t>count * 4)
        gb_reserve(&self.value_offsets, <Py_ssize_t>count * 4)
        gb_bitmap(&self.key_valid, self.rows + count)
        gb_bitmap(&self.value_valid, self.rows + count)
        gb_reserve(&self.key_data, end)
        gb_reserve(&self.value_data, end)
        if headers:
            gb_reserve(&self.hdr_offsets, <Py_ssize_t>count * 4)
            gb_bitmap(&self.hdr_valid, self.rows + count)
            # Each header takes at least 2 bytes of the batch: bounds their number.
            gb_reserve(&self.hk_offsets, end * 2)
            gb_reserve(&self.hv_offsets, end * 2)
            gb_bitmap(&self.hv_valid, self.header_count + end // 2 + 1)
            gb_reserve(&self.hk_data, end)
            gb_reserve(&self.hv_data, end)
        for i in range(count):
            if p >= end:
                _bad(f"batch declares {count} records but holds {i}", where)
            q = read_varint32(d, p, end, &rec_len)
            if q < 0:
                raise_varint_error(q, where, "record length")
            if rec_len < 6 or rec_len > end - q:
                _bad(f"invalid record length {rec_len}", where)
            rend = q + rec_len
            q += 1  # attributes
            q = read_varint64(d, q, rend, &tdelta)
            if q < 0:
                raise_varint_error(q, where, "timestamp delta")
            q = read_varint32(d, q, rend, &odelta)
            if q < 0:
                raise_varint_error(q, where, "offset delta")
            kpos = _nullable_blob(d, q, rend, &klen, "key", where)
            vpos = _nullable_blob(d, kpos + (klen if klen > 0 else 0), rend, &vlen, "value",
                                  where)
            q = vpos + (vlen if vlen > 0 else 0)
            offset = base_offset + odelta
            if offset < start:
                p = rend
                continue
            if offset >= stop:
                break
            row = self.rows
            gb_i64(&self.offsets, offset)
            if log_append:
                gb_i64(&self.timestamps, max_ts * 1000)
                gb_i32(&self.ts_types, 1)
            else:
                gb_i64(&self.timestamps, (first_ts + tdelta) * 1000)
                gb_i32(&self.ts_types, 0)
            self.key_nulls += _append_binary(&self.key_valid, &self.key_offsets,
                                             &self.key_data, row, d + kpos, klen)
            self.value_nulls += _append_binary(&self.value_valid, &self.value_offsets,
                                               &self.value_data, row, d + vpos, vlen)
            if headers:
                q = read_varint32(d, q, rend, &hcount)
                if q < 0:
                    raise_varint_error(q, where, "header count")
                if hcount < 0 or hcount > rend - q:
                    _bad(f"invalid header count {hcount}", where)
                for _j in range(hcount):
                    q = read_varint32(d, q, rend, &hk)
                    if q < 0 or hk < 0 or hk > rend - q:
                        _bad("invalid header key", where)
                    gb_bytes(&self.hk_data, d + q, hk)
                    q += hk
                    gb_i32(&self.hk_offsets, <int32_t>self.hk_data.len)
                    q = read_varint32(d, q, rend, &hv)
                    if q < 0 or hv < -1 or hv > rend - q:
                        _bad("invalid header value", where)
                    if hv >= 0:
                        set_bit(&self.hv_valid, self.header_count)
                        gb_bytes(&self.hv_data, d + q, hv)
                        q += hv
                    else:
                        self.header_value_nulls += 1
                    gb_i32(&self.hv_offsets, <int32_t>self.hv_data.len)
                    self.header_count += 1
                if hcount > 0:
                    set_bit(&self.hdr_valid, row)
                else:
                    self.header_nulls += 1
                gb_i32(&self.hdr_offsets, <int32_t>self.header_count)
            self.rows += 1
            p = rend
        return 0

    def finish(self):
        """The accumulated columns as a dict of buffers and counts; the builder restarts.

        Keys: rows, offsets, timestamps, ts_types, key (validity, offsets, data, nulls),
        value (same), and with headers: headers (validity, offsets, nulls), header_keys
        (offsets, data), header_values (validity, offsets, data, nulls), header_count.
        """
        cdef Py_ssize_t n = self.rows
        cdef Py_ssize_t bitmap = (n + 7) // 8
        out = {
            "rows": n,
            "offsets": take(&self.offsets, n * 8),
            "timestamps": take(&self.timestamps, n * 8),
            "ts_types": take(&self.ts_types, n * 4),
            "key": (take(&self.key_valid, bitmap) if self.key_nulls else None,
                    take(&self.key_offsets, (n + 1) * 4),
                    take(&self.key_data, self.key_data.len), self.key_nulls),
            "value": (take(&self.value_valid, bitmap) if self.value_nulls else None,
                      take(&self.value_offsets, (n + 1) * 4),
                      take(&self.value_data, self.value_data.len), self.value_nulls),
        }
        gb_free(&self.key_valid)
        gb_free(&self.value_valid)
        if self.include_headers:
            h = self.header_count
            out["headers"] = (take(&self.hdr_valid, bitmap) if self.header_nulls else None,
                              take(&self.hdr_offsets, (n + 1) * 4), self.header_nulls)
            out["header_keys"] = (take(&self.hk_offsets, (h + 1) * 4),
                                  take(&self.hk_data, self.hk_data.len))
            out["header_values"] = (
                take(&self.hv_valid, (h + 7) // 8) if self.header_value_nulls else None,
                take(&self.hv_offsets, (h + 1) * 4), take(&self.hv_data, self.hv_data.len),
                self.header_value_nulls)
            out["header_count"] = h
        self._free_headers()
        self._reset()
        return out
