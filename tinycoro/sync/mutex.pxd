# Augments mutex.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes mutex.py
# with this file beside it). The .py is the source: this declares the Mutex's layout, so that its
# uncontended lock and unlock read and write the token, the flag and the owner as C fields. The
# token's take and give are C statements on its own fields (core/tokens.pxd: atomic under the
# GIL, or under the token's own lock without it), which the module doc relies on.
# Attributes are public: Condition reads the owner, statistics and snapshots the rest.

from .._clocal cimport running_task
from ..core cimport fence
from ..core.engine cimport spend_inline
from ..core cimport tokens
from ._lot cimport Acquirable, Acquisition, acquisition

cdef class _Foreign:
    pass

cdef class Mutex(Acquirable):
    cdef public object _mu
    cdef public list _free
    cdef public bint _contended
    cdef public object _owner
    cdef public object _lot

    cdef object _acquire(self)
    cdef bint _take_free(self, object me) except -1
    cdef bint _grab(self) except -1
