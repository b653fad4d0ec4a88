# Augments deadlines.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes
# deadlines.py with this file beside it). The .py is the source: this declares the heap's
# layout, so the engine, which cimports it, tests and fires it every turn as C calls.

cdef class Deadlines:
    cdef public list heap
    cdef public Py_ssize_t dead
    cdef object _seq

    cpdef object fire(self)
