# What compiled modules use of fence.py: its two names as C macros (the module doc says why).
# A module cimports it under the name its .py imports it by (``from . cimport fence`` beside
# ``from . import fence``): compiled, ``fence.full()`` is the C fence; interpreted, the .py's.
# Not a compiled module itself: there is nothing here to compile.

cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    #define TC_FREE_THREADED 1
    #define TC_FULL_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
    #else
    #define TC_FREE_THREADED 0
    #define TC_FULL_FENCE() ((void)0)
    #endif
    """
    const bint FREE_THREADED "TC_FREE_THREADED"
    void full "TC_FULL_FENCE" () noexcept nogil
