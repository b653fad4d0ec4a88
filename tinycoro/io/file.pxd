# Augments file.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes file.py with
# this file beside it). The .py is the source: this declares AsyncFile's layout, so that the
# read path (read_at's page-cache read, readinto_at's ring read) reads the file's fields
# directly, and makes the cooperative budget's check a C call into the engine (spend_inline,
# rule 16) and the page-cache read a C call from read_at (a Python method call cost ~300
# instructions).
# Attributes are public: the tests switch a file to ring-only reads through _inline.

from ..buffers cimport as_bytes_view, writable_view
from ..closing cimport PendingOps
# The names file.py imports from .pagecache and ..core.local, which pick these or their Python
# twins: compiled, the cimport wins, and the running task's read, the page-cache read and its
# finished awaitable are C calls.
from .._cfile cimport done, offset_ok, pread_nowait, pread_nowait_into
from .._clocal cimport running_task
from .direct cimport check_direct
from . cimport directview
from .ops cimport ring_read
from ..core.engine cimport spend_inline
from ..core cimport iterslots

cimport cython

cpdef bint _whole(bytes data, Py_ssize_t size)

cdef class AsyncFile:
    cdef public int _fd
    cdef public object name
    cdef public object mode
    cdef public bint direct
    cdef public bint _readable
    cdef public bint _writable
    cdef public bint _append
    cdef public object _pos
    cdef public PendingOps _ops
    cdef public bint _inline
    cdef public object _lbuf
    cdef public object _lstart
    cdef object __weakref__

    # C ints: read_at converts its checked ints once, at the call, and the page-cache read
    # and the whole-result check take them as they are
    cdef _read_cached(self, Py_ssize_t size, long long offset)
    cdef _read_inline(self, Py_ssize_t size, long long offset)

cdef int _NEW, _YIELDED, _DELEGATED, _OVER

cdef class _ReadLater:
    cdef AsyncFile file
    cdef object size
    cdef object offset
    cdef int state
    cdef object sub
    cdef object result

    cdef inline _setup(self, AsyncFile file, object size, object offset)
    @cython.locals(f=AsyncFile)
    cdef object _step(self, object value)
    cdef object _forward(self, object value, object exc)

# The C steps behind _ReadLater's slots (iterslots.install): object in, object out
@cython.locals(r=_ReadLater)
cpdef _ReadLater _read_later(AsyncFile file, object size, object offset)
@cython.locals(r=_ReadLater)
cdef object _later_step(object read, object value)
@cython.locals(r=_ReadLater)
cdef object _later_result(object read)
