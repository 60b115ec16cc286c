# fastlog._lz4: LZ4 frames of independent blocks, decoded in C (the produce path's lz4).
#
# Owns: decoding the LZ4 frame format (magic 0x184D2204; an FLG/BD descriptor closed by
# the second byte of its xxh32; size-prefixed blocks, the high bit marking a stored one;
# a zero end mark) for the shape Kafka clients write: independent blocks, no block or
# content checksum, no dictionary. Every block is decoded by LZ4_decompress_safe straight
# into one output buffer, with the GIL released: a bytes object (decode_frames), or a
# per-thread scratch buffer that is reused (decode_frames_scratch, for the produce path's
# record walk, which needs the content only for a moment: a fresh buffer per batch cost
# as much in page faults as the decoding itself). Anything else (linked blocks,
# checksums, skippable frames) or anything damaged returns None, and fastlog.compression's
# general frame decoder handles or reports it.
#
# Why compiled: a produce of ~300 KB of lz4 from librdkafka is 5 blocks; the per-block
# Python loop, a bytes per block and the join cost more than the decoding itself.
#
# The LZ4 and xxHash functions are those of the lz4 package's own build: its frame
# extension exports LZ4_decompress_safe and XXH32, found with dlsym at import. No second
# copy of the library and no headers are needed to build; importing fails loudly if the
# pinned package ever stops exporting them. Reentrant: any thread may call it.

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_RawFree, PyMem_RawRealloc
from cpython.ref cimport Py_XDECREF
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym

# (raw references: the output bytes object is grown in place while we own it alone)
from fastlog._rawbytes cimport _bytes_data, _new_bytes, _PyBytes_Resize

import threading

import lz4.frame._frame as _lz4_frame_ext

ctypedef int (*decompress_safe_t)(const char *src, char *dst, int src_size,
                                  int dst_capacity) noexcept nogil
ctypedef unsigned int (*xxh32_t)(const void *data, size_t length,
                                 unsigned int seed) noexcept nogil

cdef decompress_safe_t _decompress_safe = NULL
cdef xxh32_t _xxh32 = NULL

cdef uint32_t FRAME_MAGIC = 0x184D2204


cdef void _load() except *:
    global _decompress_safe, _xxh32
    path = _lz4_frame_ext.__file__.encode()
    cdef void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL)
    if handle == NULL:
        raise ImportError(f"cannot open the lz4 package's extension {path!r}: "
                          f"{(<bytes>dlerror()).decode(errors='replace')}")
    _decompress_safe = <decompress_safe_t>dlsym(handle, b"LZ4_decompress_safe")
    _xxh32 = <xxh32_t>dlsym(handle, b"XXH32")
    if _decompress_safe == NULL or _xxh32 == NULL:
        raise ImportError(f"the lz4 package's extension {path!r} does not export "
                          f"LZ4_decompress_safe and XXH32")


_load()


cdef inline uint32_t _le32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


def xxh32(data, unsigned int seed=0):
    """xxHash32 of a bytes-like object (the LZ4 frame descriptor's checksum)."""
    cdef Py_buffer view
    cdef unsigned int h
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        h = _xxh32(view.buf, <size_t>view.len, seed)
    finally:
        PyBuffer_Release(&view)
    return h


cdef int _grow(Sink *sink, Py_ssize_t cap) except -1:
    cdef char *p
    if sink.bytes != NULL:
        _PyBytes_Resize(&sink.bytes, cap)
        sink.data = _bytes_data(sink.bytes)
    else:
        p = <char *>PyMem_RawRealloc(sink.data, <size_t>cap)
        if p == NULL:
            raise MemoryError()
        sink.data = p
    sink.cap = cap
    return 0


