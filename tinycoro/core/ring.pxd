# Augments ring.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes ring.py with this
# file beside it). The .py is the source: this declares the class's layout and its hot calls.
# Attributes are public: the asyncio host (a Python subclass) and statistics read them.

cdef object _prep_cancel
cdef object _prep_close
cdef object _SKIP_UD
cdef Py_ssize_t _MULTI_UD_TAG
cdef object _RingBusy
cdef bint _LOCKED_REAP

cimport cython

from . cimport cqwatch, fence, ringcalls
from .traps cimport Op

cdef class RingOwner:
    cdef readonly object ring  # readonly: the call table (_calls) is this ring's
    cdef public list _slots  # the in-flight table: op (or None) and user_data per slot (ring.py)
    cdef public list _free  # the free slots' user_data
    cdef public Py_ssize_t unsubmitted
    cdef public Py_ssize_t own_inflight
    cdef public Py_ssize_t ops
    cdef public list _done
    cdef public dict standing
    cdef public list _shots
    cdef public Py_ssize_t rearms
    cdef public Py_ssize_t nobufs_endings
    cdef public object completion_hook
    cdef public object _flight_lock
    # the ring's calls, bound once where there is no call table, else None (ring.py)
    cdef readonly object _ring_queue
    cdef readonly object _ring_complete
    cdef readonly object _ring_cq_ready
    cdef readonly object _ring_submit
    cdef readonly object _ring_sq_ready
    cdef readonly Py_ssize_t cq_high
    cdef size_t _cq_watch  # the compiled ring's CQ watch, 0 for none (ring.py, _reap)
    cdef readonly size_t _calls  # the compiled ring's call table, 0 for none (core/ringcalls.py)
    cdef dict __dict__  # subclasses (Engine, LoopHost) keep attributes of their own

    cpdef _deliver(self, list done)
    # a C call from the engine's written-out _enter (engine.py, _start)
    cdef object _take_slot(self)
    # C arithmetic on the table's index: no Python int made between
    cpdef Py_ssize_t inflight_count(self) except -1
    cpdef bint holds(self, op) except -1
    @cython.locals(slot=Py_ssize_t, slots=list)
    cdef bint _holds_at(self, Py_ssize_t ud, op) except -1
    @cython.locals(reaped=bint, n=Py_ssize_t)
    cpdef _reap(self)
    cpdef _submit(self)
    # The ring's calls, each deciding in one place between its C table and its bound method:
    # C calls (through the vtable) from here and from the engine's _start and _submit
    # ud: the object the caller holds, converted only for the table (the ring takes it as is)
    cdef int _queue_sqe(self, prep, args, ud) except -1
    cdef Py_ssize_t _submit_sqes(self) except -1
    cdef Py_ssize_t _cq_ready(self) except -1
    cdef int _set_release_gil(self, bint on) except -1
    cdef Py_ssize_t _complete(self, list done, list shots) except -1
    # C integers: with an object index, `range(0, len(shots), 4)` was a range object, its
    # iterator and a boxed index per CQE, and each `shots[i + k]` a generic subscript: ~1,300
    # instructions per multishot CQE (callgrind, 3.11), two per echo round trip
    # mop: an Op's completion is its C method (traps.pxd)
    @cython.locals(i=Py_ssize_t, n=Py_ssize_t, more=bint, mop=Op)
    cdef _complete_multi(self, list shots)
