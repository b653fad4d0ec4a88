# Augments closing.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes closing.py with
# this file beside it). The .py is the source: this declares the pending set's and the resource
# op's layouts, and the op's close-tracking steps as C calls for the op classes that cimport it.

from .core.traps cimport Op

cdef class PendingOps:
    cdef public dict _ops
    cdef public bint closed
    cdef public object _error

cdef class ResourceOp(Op):
    cdef public PendingOps pending

    cpdef _enter(self)
    cpdef _enter_on(self, object engine)
    cpdef _fill_for(self, PendingOps pending, object prep, tuple args, bint returns_fd=*)
