# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot half of :class:`tinycoro.uring.Ring`, compiled: queue operations, submit, reap.

Each method here is one Python call that does its whole job in C. It cimports the ``liburing``
binding's declarations, so it fills SQEs and reads CQEs through the C structs themselves: no
``liburing.name`` lookup, no SQE or CQE wrapper object and no property call per operation.
Nothing is linked against liburing itself: the binding's module does the system calls, and the
inline ``io_uring_prep_*`` / ``io_uring_get_sqe`` helpers come from its bundled header.

The completion contract is the pure ring's (``tinycoro/uring.py``): ``complete`` resolves
user_data to op and hands ``(op, res)`` back, and never looks inside the op; each CQE of a
multishot recv (which only this ring queues) is handed back apart, as
``(op, res, data, more)``, marked seen and its buffer given back before anything runs.

Only the per-operation paths live here. Creating and closing the ring, the eventfd and the
error messages stay in Python (``tinycoro/uring.py``), shared with the pure-Python ring, which
implements the same methods with the same results (``PyRing``): keep the two in step.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.dict cimport PyDict_GetItem, PyDict_DelItem
from cpython.object cimport PyObject
from cpython.exc cimport PyErr_CheckSignals
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno, EINTR, EINVAL
from libc.stdint cimport uint16_t, uint32_t, uint64_t
from libc.string cimport memset

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
    __io_uring_prep_recv_multishot,
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
    io_uring_params,
    io_uring_queue_init_params,
)
from liburing.time cimport timespec
from liburing.lib.io_uring cimport (
    __io_uring_params,
    __IORING_SETUP_CQSIZE,
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


# -- the provided-buffer ring (multishot recv) ---------------------------------------------------
# Declared here, not taken from the binding: its io_uring_buf_ring is declared twice as two
# types and its io_uring_setup_buf_ring raises MemoryError even when it succeeds (DESIGN 6), and
# its SQE struct names no buf_group. These are the kernel's layouts (include/uapi io_uring.h).
cdef extern from "<sys/syscall.h>" nogil:
    long SYS_io_uring_register


cdef extern from "<sys/mman.h>" nogil:
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void* addr, size_t length)
    int PROT_READ
    int PROT_WRITE
    int MAP_PRIVATE
    int MAP_ANONYMOUS
    void* MAP_FAILED


cdef extern from *:
    """
    /* an io_uring SQE's buffer-group field (liburing's io_uring_sqe, by another name) */
    #define tc_sqe_set_buf_group(sqe, g) (((struct io_uring_sqe *)(sqe))->buf_group = (g))
    #define tc_sqe_or_flags(sqe, f) (((struct io_uring_sqe *)(sqe))->flags |= (f))
    /* publish a buffer ring's tail (the kernel reads it without a system call) */
    #define tc_store_release_u16(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
    """
    void tc_sqe_set_buf_group(void* sqe, uint16_t group) nogil
    void tc_sqe_or_flags(void* sqe, uint16_t flags) nogil
    void tc_store_release_u16(uint16_t* p, uint16_t v) nogil


cdef struct _pbuf:  # struct io_uring_buf: one entry of a provided-buffer ring
    uint64_t addr
    uint32_t len
    uint16_t bid
    uint16_t resv  # entry 0's resv is the ring's tail: never written as an entry field


cdef struct _pbuf_reg:  # struct io_uring_buf_reg: IORING_(UN)REGISTER_PBUF_RING's argument
    uint64_t ring_addr
    uint32_t ring_entries
    uint16_t bgid
    uint16_t flags
    uint64_t resv[3]


cdef enum:
    _REGISTER_PBUF_RING = 22
    _IOSQE_BUFFER_SELECT = 32  # 1 << IOSQE_BUFFER_SELECT_BIT (5)
    _CQE_F_BUFFER = 1
    _CQE_F_MORE = 2
    _CQE_F_BUF_MORE = 16  # IORING_CQE_F_BUF_MORE: an incremental buffer the kernel still fills
    _PBUF_RING_INC = 2  # IOU_PBUF_RING_INC (6.12): buffers consumed a received length at a time
    _CQE_BUFFER_SHIFT = 16
    _BGID = 0  # the one buffer group of a ring

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


