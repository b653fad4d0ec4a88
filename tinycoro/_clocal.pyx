# cython: language_level=3
"""``tinycoro.core.local._local`` compiled: "which engine and which task run on this thread".

The runtime asks this on every trap and every Mutex lock and unlock, and the engine answers it
on every step. A ``threading.local`` attribute costs ~620 instructions per read or write (the
thread-state dict, the object's key, a compare with ``"__dict__"``, then its own dict); here
each attribute is a C thread-local pointer behind a getset descriptor, ~170 instructions
(callgrind, CPython 3.11).

Same behaviour as the pure-Python ``threading.local`` it replaces: each thread sees its own
values, ``None`` until it sets one. The pointers own a reference.
A thread that ends with a value set keeps that object alive (C thread-locals have no
destructor), so the engine clears both before its thread returns, as it always has.
"""

from cpython.object cimport PyObject
from cpython.ref cimport Py_XINCREF, Py_XDECREF

cdef extern from *:
    """
    /* Reached through TLS descriptors (setup.py builds this module with -mtls-dialect=gnu2
       on x86-64; aarch64's default). Per ping-pong round trip (~16 accesses, callgrind):
       the general-dynamic default, a __tls_get_addr call per access, 16,834 instructions;
       descriptors 16,709; initial-exec, a plain read, 16,501. initial-exec is not used: it
       takes room from the static TLS surplus glibc keeps for modules loaded later, and a
       process whose other libraries used it up could then not import tinycoro at all
       ("cannot allocate memory in static TLS block"); descriptors fall back to dynamic TLS. */
    static __thread PyObject *tinycoro_local_engine = NULL;
    static __thread PyObject *tinycoro_local_task = NULL;
    """
    PyObject *tinycoro_local_engine
    PyObject *tinycoro_local_task


cdef inline object _get(PyObject *p):
    return None if p == NULL else <object>p


cdef inline void _store(PyObject **slot, object value) noexcept:
    """Own a reference to *value* (NULL for None) in *slot*, then drop the old one: last, so
    a finalizer that this runs already sees the new value. noexcept: nothing here raises (a
    finalizer's error is reported by CPython, not raised), and a void function without it
    made each caller read the thread state (PyErr_Occurred()) after the call."""
    cdef PyObject *old = slot[0]
    cdef PyObject *new = NULL
    if value is not None:
        new = <PyObject *>value
        Py_XINCREF(new)
    slot[0] = new
    Py_XDECREF(old)


cdef class Local:
    """Per-thread ``engine`` and ``task`` (see the module doc); one instance is enough."""

    @property
    def engine(self):
        return _get(tinycoro_local_engine)

    @engine.setter
    def engine(self, value):
        _store(&tinycoro_local_engine, value)

    @property
    def task(self):
        return _get(tinycoro_local_task)

    @task.setter
    def task(self, value):
        _store(&tinycoro_local_task, value)


cpdef object running_task():
    """This thread's ``task``, as a C call for the compiled hot paths that cimport it
    (``_clocal.pxd``): ~20 instructions against ~150 for the attribute read through the
    descriptor. ``tinycoro.core.local.running_task`` is its name for the source; it is this
    function, or the same read of the ``threading.local`` where this module is not used."""
    return _get(tinycoro_local_task)


cpdef object running_engine():
    """This thread's ``engine``, as a C call for the compiled hot paths that cimport it
    (``_clocal.pxd``): the read of ``_local.engine`` through its descriptor (a type lookup, a
    getset call: ~180 instructions on 3.13, twice per echo round trip in net's ops) without
    the lookup. ``tinycoro.core.local.running_engine`` is its name for the source."""
    return _get(tinycoro_local_engine)


cpdef set_running_task(object task):
    """Set this thread's ``task``: the engine's write at every step, as a C call for the
    compiled engine that cimports it (``_clocal.pxd``): ~20 instructions against ~165 for the
    attribute store through the descriptor. ``tinycoro.core.local.set_running_task`` is its
    name for the source; it is this function, or the same store into the ``threading.local``
    where this module is not used."""
    _store(&tinycoro_local_task, task)
