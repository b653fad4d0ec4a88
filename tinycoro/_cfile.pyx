# cython: language_level=3, boundscheck=False, wraparound=False
"""Page-cache reads in one call: ``preadv2(RWF_NOWAIT)`` straight into a new ``bytes``; the
address of a buffer, which O_DIRECT reads check for alignment; and :class:`Done`, the
awaitable of a read that finished at its call.

The Python spelling, ``os.preadv(fd, (bytearray(size),), offset, os.RWF_NOWAIT)`` and then
``bytes(buf)``, zero-fills a buffer, parses an iovec sequence and copies the result once more:
about 1 us on a 4 KiB read that the kernel copies in ~1 us. Here the kernel copies into the
bytes object that is returned, as ``os.pread`` does (a new bytes object may be filled in place
until anyone else sees it). :mod:`tinycoro.io` uses the Python spelling when this module is
not built, or when ``TINYCORO_PURE`` asks for the pure-Python paths (``tinycoro.compiled``).
"""

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.ref cimport PyObject, Py_INCREF
from libc.errno cimport EAGAIN, errno

import os as _os

cdef extern from "sys/uio.h" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t preadv2(int fd, const iovec *iov, int iovcnt, long long offset, int flags)

cdef extern from "linux/fs.h":
    int RWF_NOWAIT

# Up to this size the read is done holding the GIL: a page-cache copy of 64 KiB takes a few
# microseconds and never waits (RWF_NOWAIT), while releasing and taking back the GIL around it
# hands the GIL to any other context that wants it, and getting it back then waits for that
# context's next release. Larger copies release it, as os.pread does.
DEF HOLD_GIL_MAX = 65536


def pread_nowait(int fd, Py_ssize_t size, long long offset):
    """Up to *size* bytes at *offset* from the page cache, never waiting for the disk.

    Returns the bytes (short at EOF, or when a later page is not cached: a short result is not
    EOF, only ``b""`` is), or None when the first page is not cached (EAGAIN); raises OSError
    with the errno for anything else (EOPNOTSUPP: the file system has no RWF_NOWAIT).
    """
    cdef bytes data = PyBytes_FromStringAndSize(NULL, size)
    cdef iovec iov
    cdef ssize_t n
    cdef int err
    iov.iov_base = PyBytes_AS_STRING(data)
    iov.iov_len = <size_t>size
    if size <= HOLD_GIL_MAX:
        n = preadv2(fd, &iov, 1, offset, RWF_NOWAIT)
    else:
        with nogil:
            n = preadv2(fd, &iov, 1, offset, RWF_NOWAIT)
    if n < 0:
        err = errno
        if err == EAGAIN:
            return None
        raise OSError(err, _os.strerror(err))
    if n == size:
        return data
    return data[:n]


def buffer_address(obj):
    """The address of the first byte of *obj*'s buffer (read-only buffers included).

    ``tinycoro.io`` checks it on every O_DIRECT ``readinto_at``; through ctypes that check
    cost ~3.5 us per read here, a sixth of the context's time per O_DIRECT read.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    cdef size_t addr = <size_t>view.buf
    PyBuffer_Release(&view)
    return addr


# -- a finished read, as an awaitable ------------------------------------------------------

cdef extern from "Python.h":
    ctypedef struct PyAsyncMethods:
        void *am_send
    ctypedef struct PyTypeObject:
        PyAsyncMethods *tp_as_async
    int PYGEN_RETURN


@cython.freelist(16)
cdef class Done:
    """An awaitable whose result is there already: a page-cache read that ``read_at`` did at
    its call. Awaiting it never suspends and costs no generator: the interpreter's ``await``
    asks the type's ``am_send`` slot (set below), which hands the value back as a return,
    with no StopIteration raised. The twin of ``tinycoro.core.traps.Ready``, which the pure
    runtime uses instead (its ``__await__`` is a generator, ~600 instructions per await
    more, with the coroutine a compiled ``async def`` would cost). Like it, it is also a
    coroutine (``send``/``throw``/``close``), so that ``tc.spawn`` and
    ``asyncio.create_task`` take it."""

    cdef readonly object value

    def __cinit__(self, value):
        self.value = value

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        raise StopIteration(self.value)

    def send(self, value):
        raise StopIteration(self.value)

    def throw(self, typ, val=None, tb=None):
        if val is None and tb is None:
            raise typ
        raise val.with_traceback(tb) if val is not None else typ

    def close(self):
        pass


cdef int _done_send(PyObject *self, PyObject *arg, PyObject **result) noexcept:
    # PyIter_Send's slot: the value is the await's result (PYGEN_RETURN, a new reference).
    cdef PyObject *value = <PyObject *>(<Done>self).value
    Py_INCREF(<object>value)
    result[0] = value
    return PYGEN_RETURN


(<PyTypeObject *>Done).tp_as_async.am_send = <void *>_done_send
