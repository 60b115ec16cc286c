# fastlog/_lz4.pxd: the C-level face of fastlog._lz4 for other compiled modules.

from cpython.object cimport PyObject


cdef struct Sink:
    # Where decoded bytes go: a bytes object grown in place (bytes != NULL) or raw memory.
    char *data
    Py_ssize_t cap
    PyObject *bytes


cdef Py_ssize_t decode_frames_scratch(const unsigned char *src, Py_ssize_t n,
                                      Py_ssize_t max_size,
                                      const unsigned char **out) except -2
