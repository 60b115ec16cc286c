# fastlog/_codec.pyx: the bottom layer every byte of fastlog passes through.
#
# Owns Kafka's binary formats exactly as Kafka defines them: unsigned and zig-zag varints,
# CRC-32C (batches) and CRC-32 (legacy messages), record batch v2 (header, validation,
# scanning, in-place offset stamping, record iteration, building), legacy message sets v0/v1
# and conversion to/from v2, and the protocol primitives (Reader/Writer) that every request
# and response is encoded with. It knows nothing of the server, files or sockets (FileRegion
# is only a description of bytes in a file).
#
# Callers: the protocol layer and handlers (event-loop threads), storage (log recovery,
# append), clients and tools. All functions are reentrant; none keeps global state beyond
# the CRC kernel pointer chosen at import (the produce walk over lz4 batches decodes into
# a per-thread scratch buffer of fastlog._lz4, the codec layer's LZ4 decoder). Bad input
# raises a CodecError subclass that says what was wrong and at which byte offset; nothing
# reads outside the buffer it was given, and no allocation is ever sized from an untrusted
# length before that length has been bounded by the bytes actually present.

cimport cython
from cpython.buffer cimport (
    PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport (
    int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t,
)
from libc.string cimport memcpy

from fastlog._lz4 cimport decode_frames_scratch

import os
import zlib

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef extern from "<dlfcn.h>" nogil:
    void *dlopen(const char *filename, int flags)
    void *dlsym(void *handle, const char *symbol)
    int RTLD_NOW
    int RTLD_NOLOAD


# ---------------------------------------------------------------------------------------
# Exceptions

class CodecError(ValueError):
    """Bad bytes: says what was wrong; ``position`` is the byte offset where it was found."""

    def __init__(self, message, position=None):
        super().__init__(message)
        self.position = position


class TruncatedError(CodecError):
    """The buffer ends before the structure being read does."""


class CorruptRecordError(CodecError):
    """A checksum does not match the bytes it covers."""


class InvalidMagicError(CodecError):
    """A record batch or message has a magic (format version) this call does not accept."""


class InvalidRecordError(CodecError):
    """Structurally wrong: bad lengths, counts, attributes, varints, or a forbidden batch."""


class MissingKeyError(InvalidRecordError):
    """A record without a key where the caller requires one (a compacted topic's);
    ``record_index`` is its index in the batch."""

    def __init__(self, message, position=None, record_index=0):
        super().__init__(message, position)
        self.record_index = record_index


class RecordTooLargeError(InvalidRecordError):
    """A batch is larger than the size limit the caller gave."""


class UnsupportedCodecError(CodecError):
    """A compression codec that is unknown or not allowed here."""


class DecompressionLimitError(CodecError):
    """Decompressed data would exceed the caller's cap."""


# ---------------------------------------------------------------------------------------
# Constants

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1

# Byte offsets inside a v2 batch (Kafka's DefaultRecordBatch layout).
cdef enum:
    OFF_BASE_OFFSET = 0
    OFF_LENGTH = 8
    OFF_LEADER_EPOCH = 12
    OFF_MAGIC = 16
    OFF_CRC = 17
    OFF_ATTRIBUTES = 21
    OFF_LAST_OFFSET_DELTA = 23
    OFF_FIRST_TIMESTAMP = 27
    OFF_MAX_TIMESTAMP = 35
    OFF_PRODUCER_ID = 43
    OFF_PRODUCER_EPOCH = 51
    OFF_BASE_SEQUENCE = 53
    OFF_RECORD_COUNT = 57
    HEADER_SIZE = 61
    OVERHEAD = 12
    # batchLength counts everything after itself, so a batch with no records has this.
    MIN_BATCH_LENGTH = 49
    ATTR_CODEC_MASK = 0x07
    ATTR_TIMESTAMP_TYPE = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    # Bit 6 marks a delete horizon (set by compaction, KIP-534); bits 7..15 are unused.
    ATTR_DELETE_HORIZON = 0x40
    ATTR_UNUSED_MASK = 0xFF80

DEFAULT_DECOMPRESS_LIMIT = 64 * 1024 * 1024


# ---------------------------------------------------------------------------------------
# Small raising helpers (kept out of line so that hot loops stay small)

cdef int _raise_truncated(str what, Py_ssize_t pos, Py_ssize_t need,
                          Py_ssize_t have) except -1:
    raise TruncatedError(
        f"truncated {what} at byte {pos}: need {need} bytes, {max(have, 0)} left", pos)


cdef int raise_varint_error(Py_ssize_t code, Py_ssize_t pos, str what) except -1:
    if code == VARINT_TRUNCATED:
        raise TruncatedError(f"truncated varint ({what}) at byte {pos}", pos)
    raise InvalidRecordError(f"varint too long ({what}) at byte {pos}", pos)


cdef inline int _get_buffer(object obj, Py_buffer *view, bint writable) except -1:
    PyObject_GetBuffer(obj, view, PyBUF_WRITABLE if writable else PyBUF_SIMPLE)
    return 0


# ---------------------------------------------------------------------------------------
# Varints (Python API)

def encode_uvarint(n):
    """Unsigned varint of 0 <= n < 2**32 (as Kafka's unsigned varint, at most 5 bytes)."""
    if n < 0 or n > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {n}")
    cdef unsigned char tmp[10]
    cdef int k = write_uvarint(tmp, <uint64_t>n)
    return PyBytes_FromStringAndSize(<char *>tmp, k)


def encode_varint(n):
    """Zig-zag varint of a signed 32-bit value (at most 5 bytes)."""
    if n < -0x80000000 or n > 0x7FFFFFFF:
        raise ValueError(f"varint out of 32-bit range: {n}")
    cdef unsigned char tmp[10]
    cdef int k = write_uvarint(tmp, zigzag32(<int32_t>n))
    return PyBytes_FromStringAndSize(<char *>tmp, k)


def encode_varlong(n):
    """Zig-zag varint of a signed 64-bit value (at most 10 bytes)."""
    if n < -0x8000000000000000 or n > 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of 64-bit range: {n}")
    cdef unsigned char tmp[10]
    cdef int k = write_uvarint(tmp, zigzag64(<int64_t>n))
    return PyBytes_FromStringAndSize(<char *>tmp, k)


cdef object _decode(object buf, Py_ssize_t pos, int kind):
    # kind 0: unsigned varint, 1: zig-zag varint, 2: zig-zag varlong.
    cdef Py_buffer view
    cdef uint32_t u = 0
    cdef int32_t i = 0
    cdef int64_t wide = 0
    cdef Py_ssize_t nxt
    cdef const unsigned char *data
    _get_buffer(buf, &view, False)
    try:
        if pos < 0:
            raise ValueError("negative position")
        data = <const unsigned char *>view.buf
        if kind == 0:
            nxt = read_uvarint32(data, pos, view.len, &u)
            value = u
        elif kind == 1:
            nxt = read_varint32(data, pos, view.len, &i)
            value = i
        else:
            nxt = read_varint64(data, pos, view.len, &wide)
            value = wide
        if nxt < 0:
            raise_varint_error(nxt, pos, ("uvarint", "varint", "varlong")[kind])
        return value, nxt
    finally:
        PyBuffer_Release(&view)


def decode_uvarint(buf, Py_ssize_t pos=0):
    """Return (value, next_pos) of the unsigned varint at pos."""
    return _decode(buf, pos, 0)


def decode_varint(buf, Py_ssize_t pos=0):
    """Return (value, next_pos) of the zig-zag 32-bit varint at pos."""
    return _decode(buf, pos, 1)


def decode_varlong(buf, Py_ssize_t pos=0):
    """Return (value, next_pos) of the zig-zag 64-bit varint at pos."""
    return _decode(buf, pos, 2)


# ---------------------------------------------------------------------------------------
# CRC-32C through the crc32c package's own kernel.
#
# The package picks a hardware kernel (SSE4.2, three interleaved streams) at import. We
# look the same symbol up in its shared object once, so that batch validation calls the
# kernel directly (no Python call per batch, GIL released for big buffers). If the lookup
# fails we fall back to calling the package's Python function, which is the same kernel.

ctypedef uint32_t (*crc_kernel_t)(uint32_t, const unsigned char *, unsigned long) noexcept nogil

cdef crc_kernel_t _crc_kernel = NULL
cdef object _py_crc32c = None
# Buffers at least this long are checksummed without the GIL.
cdef Py_ssize_t _NOGIL_CRC_MIN = 32 * 1024


cdef int _load_crc_kernel() except -1:
    # Import errors propagate: without the crc32c package the codec refuses to load.
    global _crc_kernel, _py_crc32c
    import crc32c as _pkg
    import crc32c._crc32c as _ext
    _py_crc32c = _pkg.crc32c
    cdef bytes path = os.fsencode(_ext.__file__)
    cdef void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD)
    cdef void *sym = NULL
    if handle == NULL:
        return 0
    if _pkg.hardware_based:
        sym = dlsym(handle, b"_crc32c_hw_adler")
    else:
        sym = dlsym(handle, b"_crc32c_sw_slicing_by_8")
    if sym != NULL:
        _crc_kernel = <crc_kernel_t>sym
        # Self-check against the package before trusting the symbol.
        if (crc32c_update(0, <const unsigned char *>b"123456789", 9)
                != _py_crc32c(b"123456789")):
            _crc_kernel = NULL
    return 0


cdef uint32_t crc32c_update(uint32_t crc, const unsigned char *data,
                            size_t length) noexcept nogil:
    if _crc_kernel != NULL:
        return _crc_kernel(crc ^ 0xFFFFFFFFu, data, length) ^ 0xFFFFFFFFu
    with gil:
        return _py_crc32c(
            PyBytes_FromStringAndSize(<const char *>data, length), crc)


cdef inline uint32_t _crc32c_maybe_nogil(const unsigned char *data, Py_ssize_t length):
    cdef uint32_t r
    if length >= _NOGIL_CRC_MIN and _crc_kernel != NULL:
        with nogil:
            r = crc32c_update(0, data, length)
        return r
    return crc32c_update(0, data, length)


_load_crc_kernel()
# True when batches are checksummed by calling the package's kernel directly (expected).
CRC32C_DIRECT = _crc_kernel != NULL


def crc32c(data, value=0):
    """CRC-32C (Castagnoli) of data, continuing from value (Kafka's batch checksum)."""
    cdef Py_buffer view
    cdef uint32_t r
    cdef uint32_t start = value
    _get_buffer(data, &view, False)
    try:
        if view.len >= _NOGIL_CRC_MIN and _crc_kernel != NULL:
            with nogil:
                r = crc32c_update(start, <const unsigned char *>view.buf, view.len)
        else:
            r = crc32c_update(start, <const unsigned char *>view.buf, view.len)
        return r
    finally:
        PyBuffer_Release(&view)


def crc32(data):
    """CRC-32 (zlib polynomial) of data: the checksum of legacy v0/v1 messages."""
    return zlib.crc32(data) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------
# FileRegion

cdef class FileRegion:
    """``length`` bytes of ``file`` starting at ``position``.

    Storage returns these for fetch reads; the network layer sends them with sendfile.
    The region keeps ``file`` referenced so its descriptor stays open while in use.
    """

    def __init__(self, file, Py_ssize_t position, Py_ssize_t length):
        if position < 0 or length < 0:
            raise ValueError(f"bad file region: position={position} length={length}")
        self.file = file
        self.position = position
        self.length = length

    def read(self):
        """The region's bytes (a copy, through pread): for tests and tools, not hot paths."""
        data = os.pread(self.file.fileno(), self.length, self.position)
        if len(data) != self.length:
            raise TruncatedError(
                f"file region {self.position}+{self.length} extends past the end of the file",
                self.position + len(data))
        return data

    def __repr__(self):
        return f"FileRegion({self.file!r}, position={self.position}, length={self.length})"


