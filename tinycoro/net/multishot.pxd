# Augments multishot.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes
# multishot.py with this file beside it). The .py is the source: this declares the layout of a
# stream's multishot recv, whose fields a recv and a completion on two contexts share; each
# read or write of one is a single C step under the GIL, and the sequences of them run under
# ``lock`` on a free-threaded build (the module doc says why that matters).

cimport cython

from .._clocal cimport running_engine, running_task
from ..core cimport fence, iterslots, tokens
from ..core.task cimport wake_waiter
from .ops cimport InlineOp, RecvLimit

cdef class MultishotRecv(InlineOp):
    cdef public object head
    cdef public object rest
    cdef public Py_ssize_t queued
    cdef public Py_ssize_t offset
    cdef public bint armed
    cdef public bint stopping
    cdef public bint was_armed
    cdef public object engine
    cdef public object waiter
    cdef public object ticket
    cdef public list token
    cdef public object owner
    cdef public bint waited
    cdef public object broken
    cdef public object lock

    # Op's C method (traps.pxd), which the ring's owner calls for each CQE
    cpdef completion(self, int res, object data, bint more)
    # C integers: as objects, each read of offset and queued and each length was an int
    # boxed and freed (5 per recv, ~300 instructions on 3.12, callgrind)
    @cython.locals(start=Py_ssize_t, left=Py_ssize_t, got=Py_ssize_t, n=Py_ssize_t)
    cdef object _take(self, Py_ssize_t want)
    cdef object _push(self, object item)
    cdef object _pop(self)
    cdef object _take_locked(self, Py_ssize_t want)
    cdef object _take_waiter(self)
    cdef int _look(self, object engine, Py_ssize_t want) except -1


cdef class RecvCall(RecvLimit):  # its want: RecvLimit's (ops.pxd)
    cdef public MultishotRecv ms
    # a list (the stream's spare list) or None: typed, `not spare` reads its length
    cdef public list spare
    # RecvCall's own steps (it is its own iterator: no generator per recv)
    cdef public int state
    cdef public Py_ssize_t limit
    cdef public object engine
    cdef public bint held
    cdef public object sub
    cdef public object result

    @cython.locals(over=bint)
    cdef object _step(self, object value)
    cdef object _forward(self, object value, object exc)
    @cython.locals(spare=list)
    cdef int _end(self) except -1  # not void: no PyErr_Occurred() after each call (ops.pxd)


# The C steps behind RecvCall's slots (iterslots.install): object in, object out
@cython.locals(c=RecvCall)
cdef object _recv_step(object call, object value)
@cython.locals(c=RecvCall)
cdef object _recv_result(object call)
@cython.locals(c=RecvCall)
cdef object _recv_send(object call, object value)

# The step codes as C integers: as module objects, each compare with a C int boxed it
cdef int _TAKE, _SPEND, _SINGLE, _PARK
cdef int _IDLE, _HANDED, _SPENDING, _PARKED, _DELEGATED
# The queue's limit and the CQE errnos a completion compares with, likewise
cdef Py_ssize_t _QUEUE_LIMIT
cdef int _ENOBUFS, _ECANCELED, _EINVAL