def queue_init(unsigned int entries, io_uring ring not None, unsigned int flags,
               unsigned int cq_entries):
    """``io_uring_queue_init`` with a completion queue of *cq_entries* (IORING_SETUP_CQSIZE;
    the kernel rounds it up to a power of two), which the binding's Python API cannot ask
    for. Why a CQ larger than twice the SQ: every armed multishot recv may post a CQE in one
    turn, and a kernel that finds the CQ full ends the multishot (no IORING_CQE_F_MORE), so
    with 1,000 connections on a 512-entry CQ every turn ended hundreds of them, each armed
    again by its next recv. Raises OSError as the binding does."""
    cdef __io_uring_params params
    cdef io_uring_params p = io_uring_params()  # the binding's wrapper: a pointer, here ours
    memset(&params, 0, sizeof(params))
    params.flags = flags | __IORING_SETUP_CQSIZE
    params.cq_entries = cq_entries
    p.ptr = &params
    try:
        io_uring_queue_init_params(entries, ring, p)
    finally:
        p.ptr = NULL


def prep_recv_multishot(sqe, fd):
    """A multishot recv into the ring's provided buffers, ``(sqe, fd)``: queued by
    :meth:`RingCore.queue`; ``complete`` hands back each of its CQEs apart, for the op that
    the owner's *standing* table holds under its user_data (the compiled ring only: this
    Python form is never called)."""
    raise RuntimeError("prep_recv_multishot is queued by the compiled ring only")


