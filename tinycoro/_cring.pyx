# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot half of :class:`tinycoro.uring.Ring`, compiled: queue operations, submit, reap.

Each method here is one Python call that does its whole job in C. It cimports the ``liburing``
binding's declarations, so it fills SQEs and reads CQEs through the C structs themselves: no
``liburing.name`` lookup, no SQE or CQE wrapper object and no property call per operation.
Nothing is linked against liburing itself: the binding's module does the system calls, and the
inline ``io_uring_prep_*`` / ``io_uring_get_sqe`` helpers come from its bundled header.

The completion contract is the pure ring's (``tinycoro/uring.py``): ``complete`` resolves
user_data to op and hands ``(op, res)`` back, and never looks inside the op.

Only the per-operation paths live here. Creating and closing the ring, the eventfd and the
error messages stay in Python (``tinycoro/uring.py``), shared with the pure-Python ring, which
implements the same methods with the same results (``PyRing``): keep the two in step.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.dict cimport PyDict_GetItem, PyDict_DelItem
from cpython.object cimport PyObject
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport errno, EINTR, EINVAL

import errno as _errno
import os as _os
import liburing as _L

from liburing.lib.uring cimport (
    __io_uring,
    __io_uring_sq,
    __io_uring_sqe,
    __io_uring_get_sqe,
    __io_uring_sqe_set_data64,
    __io_uring_prep_nop,
    __io_uring_prep_recv,
    __io_uring_prep_send,
    __io_uring_prep_read,
    __io_uring_prep_write,
    __io_uring_prep_cancel64,
    __io_uring_prep_timeout,
)
from liburing.queue cimport (
    io_uring,
    io_uring_cqe,
    io_uring_sqe,
    io_uring_sq_ready,
    io_uring_cq_ready,
    io_uring_peek_cqe,
    io_uring_cqe_seen,
    io_uring_cq_eventfd_toggle,
)
from liburing.time cimport timespec
from liburing.lib.io_uring cimport (
    __IORING_SQ_CQ_OVERFLOW,
    __IORING_SQ_TASKRUN,
    __IORING_ENTER_GETEVENTS,
    __IORING_SETUP_SQPOLL,
    __IORING_SETUP_IOPOLL,
)


cdef extern from "<unistd.h>" nogil:
    long syscall(long number, ...)


cdef extern from "<sys/syscall.h>" nogil:
    long SYS_io_uring_enter


cdef extern from "<signal.h>" nogil:
    int _NSIG

# Shared with the pure-Python ring; from their own module, so that importing this one never
# imports tinycoro.uring (which loads this one): no import cycle.
from tinycoro._ringdefs import RingBusy, SKIP_UD

cdef unsigned long long _SKIP_UD = SKIP_UD

# The binding's prep functions that queue() fills in C. Any other prep callable is called as
# prep(sqe, *args) on a wrapper of the same SQE, exactly as the pure ring does.
cdef object _RECV = _L.io_uring_prep_recv
cdef object _SEND = _L.io_uring_prep_send
cdef object _READ = _L.io_uring_prep_read
cdef object _WRITE = _L.io_uring_prep_write
cdef object _NOP = _L.io_uring_prep_nop
cdef object _CANCEL = _L.io_uring_prep_cancel64
cdef object _TIMEOUT = _L.io_uring_prep_timeout


cdef char _EMPTY[1]


