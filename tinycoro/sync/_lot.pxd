# Augments _lot.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes _lot.py with
# this file beside it). The .py is the source: this declares the layouts of the parking lot and
# its waiters, which every primitive's lock, unlock, wait and wake go through. Attributes are
# public: the primitives (some of them interpreted) and the engine's abort hook use them.

cimport cython

cdef class Waiter:
    cdef public object lot
    cdef public object task
    cdef public object item
    cdef public bint queued

cdef class ParkingLot:
    cdef public object _lock
    cdef public object _queue
    cdef public Py_ssize_t _live
    cdef public Py_ssize_t _dead
    cdef public object what

# Acquisitions that complete at once (rule 16, the module doc): the budget check is a C call of
# the engine's spend_inline, and the shared traps.DONE finishes an await with no allocation.
from ..core.engine cimport spend_inline

cpdef bint spend()

from . cimport _refs

cdef class Acquirable:
    cdef object _spare

    cdef object _acquire(self)

cdef class Acquisition:
    cdef Acquirable prim
    cdef public object _gen

@cython.locals(acq=Acquisition)
cpdef Acquisition acquisition(Acquirable prim)