# ---------------------------------------------------------------------------------------
# Protocol primitives: Reader

@cython.final
cdef class Reader:
    """Zero-copy reader of Kafka protocol primitives over any buffer (bytes, mmap, ...).

    ``pos`` is an absolute position in the buffer; reading past ``end`` raises
    TruncatedError. One Reader belongs to one thread at a time.
    """

    def __cinit__(self, buf, Py_ssize_t pos=0, end=None):
        cdef Py_ssize_t e
        _get_buffer(buf, &self._view, False)
        self._has_view = True
        self._obj = buf
        self._data = <const unsigned char *>self._view.buf
        e = self._view.len if end is None else end
        if e < 0 or e > self._view.len or pos < 0 or pos > e:
            raise ValueError(f"bad reader range pos={pos} end={end} for {self._view.len} bytes")
        self._pos = pos
        self._end = e

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)
            self._has_view = False

    @property
    def pos(self):
        return self._pos

    @pos.setter
    def pos(self, Py_ssize_t value):
        if value < 0 or value > self._end:
            raise ValueError(f"position {value} outside 0..{self._end}")
        self._pos = value

    @property
    def end(self):
        return self._end

    @property
    def remaining(self):
        return self._end - self._pos

    cdef const unsigned char *_take(self, Py_ssize_t n, str what) except NULL:
        cdef const unsigned char *p
        if n > self._end - self._pos:
            _raise_truncated(what, self._pos, n, self._end - self._pos)
        p = self._data + self._pos
        self._pos += n
        return p

    def skip(self, Py_ssize_t n):
        if n < 0:
            raise ValueError("negative skip")
        self._take(n, "skip")

    def int8(self):
        return <int8_t>self._take(1, "int8")[0]

    def boolean(self):
        return self._take(1, "boolean")[0] != 0

    def int16(self):
        return <int16_t>fl_be16(self._take(2, "int16"))

    def uint16(self):
        return fl_be16(self._take(2, "uint16"))

    def int32(self):
        return <int32_t>fl_be32(self._take(4, "int32"))

    def uint32(self):
        return fl_be32(self._take(4, "uint32"))

    def int64(self):
        return <int64_t>fl_be64(self._take(8, "int64"))

    def float64(self):
        cdef uint64_t raw = fl_be64(self._take(8, "float64"))
        cdef double d
        memcpy(&d, &raw, 8)
        return d

    def uuid(self):
        return PyBytes_FromStringAndSize(<const char *>self._take(16, "uuid"), 16)

    cdef uint32_t _uvarint(self) except? 0xFFFFFFFF:
        cdef uint32_t v = 0
        cdef Py_ssize_t nxt = read_uvarint32(self._data, self._pos, self._end, &v)
        if nxt < 0:
            raise_varint_error(nxt, self._pos, "uvarint")
        self._pos = nxt
        return v

    def uvarint(self):
        return self._uvarint()

    def varint(self):
        cdef int32_t v = 0
        cdef Py_ssize_t nxt = read_varint32(self._data, self._pos, self._end, &v)
        if nxt < 0:
            raise_varint_error(nxt, self._pos, "varint")
        self._pos = nxt
        return v

    def varlong(self):
        cdef int64_t v = 0
        cdef Py_ssize_t nxt = read_varint64(self._data, self._pos, self._end, &v)
        if nxt < 0:
            raise_varint_error(nxt, self._pos, "varlong")
        self._pos = nxt
        return v

    cdef object _utf8(self, Py_ssize_t n, str what):
        cdef Py_ssize_t at = self._pos
        cdef const unsigned char *p = self._take(n, what)
        try:
            return PyUnicode_DecodeUTF8(<const char *>p, n, NULL)
        except UnicodeDecodeError as exc:
            raise InvalidRecordError(f"{what} at byte {at} is not UTF-8: {exc}", at) from None

    def string(self):
        cdef Py_ssize_t at = self._pos
        cdef int16_t n = <int16_t>fl_be16(self._take(2, "string length"))
        if n < 0:
            raise InvalidRecordError(f"null or negative string length {n} at byte {at}", at)
        return self._utf8(n, "string")

    def nullable_string(self):
        cdef Py_ssize_t at = self._pos
        cdef int16_t n = <int16_t>fl_be16(self._take(2, "string length"))
        if n == -1:
            return None
        if n < 0:
            raise InvalidRecordError(f"negative string length {n} at byte {at}", at)
        return self._utf8(n, "string")

    def compact_string(self):
        cdef Py_ssize_t at = self._pos
        cdef uint32_t n = self._uvarint()
        if n == 0:
            raise InvalidRecordError(f"null compact string at byte {at}", at)
        return self._utf8(<Py_ssize_t>n - 1, "compact string")

    def compact_nullable_string(self):
        cdef uint32_t n = self._uvarint()
        if n == 0:
            return None
        return self._utf8(<Py_ssize_t>n - 1, "compact string")

    cdef Py_ssize_t _bytes_len(self, bint nullable, bint compact) except -2:
        # Returns -1 for null (only when nullable), else the byte count.
        cdef Py_ssize_t at = self._pos
        cdef int32_t n
        cdef uint32_t u
        if compact:
            u = self._uvarint()
            if u == 0:
                if not nullable:
                    raise InvalidRecordError(f"null compact bytes at byte {at}", at)
                return -1
            return <Py_ssize_t>u - 1
        n = <int32_t>fl_be32(self._take(4, "bytes length"))
        if n == -1 and nullable:
            return -1
        if n < 0:
            raise InvalidRecordError(f"invalid bytes length {n} at byte {at}", at)
        return n

    cdef object _copy(self, Py_ssize_t n):
        if n < 0:
            return None
        return PyBytes_FromStringAndSize(<const char *>self._take(n, "bytes"), n)

    cdef object _view_of(self, Py_ssize_t n):
        cdef Py_ssize_t start
        if n < 0:
            return None
        start = self._pos
        self._take(n, "bytes")
        if self._mv is None:
            mv = memoryview(self._obj)
            if mv.ndim != 1 or mv.itemsize != 1 or mv.format != "B":
                mv = mv.cast("B")
            self._mv = mv
        return self._mv[start:start + n]

    def bytes_(self):
        return self._copy(self._bytes_len(False, False))

    def nullable_bytes(self):
        return self._copy(self._bytes_len(True, False))

    def compact_bytes(self):
        return self._copy(self._bytes_len(False, True))

    def compact_nullable_bytes(self):
        return self._copy(self._bytes_len(True, True))

    def bytes_view(self):
        return self._view_of(self._bytes_len(False, False))

    def nullable_bytes_view(self):
        return self._view_of(self._bytes_len(True, False))

    def compact_bytes_view(self):
        return self._view_of(self._bytes_len(False, True))

    def compact_nullable_bytes_view(self):
        return self._view_of(self._bytes_len(True, True))

    def array_len(self):
        """Element count of an array (-1 for null); bounded by the bytes left."""
        cdef Py_ssize_t at = self._pos
        cdef int32_t n = <int32_t>fl_be32(self._take(4, "array length"))
        if n == -1:
            return -1
        if n < 0:
            raise InvalidRecordError(f"invalid array length {n} at byte {at}", at)
        if n > self._end - self._pos:
            raise TruncatedError(
                f"array of {n} elements at byte {at} cannot fit in the "
                f"{self._end - self._pos} bytes left", at)
        return n

    def compact_array_len(self):
        """Element count of a compact array (-1 for null); bounded by the bytes left."""
        cdef Py_ssize_t at = self._pos
        cdef uint32_t u = self._uvarint()
        if u == 0:
            return -1
        if <Py_ssize_t>u - 1 > self._end - self._pos:
            raise TruncatedError(
                f"compact array of {u - 1} elements at byte {at} cannot fit in the "
                f"{self._end - self._pos} bytes left", at)
        return <Py_ssize_t>u - 1

    def tagged_fields(self):
        """Tagged fields of a flexible version as {tag: raw bytes} (usually empty)."""
        cdef uint32_t count = self._uvarint()
        cdef uint32_t _i, tag, size
        cdef dict out = {}
        cdef Py_ssize_t at
        if count == 0:
            return out
        if count > self._end - self._pos:
            raise TruncatedError(
                f"{count} tagged fields cannot fit in the {self._end - self._pos} bytes left",
                self._pos)
        for _i in range(count):
            at = self._pos
            tag = self._uvarint()
            size = self._uvarint()
            if tag in out:
                raise InvalidRecordError(f"duplicate tagged field {tag} at byte {at}", at)
            out[tag] = self._copy(size)
        return out

    def __repr__(self):
        return f"Reader(pos={self._pos}, end={self._end})"


# ---------------------------------------------------------------------------------------
# Protocol primitives: Writer

