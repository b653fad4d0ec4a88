# Augments event.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes event.py
# with this file beside it). The .py is the source: this declares the Event's layout. It stays
# subclassable: a TaskGroup's exit waits on a Python subclass of it.

from ._lot cimport spend

cdef class Event:
    cdef public object _mu
    cdef public bint _set
    cdef public object _value
    cdef public object _lot
