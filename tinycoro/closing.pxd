# Augments closing.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes closing.py with
# this file beside it). The .py is the source: this declares the pending set's and the resource
# op's layouts, and the op's close-tracking steps as C calls for the op classes that cimport it.

cimport cython

from .core cimport fence
from .core.traps cimport Op

# ResourceOp.slot's values as C integers (the .py's IN_SET, RECV_SLOT)
cdef int _IN_SET, _RECV_SLOT

cdef class PendingOps:
    cdef public dict _ops
    cdef public bint closed
    cdef public object _error
    # the fixed slots of a stream's reused recv and send (closing.py)
    cdef public object _recv_op
    cdef public object _recv_on
    cdef public object _send_op
    cdef public object _send_on

    cpdef list in_flight(self)

cdef class ResourceOp(Op):
    cdef public PendingOps pending
    cdef public int slot

    cpdef _enter(self)
    @cython.locals(pending=PendingOps, slot=int)
    cpdef _enter_on(self, object engine)
    @cython.locals(pending=PendingOps, slot=int)
    cpdef _leave_pending(self)
    cpdef _fill_for(self, PendingOps pending, object prep, tuple args, bint returns_fd=*)