@cython.final
cdef class Writer:
    """Growable encoder of Kafka protocol primitives.

    ``external(obj, length)`` inserts a part (FileRegion, large memoryview) without
    copying; ``getparts()`` returns the written bytes interleaved with those parts, for a
    vectored or sendfile write. ``len()`` counts both.
    """

    def __cinit__(self, Py_ssize_t capacity=256):
        if capacity < 16:
            capacity = 16
        self._buf = <unsigned char *>PyMem_Realloc(NULL, capacity)
        if self._buf == NULL:
            raise MemoryError()
        self._cap = capacity
        self._len = 0
        self._externals = []
        self._external_len = 0

    def __dealloc__(self):
        if self._buf != NULL:
            PyMem_Free(self._buf)
            self._buf = NULL

    cdef int _grow(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = self._cap * 2
        cdef unsigned char *nb
        while cap < self._len + need:
            cap *= 2
        nb = <unsigned char *>PyMem_Realloc(self._buf, cap)
        if nb == NULL:
            raise MemoryError()
        self._buf = nb
        self._cap = cap
        return 0

    cdef unsigned char *_room(self, Py_ssize_t n) except NULL:
        cdef unsigned char *p
        if self._len + n > self._cap:
            self._grow(n)
        p = self._buf + self._len
        self._len += n
        return p

    def __len__(self):
        return self._len + self._external_len

    def int8(self, int8_t v):
        self._room(1)[0] = <unsigned char>v

    def boolean(self, v):
        self._room(1)[0] = 1 if v else 0

    def int16(self, int16_t v):
        fl_put_be16(self._room(2), <uint16_t>v)

    def uint16(self, uint16_t v):
        fl_put_be16(self._room(2), v)

    def int32(self, int32_t v):
        fl_put_be32(self._room(4), <uint32_t>v)

    def uint32(self, uint32_t v):
        fl_put_be32(self._room(4), v)

    def int64(self, int64_t v):
        fl_put_be64(self._room(8), <uint64_t>v)

    def float64(self, double v):
        cdef uint64_t raw
        memcpy(&raw, &v, 8)
        fl_put_be64(self._room(8), raw)

    def uuid(self, v):
        cdef Py_buffer view
        _get_buffer(v, &view, False)
        try:
            if view.len != 16:
                raise ValueError(f"uuid must be 16 bytes, got {view.len}")
            memcpy(self._room(16), view.buf, 16)
        finally:
            PyBuffer_Release(&view)

    cdef int _uvarint(self, uint64_t v) except -1:
        if self._len + 10 > self._cap:
            self._grow(10)
        self._len += write_uvarint(self._buf + self._len, v)
        return 0

    def uvarint(self, uint32_t v):
        self._uvarint(v)

    def varint(self, int32_t v):
        self._uvarint(zigzag32(v))

    def varlong(self, int64_t v):
        self._uvarint(zigzag64(v))

    cdef int _raw(self, const void *p, Py_ssize_t n) except -1:
        if n:
            memcpy(self._room(n), p, n)
        return 0

    cdef int _text(self, s, bint compact, bint nullable) except -1:
        cdef const char *p
        cdef Py_ssize_t n
        if s is None:
            if not nullable:
                raise ValueError("None for a non-nullable string")
            if compact:
                self._uvarint(0)
            else:
                fl_put_be16(self._room(2), 0xFFFF)
            return 0
        p = PyUnicode_AsUTF8AndSize(s, &n)
        if compact:
            self._uvarint(<uint64_t>n + 1)
        else:
            if n > 0x7FFF:
                raise ValueError(f"string of {n} bytes is too long for int16 length")
            fl_put_be16(self._room(2), <uint16_t>n)
        self._raw(p, n)
        return 0

    def string(self, s):
        self._text(s, False, False)

    def nullable_string(self, s):
        self._text(s, False, True)

    def compact_string(self, s):
        self._text(s, True, False)

    def compact_nullable_string(self, s):
        self._text(s, True, True)

    cdef int _blob(self, b, bint compact, bint nullable) except -1:
        cdef Py_buffer view
        if b is None:
            if not nullable:
                raise ValueError("None for non-nullable bytes")
            if compact:
                self._uvarint(0)
            else:
                fl_put_be32(self._room(4), 0xFFFFFFFFu)
            return 0
        if type(b) is bytes:
            if compact:
                self._uvarint(<uint64_t>len(<bytes>b) + 1)
            else:
                fl_put_be32(self._room(4), <uint32_t>len(<bytes>b))
            self._raw(PyBytes_AS_STRING(b), len(<bytes>b))
            return 0
        _get_buffer(b, &view, False)
        try:
            if compact:
                self._uvarint(<uint64_t>view.len + 1)
            else:
                fl_put_be32(self._room(4), <uint32_t>view.len)
            self._raw(view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
        return 0

    def bytes_(self, b):
        self._blob(b, False, False)

    def nullable_bytes(self, b):
        self._blob(b, False, True)

    def compact_bytes(self, b):
        self._blob(b, True, False)

    def compact_nullable_bytes(self, b):
        self._blob(b, True, True)

    def write(self, b):
        """Append raw bytes (no length prefix)."""
        cdef Py_buffer view
        _get_buffer(b, &view, False)
        try:
            self._raw(view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    def array_len(self, int32_t n):
        if n < -1:
            raise ValueError(f"invalid array length {n}")
        fl_put_be32(self._room(4), <uint32_t>n)

    def compact_array_len(self, Py_ssize_t n):
        if n < -1:
            raise ValueError(f"invalid array length {n}")
        self._uvarint(<uint64_t>(n + 1))

    def tagged_fields(self, fields=None):
        """Write tagged fields ({tag: bytes}); None or {} writes the single 0 byte."""
        if not fields:
            self._room(1)[0] = 0
            return
        self._uvarint(len(fields))
        cdef Py_buffer view
        for tag in sorted(fields):
            self._uvarint(<uint32_t>tag)
            _get_buffer(fields[tag], &view, False)
            try:
                self._uvarint(<uint64_t>view.len)
                self._raw(view.buf, view.len)
            finally:
                PyBuffer_Release(&view)

    def external(self, obj, Py_ssize_t length):
        """Insert obj (FileRegion, memoryview, bytes) of length bytes as its own part."""
        if length < 0:
            raise ValueError("negative length")
        self._externals.append((self._len, obj, length))
        self._external_len += length

    def patch_int32(self, Py_ssize_t pos, int32_t value):
        """Overwrite the int32 at absolute output position pos (e.g. a size prefix)."""
        cdef Py_ssize_t internal = pos
        cdef Py_ssize_t at, length
        for at, _obj, length in self._externals:
            if at <= internal:
                if internal < at + length:
                    raise ValueError(f"position {pos} lies inside an external part")
                internal -= length
            else:
                break
        if internal < 0 or internal + 4 > self._len:
            raise ValueError(f"position {pos} outside the written bytes")
        for at, _obj, _length in self._externals:
            if internal < at < internal + 4:
                raise ValueError(f"int32 at {pos} straddles an external part")
        fl_put_be32(self._buf + internal, <uint32_t>value)

    def getparts(self):
        """Written bytes interleaved with the external parts, in output order."""
        cdef list parts = []
        cdef Py_ssize_t start = 0, at
        for at, obj, _length in self._externals:
            if at > start:
                parts.append(PyBytes_FromStringAndSize(<char *>self._buf + start, at - start))
                start = at
            parts.append(obj)
        if self._len > start or not parts:
            parts.append(PyBytes_FromStringAndSize(<char *>self._buf + start, self._len - start))
        return parts

    def getvalue(self):
        """Everything as one bytes object (FileRegions are read from their files)."""
        if not self._externals:
            return PyBytes_FromStringAndSize(<char *>self._buf, self._len)
        chunks = []
        for part in self.getparts():
            if isinstance(part, FileRegion):
                chunks.append((<FileRegion>part).read())
            else:
                chunks.append(part)
        return b"".join(chunks)

    def __repr__(self):
        return f"Writer(len={self._len + self._external_len}, parts={len(self._externals)})"


# ---------------------------------------------------------------------------------------
# Record batch v2: header, validation, scanning, stamping

@cython.final
cdef class BatchHeader:
    """The fixed 61-byte header of one v2 record batch at ``position`` in some buffer.

    Created by read_batch_header/validate_batch/scan_batches/validate_record_set; holds
    numbers only (no reference to the buffer).
    """

    @property
    def size(self):
        """Bytes of the whole batch: batchLength + 12 (baseOffset and batchLength)."""
        return <Py_ssize_t>self.batch_length + OVERHEAD

    @property
    def end(self):
        """Position just after the batch."""
        return self.position + <Py_ssize_t>self.batch_length + OVERHEAD

    @property
    def compression(self):
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self):
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self):
        return (self.attributes & ATTR_TRANSACTIONAL) != 0

    @property
    def is_control(self):
        return (self.attributes & ATTR_CONTROL) != 0

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    def __repr__(self):
        return (
            f"BatchHeader(position={self.position}, base_offset={self.base_offset}, "
            f"last_offset_delta={self.last_offset_delta}, records={self.record_count}, "
            f"size={self.size}, magic={self.magic}, crc=0x{self.crc:08x}, "
            f"attributes=0x{self.attributes:x}, leader_epoch={self.partition_leader_epoch}, "
            f"timestamps={self.first_timestamp}..{self.max_timestamp}, "
            f"producer={self.producer_id}/{self.producer_epoch}/{self.base_sequence})"
        )


@cython.final
cdef class ScanResult:
    """What scan_batches found: the good batches, where they end, and the first error."""
    cdef readonly list batches
    cdef readonly Py_ssize_t valid_end
    cdef readonly object error

    def __repr__(self):
        return (f"ScanResult(batches={len(self.batches)}, valid_end={self.valid_end}, "
                f"error={self.error!r})")


cdef BatchHeader _read_header(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end):
    """Parse the header of the batch at pos; structural checks only (no CRC)."""
    cdef Py_ssize_t avail = end - pos
    cdef const unsigned char *p = buf + pos
    cdef int32_t length
    cdef int magic
    cdef BatchHeader h
    if avail < OVERHEAD:
        _raise_truncated("batch header", pos, OVERHEAD, avail)
    length = <int32_t>fl_be32(p + OFF_LENGTH)
    if avail > OFF_MAGIC:
        magic = <int8_t>p[OFF_MAGIC]
        if magic != 2:
            raise InvalidMagicError(
                f"record batch at byte {pos} has magic {magic}, expected 2", pos + OFF_MAGIC)
    if length < MIN_BATCH_LENGTH:
        raise InvalidRecordError(
            f"record batch at byte {pos} has batchLength {length}, below the minimum "
            f"{MIN_BATCH_LENGTH}", pos + OFF_LENGTH)
    if <Py_ssize_t>length > avail - OVERHEAD:
        _raise_truncated("record batch", pos, <Py_ssize_t>length + OVERHEAD, avail)
    h = BatchHeader.__new__(BatchHeader)
    h.position = pos
    h.base_offset = <int64_t>fl_be64(p)
    h.batch_length = length
    h.partition_leader_epoch = <int32_t>fl_be32(p + OFF_LEADER_EPOCH)
    h.magic = 2
    h.crc = fl_be32(p + OFF_CRC)
    h.attributes = fl_be16(p + OFF_ATTRIBUTES)
    h.last_offset_delta = <int32_t>fl_be32(p + OFF_LAST_OFFSET_DELTA)
    h.first_timestamp = <int64_t>fl_be64(p + OFF_FIRST_TIMESTAMP)
    h.max_timestamp = <int64_t>fl_be64(p + OFF_MAX_TIMESTAMP)
    h.producer_id = <int64_t>fl_be64(p + OFF_PRODUCER_ID)
    h.producer_epoch = <int16_t>fl_be16(p + OFF_PRODUCER_EPOCH)
    h.base_sequence = <int32_t>fl_be32(p + OFF_BASE_SEQUENCE)
    h.record_count = <int32_t>fl_be32(p + OFF_RECORD_COUNT)
    if h.record_count < 0:
        raise InvalidRecordError(
            f"record batch at byte {pos} has negative record count {h.record_count}",
            pos + OFF_RECORD_COUNT)
    return h


cdef int _check_batch(const unsigned char *buf, BatchHeader h, bint verify_crc) except -1:
    """CRC and consistency checks of a parsed batch (as Kafka's log validation does)."""
    cdef Py_ssize_t pos = h.position
    cdef Py_ssize_t size = <Py_ssize_t>h.batch_length + OVERHEAD
    cdef uint32_t crc
    cdef int codec = h.attributes & ATTR_CODEC_MASK
    if verify_crc:
        crc = _crc32c_maybe_nogil(buf + pos + OFF_ATTRIBUTES, size - OFF_ATTRIBUTES)
        if crc != h.crc:
            raise CorruptRecordError(
                f"record batch at byte {pos} (base offset {h.base_offset}) fails its CRC: "
                f"stored 0x{h.crc:08x}, computed 0x{crc:08x}", pos + OFF_CRC)
    if h.attributes & ATTR_UNUSED_MASK:
        raise InvalidRecordError(
            f"record batch at byte {pos} sets unused attribute bits (0x{h.attributes:04x})",
            pos + OFF_ATTRIBUTES)
    if codec > 4:
        raise UnsupportedCodecError(
            f"record batch at byte {pos} uses unknown compression codec {codec}",
            pos + OFF_ATTRIBUTES)
    # Compaction may remove records but keeps lastOffsetDelta, so count <= delta + 1.
    if h.last_offset_delta < -1 or h.record_count > <int64_t>h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record batch at byte {pos} has {h.record_count} records but lastOffsetDelta "
            f"{h.last_offset_delta}", pos + OFF_LAST_OFFSET_DELTA)
    # Every record takes at least 7 bytes uncompressed (length, attributes, three
    # deltas/lengths, value length, header count).
    if codec == 0 and <int64_t>h.record_count * 7 > size - HEADER_SIZE:
        raise InvalidRecordError(
            f"record batch at byte {pos} claims {h.record_count} records in "
            f"{size - HEADER_SIZE} bytes", pos + OFF_RECORD_COUNT)
    if (h.attributes & ATTR_TRANSACTIONAL) and (h.producer_id < 0 or h.producer_epoch < 0):
        raise InvalidRecordError(
            f"transactional record batch at byte {pos} has no producer id/epoch "
            f"({h.producer_id}/{h.producer_epoch})", pos + OFF_PRODUCER_ID)
    return 0