cdef Py_ssize_t _decode(const unsigned char *src, Py_ssize_t n, Py_ssize_t max_size,
                        Sink *sink) except -2:
    # The frames of src[:n] into sink.data[:result]; -1: not this shape, or damaged.
    cdef Py_ssize_t pos = 0, p, desc_end, total = 0, bmax, room
    cdef unsigned char flg, bd
    cdef uint32_t size, length
    cdef uint64_t declared
    cdef int got
    cdef char *dst
    while pos < n:
        if n - pos < 7 or _le32(src + pos) != FRAME_MAGIC:
            return -1
        flg = src[pos + 4]
        bd = src[pos + 5]
        # version 01 and independent blocks; no block/content checksum, reserved bit or
        # dictionary id; BD's reserved bits clear; 64 KiB to 4 MiB blocks.
        if flg & 0xE0 != 0x60 or flg & 0x17 or bd & 0x8F or (bd >> 4) & 7 < 4:
            return -1
        desc_end = pos + 6 + (8 if flg & 0x08 else 0)
        if desc_end >= n:
            return -1
        if src[desc_end] != (_xxh32(src + pos + 4, <size_t>(desc_end - pos - 4), 0) >> 8) & 0xFF:
            return -1
        if flg & 0x08:
            declared = _le32(src + pos + 6) | (<uint64_t>_le32(src + pos + 10) << 32)
            if declared > <uint64_t>(max_size - total):
                raise OverflowError("declared content size over the limit")
        bmax = 1 << (8 + 2 * ((bd >> 4) & 7))
        p = desc_end + 1
        while True:
            if n - p < 4:
                return -1
            size = _le32(src + p)
            p += 4
            if size == 0:
                break
            length = size & 0x7FFFFFFF
            if length > bmax or length > n - p:
                return -1
            # Room for one block, but never past max_size + 1 bytes in all: a block that
            # does not fit then fails to decode and the general decoder names the cause.
            room = min(bmax, max_size + 1 - total)
            if total + room > sink.cap:
                # Growth follows the bytes decoded, never a size the input declares.
                _grow(sink, max(total + room, min(2 * sink.cap, max_size + 1)))
            dst = sink.data + total
            if size & 0x80000000:
                if length > max_size - total:
                    raise OverflowError("content over the limit")
                memcpy(dst, src + p, length)   # a block stored uncompressed
                got = <int>length
            else:
                with nogil:
                    got = _decompress_safe(<const char *>(src + p), dst, <int>length,
                                           <int>room)
                if got < 0:
                    return -1
            p += length
            total += got
            if total > max_size:
                raise OverflowError("content over the limit")
        pos = p
    return total


def decode_frames(data, Py_ssize_t max_size):
    """The concatenated content of the LZ4 frames in ``data`` as bytes, when every frame
    has independent blocks and no checksums or dictionary; None otherwise or when the
    input looks damaged (let the general decoder decide). Raises OverflowError when the
    content would pass max_size."""
    cdef Py_buffer view
    cdef Sink sink
    cdef Py_ssize_t total
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    sink.bytes = NULL
    try:
        # First guess: twice the input, a few blocks' room; then it grows with the output.
        sink.cap = min(2 * view.len + 65536, max_size + 1)
        sink.bytes = _new_bytes(NULL, sink.cap)
        sink.data = _bytes_data(sink.bytes)
        total = _decode(<const unsigned char *>view.buf, view.len, max_size, &sink)
        if total < 0:
            return None
        _PyBytes_Resize(&sink.bytes, total)
        return <object>sink.bytes   # a new reference; ours is dropped below
    finally:
        Py_XDECREF(sink.bytes)
        PyBuffer_Release(&view)


@cython.final
cdef class _Scratch:
    cdef Sink sink

    def __cinit__(self):
        self.sink.bytes = NULL
        self.sink.data = NULL
        self.sink.cap = 0

    def __dealloc__(self):
        PyMem_RawFree(self.sink.data)


cdef object _local = threading.local()
# A thread keeps at most this much scratch: a bigger one is freed at its next call.
cdef Py_ssize_t SCRATCH_KEEP = 4 << 20


cdef Py_ssize_t decode_frames_scratch(const unsigned char *src, Py_ssize_t n,
                                      Py_ssize_t max_size,
                                      const unsigned char **out) except -2:
    """Like decode_frames, into this thread's scratch buffer: *out points at the content
    until this thread's next call. Returns its length, or -1 for "not this shape"."""
    cdef _Scratch scratch
    cdef Py_ssize_t total
    try:
        scratch = _local.scratch
    except AttributeError:
        scratch = _local.scratch = _Scratch()
    if scratch.sink.cap > SCRATCH_KEEP:
        PyMem_RawFree(scratch.sink.data)
        scratch.sink.data = NULL
        scratch.sink.cap = 0
    total = _decode(src, n, max_size, &scratch.sink)
    out[0] = <const unsigned char *>scratch.sink.data
    return total
