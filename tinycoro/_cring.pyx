# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot half of :class:`tinycoro.uring.Ring`, compiled: queue operations, submit, reap.

Each method here is one Python call that does its whole job in C. It cimports the ``liburing``
binding's declarations, so it fills SQEs and reads CQEs through the C structs themselves: no
``liburing.name`` lookup, no SQE or CQE wrapper object and no property call per operation.
Nothing is linked against liburing itself: the binding's module does the system calls, and the
inline ``io_uring_prep_*`` / ``io_uring_get_sqe`` helpers come from its bundled header.

Only the per-operation paths live here. Creating and closing the ring, the eventfd and the
error messages stay in Python (``tinycoro/uring.py``), shared with the pure-Python ring, which
implements the same methods with the same results (``PyRing``): keep the two in step.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.dict cimport PyDict_GetItem, PyDict_DelItem
from cpython.object cimport PyObject

import errno as _errno
import liburing as _L

from liburing.lib.uring cimport (
    __io_uring,
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
    io_uring_submit,
    io_uring_sq_ready,
    io_uring_cq_ready,
    io_uring_peek_cqe,
    io_uring_cqe_seen,
    io_uring_cq_eventfd_toggle,
)
from liburing.time cimport timespec

# Defined once for both rings in tinycoro.uring, which imports this module after defining them.
from tinycoro.uring import RingBusy, SKIP_UD

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
        """Hand every prepared SQE to the kernel. Retries while the kernel says EINTR."""
        while True:
            try:
                return io_uring_submit(self._ring)
            except InterruptedError:
                continue

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

    def complete(self, dict inflight not None, ready, list rest not None):
        """Reap every ready CQE and resolve it against *inflight* (user_data -> op); return
        how many CQEs were reaped.

        The plain case, an op whose task still waits and that either succeeded or was not
        being cancelled, is finished here: the op leaves *inflight*, ``task._value = res``
        and the task is appended to *ready*. Everything else is appended to *rest* as
        ``(ud, res, op)`` (op None for the engine's own SQEs) for the engine to decide.
        """
        cdef io_uring ring = self._ring
        cdef io_uring_cqe cqe = self._cqe
        cdef Py_ssize_t n = 0
        cdef unsigned long long ud
        cdef int res
        cdef PyObject* found
        cdef object op, task, key
        append = ready.append
        while io_uring_peek_cqe(ring, cqe) == 0:
            ud = cqe.ptr.user_data
            res = cqe.ptr.res
            io_uring_cqe_seen(ring, cqe)
            n += 1
            key = ud
            found = PyDict_GetItem(inflight, key)
            if found is NULL:
                rest.append((ud, res, None))
                continue
            op = <object>found
            PyDict_DelItem(inflight, key)
            task = op.task
            if task is None or (res < 0 and op.cancelling):
                rest.append((ud, res, op))
                continue
            task._value = res
            append(task)
        return n

    def cq_ready(self):
        return io_uring_cq_ready(self._ring)

    def notify_on(self, bint enabled):
        """Let completions write the eventfd (before sleeping) or not (while awake)."""
        io_uring_cq_eventfd_toggle(self._ring, enabled)
