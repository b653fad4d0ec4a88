# Augments multishot.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes
# multishot.py with this file beside it). The .py is the source: this declares the layout of a
# stream's multishot recv, whose fields a recv and a completion on two contexts share; each
# read or write of one is a single C step under the GIL, and the sequences of them run under
# ``lock`` on a free-threaded build (the module doc says why that matters).

cimport cython

from ..core cimport fence
from ..core.traps cimport Op
from .ops cimport InlineOp

cdef class MultishotRecv(InlineOp):
    cdef public object queue
    cdef public Py_ssize_t queued
    cdef public Py_ssize_t offset
    cdef public bint armed
    cdef public bint stopping
    cdef public bint was_armed
    cdef public object engine
    cdef public object waiter
    cdef public object ticket
    cdef public object token
    cdef public object owner
    cdef public bint waited
    cdef public object broken
    cdef public object lock

    # C integers: as objects, each read of offset and queued and each length was an int
    # boxed and freed (5 per recv, ~300 instructions on 3.12, callgrind)
    @cython.locals(start=Py_ssize_t, left=Py_ssize_t, got=Py_ssize_t, n=Py_ssize_t)
    cdef object _take(self, Py_ssize_t want)
    cdef object _take_locked(self, Py_ssize_t want)
    cdef object _take_waiter(self)


cdef class RecvCall(Op):
    cdef public MultishotRecv ms
    cdef public Py_ssize_t want
    cdef public object spare
