# Augments stream.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes stream.py
# with this file beside it). The .py is the source. Stream stays a Python class (a stream is
# subclassed and given attributes freely); what recv() and sendall() read each call lives in
# _StreamCore, its C base, as C fields: written once as the stream is made (the descriptor, a C
# int, also by close()), so that a free-threaded build never frees a field under a reader.

cimport cython

from ..core cimport tokens
from . cimport _untrack
from .ops cimport RecvLimit, SendallOp

# buffers.MAX_RW as a C integer: sendall compares a length with it
cdef Py_ssize_t _MAX_RW

cdef class _StreamCore:
    cdef public object _sock
    cdef public int _fd
    cdef public object _ops
    # not the multishot's C type: a stream runs with an interpreted multishot module too (a
    # partial build, tests/test_multishot.py), whose class has no C layout to cimport
    cdef public object _ms
    cdef public list _recv_spare
    cdef public list _send_spare
    cdef public object _ref
    cdef public list _recv_token

    # typed locals: the spare sendall's args are written as a C field, and so is the spare
    # recv call's limit (its C base, ops.pxd: the multishot's own layout may be interpreted)
    @cython.locals(spare=list, call=RecvLimit)
    cpdef recv(self, max_bytes=*)
    @cython.locals(op=SendallOp, spare=list, n=Py_ssize_t)
    cpdef sendall(self, data)
