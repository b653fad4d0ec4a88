# Augments engine.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes engine.py with
# this file beside it). The .py is the source: this declares the Engine's layout and makes its
# per-operation methods (_step, _start, _deliver, _park, _finish) C calls from its run loop,
# and inline_ok a C call from the I/O layer's compiled ops that complete at once (rule 16).
# Attributes are public: the scheduler, statistics and the notebook layer read them.

cimport cython

from . cimport deques, fence, resume, wakeword
from .._clocal cimport running_task, set_running_task
from .deadlines cimport Deadlines
from .ring cimport RingOwner
from .task cimport Task
from .traps cimport Op, Park


cdef class Engine(RingOwner):
    cdef public object id
    cdef public object scheduler
    cdef public bint guest
    cdef public object ready
    cdef public object calls
    cdef public list deferred
    cdef public dict parked
    cdef public set live
    cdef public bint abandoning
    cdef public bint sleeping
    cdef public bint stop_requested
    cdef public object stop_flag
    cdef public object _wake_lock
    cdef public object _fence
    cdef public Py_ssize_t tasks_run
    cdef public Py_ssize_t failed
    cdef public object failures
    cdef public Py_ssize_t steps
    cdef public Py_ssize_t inline_left
    cdef public Py_ssize_t wakeups
    cdef public Py_ssize_t timers
    cdef public double sleep_total
    cdef public double sleep_since
    cdef public tuple _samples
    cdef public object _samples_lock
    cdef public Deadlines deadlines
    cdef public bytearray wake_word
    cdef public Py_ssize_t handovers
    cdef public Py_ssize_t waited_steps
    cdef public list watchers
    cdef public object thread_ident
    cdef public tuple _peers
    cdef public tuple _hand_to

    # run's turn counts in C integers: as objects, `self.steps += n` boxed the step count
    # and `range(n)` made a range and its iterator every turn (~450 instructions per turn)
    @cython.locals(n=Py_ssize_t, _=Py_ssize_t, hand_to=tuple)
    cpdef run(self, until=*)
    # `except -1`: checked by the value; undeclared, every caller read the thread state
    # (PyErr_Occurred(), a call into libpython's thread-local storage on 3.12 and later)
    cpdef bint inline_ok(self) except -1
    cpdef _submit(self)
    cdef _submit_eager(self)
    # a C call from a task's wake (task.pxd types its engine): by name it was a method lookup
    # on the engine's type and instance dict per completion that wakes a task
    cpdef push(self, task)
    cdef _run_calls(self)
    cdef bint _peer_awake(self)
    cdef _end_sleep(self, double t0)  # a C call at each wake
    # word: a C char, read from the bytearray without a Python int per peer per turn
    @cython.locals(e=Engine, word=char)
    cdef _hand_over(self, tuple peers, Py_ssize_t steps)
    cpdef _step(self, Task task)
    # slot: the user_data's C value, the index where the op goes (no Python int made)
    @cython.locals(slot=Py_ssize_t)
    cdef _start(self, Task task, Op op)
    cdef _park(self, Task task, Park ticket)
    # C integers: op, res pairs read by index (ring.py's _complete_multi says why)
    @cython.locals(op=Op, task=Task, i=Py_ssize_t, n=Py_ssize_t)
    cpdef _deliver(self, list done)

# The budget check of a caller that holds the running task (tinycoro.sync's acquisitions).
@cython.locals(engine=Engine)
cpdef bint spend_inline(Task task) except -1
