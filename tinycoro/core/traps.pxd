# Augments traps.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes traps.py with this
# file beside it). The .py is the source: this declares the traps' layouts, so the engine, which
# cimports them, reads and writes an op's fields directly. Attributes are public: the I/O layer
# (Python subclasses of Op) and the asyncio host use them.

cimport cython

from . cimport iterslots
from .._clocal cimport running_engine, running_task

cdef class _CoroutineProtocol:
    cdef public object _gen

cdef class Op(_CoroutineProtocol):
    cdef public object prep
    cdef public object args
    cdef public object task
    cdef public object ud
    cdef public bint cancelling
    cdef public object what
    cdef public bint returns_fd
    cdef public bint eager
    cdef public int _state
    cdef public object _res

    cpdef _fill(self, object prep, tuple args, bint returns_fd=*)
    # a MultiOp's CQE (traps.py): the ring's owner calls it as a C method, the override's
    # through the vtable (net/multishot's), a Python subclass's by name (io/_parallel's)
    cpdef completion(self, int res, object data, bint more)
    cdef object _by_hand(self)
    cdef object _drive(self, object gen, object value)

cdef class _Raw(_CoroutineProtocol):
    cdef public object op

cdef class Ready:
    cdef public object value

cdef class Done:
    pass

cdef class Park:
    cdef public object abort
    cdef public object undo
    cdef public object what

cdef class _Yield:
    pass

cdef class _Spend:
    cdef object value
    cdef bint yielded

# Where an op's await is (Op._state), as C ints: a step compares them to a C int
cdef int _IDLE, _HANDED, _WAITING

# The end marker of an await that yields its op (iterslots.END), as a C global
cdef object END

# The C steps behind Op's, Ready's and _Spend's slots (iterslots.install): object in, object out
@cython.locals(o=Op, state=int)
cdef object _op_step(object op, object value)
# (exported: io/ops' RingRead ends its await the same way)
@cython.locals(o=Op)
cdef object op_result(object op)
cdef object _ready_step(object ready, object value)
@cython.locals(r=Ready)
cdef object _ready_result(object ready)
@cython.locals(s=_Spend)
cdef _Spend _spend_then(object value)
@cython.locals(s=_Spend)
cdef object _spend_step(object spend, object value)
@cython.locals(s=_Spend)
cdef object _spend_result(object spend)

# The budget's decision (install_budget): a C global, not a module attribute looked up per call
cdef object _spend

@cython.locals(op=Op, where=dict)
cpdef list ops_waited_by(list tasks, list ops)
