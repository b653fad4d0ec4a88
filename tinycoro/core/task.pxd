# Augments task.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes task.py with this
# file beside it). The .py is the source: this declares the Task's layout, so the engine, which
# cimports it, reads and writes a task's fields directly. Attributes are public: primitives,
# the scheduler and the notebook layer use them.

cimport cython

from . cimport fence

cdef class Task:
    cdef public object _coro
    cdef public object _coro_send
    cdef public object id
    cdef public object name
    cdef public object _engine
    cdef public object _state
    cdef public object _resume_value
    cdef public object _resume_exc
    cdef public object _result
    cdef public object _exception
    cdef public object _waiting
    cdef public list _interrupts
    cdef public list _joiners
    cdef public bint _retrieved
    cdef public double _born
    cdef public object _lock
    cdef public object _context
    cdef object __weakref__

    cdef void _join(self, list joiners, object joiner)
    # A C call from what wakes a parked task (the multishot's completion, the primitives
    # that cimport this), and push a C call from it: by name, each was a method lookup on
    # the callee's type (a thread-state read on 3.12+ too), ~300 instructions apiece
    @cython.locals(engine=Engine)
    cpdef wake(self, value=*)

@cython.locals(task=Task)
cpdef int wake_waiter(object waiter, object value=*) except -1

# Last: engine.pxd cimports this file too, and what it cimports (resume.pxd) reads a Task's
# fields, so Task must be complete first. At run time each module makes its own types before
# it imports the other's.
from .engine cimport Engine
