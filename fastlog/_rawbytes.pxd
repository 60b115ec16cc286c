# fastlog/_rawbytes.pxd — CPython's bytes calls declared over raw references, for compiled
# code that writes into a bytes object it alone owns and then shrinks it in place
# (_PyBytes_Resize wants the only reference, which an object variable would not let it
# hold). Declarations only: no module of its own. Cimported by fastlog/_lz4.pyx (the
# decoder's output) and fastlog/server/_exposition.pyx (GaugeRows.text).

from cpython.object cimport PyObject


cdef extern from "Python.h":
    PyObject *_new_bytes "PyBytes_FromStringAndSize"(const char *s, Py_ssize_t n) except NULL
    char *_bytes_data "PyBytes_AS_STRING"(PyObject *o) noexcept
    int _PyBytes_Resize(PyObject **bytes, Py_ssize_t newsize) except -1
