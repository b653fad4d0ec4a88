# What compiled modules use of _refs.py: its two names as C macros (the module doc says why).
# A module cimports it under the name its .py imports it by (``from . cimport _refs`` beside
# ``from . import _refs``): compiled, ``_refs.unshared(o)`` is a reference-count test;
# interpreted, the .py's, which always says no. Not a compiled module itself: there is nothing
# here to compile.

cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    #define TC_REFS_REUSE 0
    #define TC_REFS_UNSHARED(o) 0
    #else
    #define TC_REFS_REUSE 1
    #define TC_REFS_UNSHARED(o) (Py_REFCNT(o) == 2)
    #endif
    """
    const bint REUSE "TC_REFS_REUSE"
    bint unshared "TC_REFS_UNSHARED" (object o) noexcept
