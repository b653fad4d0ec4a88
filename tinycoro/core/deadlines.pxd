# Augments deadlines.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes
# deadlines.py with this file beside it). The .py is the source: this declares the heap's
# layout, so the engine, which cimports it, tests and fires it every turn as C calls, and
# tc.sleep parks on it with one C call.

cdef class Sleep:
    cdef public object seconds
    cdef public object when
    cdef public object task
    cdef public object entry
    cdef public object deadlines

cdef class Deadlines:
    cdef public list heap
    cdef public Py_ssize_t dead
    cdef object _seq
    cdef public object ready

    cpdef object sleep(self, object task, object seconds, object when)
    cpdef object fire(self)
