# cython: language_level=3, boundscheck=False, wraparound=False
"""Page-cache reads in one call: ``preadv2(RWF_NOWAIT)`` straight into a new ``bytes``; a whole
cached file (open, size, read, close) in one call; a new ``bytes`` to be filled in place; the
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
from cpython.buffer cimport (
    PyObject_GetBuffer, PyBuffer_FillInfo, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.ref cimport PyObject, Py_INCREF

from .core cimport iterslots
from libc.errno cimport EAGAIN, E2BIG, EINVAL, ENOSYS, EPERM, errno
from posix.fcntl cimport F_SETFL, O_CLOEXEC, O_NONBLOCK, O_RDONLY, fcntl
from posix.stat cimport S_ISREG, fstat, struct_stat
from posix.unistd cimport close
from libc.stdlib cimport getenv
from libc.string cimport strcmp, strlen

import os as _os

cdef extern from "sys/uio.h" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len

cdef extern from *:
    """
    #include <sys/syscall.h>
    #include <sys/uio.h>
    #include <unistd.h>
    /* preadv2(2) as the system call itself: glibc's wrapper is a thread-cancellation point,
       and switches asynchronous cancellation on and off around the call (~30 of the ~70
       instructions it spent per cached read); CPython never cancels a thread. The offset
       goes as the kernel's low and high words (the high one is ignored on 64-bit), as the
       wrapper passes it. -1 and errno on failure, as the wrapper. */
    static inline ssize_t tc_preadv2(int fd, const struct iovec *iov, int iovcnt,
                                     long long offset, int flags) {
        return (ssize_t)syscall(SYS_preadv2, fd, iov, iovcnt, (unsigned long)offset,
                                (unsigned long)((unsigned long long)offset >> 32), flags);
    }
    """
    ssize_t preadv2 "tc_preadv2" (int fd, const iovec *iov, int iovcnt, long long offset,
                                  int flags) nogil

cdef extern from "linux/openat2.h":
    struct open_how:
        unsigned long long flags
        unsigned long long mode
        unsigned long long resolve
    unsigned long long RESOLVE_CACHED

cdef extern from "<sys/syscall.h>":
    long SYS_openat2

cdef extern from "<unistd.h>" nogil:
    long syscall(long number, ...)

cdef extern from "<fcntl.h>":
    int AT_FDCWD

cdef extern from "Python.h":
    bytes PyUnicode_EncodeFSDefault(object unicode)
    object PyOS_FSPath(object path)

cdef extern from "linux/fs.h":
    int RWF_NOWAIT

# Up to this size the read is done holding the GIL: a page-cache copy of 64 KiB takes a few
# microseconds and never waits (RWF_NOWAIT), while releasing and taking back the GIL around it
# hands the GIL to any other context that wants it, and getting it back then waits for that
# context's next release. Larger copies release it, as os.pread does.
DEF HOLD_GIL_MAX = 65536


cdef extern from *:
    """
    /* The bytes object a cached read filled last, kept to be filled again once everyone else
       has let go of it (see _fresh_bytes). With the GIL only: a free-threaded build would race
       on the one slot, and allocates each time. */
    #ifdef Py_GIL_DISABLED
    #define TC_REUSE_BYTES 0
    #else
    #define TC_REUSE_BYTES 1
    #endif
    static inline void tc_bytes_forget_hash(PyObject *o) {
    #if defined(__GNUC__)
    #pragma GCC diagnostic push
    #pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    #endif
        ((PyBytesObject *)o)->ob_shash = -1;
    #if defined(__GNUC__)
    #pragma GCC diagnostic pop
    #endif
    }
    """
    bint TC_REUSE_BYTES
    void tc_bytes_forget_hash(object o)
    Py_ssize_t Py_SIZE(object o)


# Up to this size a read's bytes object is kept for reuse: a 4 KiB bytes is past pymalloc's
# small objects, and its malloc and free cost ~530 instructions per cached read, a third of
# what the read costs besides the kernel's copy. At most HOLD_GIL_MAX: the refill runs holding
# the GIL from the check on, so no other thread can take a reference meanwhile.
DEF REUSE_MAX = 16384

cdef object _spare = None  # the bytes the last cached read of at most REUSE_MAX returned
# The Done the last cached read returned, kept to be handed out again (see done): a new one
# per read was its allocation, initialisation and teardown, ~130 instructions of a cached
# read's ~1,300 (3.11).
cdef object _spare_done = None


cdef inline Py_ssize_t _done_holds(object value) noexcept:
    """1 when the spare Done holds *value* from the read it ended last and only this module
    holds that Done: a reference dead to everyone (the Done is handed out again only with a
    new value), which _fresh_bytes counts as its own. Letting go of it instead (setting the
    value to None) cost a reference swap per cached read, and done() another to set it."""
    cdef PyObject *d = <PyObject *>_spare_done  # (borrowed: a local object would count too)
    if d != <PyObject *>None and Py_REFCNT(d) == 1 and (<Done>d).value is value:
        return 1
    return 0


cdef inline bytes _fresh_bytes(Py_ssize_t size):
    """A bytes object of *size* that nobody else holds, its content undefined, for a read to
    fill: the spare one when its last holder (the caller of the read that returned it) has let
    it go, as a read loop that drops each result does, else a new one (kept as the spare).

    Refilling it is safe as an allocator's reuse is: its reference count says that only this
    slot holds it (the caller's own reference here makes two), besides the dead references of
    the spare Done and the spare StopIteration (3.12+) that ended the last read's await, which
    only this process's compiled modules hold; so no code can see it change. Its cached hash
    is reset, as a new object's is. A 4 KiB read otherwise allocates and frees
    4 KiB through malloc on every call."""
    global _spare
    cdef object spare = _spare
    if TC_REUSE_BYTES and spare is not None and Py_SIZE(spare) == size:
        # (iterslots.holds: 3.12+, the spare StopIteration's value and its argument)
        if Py_REFCNT(<PyObject *>spare) == 2 + iterslots.holds(spare) + _done_holds(spare):
            tc_bytes_forget_hash(spare)
            return <bytes>spare
    cdef bytes data = PyBytes_FromStringAndSize(NULL, size)
    if TC_REUSE_BYTES and 0 < size <= REUSE_MAX:
        _spare = data
    return data


cpdef object pread_nowait(int fd, Py_ssize_t size, long long offset):
    """Up to *size* bytes at *offset* from the page cache, never waiting for the disk.

    Returns the bytes (short at EOF, or when a later page is not cached: a short result is not
    EOF, only ``b""`` is), None when the first page is not cached (EAGAIN), or the errno (an
    int) of any other failure (EOPNOTSUPP: the file system has no RWF_NOWAIT). A number, not
    an exception: the caller's ``try`` saved and restored the thread's handled exception on
    every read, a call into libpython's thread-local storage on 3.12 and later, for a
    failure that the ring then reports anyway.
    """
    cdef bytes data = _fresh_bytes(size)
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
        return err
    if n == size:
        return data
    return data[:n]


cpdef Py_ssize_t pread_nowait_into(int fd, object buf, Py_ssize_t start, long long offset) except? -2:
    """Read from the page cache into *buf* (a writable, contiguous buffer) from its byte *start*
    on, at file *offset*, never waiting for the disk: the byte count (short at EOF or before a
    page that is not cached; 0 at EOF), or minus the errno of a failure (``-EAGAIN``: the first
    page is not cached). What ``os.preadv(fd, (view[start:],), offset, RWF_NOWAIT)`` does,
    without the iovec sequence, the slice and an exception per failure: a number, as
    :func:`pread_nowait` returns one, for the same reason."""
    cdef Py_buffer view
    cdef iovec iov
    cdef ssize_t n
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        if start < 0 or start > view.len:
            raise ValueError(f"start {start} is outside the buffer of {view.len} bytes")
        iov.iov_base = <char *>view.buf + start
        iov.iov_len = <size_t>(view.len - start)
        if iov.iov_len <= HOLD_GIL_MAX:
            n = preadv2(fd, &iov, 1, offset, RWF_NOWAIT)
        else:
            with nogil:  # the buffer stays exported meanwhile: nobody can resize or free it
                n = preadv2(fd, &iov, 1, offset, RWF_NOWAIT)
        if n < 0:
            return -errno
        return n
    finally:
        PyBuffer_Release(&view)


# -- a whole file, in one call --------------------------------------------------------------

cdef bint _openat2_works = True  # False once the kernel has no openat2 or no RESOLVE_CACHED


def read_cached_file(path, Py_ssize_t limit):
    """The whole of the file at *path* (str, bytes or os.PathLike) when the kernel can give it without waiting: its name
    in the dentry cache, a regular file of at most *limit* bytes, every page in the page cache.

    Returns the bytes (the descriptor closed again); or an open descriptor (an int, blocking,
    close-on-exec) when the name was cached but the rest is not for here: not a regular file,
    a size of 0 (/proc) or above *limit*, a page not cached, a file that grew meanwhile; or
    None when the name is not cached (the ring opens it), when *path* is of another type or
    holds a NUL (the caller's checks say what is wrong), or when ``TINYCORO_FILE_READS=ring``
    asks for the ring (read here by getenv: ``os.environ`` costs ~1.5 us a look). OSError, with the errno and the
    path, when the open fails: the answer the ring's open would give.

    It is the attempt io_uring makes first for an openat, done here without the SQE, the CQE
    and the suspension: ``openat2`` with RESOLVE_CACHED fails with EAGAIN rather than wait for
    a lookup, and O_NONBLOCK keeps the open of a FIFO or a device from waiting (it is cleared
    again before a descriptor is handed on, as io_uring clears it). Then fstat, one
    ``preadv2(RWF_NOWAIT)`` of the size and one byte more, into the bytes object returned
    (the byte more finds growth; a read of exactly the size stopped at the file's end, or at
    a page appended since the fstat and not cached yet: then the file as the fstat saw it),
    and close(2): io_uring's close runs inline too, for a file whose close has no flush to
    wait for, as a local file system's read-only descriptor has. Four system calls to the
    builtin ``open().read()``'s six or more.
    """
    global _openat2_works
    if not _openat2_works:
        return None
    cdef const char *mode = getenv(b"TINYCORO_FILE_READS")
    if mode != NULL and strcmp(mode, b"ring") == 0:
        return None
    cdef bytes raw
    if type(path) is not str and type(path) is not bytes:
        try:
            path = PyOS_FSPath(path)  # a pathlib.Path, say
        except TypeError:
            return None
    if type(path) is str:
        raw = PyUnicode_EncodeFSDefault(path)
    elif type(path) is bytes:
        raw = <bytes>path
    else:
        return None
    cdef const char *cpath = raw
    if strlen(cpath) != <size_t>len(raw):
        return None
    cdef open_how how
    how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK
    how.mode = 0
    how.resolve = RESOLVE_CACHED
    cdef int fd = <int>syscall(SYS_openat2, AT_FDCWD, cpath, &how, sizeof(how))
    cdef int err
    if fd < 0:
        err = errno
        if err == EAGAIN or err == EPERM:  # (EPERM: maybe a seccomp filter; the ring will say)
            return None
        if err == ENOSYS or err == E2BIG or err == EINVAL:  # no openat2, or no RESOLVE_CACHED
            _openat2_works = False
            return None
        raise OSError(err, _os.strerror(err), path if type(path) is str else _os.fsdecode(raw))
    cdef struct_stat st
    cdef bytes data
    cdef iovec iov[2]
    cdef char extra
    cdef ssize_t n = -1
    cdef Py_ssize_t size
    if fstat(fd, &st) == 0 and S_ISREG(st.st_mode) and 0 < st.st_size <= limit:
        size = <Py_ssize_t>st.st_size
        data = PyBytes_FromStringAndSize(NULL, size)
        iov[0].iov_base = PyBytes_AS_STRING(data)
        iov[0].iov_len = <size_t>size
        iov[1].iov_base = &extra
        iov[1].iov_len = 1
        if size <= HOLD_GIL_MAX:
            n = preadv2(fd, iov, 2, 0, RWF_NOWAIT)
        else:
            with nogil:
                n = preadv2(fd, iov, 2, 0, RWF_NOWAIT)
        if n == size:
            close(fd)
            return data
    # The rest is the ring's: a blocking descriptor, as io_uring's own open leaves it.
    fcntl(fd, F_SETFL, O_RDONLY)
    return fd


@cython.final
cdef class _Filling:
    """Exports a new bytes object's storage as a writable buffer, for the reads that fill it
    before anyone else sees it; a view of it keeps the bytes alive (rule 8)."""

    cdef bytes data

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, PyBytes_AS_STRING(self.data), len(self.data), 0, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass


cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject **bytes, Py_ssize_t newsize) except -1
    Py_ssize_t Py_REFCNT(PyObject *o)
    void Py_DECREF(PyObject *o)


@cython.final
cdef class Receiving:
    """A new bytes object of some size (its content undefined) that one receive fills in
    place, exported as a writable buffer with no view left behind: a ring op takes its address
    and lets go of the export at once. :meth:`take` then hands out the bytes, shrunk in place to
    what arrived, as ``socket.recv`` shrinks its own: the kernel's copy is the only one.

    The op that receives into it keeps it (so the storage) until its completion; only then is
    it taken, and a taken one exports nothing more (rule 8: no buffer the kernel may write into
    outlives its op, none is shown to anyone while the kernel may write into it)."""

    cdef object data  # the bytes, None once taken
    cdef Py_ssize_t exports  # buffers exported and not released: take() refuses while any is

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.data is None:
            raise BufferError("this receive buffer has been taken")
        PyBuffer_FillInfo(view, self, PyBytes_AS_STRING(self.data), len(self.data), 0, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def __len__(self):
        return 0 if self.data is None else len(self.data)

    def take(self, Py_ssize_t size):
        """The bytes, its first *size* (at most its length) only; the buffer is empty after."""
        cdef PyObject* p
        if self.data is None:
            raise BufferError("this receive buffer has been taken")
        if self.exports:
            raise BufferError("the receive buffer is still exported")
        if not 0 <= size <= len(self.data):
            raise ValueError(f"size {size} is out of range for {len(self.data)} bytes")
        data = self.data
        self.data = None
        if size == len(data):
            return data
        p = <PyObject*>data
        if Py_REFCNT(p) != 1:  # someone else holds it too (never, in tinycoro): copy
            return PyBytes_FromStringAndSize(PyBytes_AS_STRING(data), size)
        Py_INCREF(data)  # the reference the resize consumes (freed with the old object on error)
        del data  # now p holds the only reference
        _PyBytes_Resize(&p, size)  # in place (realloc), or a new object: p says which
        result = <object>p
        Py_DECREF(p)
        return result


def receiving(Py_ssize_t size):
    """A :class:`Receiving` of *size* bytes (at least 1)."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    cdef Receiving r = Receiving.__new__(Receiving)
    r.data = PyBytes_FromStringAndSize(NULL, size)
    return r


def filling(Py_ssize_t size):
    """A new ``bytes`` of *size* (its content undefined) and a writable memoryview of it, which
    the reads of a whole file fill at offsets, as the builtin read fills its one buffer: the
    bytes is the result, with no copy. It must not be shown to anyone until it is filled and
    no read into the view is in flight: bytes are immutable to everyone else."""
    cdef _Filling f = _Filling.__new__(_Filling)
    f.data = PyBytes_FromStringAndSize(NULL, size)
    return f.data, memoryview(f)


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

@cython.freelist(16)
@cython.no_gc  # holds a read's bytes only: no cycle through it, so no GC tracking per read
cdef class Done:
    """An awaitable whose result is there already: a page-cache read that ``read_at`` did at
    its call. Awaiting it never suspends and costs no generator: its C slots (set below)
    hand the value back as a return where the interpreter asks ``am_send`` (3.10, 3.11), and
    set StopIteration directly where it asks ``tp_iternext`` (3.12+). The twin of
    ``tinycoro.core.traps.Ready``, which the pure runtime uses instead (its ``__await__`` is a generator, ~600 instructions per await
    more, with the coroutine a compiled ``async def`` would cost). Like it, it is also a
    coroutine (``send``/``throw``/``close``), so that ``tc.spawn`` and
    ``asyncio.create_task`` take it."""

    # value: its one field, declared in _cfile.pxd

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


cpdef object done(object value):
    """The finished awaitable of *value* (a :class:`Done`): a C call from the compiled read
    path (``_cfile.pxd``), with no argument parsing and no ``__cinit__``.

    The one the last call returned is handed out again when nobody else holds it (its await
    is over and the awaiting frame let go of it, as ``await f.read_at(...)`` does): only this
    module's slot holds it then, so no code can see its value change, as with the reused
    bytes of _fresh_bytes. Otherwise (kept by the caller, or no GIL) a new one. The spare
    keeps its value until the next call, so only a value that is nothing bigger or livelier
    goes there (None, an exact int, bytes of at most REUSE_MAX: a read's count or a small
    read's bytes, which _fresh_bytes holds anyway): no large read held, no ``__del__`` run
    at a replacement, and any other value's last reference is its awaiter's."""
    global _spare_done
    cdef PyObject *p = <PyObject *>_spare_done
    cdef Done d
    cdef bint small = (value is None or type(value) is int
                       or (type(value) is bytes and Py_SIZE(value) <= REUSE_MAX))
    if TC_REUSE_BYTES and small and _spare_done is not None and Py_REFCNT(p) == 1:
        d = <Done>_spare_done
        d.value = value
        return d
    d = Done.__new__(Done)
    d.value = value
    if TC_REUSE_BYTES and small:
        _spare_done = d
    return d


cdef object _done_step(object d, object value):
    return d  # over at its first step


cdef object _done_result(object d):
    return (<Done>d).value


# Its C slots (core/iterslots): am_send hands the value back as a return (the interpreter's
# await on 3.10 and 3.11, a compiled coroutine's on all); on 3.12+, whose await resumes a
# non-generator through tp_iternext or ``send``, a None value ends with no exception and any
# other sets StopIteration directly, where the compiled ``__next__``'s raise added a traceback
# entry to every cached read.
iterslots.install(Done, _done_step, _done_result, _done_step)