def read_batch_header(buf, Py_ssize_t pos=0):
    """Parse the v2 batch header at pos (magic, sizes, count); the CRC is not checked."""
    cdef Py_buffer view
    _get_buffer(buf, &view, False)
    try:
        if pos < 0 or pos > view.len:
            raise ValueError(f"position {pos} outside the buffer")
        return _read_header(<const unsigned char *>view.buf, pos, view.len)
    finally:
        PyBuffer_Release(&view)


def validate_batch(buf, Py_ssize_t pos=0):
    """Parse and validate the v2 batch at pos: header, CRC-32C, counts, attributes."""
    cdef Py_buffer view
    cdef BatchHeader h
    _get_buffer(buf, &view, False)
    try:
        if pos < 0 or pos > view.len:
            raise ValueError(f"position {pos} outside the buffer")
        h = _read_header(<const unsigned char *>view.buf, pos, view.len)
        _check_batch(<const unsigned char *>view.buf, h, True)
        return h
    finally:
        PyBuffer_Release(&view)


def scan_batches(buf, Py_ssize_t start=0, end=None, bint verify_crc=True):
    """Validate consecutive v2 batches in buf[start:end] (log recovery, segment checks).

    Never raises for bad data: stops at the first bad or partial batch and reports it in
    ``.error``; ``.valid_end`` is the position just after the last good batch. buf may be
    an mmap or memoryview; it is not copied.
    """
    cdef Py_buffer view
    cdef ScanResult result = ScanResult.__new__(ScanResult)
    cdef list batches = []
    cdef Py_ssize_t pos, stop
    cdef const unsigned char *data
    cdef BatchHeader h
    _get_buffer(buf, &view, False)
    try:
        stop = view.len if end is None else end
        if start < 0 or stop > view.len or start > stop:
            raise ValueError(f"bad scan range {start}..{end} for {view.len} bytes")
        data = <const unsigned char *>view.buf
        pos = start
        result.error = None
        try:
            while pos < stop:
                h = _read_header(data, pos, stop)
                _check_batch(data, h, verify_crc)
                batches.append(h)
                pos += <Py_ssize_t>h.batch_length + OVERHEAD
        except CodecError as exc:
            result.error = exc
        result.batches = batches
        result.valid_end = pos
        return result
    finally:
        PyBuffer_Release(&view)


