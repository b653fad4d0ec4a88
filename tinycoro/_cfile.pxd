# The page-cache read and the finished read's awaitable, as C calls for the compiled read path:
# io/file.pxd cimports them under the names io/file.py imports from io/pagecache (which
# chooses these or their Python twins at run time), so compiled, read_at calls them directly
# instead of through a Python call with its arguments parsed (~300 instructions per read).

cdef class Done:
    cdef readonly object value

cpdef object pread_nowait(int fd, Py_ssize_t size, long long offset)
cpdef Py_ssize_t pread_nowait_into(int fd, object buf, Py_ssize_t start, long long offset) except? -2
cpdef object done(object value)

from cpython.long cimport PyLong_AsLongLongAndOverflow

cdef extern from *:
    """
    /* Whether an exact int has at most one digit (|x| < 2**30), and then whether it is not
       negative, read off its header: what PyLong_AsLongLongAndOverflow finds out with a
       call and a loop over the digits (~20 instructions of each of read_at's two checks). */
    #if PY_VERSION_HEX >= 0x030C0000
    #define tc_small_int(x) PyUnstable_Long_IsCompact((PyLongObject *)(x))
    #define tc_small_nonneg(x) (PyUnstable_Long_CompactValue((PyLongObject *)(x)) >= 0)
    #else
    #define tc_small_int(x) (Py_SIZE(x) >= -1 && Py_SIZE(x) <= 1)
    #define tc_small_nonneg(x) (Py_SIZE(x) >= 0)
    #endif
    """
    bint tc_small_int(object x)
    bint tc_small_nonneg(object x)


# noexcept: it cannot raise, and undeclared, every caller read the thread state after each
# call (PyErr_Occurred(): a call into libpython's thread-local storage on 3.12 and later)
cpdef inline bint offset_ok(object x) noexcept:
    """Whether *x* is an exact int in 0..MAX_OFFSET (2**63 - 1): read_at's fast-path check of
    its size and offset, as C reads of the int. Python's four chained comparisons were ~100
    instructions per read on 3.12 (~60 on 3.11); defined here, a module that cimports it
    compiles it into each call (through _cfile's function pointer, read_at's two calls cost
    ~45 instructions per read on 3.11 and ~55 on 3.12, most of it the calls)."""
    cdef int over = 0
    if type(x) is not int:
        return False
    if tc_small_int(x):  # one digit: the sign is the answer (a read's size, most offsets)
        return tc_small_nonneg(x)
    return PyLong_AsLongLongAndOverflow(x, &over) >= 0 and not over