cdef object _RECV_MS = prep_recv_multishot


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
    # Whether submit() enters the kernel without the GIL (see submit); its owner decides.
    cdef public bint release_gil
    # The provided-buffer ring (multishot recv): set up at the first multishot, kept until the
    # ring closes. _pb_state: 0 not tried, 1 ready, -1 unavailable (kernel, or forced off).
    cdef public int _pb_state
    cdef _pbuf* _pb_ring
    cdef char* _pb_mem
    cdef size_t _pb_ring_bytes
    cdef size_t _pb_mem_bytes
    cdef uint32_t _pb_count
    cdef uint32_t _pb_size
    cdef uint16_t _pb_tail
    cdef uint16_t _pb_mask
    # Incremental consumption (IOU_PBUF_RING_INC): the kernel takes from the head buffer only
    # what each receive wrote, so 64 bytes use 64 bytes of a buffer, not all of it, and many
    # streams' small messages share one. _pb_used[bid]: bytes of buffer bid the kernel has
    # written so far (where its next CQE's data starts); it comes back to us when a CQE
    # lacks IORING_CQE_F_BUF_MORE. 0 on a kernel without it: one CQE, one whole buffer.
    cdef public bint incremental
    cdef uint32_t* _pb_used

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
            elif prep is _RECV_MS:
                if self._pb_state != 1:
                    raise RuntimeError("multishot recv queued on a ring without buffers")
                __io_uring_prep_recv_multishot(sqe, args[0], NULL, 0, 0)
                tc_sqe_or_flags(sqe, _IOSQE_BUFFER_SELECT)
                tc_sqe_set_buf_group(sqe, _BGID)
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
        """Hand every prepared SQE to the kernel, without the GIL while ``release_gil`` is
        set. Retries after EINTR (once the signal handlers have run: one that raises ends the
        retry, PEP 475).

        Why the GIL is not always released: a release wakes the thread waiting for the GIL,
        which restarts its switch interval and finds the GIL taken back at once, so it never
        asks for a switch. A context busy enough to submit more often than every switch
        interval then starved the process's other threads (the main thread unwinding a
        Ctrl-C waited up to seconds); only a peer context gains from the release."""
        cdef __io_uring* ring = &self._ring.ptr
        cdef int n
        while True:
            if self.release_gil:
                with nogil:
                    n = _submit_nogil(ring)
            else:
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
        """Append ``(user_data, res)`` for each ready CQE to *out*; return how many. The
        by-hand interface (notebooks/10_io_uring.ipynb); the engine uses ``complete``.

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

    def complete(self, dict inflight not None, dict standing not None, list done not None,
                 list shots not None):
        """Reap every ready CQE and resolve its user_data against *inflight*; return how many
        CQEs were reaped, multishots' left out (the completion contract in ``tinycoro/uring.py``).

        For each CQE whose user_data is a key of *inflight*, the entry is removed and
        ``(op, res)`` appended to *done*. Any other CQE is one of the owner's own SQEs and is
        only counted. Nothing of the op is read or written here. A CQE whose user_data is a
        key of *standing* (the owner's multishots, also in *inflight*) is appended to *shots*
        as ``(op, res, data, more)`` instead, uncounted (its op is handed to nobody, so the
        owner must not take it for one of its own SQEs): its data copied out, its buffer given
        back and the CQE marked seen before the owner runs any handler, so a handler that
        raises can neither replay it nor lose or double a buffer (rule 17). Its last CQE (no
        ``IORING_CQE_F_MORE``) takes the op out of both tables. The owner's table is the one
        record of which ops complete many times: the ring keeps no copy of it.
        """
        cdef io_uring ring = self._ring
        cdef io_uring_cqe cqe = self._cqe
        cdef Py_ssize_t n = 0
        cdef unsigned long long ud
        cdef int res
        cdef unsigned int flags
        cdef PyObject* found
        cdef object key
        cdef object data
        cdef uint16_t bid
        cdef bint more
        while io_uring_peek_cqe(ring, cqe) == 0:
            ud = cqe.ptr.user_data
            res = cqe.ptr.res
            flags = cqe.ptr.flags
            key = ud
            if standing:  # a multishot recv is in the kernel: is this one of its CQEs?
                found = PyDict_GetItem(standing, key)
                if found is not NULL:
                    data = None
                    if flags & _CQE_F_BUFFER:
                        bid = <uint16_t>(flags >> _CQE_BUFFER_SHIFT)
                        if not self.incremental:
                            if res > 0:
                                data = PyBytes_FromStringAndSize(
                                    self._pb_mem + <size_t>bid * self._pb_size, res)
                            self._pb_give(bid)
                        elif res > 0:
                            # A CQE of no bytes (EOF) or an error consumed nothing: the
                            # kernel keeps that buffer at its head, so it is not given back.
                            data = PyBytes_FromStringAndSize(
                                self._pb_mem + <size_t>bid * self._pb_size + self._pb_used[bid],
                                res)
                            if flags & _CQE_F_BUF_MORE:
                                self._pb_used[bid] += res
                            else:
                                self._pb_used[bid] = 0
                                self._pb_give(bid)
                    io_uring_cqe_seen(ring, cqe)
                    more = (flags & _CQE_F_MORE) != 0
                    shots.append((<object>found, res, data, more))
                    if not more:
                        PyDict_DelItem(standing, key)
                        if PyDict_GetItem(inflight, key) is not NULL:
                            PyDict_DelItem(inflight, key)
                    continue
            io_uring_cqe_seen(ring, cqe)
            n += 1
            found = PyDict_GetItem(inflight, key)
            if found is NULL:
                continue
            done.append((<object>found, res))
            PyDict_DelItem(inflight, key)
        return n

    # -- the provided-buffer ring ---------------------------------------------------------------
    cdef void _pb_give(self, uint16_t bid) noexcept nogil:
        """Put buffer *bid* back at the ring's tail and publish the tail (liburing's
        io_uring_buf_ring_add + advance: the entry first, then a store-release of the tail)."""
        cdef _pbuf* entry = &self._pb_ring[self._pb_tail & self._pb_mask]
        entry.addr = <uint64_t>(self._pb_mem + <size_t>bid * self._pb_size)
        entry.len = self._pb_size
        entry.bid = bid
        self._pb_tail += 1
        tc_store_release_u16(&self._pb_ring[0].resv, self._pb_tail)

    def multishot_setup(self, unsigned int count, unsigned int size, bint incremental=True):
        """Register this ring's provided-buffer ring (group 0): *count* buffers (a power of
        two, at most 32768) of *size* bytes each, in memory tinycoro maps and owns, consumed
        incrementally where the kernel can (*incremental*, and 6.12 or later; else each CQE
        takes a whole buffer). Returns 0, or the negative errno of a kernel without it (the
        ring then stays without: every recv is a single one). Once; later calls return the
        first answer.

        Why not the binding's io_uring_setup_buf_ring: DESIGN section 6. The ring's entries
        and the buffers are two anonymous private mappings: page-aligned as the kernel wants,
        unmapped only by :meth:`multishot_free`, after the ring has closed, so no buffer the
        kernel may still write into is ever given back to the allocator."""
        cdef _pbuf_reg reg
        cdef long ret
        cdef uint32_t i
        cdef void* ring_mem
        cdef void* mem
        if self._pb_state == 1:
            return 0
        if self._pb_state == -1:
            return -EINVAL
        if count == 0 or count > 32768 or (count & (count - 1)) or size == 0:
            raise ValueError(f"buffer ring: count must be a power of two <= 32768 and size > 0, "
                             f"got {count} x {size}")
        self._pb_ring_bytes = count * sizeof(_pbuf)
        self._pb_mem_bytes = <size_t>count * size
        ring_mem = mmap(NULL, self._pb_ring_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if ring_mem == MAP_FAILED:
            self._pb_state = -1
            return -errno
        mem = mmap(NULL, self._pb_mem_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if mem == MAP_FAILED:
            ret = -errno
            munmap(ring_mem, self._pb_ring_bytes)
            self._pb_state = -1
            return ret
        self._pb_used = <uint32_t*>mmap(NULL, count * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if <void*>self._pb_used == MAP_FAILED:
            ret = -errno
            self._pb_used = NULL
            munmap(mem, self._pb_mem_bytes)
            munmap(ring_mem, self._pb_ring_bytes)
            self._pb_state = -1
            return ret
        memset(&reg, 0, sizeof(reg))
        reg.ring_addr = <uint64_t>ring_mem
        reg.ring_entries = count
        reg.bgid = _BGID
        ret = -EINVAL
        if incremental:
            reg.flags = _PBUF_RING_INC
            ret = syscall(SYS_io_uring_register, self._ring.ptr.ring_fd, _REGISTER_PBUF_RING,
                          &reg, 1)
        self.incremental = ret >= 0
        if ret < 0:  # not asked for, or a kernel older than 6.12: whole buffers
            reg.flags = 0
            ret = syscall(SYS_io_uring_register, self._ring.ptr.ring_fd, _REGISTER_PBUF_RING,
                          &reg, 1)
        if ret < 0:
            ret = -errno
            munmap(self._pb_used, count * sizeof(uint32_t))
            self._pb_used = NULL
            munmap(mem, self._pb_mem_bytes)
            munmap(ring_mem, self._pb_ring_bytes)
            self._pb_state = -1
            return ret
        self._pb_ring = <_pbuf*>ring_mem
        self._pb_mem = <char*>mem
        self._pb_count = count
        self._pb_size = size
        self._pb_mask = <uint16_t>(count - 1)
        self._pb_tail = 0
        for i in range(count):
            self._pb_give(<uint16_t>i)
        self._pb_state = 1
        return 0

    def multishot_off(self):
        """Never set up the buffer ring (a forced fallback, or a kernel that refused the
        multishot recv itself): every recv on this ring is a single one."""
        if self._pb_state == 0:
            self._pb_state = -1

    def multishot_refused(self):
        """The kernel refused a multishot recv (EINVAL: older than 6.0): no more of them here.
        The buffer ring stays registered until the ring closes."""
        self._pb_state = -1

    @property
    def buffer_bytes(self):
        """Bytes of provided buffers mapped for this ring now (0 before the first multishot
        and once the ring has closed)."""
        return self._pb_mem_bytes if self._pb_mem != NULL else 0

    @property
    def multishot(self):
        """True when multishot recvs can be queued here (the buffer ring is registered)."""
        return self._pb_state == 1

    def multishot_free(self):
        """Unmap the buffer ring's memory. Only after the ring has closed (io_uring_queue_exit
        unregisters it and the kernel writes into none of it any more)."""
        if self._pb_ring != NULL:
            munmap(self._pb_ring, self._pb_ring_bytes)
            munmap(self._pb_mem, self._pb_mem_bytes)
            munmap(self._pb_used, self._pb_count * sizeof(uint32_t))
            self._pb_used = NULL
            self._pb_ring = NULL
            self._pb_mem = NULL
        self._pb_state = -1  # closed: no multishot any more

    def cq_ready(self):
        return io_uring_cq_ready(self._ring)

    def notify_on(self, bint enabled):
        """Let completions write the eventfd (before sleeping) or not (while awake)."""
        io_uring_cq_eventfd_toggle(self._ring, enabled)