def validate_record_set(buf, *, max_batch_size=None, bint allow_zstd=True,
                        bint verify_records=False,
                        Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Validate a produced records blob: one or more complete v2 batches from a client.

    Checks everything validate_batch does, plus what Kafka requires of client batches
    (not control, count == lastOffsetDelta + 1 > 0, size and codec limits); with
    verify_records also decompresses (capped) and walks every record. Raises on the
    first problem; magic 0/1 sets raise InvalidMagicError (see convert_to_v2).
    """
    cdef Py_buffer view
    cdef list batches = []
    cdef Py_ssize_t pos = 0, limit = -1
    cdef const unsigned char *data
    cdef BatchHeader h
    if max_batch_size is not None:
        limit = max_batch_size
    _get_buffer(buf, &view, False)
    try:
        data = <const unsigned char *>view.buf
        if view.len == 0:
            raise InvalidRecordError("empty record set", 0)
        while pos < view.len:
            h = _read_header(data, pos, view.len)
            if limit >= 0 and <Py_ssize_t>h.batch_length + OVERHEAD > limit:
                raise RecordTooLargeError(
                    f"record batch at byte {pos} is {h.batch_length + OVERHEAD} bytes, "
                    f"over the limit of {limit}", pos)
            _check_batch(data, h, True)
            if h.attributes & ATTR_CONTROL:
                raise InvalidRecordError(
                    f"control batch at byte {pos}: clients may not produce control records",
                    pos + OFF_ATTRIBUTES)
            if not allow_zstd and (h.attributes & ATTR_CODEC_MASK) == 4:
                raise UnsupportedCodecError(
                    f"record batch at byte {pos} is zstd-compressed, not allowed for this "
                    f"request version", pos + OFF_ATTRIBUTES)
            if h.record_count == 0 or h.last_offset_delta != h.record_count - 1:
                raise InvalidRecordError(
                    f"record batch at byte {pos} has {h.record_count} records but "
                    f"lastOffsetDelta {h.last_offset_delta}", pos + OFF_LAST_OFFSET_DELTA)
            if verify_records:
                _verify_records(buf, data, h, decompress_limit)
            batches.append(h)
            pos += <Py_ssize_t>h.batch_length + OVERHEAD
        return batches
    finally:
        PyBuffer_Release(&view)


def verify_batch_records(buf, BatchHeader h,
                         Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT,
                         bint release_gil=False, bint require_keys=False):
    """Decompress (capped) and walk every record of batch h of buf: the record checks
    that validate_record_set(verify_records=True) makes, for a batch that an earlier
    validate_record_set(verify_records=False) of the same bytes returned. release_gil:
    walk without the GIL, for a worker thread checking a large batch while the request
    loop goes on (decompression releases it in any case). require_keys: a record with a
    null key raises MissingKeyError (a compacted topic's rule), found in the same walk."""
    cdef Py_buffer view
    _get_buffer(buf, &view, False)
    try:
        if h.position < 0 or h.position + <Py_ssize_t>h.batch_length + OVERHEAD > view.len:
            raise ValueError(f"batch at byte {h.position} is not within the buffer")
        _verify_records(buf, <const unsigned char *>view.buf, h, decompress_limit,
                        release_gil, require_keys)
    finally:
        PyBuffer_Release(&view)


def stamp_batches(buf, batches, int64_t first_offset, int32_t leader_epoch):
    """Assign offsets: write baseOffset and partitionLeaderEpoch of each batch in place.

    buf must be writable and ``batches`` the headers found in this same buf. Both fields
    lie outside the CRC. Returns the offset after the last record.
    """
    cdef Py_buffer view
    _get_buffer(buf, &view, True)
    try:
        return stamp_batch_headers(<unsigned char *>view.buf, view.len,
                                   batches if type(batches) is list else list(batches),
                                   first_offset, leader_epoch)
    finally:
        PyBuffer_Release(&view)


cdef int64_t stamp_batch_headers(unsigned char *data, Py_ssize_t length, list batches,
                                 int64_t first_offset, int32_t leader_epoch) except -1:
    # stamp_batches' work on a buffer already held (the compiled leader append's too).
    cdef int64_t offset = first_offset
    cdef BatchHeader h
    for obj in batches:
        h = <BatchHeader?>obj
        if h.position < 0 or h.position + HEADER_SIZE > length:
            raise ValueError(f"batch at {h.position} is not inside this buffer")
        fl_put_be64(data + h.position, <uint64_t>offset)
        fl_put_be32(data + h.position + OFF_LEADER_EPOCH, <uint32_t>leader_epoch)
        h.base_offset = offset
        h.partition_leader_epoch = leader_epoch
        offset += <int64_t>h.last_offset_delta + 1
    return offset


def stamp_log_append_time(buf, batches, int64_t timestamp):
    """For topics with message.timestamp.type=LogAppendTime: mark each batch of buf
    (writable) as log-append-time with maxTimestamp = timestamp, in place, and recompute
    its CRC (both fields are covered by it). Readers then give every record timestamp.
    """
    cdef Py_buffer view
    cdef BatchHeader h
    cdef unsigned char *data
    cdef Py_ssize_t size
    _get_buffer(buf, &view, True)
    try:
        data = <unsigned char *>view.buf
        for obj in batches:
            h = <BatchHeader?>obj
            size = <Py_ssize_t>h.batch_length + OVERHEAD
            if h.position < 0 or h.position + size > view.len:
                raise ValueError(f"batch at {h.position} is not inside this buffer")
            h.attributes |= ATTR_TIMESTAMP_TYPE
            h.max_timestamp = timestamp
            fl_put_be16(data + h.position + OFF_ATTRIBUTES, <uint16_t>h.attributes)
            fl_put_be64(data + h.position + OFF_MAX_TIMESTAMP, <uint64_t>timestamp)
            h.crc = _crc32c_maybe_nogil(data + h.position + OFF_ATTRIBUTES,
                                        size - OFF_ATTRIBUTES)
            fl_put_be32(data + h.position + OFF_CRC, h.crc)
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------
# Records inside a v2 batch

cdef struct RecordSpan:
    # One record located inside a records region (positions are absolute in that region).
    Py_ssize_t next          # position after the record
    int64_t timestamp_delta
    int32_t offset_delta
    Py_ssize_t key_pos
    int32_t key_len          # -1: null key
    Py_ssize_t value_pos
    int32_t value_len        # -1: null value
    Py_ssize_t headers_pos
    int32_t header_count


cdef int _record_error(str what, Py_ssize_t pos, Py_ssize_t base) except -1:
    raise InvalidRecordError(f"{what} at byte {pos + base}", pos + base)


cdef inline Py_ssize_t _blob_at(const unsigned char *d, Py_ssize_t pos, Py_ssize_t end,
                                int32_t *length, bint nullable) noexcept nogil:
    # Reads a varint length at pos and checks that many bytes follow within end. Returns
    # the position of the bytes, or a negative code for _blob_error.
    cdef Py_ssize_t nxt = read_varint32(d, pos, end, length)
    if nxt < 0:
        return nxt
    if length[0] < 0:
        if length[0] == -1 and nullable:
            return nxt
        return -3
    if length[0] > end - nxt:
        return -4
    return nxt


cdef int _blob_error(Py_ssize_t code, Py_ssize_t pos, Py_ssize_t base, str what,
                     int32_t length) except -1:
    if code == VARINT_TRUNCATED or code == VARINT_TOO_LONG:
        raise_varint_error(code, pos + base, what)
    if code == -3:
        _record_error(f"invalid {what} length {length}", pos, base)
    _record_error(f"{what} of {length} bytes overruns its record", pos, base)


cdef int _parse_record(const unsigned char *d, Py_ssize_t pos, Py_ssize_t end,
                       RecordSpan *r, Py_ssize_t base) except -1:
    """Locate the fields of the record at d[pos:], which must lie within d[:end].

    ``base`` is added to positions in error messages (where the region starts in the
    caller's buffer). Checks every length against the record's own length.
    """
    cdef int32_t length = 0, hlen = 0
    cdef Py_ssize_t p, rend, _i, p_hc, nxt
    p = read_varint32(d, pos, end, &length)
    if p < 0:
        raise_varint_error(p, pos + base, "record length")
    if length < 6 or length > end - p:
        if length >= 6:
            raise TruncatedError(
                f"record of {length} bytes at byte {pos + base} overruns the batch",
                pos + base)
        _record_error(f"invalid record length {length}", pos, base)
    rend = p + length
    p += 1  # attributes: unused in v2
    p = read_varint64(d, p, rend, &r.timestamp_delta)
    if p < 0:
        raise_varint_error(p, pos + base, "timestamp delta")
    p = read_varint32(d, p, rend, &r.offset_delta)
    if p < 0:
        raise_varint_error(p, pos + base, "offset delta")
    r.key_pos = _blob_at(d, p, rend, &r.key_len, True)
    if r.key_pos < 0:
        _blob_error(r.key_pos, p, base, "key", r.key_len)
    p = r.key_pos + (r.key_len if r.key_len > 0 else 0)
    r.value_pos = _blob_at(d, p, rend, &r.value_len, True)
    if r.value_pos < 0:
        _blob_error(r.value_pos, p, base, "value", r.value_len)
    p = r.value_pos + (r.value_len if r.value_len > 0 else 0)
    p_hc = p
    p = read_varint32(d, p, rend, &r.header_count)
    if p < 0:
        raise_varint_error(p, p_hc + base, "header count")
    if r.header_count < 0 or r.header_count > rend - p:
        _record_error(f"invalid header count {r.header_count}", p_hc, base)
    r.headers_pos = p
    for _i in range(r.header_count):
        nxt = _blob_at(d, p, rend, &hlen, False)
        if nxt < 0:
            _blob_error(nxt, p, base, "header key", hlen)
        p = nxt + hlen
        nxt = _blob_at(d, p, rend, &hlen, True)
        if nxt < 0:
            _blob_error(nxt, p, base, "header value", hlen)
        p = nxt + (hlen if hlen > 0 else 0)
    if p != rend:
        _record_error(f"record of {length} bytes has {rend - p} bytes left over", pos, base)
    r.next = rend
    return 0


cdef list _decode_headers(const unsigned char *d, Py_ssize_t p, int32_t count):
    # Only called on a span that _parse_record has already checked.
    cdef list out = []
    cdef int32_t klen = 0, vlen = 0
    cdef int32_t _i
    cdef object key, value
    for _i in range(count):
        p = read_varint32(d, p, p + 5, &klen)
        key = PyUnicode_DecodeUTF8(<const char *>d + p, klen, "replace")
        p += klen
        p = read_varint32(d, p, p + 5, &vlen)
        if vlen < 0:
            value = None
        else:
            value = PyBytes_FromStringAndSize(<const char *>d + p, vlen)
            p += vlen
        out.append((key, value))
    return out


@cython.final
@cython.no_gc
@cython.freelist(1024)
cdef class Record:
    """One record of a v2 batch, decoded.

    Not tracked by the cycle collector: its fields are bytes, str and a list of tuples of
    those, which cannot form a cycle (unless a caller puts the record into its own
    headers list). Untracked records cost no collector passes while a consumer decodes
    thousands of them per fetch.
    """
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef object key      # exposed as a member slot below (_install_slot_members)
    cdef object value    # idem
    cdef object _headers
    cdef readonly int timestamp_type

    @property
    def headers(self):
        if self._headers is None:
            return []
        return self._headers

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp
                and self.key == o.key and self.value == o.value
                and self.headers == o.headers and self.timestamp_type == o.timestamp_type)

    __hash__ = None


# key and value are read once per record by every consumer. Exposed as T_OBJECT_EX member
# descriptors (instead of Cython's getset properties), CPython's attribute specializer
# turns `record.value` into a direct slot load: about 3x cheaper per access.
cdef extern from *:
    """
    #include <structmember.h>
    static PyMemberDef fl_record_members[2];
    static int fl_add_slot_member(PyTypeObject *tp, int i, const char *name,
                                  Py_ssize_t offset) {
        PyObject *descr;
        fl_record_members[i].name = name;
        fl_record_members[i].type = T_OBJECT_EX;
        fl_record_members[i].offset = offset;
        fl_record_members[i].flags = READONLY;
        fl_record_members[i].doc = NULL;
        descr = PyDescr_NewMember(tp, &fl_record_members[i]);
        if (descr == NULL) return -1;
        if (PyDict_SetItemString(tp->tp_dict, name, descr) < 0) {
            Py_DECREF(descr);
            return -1;
        }
        Py_DECREF(descr);
        PyType_Modified(tp);
        return 0;
    }
    """
    int fl_add_slot_member(PyTypeObject *tp, int i, const char *name,
                           Py_ssize_t offset) except -1


cdef Py_ssize_t _slot_offset(object obj, object marker) except -1:
    # Offset of the object field holding `marker` (Cython cannot take its address).
    cdef PyObject **slots = <PyObject **><PyObject *>obj
    cdef object tp = type(obj)
    cdef Py_ssize_t n = (<PyTypeObject *>tp).tp_basicsize // sizeof(PyObject *)
    cdef Py_ssize_t i
    for i in range(n):
        if slots[i] == <PyObject *>marker:
            return i * sizeof(PyObject *)
    raise RuntimeError("field not found in Record")


cdef int _install_slot_members() except -1:
    cdef Record probe = Record.__new__(Record)
    key_marker = object()
    value_marker = object()
    probe.key = key_marker
    probe.value = value_marker
    fl_add_slot_member(<PyTypeObject *>Record, 0, "key", _slot_offset(probe, key_marker))
    fl_add_slot_member(<PyTypeObject *>Record, 1, "value", _slot_offset(probe, value_marker))
    return 0


_install_slot_members()


cdef inline Record _make_record(const unsigned char *d, RecordSpan *r, BatchHeader h):
    cdef Record rec = Record.__new__(Record)
    rec.offset = h.base_offset + r.offset_delta
    if h.attributes & ATTR_TIMESTAMP_TYPE:
        rec.timestamp = h.max_timestamp
        rec.timestamp_type = 1
    else:
        rec.timestamp = h.first_timestamp + r.timestamp_delta
        rec.timestamp_type = 0
    if r.key_len >= 0:
        rec.key = PyBytes_FromStringAndSize(<const char *>d + r.key_pos, r.key_len)
    else:
        rec.key = None
    if r.value_len >= 0:
        rec.value = PyBytes_FromStringAndSize(<const char *>d + r.value_pos, r.value_len)
    else:
        rec.value = None
    if r.header_count > 0:
        rec._headers = _decode_headers(d, r.headers_pos, r.header_count)
    return rec


cdef object _decompress_fn = None


cdef object decompress_records(int codec, object data, Py_ssize_t limit):
    return _decompress(codec, data, limit)


cdef object _decompress(int codec, object data, Py_ssize_t limit):
    global _decompress_fn
    if _decompress_fn is None:
        from fastlog.compression import decompress
        _decompress_fn = decompress
    return _decompress_fn(codec, data, limit)


cdef object _byte_view(object buf):
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1 or mv.format != "B":
        mv = mv.cast("B")
    return mv


cdef object _records_region(object buf, BatchHeader h, Py_ssize_t limit):
    """The records bytes of batch h: a view of buf, or the decompressed bytes."""
    cdef int codec = h.attributes & ATTR_CODEC_MASK
    region = _byte_view(buf)[h.position + HEADER_SIZE:h.position + h.batch_length + OVERHEAD]
    if codec == 0:
        return region
    try:
        return _decompress(codec, region, limit)
    except CodecError as exc:
        if exc.position is None:
            exc.position = h.position + HEADER_SIZE
        raise


cdef int _walk_records(const unsigned char *d, Py_ssize_t end, int32_t count,
                       bint require_keys=False) noexcept nogil:
    """0 when d[:end] is exactly ``count`` well-formed records with offset deltas 0..n-1
    (and, with require_keys, none with a null key), else -1. The checks of _parse_record
    without locating fields or building errors: the produce path's walk over every
    record, so it stays lean. The next record starts where this one's length says
    (p = rend), never where the parse of its fields ended (q, only compared with rend):
    the chain from one record to the next is one varint long, and the CPU checks a
    record's fields while it already reads the next one's length."""
    cdef Py_ssize_t p = 0, q, rend
    cdef int32_t i, _j, length = 0, v = 0, hc = 0
    cdef int64_t ts = 0
    for i in range(count):
        p = read_varint32(d, p, end, &length)
        if p < 0 or length < 6 or length > end - p:
            return -1
        rend = p + length
        q = read_varint64(d, p + 1, rend, &ts)   # after the attributes byte
        if q < 0:
            return -1
        q = read_varint32(d, q, rend, &v)
        if q < 0 or v != i:
            return -1
        q = read_varint32(d, q, rend, &v)        # key length, -1 for null
        if q < 0 or v < -1 or v > rend - q or (require_keys and v < 0):
            return -1
        if v > 0:
            q += v
        q = read_varint32(d, q, rend, &v)        # value length, -1 for null
        if q < 0 or v < -1 or v > rend - q:
            return -1
        if v > 0:
            q += v
        q = read_varint32(d, q, rend, &hc)
        if q < 0 or hc < 0 or hc > rend - q:
            return -1
        for _j in range(hc):
            q = read_varint32(d, q, rend, &v)    # header key: never null
            if q < 0 or v < 0 or v > rend - q:
                return -1
            q = read_varint32(d, q + v, rend, &v)
            if q < 0 or v < -1 or v > rend - q:
                return -1
            if v > 0:
                q += v
        if q != rend:
            return -1
        p = rend
    return 0 if p == end else -1


cdef int _verify_records(object buf, const unsigned char *data, BatchHeader h,
                         Py_ssize_t limit, bint release_gil=False,
                         bint require_keys=False) except -1:
    """Walk every record of h: lengths, varints, count and offset deltas 0..n-1; with
    require_keys, a record with a null key raises MissingKeyError.
    release_gil: walk without the GIL (a worker thread's large batch; the request loop's
    own small batches keep it, since handing it over costs more than the walk)."""
    cdef Py_buffer view
    cdef RecordSpan r
    cdef Py_ssize_t p, end, base
    cdef int32_t i, walked
    cdef const unsigned char *content
    if h.attributes & ATTR_CODEC_MASK == 3:
        # lz4 (what librdkafka producers mostly send): decoded into this thread's scratch
        # buffer and walked there; the general path below reports anything unusual.
        try:
            end = decode_frames_scratch(data + h.position + HEADER_SIZE,
                                        <Py_ssize_t>h.batch_length + OVERHEAD - HEADER_SIZE,
                                        limit, &content)
        except OverflowError:
            end = -1
        if end >= 0:
            if release_gil:
                with nogil:
                    walked = _walk_records(content, end, h.record_count, require_keys)
            else:
                walked = _walk_records(content, end, h.record_count, require_keys)
            if walked == 0:
                return 0
    if h.attributes & ATTR_CODEC_MASK:
        region = _records_region(buf, h, limit)
        _get_buffer(region, &view, False)
        base = 0
    else:
        region = None
        view.buf = <void *>(data + h.position + HEADER_SIZE)
        view.len = <Py_ssize_t>h.batch_length + OVERHEAD - HEADER_SIZE
        base = h.position + HEADER_SIZE
    try:
        end = view.len
        if release_gil:
            with nogil:
                walked = _walk_records(<const unsigned char *>view.buf, end, h.record_count,
                                       require_keys)
        else:
            walked = _walk_records(<const unsigned char *>view.buf, end, h.record_count,
                                   require_keys)
        if walked == 0:
            return 0
        # Something is wrong: walk again record by record for the exact error.
        p = 0
        for i in range(h.record_count):
            if p >= end:
                raise InvalidRecordError(
                    f"record batch at byte {h.position} declares {h.record_count} records "
                    f"but holds {i}", h.position + OFF_RECORD_COUNT)
            _parse_record(<const unsigned char *>view.buf, p, end, &r, base)
            if r.offset_delta != i:
                raise InvalidRecordError(
                    f"record {i} of the batch at byte {h.position} has offset delta "
                    f"{r.offset_delta}", p + base)
            if require_keys and r.key_len < 0:
                raise MissingKeyError(
                    f"record {i} of the batch at byte {h.position} has no key", p + base, i)
            p = r.next
        if p != end:
            raise InvalidRecordError(
                f"record batch at byte {h.position} has {end - p} bytes after its "
                f"{h.record_count} records", h.position + OFF_RECORD_COUNT)
        # Unreachable while both walks check the same things; refuse rather than accept.
        raise InvalidRecordError(f"malformed records in the batch at byte {h.position}",
                                 h.position + OFF_RECORD_COUNT)
    finally:
        if region is not None:
            PyBuffer_Release(&view)


@cython.final
cdef class _RecordIterator:
    """Lazily decodes the records of one batch (iter_records)."""
    cdef BatchHeader header
    cdef object region
    cdef Py_buffer view
    cdef bint has_view
    cdef Py_ssize_t pos
    cdef Py_ssize_t base
    cdef int32_t left

    def __dealloc__(self):
        if self.has_view:
            PyBuffer_Release(&self.view)

    def __iter__(self):
        return self

    def __next__(self):
        cdef RecordSpan r
        if self.left <= 0 or self.pos >= self.view.len:
            if self.left > 0:
                raise InvalidRecordError(
                    f"record batch at byte {self.header.position} ends {self.left} records "
                    f"short of its count", self.header.position + OFF_RECORD_COUNT)
            raise StopIteration
        _parse_record(<const unsigned char *>self.view.buf, self.pos, self.view.len, &r,
                      self.base)
        self.pos = r.next
        self.left -= 1
        return _make_record(<const unsigned char *>self.view.buf, &r, self.header)


def iter_records(buf, Py_ssize_t pos=0, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT,
                 bint verify_crc=True):
    """Iterate the records of the one v2 batch at pos (decompressing as needed)."""
    cdef Py_buffer view
    cdef BatchHeader h
    cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
    _get_buffer(buf, &view, False)
    try:
        if pos < 0 or pos > view.len:
            raise ValueError(f"position {pos} outside the buffer")
        h = _read_header(<const unsigned char *>view.buf, pos, view.len)
        _check_batch(<const unsigned char *>view.buf, h, verify_crc)
    finally:
        PyBuffer_Release(&view)
    it.header = h
    it.region = _records_region(buf, h, decompress_limit)
    _get_buffer(it.region, &it.view, False)
    it.has_view = True
    it.pos = 0
    it.base = 0 if h.attributes & ATTR_CODEC_MASK else h.position + HEADER_SIZE
    it.left = h.record_count
    return it


def record_keys(buf, Py_ssize_t pos=0, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT,
                bint verify_crc=True):
    """[(offset, key or None, is_tombstone)] for every record of the one v2 batch at pos,
    without decoding values and headers into objects: what log compaction decides from."""
    cdef _RecordIterator it = <_RecordIterator>iter_records(buf, pos, decompress_limit,
                                                            verify_crc)
    cdef RecordSpan r
    cdef const unsigned char *d = <const unsigned char *>it.view.buf
    cdef int64_t base_offset = it.header.base_offset
    cdef list out = []
    while it.left > 0:
        if it.pos >= it.view.len:
            raise InvalidRecordError(
                f"record batch at byte {it.header.position} ends {it.left} records short "
                f"of its count", it.header.position + OFF_RECORD_COUNT)
        _parse_record(d, it.pos, it.view.len, &r, it.base)
        it.pos = r.next
        it.left -= 1
        out.append((base_offset + r.offset_delta,
                    PyBytes_FromStringAndSize(<const char *>d + r.key_pos, r.key_len)
                    if r.key_len >= 0 else None,
                    r.value_len < 0))
    return out


cdef int _batch_records(object buf, const unsigned char *data, BatchHeader h,
                        Py_ssize_t limit, list out) except -1:
    """Append the Records of batch h to out (the consumer hot path)."""
    cdef Py_buffer view
    cdef RecordSpan r
    cdef Py_ssize_t p, end, base
    cdef int32_t i
    cdef const unsigned char *d
    cdef object region = None
    if h.attributes & ATTR_CODEC_MASK:
        region = _records_region(buf, h, limit)
        _get_buffer(region, &view, False)
        d = <const unsigned char *>view.buf
        end = view.len
        base = 0
    else:
        d = data + h.position + HEADER_SIZE
        end = <Py_ssize_t>h.batch_length + OVERHEAD - HEADER_SIZE
        base = h.position + HEADER_SIZE
    try:
        p = 0
        for i in range(h.record_count):
            if p >= end:
                raise InvalidRecordError(
                    f"record batch at byte {h.position} declares {h.record_count} records "
                    f"but holds {i}", h.position + OFF_RECORD_COUNT)
            _parse_record(d, p, end, &r, base)
            out.append(_make_record(d, &r, h))
            p = r.next
    finally:
        if region is not None:
            PyBuffer_Release(&view)
    return 0


def read_records(buf, *, bint verify_crc=True, bint include_control=False,
                 Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """All records of all v2 batches in a blob (e.g. a fetched partition's records).

    A partial batch at the end (as fetch responses may carry) is ignored; any other
    problem raises. Control batches are skipped unless include_control.
    """
    cdef Py_buffer view
    cdef list out = []
    cdef Py_ssize_t pos = 0
    cdef const unsigned char *data
    cdef BatchHeader h
    _get_buffer(buf, &view, False)
    try:
        data = <const unsigned char *>view.buf
        while pos < view.len:
            try:
                h = _read_header(data, pos, view.len)
            except TruncatedError:
                break
            _check_batch(data, h, verify_crc)
            if include_control or not (h.attributes & ATTR_CONTROL):
                _batch_records(buf, data, h, decompress_limit, out)
            pos += <Py_ssize_t>h.batch_length + OVERHEAD
        return out
    finally:
        PyBuffer_Release(&view)


def read_columns(buf, *, bint verify_crc=True, bint include_control=False,
                 Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Like read_records, as columns: dict of lists offsets/timestamps/keys/values/headers."""
    cdef list recs = read_records(buf, verify_crc=verify_crc, include_control=include_control,
                                  decompress_limit=decompress_limit)
    cdef list offsets = [], timestamps = [], keys = [], values = [], headers = []
    cdef Record rec
    for obj in recs:
        rec = <Record>obj
        offsets.append(rec.offset)
        timestamps.append(rec.timestamp)
        keys.append(rec.key)
        values.append(rec.value)
        headers.append(rec.headers)
    return {"offsets": offsets, "timestamps": timestamps, "keys": keys, "values": values,
            "headers": headers}


# ---------------------------------------------------------------------------------------
# Building v2 batches

cdef object _compress_fn = None


cdef object _compress(int codec, object data, object level):
    global _compress_fn
    if _compress_fn is None:
        from fastlog.compression import compress
        _compress_fn = compress
    return _compress_fn(codec, data, level)


cdef inline int _blob_of(object obj, Py_buffer *view, const char **ptr,
                         Py_ssize_t *length) except -1:
    # Returns 1 when a buffer view was taken (release it), 0 for bytes or None.
    if obj is None:
        ptr[0] = NULL
        length[0] = -1
        return 0
    if type(obj) is bytes:
        ptr[0] = PyBytes_AS_STRING(obj)
        length[0] = len(<bytes>obj)
        return 0
    _get_buffer(obj, view, False)
    ptr[0] = <const char *>view.buf
    length[0] = view.len
    return 1


@cython.final
cdef class BatchBuilder:
    """Builds one v2 record batch: append records, then build() the bytes.

    The records are encoded as they are appended; build() writes the header, compresses
    the records if asked (in one call) and computes the CRC. One thread at a time.
    """
    cdef unsigned char *_buf
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef readonly int compression
    cdef readonly int64_t base_offset
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t partition_leader_epoch
    cdef int _attributes
    cdef object _level
    cdef int64_t _first_ts
    cdef int64_t _max_ts
    cdef int32_t _count
    cdef int32_t _last_delta

    def __cinit__(self, int compression=0, int64_t base_offset=0, int64_t producer_id=-1,
                  int producer_epoch=-1, int32_t base_sequence=-1, bint is_transactional=False,
                  int timestamp_type=0, int32_t partition_leader_epoch=-1,
                  compression_level=None, bint is_control=False):
        if compression < 0 or compression > 4:
            raise UnsupportedCodecError(f"unknown compression codec {compression}")
        if timestamp_type not in (0, 1):
            raise ValueError(f"bad timestamp type {timestamp_type}")
        self._cap = 1024
        self._buf = <unsigned char *>PyMem_Realloc(NULL, self._cap)
        if self._buf == NULL:
            raise MemoryError()
        self._len = HEADER_SIZE
        self.compression = compression
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self._attributes = (compression | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
                            | (ATTR_TRANSACTIONAL if is_transactional else 0)
                            | (ATTR_CONTROL if is_control else 0))
        self._level = compression_level
        self._count = 0
        self._last_delta = -1
        self._first_ts = -1
        self._max_ts = -1

    def __dealloc__(self):
        if self._buf != NULL:
            PyMem_Free(self._buf)
            self._buf = NULL

    @property
    def record_count(self):
        return self._count

    @property
    def size_in_bytes(self):
        """Size of the batch so far, before compression."""
        return self._len

    @property
    def max_timestamp(self):
        return self._max_ts

    cdef int _reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap = self._cap
        cdef unsigned char *nb
        if self._len + n <= cap:
            return 0
        while cap < self._len + n:
            cap *= 2
        nb = <unsigned char *>PyMem_Realloc(self._buf, cap)
        if nb == NULL:
            raise MemoryError()
        self._buf = nb
        self._cap = cap
        return 0

    cdef int _headers_size(self, object headers, Py_ssize_t *size) except -1:
        cdef Py_ssize_t total = 0, klen, vlen
        cdef Py_buffer view
        cdef const char *ptr
        for item in headers:
            hkey, hval = item
            PyUnicode_AsUTF8AndSize(hkey, &klen)
            total += uvarint_size(zigzag32(<int32_t>klen)) + klen
            if _blob_of(hval, &view, &ptr, &vlen):
                PyBuffer_Release(&view)
            if vlen > 0x7FFFFFFF:
                raise ValueError("header value too large")
            total += uvarint_size(zigzag32(<int32_t>vlen)) + (vlen if vlen > 0 else 0)
        size[0] = total
        return 0

    cdef int _write_headers(self, object headers, unsigned char *p) except -1:
        cdef Py_ssize_t klen, vlen
        cdef Py_buffer view
        cdef const char *ptr
        cdef const char *kp
        cdef int held
        for item in headers:
            hkey, hval = item
            kp = PyUnicode_AsUTF8AndSize(hkey, &klen)
            p += write_uvarint(p, zigzag32(<int32_t>klen))
            memcpy(p, kp, klen)
            p += klen
            held = _blob_of(hval, &view, &ptr, &vlen)
            try:
                p += write_uvarint(p, zigzag32(<int32_t>vlen))
                if vlen > 0:
                    memcpy(p, ptr, vlen)
                    p += vlen
            finally:
                if held:
                    PyBuffer_Release(&view)
        return 0

    cdef int _add(self, int32_t offset_delta, int64_t timestamp, object key, object value,
                  object headers) except -1:
        cdef Py_buffer kview, vview
        cdef const char *kptr
        cdef const char *vptr
        cdef Py_ssize_t klen, vlen, hsize = 0, body
        cdef Py_ssize_t nheaders = 0
        cdef int kheld = 0, vheld = 0
        cdef int64_t ts_delta
        cdef unsigned char *p
        if self._count == 0:
            self._first_ts = timestamp
            self._max_ts = timestamp
        elif timestamp > self._max_ts:
            self._max_ts = timestamp
        ts_delta = timestamp - self._first_ts
        kheld = _blob_of(key, &kview, &kptr, &klen)
        try:
            vheld = _blob_of(value, &vview, &vptr, &vlen)
            try:
                if klen > 0x3FFFFFFF or vlen > 0x3FFFFFFF:
                    raise ValueError("record key or value too large")
                if headers:
                    nheaders = len(headers)
                    self._headers_size(headers, &hsize)
                body = (1 + uvarint_size(zigzag64(ts_delta))
                        + uvarint_size(zigzag32(offset_delta))
                        + uvarint_size(zigzag32(<int32_t>klen)) + (klen if klen > 0 else 0)
                        + uvarint_size(zigzag32(<int32_t>vlen)) + (vlen if vlen > 0 else 0)
                        + uvarint_size(zigzag32(<int32_t>nheaders)) + hsize)
                if body > 0x7FFFFFFF - self._len:
                    raise ValueError("record batch too large")
                self._reserve(body + 5)
                p = self._buf + self._len
                p += write_uvarint(p, zigzag32(<int32_t>body))
                p[0] = 0
                p += 1
                p += write_uvarint(p, zigzag64(ts_delta))
                p += write_uvarint(p, zigzag32(offset_delta))
                p += write_uvarint(p, zigzag32(<int32_t>klen))
                if klen > 0:
                    memcpy(p, kptr, klen)
                    p += klen
                p += write_uvarint(p, zigzag32(<int32_t>vlen))
                if vlen > 0:
                    memcpy(p, vptr, vlen)
                    p += vlen
                p += write_uvarint(p, zigzag32(<int32_t>nheaders))
                if nheaders:
                    self._write_headers(headers, p)
                    p += hsize
                self._len = p - self._buf
            finally:
                if vheld:
                    PyBuffer_Release(&vview)
        finally:
            if kheld:
                PyBuffer_Release(&kview)
        self._count += 1
        self._last_delta = offset_delta
        return 0

    def append(self, timestamp, key, value, headers=None):
        """Append a record (timestamp in ms, or None for now); returns its offset delta."""
        cdef int32_t delta = self._last_delta + 1
        cdef int64_t ts
        if timestamp is None:
            import time
            ts = <int64_t>(time.time() * 1000)
        else:
            ts = timestamp
        self._add(delta, ts, key, value, headers)
        return delta

    def append_with_offset_delta(self, int32_t offset_delta, int64_t timestamp, key, value,
                                 headers=None):
        """Append a record at a given offset delta (above the last one): the log cleaner
        rebuilds a batch keeping its surviving records' original offsets."""
        if offset_delta <= self._last_delta:
            raise ValueError(f"offset delta {offset_delta} does not follow {self._last_delta}")
        self._add(offset_delta, timestamp, key, value, headers)

    def build(self, last_offset_delta=None, empty_timestamp=None):
        """The finished batch as bytes (compressed as configured, CRC set).

        last_offset_delta keeps an original batch's last offset (and so its last sequence)
        when records were removed from its end (log compaction); with it, a batch of no
        records may be built (Kafka keeps such an empty batch for a producer's last
        sequence), first and max timestamp then being empty_timestamp."""
        cdef bytes out
        cdef unsigned char *p
        cdef Py_ssize_t size
        cdef Py_buffer cview
        if last_offset_delta is not None:
            if last_offset_delta < self._last_delta or last_offset_delta > 0x7FFFFFFF:
                raise ValueError(f"last offset delta {last_offset_delta} is below the last "
                                 f"record's {self._last_delta}")
            self._last_delta = last_offset_delta
            if self._count == 0:
                self._first_ts = -1 if empty_timestamp is None else empty_timestamp
                self._max_ts = self._first_ts
        elif self._count == 0:
            raise ValueError("cannot build a record batch without records")
        if self.compression:
            records = PyBytes_FromStringAndSize(<char *>self._buf + HEADER_SIZE,
                                                self._len - HEADER_SIZE)
            compressed = _compress(self.compression, records, self._level)
            _get_buffer(compressed, &cview, False)
            try:
                size = HEADER_SIZE + cview.len
                out = PyBytes_FromStringAndSize(NULL, size)
                p = <unsigned char *>PyBytes_AS_STRING(out)
                memcpy(p + HEADER_SIZE, cview.buf, cview.len)
            finally:
                PyBuffer_Release(&cview)
        else:
            size = self._len
            out = PyBytes_FromStringAndSize(NULL, size)
            p = <unsigned char *>PyBytes_AS_STRING(out)
            memcpy(p + HEADER_SIZE, self._buf + HEADER_SIZE, size - HEADER_SIZE)
        fl_put_be64(p, <uint64_t>self.base_offset)
        fl_put_be32(p + OFF_LENGTH, <uint32_t>(size - OVERHEAD))
        fl_put_be32(p + OFF_LEADER_EPOCH, <uint32_t>self.partition_leader_epoch)
        p[OFF_MAGIC] = 2
        fl_put_be16(p + OFF_ATTRIBUTES, <uint16_t>self._attributes)
        fl_put_be32(p + OFF_LAST_OFFSET_DELTA, <uint32_t>self._last_delta)
        fl_put_be64(p + OFF_FIRST_TIMESTAMP, <uint64_t>self._first_ts)
        fl_put_be64(p + OFF_MAX_TIMESTAMP, <uint64_t>self._max_ts)
        fl_put_be64(p + OFF_PRODUCER_ID, <uint64_t>self.producer_id)
        fl_put_be16(p + OFF_PRODUCER_EPOCH, <uint16_t>self.producer_epoch)
        fl_put_be32(p + OFF_BASE_SEQUENCE, <uint32_t>self.base_sequence)
        fl_put_be32(p + OFF_RECORD_COUNT, <uint32_t>self._count)
        fl_put_be32(p + OFF_CRC, _crc32c_maybe_nogil(p + OFF_ATTRIBUTES, size - OFF_ATTRIBUTES))
        return out


def build_batch(records, **kwargs):
    """One v2 batch from (timestamp, key, value[, headers]) tuples; kwargs as BatchBuilder."""
    cdef BatchBuilder b = BatchBuilder(**kwargs)
    for rec in records:
        if len(rec) == 4:
            b.append(rec[0], rec[1], rec[2], rec[3])
        else:
            b.append(rec[0], rec[1], rec[2])
    return b.build()


def recompress_batch(buf, BatchHeader h, int codec, level=None,
                     Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Batch h of buf with its records under another codec (a topic's compression.type,
    as Kafka's LogValidator applies it): a new bytearray holding one batch. The records'
    encoding does not depend on the codec, so they are decompressed and compressed as one
    block and never parsed; the header keeps every field but the codec bits, the length
    and the CRC."""
    cdef Py_buffer view
    cdef unsigned char *p
    cdef unsigned char header[HEADER_SIZE]
    cdef Py_ssize_t size
    cdef bytearray out
    if codec < 0 or codec > 4:
        raise UnsupportedCodecError(f"unknown compression codec {codec}")
    _get_buffer(buf, &view, False)
    try:
        if h.position < 0 or h.position + <Py_ssize_t>h.batch_length + OVERHEAD > view.len:
            raise ValueError(f"batch at {h.position} is not inside this buffer")
        memcpy(header, <unsigned char *>view.buf + h.position, HEADER_SIZE)
    finally:
        PyBuffer_Release(&view)
    region = _records_region(buf, h, decompress_limit)
    body = _compress(codec, region, level) if codec else region
    _get_buffer(body, &view, False)
    try:
        size = HEADER_SIZE + view.len
        if size - OVERHEAD > 0x7FFFFFFF:
            raise RecordTooLargeError(f"recompressed batch of {size} bytes")
        out = bytearray(size)
        p = <unsigned char *>PyByteArray_AS_STRING(out)
        memcpy(p, header, HEADER_SIZE)
        memcpy(p + HEADER_SIZE, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    fl_put_be32(p + OFF_LENGTH, <uint32_t>(size - OVERHEAD))
    fl_put_be16(p + OFF_ATTRIBUTES,
                <uint16_t>((h.attributes & ~ATTR_CODEC_MASK) | codec))
    fl_put_be32(p + OFF_CRC, _crc32c_maybe_nogil(p + OFF_ATTRIBUTES, size - OFF_ATTRIBUTES))
    return out


def build_control_batch(bint commit, int64_t producer_id, int producer_epoch,
                        int64_t base_offset, int64_t timestamp, *, int coordinator_epoch=0,
                        int32_t partition_leader_epoch=-1):
    """A transaction marker: a control batch holding one COMMIT or ABORT record."""
    cdef BatchBuilder b = BatchBuilder(
        0, base_offset, producer_id, producer_epoch, -1, True, 0, partition_leader_epoch,
        None, True)
    key = b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00"
    value = b"\x00\x00" + (<uint32_t>coordinator_epoch).to_bytes(4, "big")
    b.append(timestamp, key, value)
    return b.build()


def parse_control_record(Record record):
    """(version, type) of a control record's key: type 0 = ABORT, 1 = COMMIT."""
    key = record.key
    if key is None or len(key) < 4:
        raise InvalidRecordError("control record key shorter than 4 bytes")
    version = int.from_bytes(key[0:2], "big", signed=True)
    return version, int.from_bytes(key[2:4], "big", signed=True)


# ---------------------------------------------------------------------------------------
# Legacy message sets (magic 0 and 1)
#
# [offset int64][size int32][crc int32][magic int8][attributes int8]([timestamp int64] v1)
# [key bytes][value bytes]; the CRC-32 covers magic..end. A compressed "wrapper" message
# holds a whole inner message set in its value. In v1 the inner offsets are relative and
# the wrapper carries the absolute offset of the last inner message; in v0 they are
# absolute. Not a hot path (only very old clients use it), so plain code.

cdef enum:
    LEGACY_MIN_SIZE_V0 = 14   # crc + magic + attributes + key length + value length
    LEGACY_MIN_SIZE_V1 = 22


@cython.final
cdef class LegacyMessage:
    """One message of a magic 0/1 set (wrappers already flattened)."""
    cdef readonly int64_t offset
    cdef readonly int magic
    cdef readonly int attributes
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value

    def __init__(self, offset, magic, attributes, timestamp, key, value):
        self.offset = offset
        self.magic = magic
        self.attributes = attributes
        self.timestamp = timestamp
        self.key = key
        self.value = value

    @property
    def compression(self):
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self):
        return 1 if (self.magic == 1 and self.attributes & ATTR_TIMESTAMP_TYPE) else 0

    @property
    def headers(self):
        return []

    def __repr__(self):
        return (f"LegacyMessage(offset={self.offset}, magic={self.magic}, "
                f"attributes={self.attributes}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r})")

    def __eq__(self, other):
        if not isinstance(other, LegacyMessage):
            return NotImplemented
        o = <LegacyMessage>other
        return (self.offset, self.magic, self.attributes, self.timestamp, self.key,
                self.value) == (o.offset, o.magic, o.attributes, o.timestamp, o.key, o.value)

    __hash__ = None


cdef object _legacy_bytes(const unsigned char *d, Py_ssize_t *p, Py_ssize_t end,
                          Py_ssize_t base, str what):
    cdef int32_t n
    if end - p[0] < 4:
        _raise_truncated(what, p[0] + base, 4, end - p[0])
    n = <int32_t>fl_be32(d + p[0])
    p[0] += 4
    if n == -1:
        return None
    if n < 0 or n > end - p[0]:
        raise InvalidRecordError(f"invalid {what} length {n} at byte {p[0] - 4 + base}",
                                 p[0] - 4 + base)
    out = PyBytes_FromStringAndSize(<const char *>d + p[0], n)
    p[0] += n
    return out


cdef int _read_legacy(object obj, list groups, bint top, Py_ssize_t base,
                      Py_ssize_t limit) except -1:
    """Parse a message set; append (wrapper_or_None, [LegacyMessage]) groups."""
    cdef Py_buffer view
    cdef const unsigned char *d
    cdef Py_ssize_t pos = 0, end, msg, p
    cdef int32_t size
    cdef int magic, attrs, codec
    cdef uint32_t crc
    cdef int64_t offset, ts, abs_base
    cdef LegacyMessage m, im
    cdef list plain = None
    cdef list inner_groups
    cdef list inner
    _get_buffer(obj, &view, False)
    try:
        d = <const unsigned char *>view.buf
        end = view.len
        while pos < end:
            if end - pos < OVERHEAD:
                if top:
                    break
                _raise_truncated("message", pos + base, OVERHEAD, end - pos)
            offset = <int64_t>fl_be64(d + pos)
            size = <int32_t>fl_be32(d + pos + 8)
            if end - pos - OVERHEAD >= 5:
                magic = <int8_t>d[pos + OVERHEAD + 4]
                if magic != 0 and magic != 1:
                    raise InvalidMagicError(
                        f"message at byte {pos + base} has magic {magic}, expected 0 or 1",
                        pos + base + OVERHEAD + 4)
            if size < LEGACY_MIN_SIZE_V0:
                raise InvalidRecordError(
                    f"message at byte {pos + base} has size {size}", pos + base + 8)
            if size > end - pos - OVERHEAD:
                if top:
                    break
                _raise_truncated("message", pos + base, size + OVERHEAD, end - pos)
            msg = pos + OVERHEAD
            crc = fl_be32(d + msg)
            magic = d[msg + 4]
            attrs = d[msg + 5]
            if magic == 1 and size < LEGACY_MIN_SIZE_V1:
                raise InvalidRecordError(
                    f"v1 message at byte {pos + base} has size {size}", pos + base + 8)
            if zlib.crc32(_byte_view(obj)[msg + 4:msg + size]) != crc:
                raise CorruptRecordError(
                    f"message at byte {pos + base} (offset {offset}) fails its CRC-32",
                    msg + base)
            p = msg + 6
            ts = NO_TIMESTAMP
            if magic == 1:
                ts = <int64_t>fl_be64(d + p)
                p += 8
            key = _legacy_bytes(d, &p, msg + size, base, "key")
            value = _legacy_bytes(d, &p, msg + size, base, "value")
            if p != msg + size:
                raise InvalidRecordError(
                    f"message at byte {pos + base} has {msg + size - p} bytes left over",
                    pos + base)
            m = LegacyMessage(offset, magic, attrs, ts, key, value)
            codec = attrs & ATTR_CODEC_MASK
            if codec == 0:
                if plain is None:
                    plain = []
                    groups.append((None, plain))
                plain.append(m)
            else:
                if not top:
                    raise InvalidRecordError(
                        f"nested compressed message at byte {pos + base}", pos + base)
                if codec > 3:
                    raise UnsupportedCodecError(
                        f"message at byte {pos + base} uses codec {codec}", msg + base + 5)
                if value is None:
                    raise InvalidRecordError(
                        f"compressed message at byte {pos + base} has a null value",
                        pos + base)
                if codec == 3 and magic == 0:
                    from fastlog.compression import fix_legacy_lz4_header
                    value = fix_legacy_lz4_header(value)
                plain = None
                inner_groups = []
                _read_legacy(_decompress(codec, value, limit), inner_groups, False, 0, limit)
                inner = []
                for _w, msgs in inner_groups:
                    inner.extend(msgs)
                if not inner:
                    raise InvalidRecordError(
                        f"compressed message at byte {pos + base} holds no messages",
                        pos + base)
                if magic == 1:
                    # Relative inner offsets: the wrapper has the last one's absolute offset.
                    # A producer's own wrapper (offset not yet assigned) gives a negative
                    # base: then the relative offsets stay as they are (as Java does).
                    abs_base = offset - (<LegacyMessage>inner[len(inner) - 1]).offset
                    for obj_im in inner:
                        im = <LegacyMessage>obj_im
                        if abs_base >= 0:
                            im.offset = abs_base + im.offset
                        if attrs & ATTR_TIMESTAMP_TYPE:
                            im.timestamp = ts
                            im.attributes |= ATTR_TIMESTAMP_TYPE
                groups.append((m, inner))
            pos += OVERHEAD + size
    finally:
        PyBuffer_Release(&view)
    return 0


def read_message_set(buf, *, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Iterate the messages of a magic 0/1 message set, flattening compressed wrappers.

    A partial message at the end (as in fetch responses) is ignored.
    """
    cdef list groups = []
    cdef list out = []
    _read_legacy(buf, groups, True, 0, decompress_limit)
    for _wrapper, msgs in groups:
        out.extend(msgs)
    return iter(out)


cdef bytes _encode_message(int64_t offset, int magic, int attrs, int64_t ts, key, value):
    cdef Writer w = Writer()
    w.int64(offset)
    w.int32(0)
    w.uint32(0)
    w.int8(magic)
    w.int8(attrs)
    if magic == 1:
        w.int64(ts)
    w.nullable_bytes(key)
    w.nullable_bytes(value)
    cdef bytearray out = bytearray(w.getvalue())
    fl_put_be32(<unsigned char *>out + 8, <uint32_t>(len(out) - OVERHEAD))
    fl_put_be32(<unsigned char *>out + OVERHEAD, zlib.crc32(memoryview(out)[OVERHEAD + 4:]))
    return bytes(out)


def build_message_set(records, int magic, int compression=0, int64_t base_offset=0, *,
                      int timestamp_type=0, compression_level=None):
    """A magic 0/1 message set from (timestamp, key, value[, headers]) tuples.

    Headers cannot be represented and are dropped. With compression the records go into
    one wrapper message (inner offsets relative in v1, absolute in v0).
    """
    cdef list msgs = []
    cdef int64_t i = 0, max_ts = NO_TIMESTAMP, ts
    cdef int ts_attr = ATTR_TIMESTAMP_TYPE if (magic == 1 and timestamp_type == 1) else 0
    if magic != 0 and magic != 1:
        raise InvalidMagicError(f"legacy message sets have magic 0 or 1, not {magic}")
    if compression > 3 or compression < 0:
        raise UnsupportedCodecError(f"codec {compression} is not available for magic {magic}")
    for rec in records:
        ts = NO_TIMESTAMP if (magic == 0 or rec[0] is None) else rec[0]
        if ts > max_ts:
            max_ts = ts
        inner_offset = i if (compression and magic == 1) else base_offset + i
        msgs.append(_encode_message(inner_offset, magic, 0 if compression else ts_attr, ts,
                                    rec[1], rec[2]))
        i += 1
    if not compression or not msgs:
        return b"".join(msgs)
    payload = _compress(compression, b"".join(msgs), compression_level)
    if compression == 3 and magic == 0:
        from fastlog.compression import fix_legacy_lz4_header
        payload = fix_legacy_lz4_header(payload, to_legacy=True)
    return _encode_message(base_offset + i - 1, magic, compression | ts_attr, max_ts, None,
                           payload)


def convert_to_v2(buf, *, bint assign_offsets=False,
                  Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Convert a magic 0/1 message set to v2 batches (one per wrapper or per run of
    uncompressed messages), keeping offsets, timestamps and codecs.

    With assign_offsets (produce from old clients, whose offsets mean nothing) each
    batch's records get offset deltas 0..n-1 instead.
    """
    cdef list groups = []
    cdef list out = []
    cdef BatchBuilder b
    cdef LegacyMessage first, m, wrapper
    cdef int64_t delta
    cdef int codec, ts_type
    _read_legacy(buf, groups, True, 0, decompress_limit)
    for wrapper_obj, msgs in groups:
        codec = 0
        ts_type = 0
        if wrapper_obj is not None:
            wrapper = <LegacyMessage>wrapper_obj
            codec = wrapper.attributes & ATTR_CODEC_MASK
            ts_type = wrapper.timestamp_type
        first = <LegacyMessage>msgs[0]
        b = BatchBuilder(compression=codec, base_offset=0 if assign_offsets else first.offset,
                         timestamp_type=ts_type)
        for i, obj in enumerate(msgs):
            m = <LegacyMessage>obj
            delta = i if assign_offsets else m.offset - first.offset
            if delta < 0 or delta > 0x7FFFFFFF or (delta <= b._last_delta):
                raise InvalidRecordError(
                    f"legacy offsets not increasing at offset {m.offset}", None)
            b._add(<int32_t>delta, m.timestamp, m.key, m.value, None)
        out.append(b.build())
    return b"".join(out)


def convert_from_v2(buf, int magic, *, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Convert v2 batches to a magic 0/1 message set (fetch from old clients).

    Control batches and empty batches are dropped, and headers are lost. Compressed
    batches become one wrapper each (zstd cannot be expressed: UnsupportedCodecError).
    A partial batch at the end is ignored.
    """
    cdef list parts = []
    cdef list recs
    cdef BatchHeader h
    cdef Record r, first
    cdef int codec
    cdef int ts_attr
    if magic != 0 and magic != 1:
        raise InvalidMagicError(f"legacy message sets have magic 0 or 1, not {magic}")
    result = scan_batches(buf)
    if result.error is not None and not isinstance(result.error, TruncatedError):
        raise result.error
    for obj in result.batches:
        h = <BatchHeader>obj
        if h.attributes & ATTR_CONTROL or h.record_count == 0:
            continue
        codec = h.attributes & ATTR_CODEC_MASK
        if codec == 4:
            raise UnsupportedCodecError(
                f"zstd batch at byte {h.position} cannot be converted to magic {magic}",
                h.position + OFF_ATTRIBUTES)
        ts_attr = ATTR_TIMESTAMP_TYPE if (magic == 1 and h.attributes & ATTR_TIMESTAMP_TYPE) else 0
        recs = list(iter_records(buf, h.position, decompress_limit=decompress_limit,
                                 verify_crc=False))
        if codec == 0:
            for obj_r in recs:
                r = <Record>obj_r
                parts.append(_encode_message(r.offset, magic, ts_attr,
                                             r.timestamp if magic == 1 else NO_TIMESTAMP,
                                             r.key, r.value))
            continue
        first = <Record>recs[0]
        inner = []
        max_ts = NO_TIMESTAMP
        for obj_r in recs:
            r = <Record>obj_r
            inner.append(_encode_message(r.offset - first.offset if magic == 1 else r.offset,
                                         magic, 0, r.timestamp if magic == 1 else NO_TIMESTAMP,
                                         r.key, r.value))
            if r.timestamp > max_ts:
                max_ts = r.timestamp
        payload = _compress(codec, b"".join(inner), None)
        if codec == 3 and magic == 0:
            from fastlog.compression import fix_legacy_lz4_header
            payload = fix_legacy_lz4_header(payload, to_legacy=True)
        parts.append(_encode_message((<Record>recs[len(recs) - 1]).offset, magic, codec | ts_attr,
                                     max_ts if magic == 1 else NO_TIMESTAMP, None, payload))
    return b"".join(parts)
