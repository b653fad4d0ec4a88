# Augments ops.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes ops.py with this
# file beside it). The .py is the source: this declares the layouts of a file's ring read and
# write awaitables, whose __await__ runs once per ring read or write (every O_DIRECT read).

cimport cython

from ..closing cimport PendingOps, ResourceOp

cdef class RingRead(ResourceOp):
    cdef public object view
    cdef public object offset
    cdef public object got
    cdef public bint direct
    cdef public object out
    cdef public object name

    cdef _setup(self, PendingOps pending, object fd, object name, bint direct, object view,
                object offset, object got, object out)

@cython.locals(op=RingRead)
cpdef RingRead ring_read(PendingOps pending, object fd, object name, bint direct, object view,
                         object offset, object got=*, object out=*)

cdef class RingWrite(ResourceOp):
    cdef public object view
    cdef public object offset
    cdef public object name