cdef int _submit_nogil(__io_uring* ring) noexcept nogil:
    """``io_uring_submit`` for our rings, callable without the GIL: the submitted count, or
    ``-errno``.

    Why not the binding's ``io_uring_submit``, which is declared ``nogil`` too: Cython checks
    for an exception after every call of it (``PyGILState_Ensure`` + ``PyErr_Occurred``), so
    each submit would take the GIL twice on the way back, and on two contexts the second
    take waits for the other thread's switch interval. Here the system call happens without
    the GIL and only its result crosses back.

    Why it is released at all: for a socket operation ``io_uring_enter`` does the work inline
    (a loopback TCP send runs the whole TCP path, the receiver's wake-up included), for an
    O_DIRECT read it builds the bio and kicks the device. Microseconds during which another
    context's thread can run Python instead of waiting for this one.

    This is liburing's ``__io_uring_submit`` (queue.c) for a ring set up with no flags, as
    ``_Lifecycle._setup`` does (no SQPOLL, no IOPOLL, ring fd not registered), and only for
    those: publish the SQ tail, then enter the kernel with the number of SQEs it has not
    consumed yet. A plain store of the tail is enough without SQPOLL: only this thread
    writes it and the kernel reads it inside the system call that follows. GETEVENTS is
    added when the kernel asks for it (overflowed CQ, pending task work), as liburing does.
    """
    cdef __io_uring_sq* sq = &ring.sq
    cdef unsigned int tail = sq.sqe_tail
    cdef unsigned int flags = 0
    cdef unsigned int pending
    cdef long ret
    if ring.flags & (__IORING_SETUP_SQPOLL | __IORING_SETUP_IOPOLL) or ring.int_flags & 1:
        return -EINVAL  # 1: liburing's INT_FLAG_REG_RING; none of these is ever set up here
    if sq.sqe_head != tail:
        sq.sqe_head = tail
        sq.ktail[0] = tail
    pending = tail - (<volatile unsigned int*>sq.khead)[0]
    if (<volatile unsigned int*>sq.kflags)[0] & (__IORING_SQ_CQ_OVERFLOW | __IORING_SQ_TASKRUN):
        flags = __IORING_ENTER_GETEVENTS
    if pending == 0 and flags == 0:
        return 0
    ret = syscall(SYS_io_uring_enter, ring.enter_ring_fd, pending, 0, flags, NULL, _NSIG // 8)
    if ret < 0:
        return -errno
    return <int>ret


cdef inline void* _buffer(object obj, size_t nbytes, bint writable) except NULL:
    """The address of *obj*'s bytes, checked to hold *nbytes*; the caller keeps *obj* alive.

    The export is released at once, as the binding's typed memoryviews do: the op keeps the
    object (for a bytearray, a memoryview slice of it, which pins its storage) until its CQE.
    """
    cdef Py_buffer view
    cdef void* addr
    PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE if writable else PyBUF_SIMPLE)
    addr = view.buf
    if <size_t>view.len < nbytes:
        PyBuffer_Release(&view)
        raise ValueError(f"nbytes ({nbytes}) is larger than the buffer ({view.len} bytes)")
    PyBuffer_Release(&view)
    if addr == NULL:  # an empty exporter may have no storage; the kernel reads 0 bytes of this
        addr = <void*>_EMPTY
    return addr


