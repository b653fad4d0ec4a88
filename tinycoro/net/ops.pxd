# Augments ops.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes ops.py with this
# file beside it). The .py is the source: this declares the layouts of a socket's operation
# awaitables (recv, send and sendall, accept), whose __await__ runs once per I/O call.

cimport cython

from ..closing cimport ResourceOp
from ..core.traps cimport Op
from ..core.engine cimport Engine
from ..core cimport deques, iterslots, tokens
from .._clocal cimport running_engine
from . cimport _nbsend

# what a stream's recv writes of its spare multishot call (ops.py says why it is here)
cdef class RecvLimit(Op):
    cdef public Py_ssize_t want

cdef class InlineOp(ResourceOp):
    # `except -1`: a call is checked by its return value; undeclared, each call was followed
    # by PyErr_Occurred() (a read of the thread state: a call into libpython's thread-local
    # storage on 3.12 and later)
    cdef bint _spend(self, Engine engine) except -1
    cdef bint _alone(self, Engine engine) except -1

cdef class RecvOp(ResourceOp):
    cdef public object view
    cdef public object token
    cdef public object owner

cdef class BulkRecvOp(InlineOp):
    cdef public object token
    cdef public object owner
    cdef public object sock

    cdef Py_ssize_t _recv_inline(self, object buf) except? -1

cdef class RingSend

cdef class SendallOp(InlineOp):
    # a list (the stream's spare list) or None: typed, `not spare` reads its length
    cdef public list spare
    cdef public object owner
    cdef public object sock
    cdef public bint once

    cdef bint _sent(self, Py_ssize_t res) except -1
    @cython.locals(args=tuple)
    cdef bint _has_data(self) except -1
    @cython.locals(waiting=RingSend, entered=bint)
    cdef object _join_batch(self, object engine)
    @cython.locals(flags=int, res=Py_ssize_t)
    cdef Py_ssize_t _send_inline(self) except -1
    @cython.locals(spare=list)
    cdef int _release(self) except -1  # not void: the same check as _spend's

cdef class RingSend:
    cdef public SendallOp op
    cdef public int state

    cdef object _step(self, object value)
    cdef int _end(self) except -1

@cython.locals(w=RingSend)
cdef object _send_step(object ring_send, object value)
cdef object _send_result(object ring_send)

cdef int _IDLE, _HANDED, _WAITING
cdef list _ring_sends
cdef Py_ssize_t _RING_SENDS_KEPT

cdef class AcceptOp(InlineOp):
    cdef public object listener

    cdef int _accept_inline(self) except? -1

cdef int _EAGAIN
cdef int _DONTWAIT
