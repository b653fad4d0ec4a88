# Augments ops.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes ops.py with this
# file beside it). The .py is the source: this declares the layouts of a file's ring read and
# write awaitables, whose __await__ runs once per ring read or write (every O_DIRECT read).

cimport cython

from ..closing cimport PendingOps, ResourceOp
from ..core cimport iterslots
# the names ops.py imports from core/local: compiled, C reads of the thread's state
from .._clocal cimport running_engine, running_task
# under the name ops.py imports it by: traps.op_result (RingRead's result) is then a C function
from ..core cimport traps

cdef class RingRead(ResourceOp):
    cdef public object view
    cdef public object offset
    cdef public object got
    cdef public bint direct
    cdef public object out
    cdef public object name
    cdef object _size  # the int object of the size its read asks for (ops.py, _setup)

    @cython.locals(want=Py_ssize_t, have=Py_ssize_t)
    cdef _setup(self, PendingOps pending, object fd, object name, bint direct, object view,
                object offset, Py_ssize_t got, object out)
    cdef _leave(self)
    cdef object _step_by_hand(self, object value)
    @cython.locals(args=tuple, want=Py_ssize_t, size=Py_ssize_t)
    cdef Py_ssize_t _took(self, Py_ssize_t got, Py_ssize_t res) except? -1
    @cython.locals(have=Py_ssize_t)
    cdef object _result_of(self, Py_ssize_t got)

cdef Py_ssize_t _MAX_RW

# Where a RingRead's await is (Op._state), as C ints: a step compares them to a C int
cdef int _IDLE, _HANDED, _WAITING

# The end marker of its await (iterslots.END), as a C global
cdef object END

# The C step behind RingRead's slots (iterslots.install; its result is traps' op_result)
@cython.locals(r=RingRead, state=int, got=Py_ssize_t, pending=PendingOps)
cdef object _read_step(object read, object value)

cdef list _spares
cdef Py_ssize_t SPARE_READS, _nspares
@cython.locals(n=Py_ssize_t)
cdef _spare(RingRead r)

@cython.locals(op=RingRead, n=Py_ssize_t)
cpdef RingRead ring_read(PendingOps pending, object fd, object name, bint direct, object view,
                         object offset, object got=*, object out=*)

cdef class RingWrite(ResourceOp):
    cdef public object view
    cdef public object offset
    cdef public object name