cdef class RingCore:
    """Per-operation methods over one ``liburing.io_uring``; the subclass in uring.py owns it.

    ``_ring`` is set once by the owner after ``io_uring_queue_init`` succeeded, and every
    method below assumes it (the owner never calls them on a closed ring: rule 8).
    """

    cdef public io_uring _ring
    cdef io_uring_cqe _cqe

    def __cinit__(self, *args, **kwargs):
        self._cqe = io_uring_cqe()

    # -- submission -------------------------------------------------------------------------
    cdef __io_uring_sqe* _take(self) except NULL:
        """A free SQE; when the SQ is full, submit what is queued and take one again."""
        cdef __io_uring_sqe* sqe = __io_uring_get_sqe(&self._ring.ptr)
        if sqe is NULL:
            try:
                self.submit()
            except OSError as e:
                if e.errno in (_errno.EBUSY, _errno.EAGAIN):
                    raise RingBusy(e.errno, e.strerror) from None
                raise
            sqe = __io_uring_get_sqe(&self._ring.ptr)
            if sqe is NULL:  # the kernel consumed nothing; cannot happen
                raise RuntimeError("io_uring SQ still full after submit")
        return sqe

    def queue(self, prep, tuple args not None, unsigned long long ud):
        """Queue one SQE as ``prep(sqe, *args)`` would fill it, with ``user_data`` *ud*.

        The common operations (recv, send, read, write, nop, cancel, timeout) are filled here
        in C; any other prep function runs in Python on a wrapper of the same SQE. If the prep
        raises, the SQE (already taken, maybe half-filled) becomes a NOP with ``SKIP_UD`` and
        the error propagates: the kernel never sees a half-prepared operation (rule 11).
        Raises :class:`RingBusy`, having queued nothing, when the kernel takes no more SQEs.
        """
        cdef __io_uring_sqe* sqe = self._take()
        cdef io_uring_sqe wrapper
        cdef size_t n
        try:
            if prep is _RECV:
                n = args[2]
                __io_uring_prep_recv(sqe, args[0], _buffer(args[1], n, True), n, args[3])
            elif prep is _SEND:
                n = args[2]
                __io_uring_prep_send(sqe, args[0], _buffer(args[1], n, False), n, args[3])
            elif prep is _READ:
                n = <unsigned int>args[2]
                __io_uring_prep_read(sqe, args[0], _buffer(args[1], n, True), n, args[3])
            elif prep is _WRITE:
                n = <unsigned int>args[2]
                __io_uring_prep_write(sqe, args[0], _buffer(args[1], n, False), n, args[3])
            elif prep is _NOP and len(args) == 0:
                __io_uring_prep_nop(sqe)
            elif prep is _CANCEL:
                __io_uring_prep_cancel64(sqe, args[0], args[1])
            elif prep is _TIMEOUT:
                __io_uring_prep_timeout(sqe, (<timespec?>args[0]).ptr, args[1], args[2])
            else:
                wrapper = io_uring_sqe(0)  # 0: a view of a ring SQE, not memory of its own
                wrapper.ptr = sqe
                prep(wrapper, *args)
        except BaseException:
            __io_uring_prep_nop(sqe)
            __io_uring_sqe_set_data64(sqe, _SKIP_UD)
            raise
        __io_uring_sqe_set_data64(sqe, ud)

    def get_sqe(self):
        """A free SQE as the binding's object, for callers that prepare it in Python.

        A fresh ``io_uring_sqe`` view each time, so an SQE handed out earlier stays valid
        until it is submitted, as with the Python ring.
        """
        cdef io_uring_sqe sqe = io_uring_sqe(0)
        sqe.ptr = self._take()
        return sqe

    def submit(self):
        """Hand every prepared SQE to the kernel, without the GIL. Retries after EINTR (once
        the signal handlers have run: one that raises ends the retry, PEP 475)."""
        cdef __io_uring* ring = &self._ring.ptr
        cdef int n
        while True:
            with nogil:
                n = _submit_nogil(ring)
            if n >= 0:
                return n
            if n != -EINTR:
                raise OSError(-n, _os.strerror(-n))
            PyErr_CheckSignals()  # raises what a signal handler raised (KeyboardInterrupt)

    def sq_ready(self):
        return io_uring_sq_ready(self._ring)

    # -- completion -------------------------------------------------------------------------
    def reap(self, list out not None):
        """Append ``(user_data, res)`` for each ready CQE to *out*; return how many.

        ``io_uring_peek_cqe`` flushes the kernel's CQ overflow list when it has to, so no
        completion beyond the CQ's 2 x entries is lost (same as the Python ring).
        """
        cdef io_uring ring = self._ring
        cdef io_uring_cqe cqe = self._cqe
        cdef Py_ssize_t n = 0
        while io_uring_peek_cqe(ring, cqe) == 0:
            out.append((cqe.ptr.user_data, cqe.ptr.res))
            io_uring_cqe_seen(ring, cqe)
            n += 1
        return n

    def complete(self, dict inflight not None, list done not None):
        """Reap every ready CQE and resolve its user_data against *inflight*; return how many
        CQEs were reaped (the completion contract of ``tinycoro/uring.py``).

        For each CQE whose user_data is a key of *inflight*, the entry is removed and
        ``(op, res)`` appended to *done*. Any other CQE is one of the owner's own SQEs and is
        only counted. Nothing of the op is read or written here.
        """
        cdef io_uring ring = self._ring
        cdef io_uring_cqe cqe = self._cqe
        cdef Py_ssize_t n = 0
        cdef unsigned long long ud
        cdef int res
        cdef PyObject* found
        cdef object key
        while io_uring_peek_cqe(ring, cqe) == 0:
            ud = cqe.ptr.user_data
            res = cqe.ptr.res
            io_uring_cqe_seen(ring, cqe)
            n += 1
            key = ud
            found = PyDict_GetItem(inflight, key)
            if found is NULL:
                continue
            done.append((<object>found, res))
            PyDict_DelItem(inflight, key)
        return n

    def cq_ready(self):
        return io_uring_cq_ready(self._ring)

    def notify_on(self, bint enabled):
        """Let completions write the eventfd (before sleeping) or not (while awake)."""
        io_uring_cq_eventfd_toggle(self._ring, enabled)
