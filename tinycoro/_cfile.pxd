# The page-cache read and the finished read's awaitable, as C calls for the compiled read path:
# io/file.pxd cimports them under the names io/file.py imports from io/pagecache (which
# chooses these or their Python twins at run time), so compiled, read_at calls them directly
# instead of through a Python call with its arguments parsed (~300 instructions per read).

cdef class Done:
    cdef readonly object value

cpdef object pread_nowait(int fd, Py_ssize_t size, long long offset)
cpdef Py_ssize_t pread_nowait_into(int fd, object buf, Py_ssize_t start, long long offset) except? -2
cpdef object done(object value)

# noexcept: neither can raise, and undeclared, every caller read the thread state after each
# call (PyErr_Occurred(): a call into libpython's thread-local storage on 3.12 and later)
cpdef bint offset_ok(object x) noexcept
