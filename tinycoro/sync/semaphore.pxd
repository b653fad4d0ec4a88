# Augments semaphore.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes
# semaphore.py with this file beside it). The .py is the source: this declares the Semaphore's
# layout.

from ._lot cimport Acquirable, Acquisition, acquisition, spend

cdef class Semaphore(Acquirable):
    cdef public object _mu
    cdef public object _value  # any int check_int takes, so a Python int
    cdef public object _lot

    cdef object _acquire(self)
    cdef object _take_or_park(self)
