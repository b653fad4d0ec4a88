# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot half of :class:`tinycoro.uring.Ring`, compiled: ring setup, queue operations,
submit, reap.

Each method here is one Python call that does its whole job in C: it fills SQEs and reads
CQEs through the kernel's structs themselves, with liburing's ``static inline`` helpers
(``io_uring_prep_*``, ``io_uring_get_sqe``, ...) from the header the ``liburing`` binding
bundles, used at build time only.

Why this module imports no module of the binding at run time: none of the binding's compiled
modules declares that it runs without the GIL, so on a free-threaded CPython importing any of
them turns the GIL back on for the whole process. The few things liburing does in its library
rather than its header (setting a ring up and tearing it down, registering the eventfd,
flushing the CQ overflow list) are a handful of system calls, made here (the "ring setup"
section, as liburing's setup.c does them); the prep functions, ``timespec`` and ``statx`` are
this module's own (``Prep``), with the binding's names and argument orders, so the layer above
reads the same on either ring.

The completion contract is the pure ring's (``tinycoro/uring.py``): ``complete`` resolves
user_data to op and hands ``(op, res)`` back, and never looks inside the op; each CQE of a
multishot recv (which only this ring queues) is handed back apart, as four entries
``op, res, data, more``, marked seen and its buffer given back before anything runs.

The eventfd, the setup flags tried and the error messages stay in Python
(``tinycoro/uring.py``), shared with the pure-Python ring, which implements the same methods
with the same results (``PyRing``): keep the two in step.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.exc cimport PyErr_CheckSignals
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.errno cimport errno, EINTR, EINVAL
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int32_t, int64_t
from libc.string cimport memset

from .core.cqwatch cimport Watch
from .core.ringcalls cimport RingCalls

import errno as _errno
import os as _os


# -- the kernel's structs and liburing's inline helpers (header only: nothing is linked) ------
cdef extern from "liburing.h" nogil:
    struct io_uring_sqe:
        uint8_t flags
        uint64_t user_data
        uint16_t buf_group

    struct io_uring_cqe:
        uint64_t user_data
        int32_t res
        uint32_t flags

    struct io_uring_sq:
        unsigned* khead
        unsigned* ktail
        unsigned* kring_mask
        unsigned* kring_entries
        unsigned* kflags
        unsigned* kdropped
        unsigned* array
        io_uring_sqe* sqes
        unsigned sqe_head
        unsigned sqe_tail
        size_t ring_sz
        void* ring_ptr
        unsigned ring_mask
        unsigned ring_entries

    struct io_uring_cq:
        unsigned* khead
        unsigned* ktail
        unsigned* kring_mask
        unsigned* kring_entries
        unsigned* kflags
        unsigned* koverflow
        io_uring_cqe* cqes
        size_t ring_sz
        void* ring_ptr
        unsigned ring_mask
        unsigned ring_entries

    struct io_uring:
        io_uring_sq sq
        io_uring_cq cq
        unsigned flags
        int ring_fd
        unsigned features
        int enter_ring_fd
        uint8_t int_flags

    struct io_sqring_offsets:
        uint32_t head, tail, ring_mask, ring_entries, flags, dropped, array

    struct io_cqring_offsets:
        uint32_t head, tail, ring_mask, ring_entries, overflow, cqes, flags

    struct io_uring_params:
        uint32_t sq_entries, cq_entries, flags, features
        io_sqring_offsets sq_off
        io_cqring_offsets cq_off

    struct __kernel_timespec:
        int64_t tv_sec
        long long tv_nsec

    struct statx_timestamp:
        int64_t tv_sec
        uint32_t tv_nsec

    struct c_statx "statx":
        uint32_t stx_mask, stx_blksize, stx_nlink, stx_uid, stx_gid
        uint16_t stx_mode
        uint64_t stx_attributes, stx_ino, stx_size, stx_blocks
        statx_timestamp stx_atime, stx_btime, stx_ctime, stx_mtime
        uint32_t stx_rdev_major, stx_rdev_minor, stx_dev_major, stx_dev_minor

    struct sockaddr:
        pass
    ctypedef unsigned int socklen_t

    enum:
        IORING_SETUP_CQSIZE
        IORING_SETUP_SQPOLL
        IORING_SETUP_IOPOLL
        IORING_SETUP_CQE32
        IORING_SETUP_SQE128
        IORING_SETUP_NO_SQARRAY
        IORING_SETUP_DEFER_TASKRUN
        IORING_FEAT_SINGLE_MMAP
        IORING_SQ_CQ_OVERFLOW
        IORING_SQ_TASKRUN
        IORING_ENTER_GETEVENTS
        IORING_REGISTER_EVENTFD
        IORING_UNREGISTER_EVENTFD
        IORING_CQ_EVENTFD_DISABLED
    unsigned long long IORING_OFF_SQ_RING
    unsigned long long IORING_OFF_CQ_RING
    unsigned long long IORING_OFF_SQES

    io_uring_sqe* io_uring_get_sqe(io_uring* ring)
    void io_uring_sqe_set_data64(io_uring_sqe* sqe, uint64_t data)
    unsigned io_uring_sq_ready(const io_uring* ring)
    unsigned io_uring_cq_ready(const io_uring* ring)
    int __io_uring_peek_cqe(io_uring* ring, io_uring_cqe** cqe_ptr, unsigned* nr_available)
    void io_uring_cqe_seen(io_uring* ring, io_uring_cqe* cqe)
    int io_uring_cq_eventfd_toggle(io_uring* ring, bint enabled)

    void io_uring_prep_nop(io_uring_sqe* sqe)
    void io_uring_prep_read(io_uring_sqe* sqe, int fd, void* buf, unsigned nbytes, uint64_t offset)
    void io_uring_prep_write(io_uring_sqe* sqe, int fd, const void* buf, unsigned nbytes,
                             uint64_t offset)
    void io_uring_prep_recv(io_uring_sqe* sqe, int fd, void* buf, size_t len, int flags)
    void io_uring_prep_recv_multishot(io_uring_sqe* sqe, int fd, void* buf, size_t len, int flags)
    void io_uring_prep_send(io_uring_sqe* sqe, int fd, const void* buf, size_t len, int flags)
    void io_uring_prep_sendto(io_uring_sqe* sqe, int fd, const void* buf, size_t len, int flags,
                              const sockaddr* addr, socklen_t addrlen)
    void io_uring_prep_cancel64(io_uring_sqe* sqe, uint64_t user_data, int flags)
    void io_uring_prep_timeout(io_uring_sqe* sqe, __kernel_timespec* ts, unsigned count,
                               unsigned flags)
    void io_uring_prep_openat(io_uring_sqe* sqe, int dfd, const char* path, int flags,
                              unsigned mode)
    void io_uring_prep_close(io_uring_sqe* sqe, int fd)
    void io_uring_prep_fsync(io_uring_sqe* sqe, int fd, unsigned flags)
    void io_uring_prep_accept(io_uring_sqe* sqe, int fd, sockaddr* addr, socklen_t* addrlen,
                              int flags)
    void io_uring_prep_connect(io_uring_sqe* sqe, int fd, const sockaddr* addr,
                               socklen_t addrlen)
    void io_uring_prep_shutdown(io_uring_sqe* sqe, int fd, int how)
    void io_uring_prep_statx(io_uring_sqe* sqe, int dfd, const char* path, int flags,
                             unsigned mask, c_statx* buf)
    void io_uring_prep_renameat(io_uring_sqe* sqe, int olddfd, const char* oldpath, int newdfd,
                                const char* newpath, unsigned flags)
    void io_uring_prep_unlinkat(io_uring_sqe* sqe, int dfd, const char* path, int flags)
    void io_uring_prep_mkdirat(io_uring_sqe* sqe, int dfd, const char* path, unsigned mode)
    void io_uring_prep_splice(io_uring_sqe* sqe, int fd_in, int64_t off_in, int fd_out,
                              int64_t off_out, unsigned nbytes, unsigned flags)
    void io_uring_prep_poll_add(io_uring_sqe* sqe, int fd, unsigned poll_mask)


cdef extern from "<unistd.h>" nogil:
    long syscall(long number, ...)
    int close(int fd)


cdef extern from "<sys/syscall.h>" nogil:
    long SYS_io_uring_setup
    long SYS_io_uring_enter
    long SYS_io_uring_register


cdef extern from "<signal.h>" nogil:
    int _NSIG


cdef extern from "<sys/mman.h>" nogil:
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void* addr, size_t length)
    int PROT_READ
    int PROT_WRITE
    int MAP_PRIVATE
    int MAP_SHARED
    int MAP_POPULATE
    int MAP_ANONYMOUS
    void* MAP_FAILED


# -- ring setup: what liburing does in its library (setup.c), not its header ------------------
# Rings here are set up with the flags of tinycoro.uring._WANTED_FLAGS and _OPTIONAL_FLAGS at
# most (COOP_TASKRUN, TASKRUN_FLAG, R_DISABLED, SINGLE_ISSUER, DEFER_TASKRUN) and a CQ size: never SQPOLL, IOPOLL,
# 32-byte CQEs, 128-byte SQEs or no SQ array, which _ring_open refuses, so the mappings below
# are the plain ones.
cdef int _ring_open(io_uring* ring, unsigned entries, unsigned flags,
                    unsigned cq_entries) noexcept nogil:
    """``io_uring_queue_init_params``: 0, or ``-errno`` with *ring* left closed (ring_fd -1)."""
    cdef io_uring_params p
    cdef long fd
    cdef int ret
    cdef unsigned i
    memset(&p, 0, sizeof(p))
    memset(ring, 0, sizeof(io_uring))
    ring.ring_fd = ring.enter_ring_fd = -1
    if flags & (IORING_SETUP_SQPOLL | IORING_SETUP_IOPOLL | IORING_SETUP_CQE32
                | IORING_SETUP_SQE128 | IORING_SETUP_NO_SQARRAY):
        return -EINVAL
    p.flags = flags
    if cq_entries:
        p.flags |= IORING_SETUP_CQSIZE
        p.cq_entries = cq_entries
    fd = syscall(SYS_io_uring_setup, entries, &p)
    if fd < 0:
        return -errno
    ret = _ring_map(ring, <int>fd, &p)
    if ret < 0:
        close(<int>fd)
        return ret
    # Each SQ slot i always points at SQE i: io_uring_get_sqe hands SQEs out in ring order.
    for i in range(ring.sq.ring_entries):
        ring.sq.array[i] = i
    ring.features = p.features
    ring.flags = p.flags
    ring.ring_fd = ring.enter_ring_fd = <int>fd
    ring.int_flags = 0
    return 0


cdef int _ring_map(io_uring* ring, int fd, io_uring_params* p) noexcept nogil:
    """Map the SQ and CQ rings (one mapping where the kernel shares them) and the SQE array,
    and point the ring's fields into them, as the inline helpers expect."""
    cdef io_uring_sq* sq = &ring.sq
    cdef io_uring_cq* cq = &ring.cq
    cdef char* sp
    cdef char* cp
    cdef int ret
    sq.ring_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned)
    cq.ring_sz = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe)
    if p.features & IORING_FEAT_SINGLE_MMAP:
        if cq.ring_sz > sq.ring_sz:
            sq.ring_sz = cq.ring_sz
        cq.ring_sz = sq.ring_sz
    sq.ring_ptr = mmap(NULL, sq.ring_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                       IORING_OFF_SQ_RING)
    if sq.ring_ptr == MAP_FAILED:
        sq.ring_ptr = NULL
        return -errno
    if p.features & IORING_FEAT_SINGLE_MMAP:
        cq.ring_ptr = sq.ring_ptr
    else:
        cq.ring_ptr = mmap(NULL, cq.ring_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                           fd, IORING_OFF_CQ_RING)
        if cq.ring_ptr == MAP_FAILED:
            ret = -errno
            cq.ring_ptr = NULL
            _ring_unmap(ring)
            return ret
    sq.sqes = <io_uring_sqe*>mmap(NULL, p.sq_entries * sizeof(io_uring_sqe),
                                  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                                  IORING_OFF_SQES)
    if <void*>sq.sqes == MAP_FAILED:
        ret = -errno
        sq.sqes = NULL
        _ring_unmap(ring)
        return ret
    sp = <char*>sq.ring_ptr
    cp = <char*>cq.ring_ptr
    sq.khead = <unsigned*>(sp + p.sq_off.head)
    sq.ktail = <unsigned*>(sp + p.sq_off.tail)
    sq.kring_mask = <unsigned*>(sp + p.sq_off.ring_mask)
    sq.kring_entries = <unsigned*>(sp + p.sq_off.ring_entries)
    sq.kflags = <unsigned*>(sp + p.sq_off.flags)
    sq.kdropped = <unsigned*>(sp + p.sq_off.dropped)
    sq.array = <unsigned*>(sp + p.sq_off.array)
    cq.khead = <unsigned*>(cp + p.cq_off.head)
    cq.ktail = <unsigned*>(cp + p.cq_off.tail)
    cq.kring_mask = <unsigned*>(cp + p.cq_off.ring_mask)
    cq.kring_entries = <unsigned*>(cp + p.cq_off.ring_entries)
    cq.koverflow = <unsigned*>(cp + p.cq_off.overflow)
    cq.cqes = <io_uring_cqe*>(cp + p.cq_off.cqes)
    if p.cq_off.flags:
        cq.kflags = <unsigned*>(cp + p.cq_off.flags)
    sq.ring_mask = sq.kring_mask[0]
    sq.ring_entries = sq.kring_entries[0]
    cq.ring_mask = cq.kring_mask[0]
    cq.ring_entries = cq.kring_entries[0]
    return 0


cdef void _ring_unmap(io_uring* ring) noexcept nogil:
    cdef io_uring_sq* sq = &ring.sq
    cdef io_uring_cq* cq = &ring.cq
    if sq.sqes != NULL:
        munmap(sq.sqes, sq.ring_entries * sizeof(io_uring_sqe))
        sq.sqes = NULL
    if cq.ring_ptr != NULL and cq.ring_ptr != sq.ring_ptr:
        munmap(cq.ring_ptr, cq.ring_sz)
    cq.ring_ptr = NULL
    if sq.ring_ptr != NULL:
        munmap(sq.ring_ptr, sq.ring_sz)
        sq.ring_ptr = NULL


cdef int _ring_enter(io_uring* ring, unsigned to_submit, unsigned flags) noexcept nogil:
    """One ``io_uring_enter``: how many SQEs it consumed, or ``-errno``."""
    cdef long ret = syscall(SYS_io_uring_enter, ring.enter_ring_fd, to_submit, 0, flags, NULL,
                            _NSIG // 8)
    if ret < 0:
        return -errno
    return <int>ret


cdef inline bint _kernel_holds_cqes(io_uring* ring) noexcept nogil:
    """Whether the kernel holds completions back until it is entered with GETEVENTS: its
    CQ overflow list, or task work not run yet (liburing's ``cq_ring_needs_flush``)."""
    return ((<volatile unsigned*>ring.sq.kflags)[0]
            & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN)) != 0


cdef inline io_uring_cqe* _peek(io_uring* ring) noexcept nogil:
    """The next ready CQE, or NULL. As liburing's ``io_uring_peek_cqe``: when none is ready
    but the kernel holds completions back (its overflow list, or task work not run yet), enter
    it with GETEVENTS to have them posted, and look once more, so none is ever lost."""
    cdef io_uring_cqe* cqe = NULL
    __io_uring_peek_cqe(ring, &cqe, NULL)
    if cqe == NULL and _kernel_holds_cqes(ring):
        _ring_enter(ring, 0, IORING_ENTER_GETEVENTS)
        __io_uring_peek_cqe(ring, &cqe, NULL)
    return cqe


# -- the provided-buffer ring (multishot recv) ---------------------------------------------------
# Declared here, not taken from the binding: its io_uring_buf_ring is declared twice as two
# types and its io_uring_setup_buf_ring raises MemoryError even when it succeeds (DESIGN 6).
# These are the kernel's layouts (include/uapi io_uring.h).
cdef extern from *:
    """
    /* publish a buffer ring's tail (the kernel reads it without a system call) */
    #define tc_store_release_u16(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
    """
    void tc_store_release_u16(uint16_t* p, uint16_t v) nogil

cdef extern from *:
    """
    /* Room for *n* entries in *list* before a run of appends: one allocation where each
       append past the list's room grew it by an eighth (a realloc and a copy). The owner
       empties the lists complete() appends to after every reap, which lets their storage go,
       so each reap grew them again from nothing: ~30 reallocs per reap of 50 echo requests,
       ~200 instructions per request (callgrind, CPython 3.11). Only the list's own fields
       change, as list.append's growth changes them (tc_list_push appends into the room), on
       a list of the owner's that nothing else writes meanwhile (the GIL is held). Not on a
       free-threaded build, where a list's storage is allocated and freed differently
       (readers without a lock), nor past 3.13, whose list internals this does not vouch
       for: there the appends grow it as before. */
    static int tc_list_reserve(PyObject *list, Py_ssize_t n) {
    #if defined(Py_GIL_DISABLED) || PY_VERSION_HEX >= 0x030E0000
        (void)list; (void)n;
        return 0;
    #else
        PyListObject *l = (PyListObject *)list;
        PyObject **items;
        if (l->allocated >= n || n > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(PyObject *))
            return 0;
        items = (PyObject **)PyMem_Realloc(l->ob_item, (size_t)n * sizeof(PyObject *));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        l->ob_item = items;
        l->allocated = n;
        return 0;
    #endif
    }

    /* list.append into that room: CPython's own append (and Cython's inline one) shrinks a
       list whose length is below half its room before it appends, which would undo the
       reservation at the first append. */
    static CYTHON_INLINE int tc_list_push(PyObject *list, PyObject *item) {
    #if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX < 0x030E0000
        PyListObject *l = (PyListObject *)list;
        Py_ssize_t n = Py_SIZE(l);
        if (n < l->allocated) {
            Py_INCREF(item);
            l->ob_item[n] = item;
            Py_SET_SIZE(l, n + 1);
            return 0;
        }
    #endif
        return PyList_Append(list, item);
    }
    """
    int tc_list_reserve(list l, Py_ssize_t n) except -1
    int tc_list_push(list l, object item) except -1

cdef extern from *:
    """
    /* the owner's wake word (core/wakeword.py): a hint a peer reads at its turn's end */
    #define tc_word_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
    """
    void tc_word_store(char* p, char v) nogil


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
    _REGISTER_ENABLE_RINGS = 12
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
from tinycoro._ringdefs import MULTI_UD_TAG, RingBusy, SKIP_UD

cdef unsigned long long _SKIP_UD = SKIP_UD
cdef unsigned long long _MULTI_UD_TAG = MULTI_UD_TAG


# -- the objects some operations point the kernel at ---------------------------------------------
cdef class timespec:
    """The kernel's ``__kernel_timespec``, as ``timespec(seconds)`` (the binding's name and
    constructor). The op keeps it alive until its CQE: the kernel reads it then."""
    cdef __kernel_timespec ts
    cdef object _twin  # the binding's timespec of the same time, once a pure ring needs one

    def __cinit__(self, double seconds=0):
        if seconds < 0:
            raise ValueError(f"timespec: seconds must be >= 0, got {seconds!r}")
        self.ts.tv_sec = <int64_t>seconds
        self.ts.tv_nsec = <long long>((seconds - <double>self.ts.tv_sec) * 1e9)

    @property
    def tv_sec(self):
        return self.ts.tv_sec

    @property
    def tv_nsec(self):
        return self.ts.tv_nsec

    def twin(self, binding):
        """The binding's timespec of this time, made once and kept as long as this one (an op
        keeps this one alive until its CQE): for a pure ring's prep_timeout."""
        if self._twin is None:
            self._twin = binding.timespec()
            self._twin.tv_sec = self.ts.tv_sec
            self._twin.tv_nsec = self.ts.tv_nsec
        return self._twin


cdef inline double _stx_time(statx_timestamp t):
    # As the binding and os.stat compute a float time (tinycoro.io.paths recovers the ns).
    return t.tv_sec + t.tv_nsec * 0.000_000_001


cdef class statx:
    """The kernel's ``struct statx``, filled by a statx op; fields as the binding names them
    (``stx_*``), times as float seconds."""
    cdef c_statx buf

    def __cinit__(self):
        memset(&self.buf, 0, sizeof(c_statx))

    @property
    def stx_mask(self): return self.buf.stx_mask
    @property
    def stx_mode(self): return self.buf.stx_mode
    @property
    def stx_ino(self): return self.buf.stx_ino
    @property
    def stx_nlink(self): return self.buf.stx_nlink
    @property
    def stx_uid(self): return self.buf.stx_uid
    @property
    def stx_gid(self): return self.buf.stx_gid
    @property
    def stx_size(self): return self.buf.stx_size
    @property
    def stx_blksize(self): return self.buf.stx_blksize
    @property
    def stx_blocks(self): return self.buf.stx_blocks
    @property
    def stx_dev_major(self): return self.buf.stx_dev_major
    @property
    def stx_dev_minor(self): return self.buf.stx_dev_minor
    @property
    def stx_rdev_major(self): return self.buf.stx_rdev_major
    @property
    def stx_rdev_minor(self): return self.buf.stx_rdev_minor
    @property
    def stx_atime(self): return _stx_time(self.buf.stx_atime)
    @property
    def stx_mtime(self): return _stx_time(self.buf.stx_mtime)
    @property
    def stx_ctime(self): return _stx_time(self.buf.stx_ctime)
    @property
    def stx_btime(self): return _stx_time(self.buf.stx_btime)


cdef class SQE:
    """A free SQE of a compiled ring, handed out by :meth:`RingCore.get_sqe` for callers that
    prepare it by hand: ``prep(sqe, *args)``, then ``sqe.user_data = ud``. Valid until the
    ring's next submit."""
    cdef io_uring_sqe* ptr

    @property
    def user_data(self):
        return self.ptr.user_data

    @user_data.setter
    def user_data(self, unsigned long long ud):
        io_uring_sqe_set_data64(self.ptr, ud)

    @property
    def flags(self):
        """The SQE's ``IOSQE_*`` flags, as the binding's SQE has them: a prep of the layer
        above sets one after filling the SQE (``IOSQE_ASYNC``: tinycoro.io._parallel)."""
        return self.ptr.flags

    @flags.setter
    def flags(self, unsigned char value):
        self.ptr.flags = value


# -- the prep functions -------------------------------------------------------------------------
cdef enum:  # what a Prep fills
    P_RECV, P_SEND, P_READ, P_WRITE, P_NOP, P_CANCEL, P_TIMEOUT, P_RECV_MS, P_OPENAT, P_CLOSE,
    P_FSYNC, P_ACCEPT, P_CONNECT, P_SHUTDOWN, P_STATX, P_RENAMEAT, P_UNLINKAT, P_MKDIRAT,
    P_SPLICE, P_SENDTO, P_POLL_ADD


cdef class Prep:
    """One kind of SQE: ``prep(sqe, *args)`` fills *sqe* as liburing's function of the same
    name (``__name__``) does, with the binding's argument order; :meth:`RingCore.queue` fills
    it in C without the call. Called with an SQE of the binding's (a pure ring's), it hands
    the call to the binding's function of that name."""
    cdef readonly int code
    cdef readonly str name
    cdef readonly int nargs

    def __cinit__(self, int code, str name, int nargs):
        self.code = code
        self.name = name
        self.nargs = nargs

    @property
    def __name__(self):
        return self.name

    @property
    def __qualname__(self):
        return self.name

    def __repr__(self):
        return f"<tinycoro prep {self.name}>"

    def __reduce__(self):  # a copy fills the same SQE: queue() dispatches on the code, not identity
        return (Prep, (self.code, self.name, self.nargs))

    def __call__(self, sqe, *args):
        if type(sqe) is SQE:
            _fill((<SQE>sqe).ptr, self, args)
            return
        from tinycoro.compiled import import_binding  # a pure ring's SQE: the binding's own
        binding = import_binding()
        if self.code == P_TIMEOUT and args and type(args[0]) is timespec:
            args = ((<timespec>args[0]).twin(binding),) + args[1:]
        getattr(binding, self.name)(sqe, *args)


cdef object _path(object p):
    """A path argument as the kernel reads it: bytes (a str is encoded as os.fsencode does);
    the op keeps the object it was given, so the pointer into it stays valid."""
    if type(p) is not bytes:
        raise TypeError(f"path must be bytes, not {type(p).__name__}")
    if b"\0" in p:
        raise ValueError("embedded null byte in path")
    return p


cdef const sockaddr* _addr(object a, socklen_t* n) except NULL:
    """A socket address built by tinycoro.uring.sockaddr_in/sockaddr_un: the kernel's bytes."""
    if type(a) is not bytes:
        raise TypeError(f"a socket address must be bytes (tinycoro.uring.sockaddr_in), "
                        f"not {type(a).__name__}")
    n[0] = <socklen_t>PyBytes_GET_SIZE(a)
    return <const sockaddr*>PyBytes_AS_STRING(a)


cdef int _fill(io_uring_sqe* sqe, Prep prep, tuple args) except -1:
    """Fill *sqe* as *prep* says, from *args* (checked: a wrong count or type raises here)."""
    cdef size_t n
    cdef socklen_t alen
    cdef const sockaddr* addr
    cdef int code = prep.code
    if len(args) != prep.nargs:
        raise TypeError(f"{prep.name}() takes {prep.nargs} arguments after the SQE "
                        f"({len(args)} given)")
    if code == P_RECV:
        n = args[2]
        io_uring_prep_recv(sqe, args[0], _buffer(args[1], n, True), n, args[3])
    elif code == P_SEND:
        n = args[2]
        io_uring_prep_send(sqe, args[0], _buffer(args[1], n, False), n, args[3])
    elif code == P_READ:
        n = <unsigned int>args[2]
        io_uring_prep_read(sqe, args[0], _buffer(args[1], n, True), n, args[3])
    elif code == P_WRITE:
        n = <unsigned int>args[2]
        io_uring_prep_write(sqe, args[0], _buffer(args[1], n, False), n, args[3])
    elif code == P_NOP:
        io_uring_prep_nop(sqe)
    elif code == P_CANCEL:
        io_uring_prep_cancel64(sqe, args[0], args[1])
    elif code == P_TIMEOUT:
        io_uring_prep_timeout(sqe, &(<timespec?>args[0]).ts, args[1], args[2])
    elif code == P_OPENAT:  # (path, flags, mode, dfd)
        io_uring_prep_openat(sqe, args[3], _path(args[0]), args[1], args[2])
    elif code == P_CLOSE:
        io_uring_prep_close(sqe, args[0])
    elif code == P_FSYNC:
        io_uring_prep_fsync(sqe, args[0], args[1])
    elif code == P_ACCEPT:  # (fd, None, flags): the peer's address is not asked for
        if args[1] is not None:
            raise TypeError("io_uring_prep_accept: the address must be None")
        io_uring_prep_accept(sqe, args[0], NULL, NULL, args[2])
    elif code == P_CONNECT:
        io_uring_prep_connect(sqe, args[0], _addr(args[1], &alen), alen)
    elif code == P_SHUTDOWN:
        io_uring_prep_shutdown(sqe, args[0], args[1])
    elif code == P_STATX:  # (statx, path, flags, mask, dfd)
        io_uring_prep_statx(sqe, args[4], _path(args[1]), args[2], args[3],
                            &(<statx?>args[0]).buf)
    elif code == P_RENAMEAT:  # (old, new, olddfd, newdfd, flags)
        io_uring_prep_renameat(sqe, args[2], _path(args[0]), args[3], _path(args[1]), args[4])
    elif code == P_UNLINKAT:  # (path, flags, dfd)
        io_uring_prep_unlinkat(sqe, args[2], _path(args[0]), args[1])
    elif code == P_MKDIRAT:  # (path, mode, dfd)
        io_uring_prep_mkdirat(sqe, args[2], _path(args[0]), args[1])
    elif code == P_SPLICE:  # (fd_in, off_in, fd_out, off_out, nbytes, flags)
        io_uring_prep_splice(sqe, args[0], args[1], args[2], args[3], args[4], args[5])
    elif code == P_SENDTO:  # (fd, buf, nbytes, addr, flags)
        n = args[2]
        addr = _addr(args[3], &alen)
        io_uring_prep_sendto(sqe, args[0], _buffer(args[1], n, False), n, args[4], addr, alen)
    elif code == P_POLL_ADD:
        io_uring_prep_poll_add(sqe, args[0], args[1])
    else:  # P_RECV_MS: only RingCore.queue fills it (it needs the ring's buffers)
        raise RuntimeError("prep_recv_multishot is queued by the compiled ring only")
    return 0


prep_recv = Prep(P_RECV, "io_uring_prep_recv", 4)  # (fd, buf, nbytes, flags)
prep_send = Prep(P_SEND, "io_uring_prep_send", 4)  # (fd, buf, nbytes, flags)
prep_read = Prep(P_READ, "io_uring_prep_read", 4)  # (fd, buf, nbytes, offset)
prep_write = Prep(P_WRITE, "io_uring_prep_write", 4)  # (fd, buf, nbytes, offset)
prep_nop = Prep(P_NOP, "io_uring_prep_nop", 0)
prep_cancel = Prep(P_CANCEL, "io_uring_prep_cancel64", 2)  # (user_data, flags)
prep_timeout = Prep(P_TIMEOUT, "io_uring_prep_timeout", 3)  # (timespec, count, flags)
prep_openat = Prep(P_OPENAT, "io_uring_prep_openat", 4)  # (path, flags, mode, dfd)
prep_close = Prep(P_CLOSE, "io_uring_prep_close", 1)  # (fd)
prep_fsync = Prep(P_FSYNC, "io_uring_prep_fsync", 2)  # (fd, flags)
prep_accept = Prep(P_ACCEPT, "io_uring_prep_accept", 3)  # (fd, None, flags)
prep_connect = Prep(P_CONNECT, "io_uring_prep_connect", 2)  # (fd, addr)
prep_shutdown = Prep(P_SHUTDOWN, "io_uring_prep_shutdown", 2)  # (fd, how)
prep_statx = Prep(P_STATX, "io_uring_prep_statx", 5)  # (statx, path, flags, mask, dfd)
prep_renameat = Prep(P_RENAMEAT, "io_uring_prep_renameat", 5)  # (old, new, olddfd, newdfd, flags)
prep_unlinkat = Prep(P_UNLINKAT, "io_uring_prep_unlinkat", 3)  # (path, flags, dfd)
prep_mkdirat = Prep(P_MKDIRAT, "io_uring_prep_mkdirat", 3)  # (path, mode, dfd)
prep_splice = Prep(P_SPLICE, "io_uring_prep_splice", 6)
prep_sendto = Prep(P_SENDTO, "io_uring_prep_sendto", 5)  # (fd, buf, nbytes, addr, flags)
prep_poll_add = Prep(P_POLL_ADD, "io_uring_prep_poll_add", 2)  # (fd, poll_mask)
#: A multishot recv into the ring's provided buffers, ``(fd,)``: queued by
#: :meth:`RingCore.queue`; ``complete`` hands back each of its CQEs apart, for the op that
#: the owner's *standing* table holds under its user_data.
prep_recv_multishot = Prep(P_RECV_MS, "prep_recv_multishot", 1)


cdef char _EMPTY[1]


cdef int _submit_nogil(io_uring* ring) noexcept nogil:
    """``io_uring_submit`` for our rings, callable without the GIL: the submitted count, or
    ``-errno``.

    Only the system call happens without the GIL and only its result crosses back.

    Why it is released at all: for a socket operation ``io_uring_enter`` does the work inline
    (a loopback TCP send runs the whole TCP path, the receiver's wake-up included), for an
    O_DIRECT read it builds the bio and kicks the device. Microseconds during which another
    context's thread can run Python instead of waiting for this one.

    This is liburing's ``__io_uring_submit`` (queue.c) for a ring set up as ``_ring_open``
    allows (no SQPOLL, no IOPOLL, ring fd not registered): publish the SQ tail, then enter
    the kernel with the number of SQEs it has not consumed yet. A plain store of the tail is
    enough without SQPOLL: only this thread writes it and the kernel reads it inside the
    system call that follows. GETEVENTS is added when the kernel asks for it (overflowed CQ,
    pending task work), as liburing does, and to every submit of a DEFER_TASKRUN ring: there
    only an enter with GETEVENTS posts completions, and the one the submit makes anyway posts
    those that came in meanwhile, where the reap after it would have entered again.
    """
    cdef io_uring_sq* sq = &ring.sq
    cdef unsigned int tail = sq.sqe_tail
    cdef unsigned int flags = 0
    cdef unsigned int pending
    if sq.sqe_head != tail:
        sq.sqe_head = tail
        sq.ktail[0] = tail
    pending = tail - (<volatile unsigned int*>sq.khead)[0]
    if _kernel_holds_cqes(ring) or (pending and ring.flags & IORING_SETUP_DEFER_TASKRUN):
        flags = IORING_ENTER_GETEVENTS
    if pending == 0 and flags == 0:
        return 0
    return _ring_enter(ring, pending, flags)


cdef inline void* _buffer(object obj, size_t nbytes, bint writable) except NULL:
    """The address of *obj*'s bytes, checked to hold *nbytes*; the caller keeps *obj* alive.

    The export is released at once, as the binding's typed memoryviews do: the op keeps the
    object (for a bytearray, a memoryview slice of it, which pins its storage) until its CQE.
    """
    cdef Py_buffer view
    cdef void* addr
    # bytes, the common send (a stream's sendall passes recv's bytes as they are): its own
    # storage and size, what its buffer export returns, without the export and release
    # (~70 instructions per send, callgrind)
    if not writable and type(obj) is bytes:
        if <size_t>PyBytes_GET_SIZE(obj) < nbytes:
            raise ValueError(f"nbytes ({nbytes}) is larger than the buffer "
                             f"({PyBytes_GET_SIZE(obj)} bytes)")
        return PyBytes_AS_STRING(obj)
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
    """Per-operation methods over one io_uring instance; the subclass in uring.py owns it.

    The ring (``struct io_uring``) lives inside this object. :meth:`ring_open` sets it up and
    :meth:`ring_exit` tears it down, both called by the owner's lifecycle; every per-operation
    method below assumes an open ring (the owner never calls them on a closed one: rule 8).
    """

    cdef io_uring _ring
    # Whether submit() enters the kernel without the GIL (see submit); its owner decides.
    cdef public bint release_gil
    # The owner's wake word, set by a submit that released the GIL (set_return_word), or NULL;
    # _word_owner keeps the bytearray (and so the address) alive.
    cdef char* _word
    cdef object _word_owner
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
    # Where the CQ's state is read without a call into this object (core/cqwatch.pxd): its
    # head and tail and the flags that say the kernel holds CQEs back; head NULL while closed.
    cdef Watch _watch

    def __cinit__(self, *args, **kwargs):
        memset(&self._ring, 0, sizeof(io_uring))
        self._ring.ring_fd = self._ring.enter_ring_fd = -1

    def __dealloc__(self):
        # An owner that never closed its ring (an exception between setup and use): the
        # mappings and the descriptor go with the object, not with the process; the provided
        # buffers only once the descriptor is closed (as multishot_free).
        if self._ring.ring_fd >= 0:
            _ring_unmap(&self._ring)
            close(self._ring.ring_fd)
        self._pb_unmap()

    # -- lifecycle (called by tinycoro.uring._Lifecycle) --------------------------------------
    def ring_open(self, unsigned int entries, unsigned int flags, unsigned int cq_entries):
        """Set the ring up: *entries* SQEs, setup *flags*, a CQ of *cq_entries* (0: the
        kernel's default, twice *entries*; else IORING_SETUP_CQSIZE, rounded up to a power of
        two). Why a CQ larger than twice the SQ: every armed multishot recv may post a CQE in
        one turn, and a kernel that finds the CQ full ends the multishot (no
        IORING_CQE_F_MORE), so with 1,000 connections on a 512-entry CQ every turn ended
        hundreds of them, each armed again by its next recv. Raises OSError with the kernel's
        errno."""
        cdef int ret
        if self._ring.ring_fd >= 0:
            raise RuntimeError("the ring is already set up")
        ret = _ring_open(&self._ring, entries, flags, cq_entries)
        if ret < 0:
            raise OSError(-ret, _os.strerror(-ret))
        self._watch.tail = self._ring.cq.ktail
        self._watch.kflags = self._ring.sq.kflags
        self._watch.held = IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN  # as _kernel_holds_cqes
        self._watch.head = self._ring.cq.khead

    def ring_exit(self):
        """Tear the ring down (``io_uring_queue_exit``): unmap it and close its descriptor,
        which unregisters its eventfd and buffer ring and cancels what is left in it."""
        if self._ring.ring_fd < 0:
            return
        self._watch.head = NULL  # the watch says "look" from now on, never reads the unmapped CQ
        _ring_unmap(&self._ring)
        close(self._ring.ring_fd)
        self._ring.ring_fd = self._ring.enter_ring_fd = -1

    def register_eventfd(self, int efd):
        """Have completions signal *efd* (``io_uring_register_eventfd``); OSError if refused."""
        self._register(IORING_REGISTER_EVENTFD, &efd, 1)

    def unregister_eventfd(self):
        self._register(IORING_UNREGISTER_EVENTFD, NULL, 0)

    def enable_rings(self):
        """Enable a ring set up with ``IORING_SETUP_R_DISABLED`` (``io_uring_enable_rings``):
        with ``IORING_SETUP_SINGLE_ISSUER`` the calling thread becomes the one thread that may
        submit to it (and, with DEFER_TASKRUN, reap). OSError if refused."""
        self._register(_REGISTER_ENABLE_RINGS, NULL, 0)

    cdef int _register(self, unsigned opcode, void* arg, unsigned nr) except -1:
        cdef long ret = syscall(SYS_io_uring_register, self._ring.ring_fd, opcode, arg, nr)
        if ret < 0:
            ret = errno
            raise OSError(ret, _os.strerror(ret))
        return 0

    @property
    def ring_fd(self):
        """The ring's descriptor (-1 once closed)."""
        return self._ring.ring_fd

    # -- submission -------------------------------------------------------------------------
    cdef io_uring_sqe* _take(self) except NULL:
        """A free SQE; when the SQ is full, submit what is queued and take one again."""
        cdef io_uring_sqe* sqe = io_uring_get_sqe(&self._ring)
        if sqe is NULL:
            try:
                self.submit()
            except OSError as e:
                if e.errno in (_errno.EBUSY, _errno.EAGAIN):
                    raise RingBusy(e.errno, e.strerror) from None
                raise
            sqe = io_uring_get_sqe(&self._ring)
            if sqe is NULL:  # the kernel consumed nothing; cannot happen
                raise RuntimeError("io_uring SQ still full after submit")
        return sqe

    def queue(self, prep, tuple args not None, unsigned long long ud):
        """Queue one SQE as ``prep(sqe, *args)`` would fill it, with ``user_data`` *ud*.

        Every :class:`Prep` of this module is filled here in C, with no call; any other
        callable runs in Python on an :class:`SQE` of the same slot. If the prep raises, the
        SQE (already taken, maybe half-filled) becomes a NOP with ``SKIP_UD`` and the error
        propagates: the kernel never sees a half-prepared operation (rule 11).
        Raises :class:`RingBusy`, having queued nothing, when the kernel takes no more SQEs.
        """
        self._queue(prep, args, ud)

    cdef int _queue(self, prep, tuple args, unsigned long long ud) except -1:
        """:meth:`queue`, a C call (its owner's, through :meth:`c_calls`)."""
        cdef io_uring_sqe* sqe = self._take()
        cdef SQE view
        try:
            if type(prep) is Prep:
                if (<Prep>prep).code == P_RECV_MS:
                    if self._pb_state != 1:
                        raise RuntimeError("multishot recv queued on a ring without buffers")
                    io_uring_prep_recv_multishot(sqe, args[0], NULL, 0, 0)
                    sqe.flags |= _IOSQE_BUFFER_SELECT
                    sqe.buf_group = _BGID
                else:
                    _fill(sqe, <Prep>prep, args)
            else:
                view = SQE.__new__(SQE)
                view.ptr = sqe
                prep(view, *args)
        except BaseException:
            io_uring_prep_nop(sqe)
            io_uring_sqe_set_data64(sqe, _SKIP_UD)
            raise
        io_uring_sqe_set_data64(sqe, ud)
        return 0

    def get_sqe(self):
        """A free SQE, for callers that prepare it by hand (``prep(sqe, *args)``).

        A fresh :class:`SQE` each time, so an SQE handed out earlier stays valid until it is
        submitted, as with the Python ring.
        """
        cdef SQE sqe = SQE.__new__(SQE)
        sqe.ptr = self._take()
        return sqe

    def set_return_word(self, word):
        """Have a submit that releases the GIL set ``word[0]`` to 2 as its system call returns,
        before it asks for the GIL back, and clear it once it has it (*word*: a one-byte
        ``bytearray``, never resized; None: no word). The engine passes its wake word, which a
        busy peer reads at its turn's end and answers by handing the GIL over
        (core/wakeword.py): without it, a context back from ``io_uring_enter`` waited for a
        peer that ran turn after turn until the switch interval forced a switch."""
        if word is None:
            self._word = NULL
        else:
            if type(word) is not bytearray or len(word) != 1:
                raise TypeError("the return word is a one-byte bytearray")
            self._word = PyByteArray_AS_STRING(word)
        self._word_owner = word

    def submit(self):
        """Hand every prepared SQE to the kernel, without the GIL while ``release_gil`` is
        set. Retries after EINTR (once the signal handlers have run: one that raises ends the
        retry, PEP 475). Released, the return word (``set_return_word``) says "back from the
        kernel, waiting for the GIL" from the system call's return until the GIL is back.

        Why the GIL is not always released: a release wakes the thread waiting for the GIL,
        which restarts its switch interval and finds the GIL taken back at once, so it never
        asks for a switch. A context busy enough to submit more often than every switch
        interval then starved the process's other threads (the main thread unwinding a
        Ctrl-C waited up to seconds); only a peer context gains from the release."""
        return self._submit()

    cdef int _submit(self) except -1:
        """:meth:`submit`, a C call (its owner's, through :meth:`c_calls`)."""
        cdef io_uring* ring = &self._ring
        cdef char* word = self._word
        cdef int n
        while True:
            if self.release_gil:
                with nogil:
                    n = _submit_nogil(ring)
                    if word != NULL:
                        tc_word_store(word, 2)
                if word != NULL:
                    tc_word_store(word, 0)
            else:
                n = _submit_nogil(ring)
            if n >= 0:
                return n
            if n != -EINTR:
                raise OSError(-n, _os.strerror(-n))
            PyErr_CheckSignals()  # raises what a signal handler raised (KeyboardInterrupt)

    def sq_ready(self):
        return io_uring_sq_ready(&self._ring)

    cdef unsigned _sq_ready(self) noexcept:
        return io_uring_sq_ready(&self._ring)

    @property
    def cq_entries(self):
        """Entries of the completion queue (0 once the ring has closed)."""
        return self._ring.cq.ring_entries if self._ring.ring_fd >= 0 else 0

    # -- completion -------------------------------------------------------------------------
    def reap(self, list out not None):
        """Append ``(user_data, res)`` for each ready CQE to *out*; return how many. The
        by-hand interface (notebooks/10_io_uring.ipynb); the engine uses ``complete``.

        ``_peek`` flushes the kernel's CQ overflow list when it has to, so no completion
        beyond the CQ's 2 x entries is lost (same as the Python ring).
        """
        cdef io_uring* ring = &self._ring
        cdef io_uring_cqe* cqe
        cdef Py_ssize_t n = 0
        while True:
            cqe = _peek(ring)
            if cqe == NULL:
                return n
            out.append((cqe.user_data, cqe.res))
            io_uring_cqe_seen(ring, cqe)
            n += 1

    def complete(self, list slots not None, list free not None, dict standing not None,
                 list done not None, list shots not None):
        """Reap every ready CQE and find its op in *slots*; return how many CQEs were reaped,
        multishots' left out (the completion contract in ``tinycoro/uring.py``).

        For each CQE whose slot holds an op (``slots[user_data & ~MULTI_UD_TAG]``), that entry
        is set to None, the slot's user_data (the next entry, an int made with the slot)
        appended to *free*, and ``op, res`` appended to *done*. Any other
        CQE is one of the owner's own SQEs and is only counted. Nothing of the op is read or
        written here. A CQE whose user_data has ``MULTI_UD_TAG`` and whose slot holds an op
        (one of *standing*, the owner's multishots) is appended to *shots* as four entries,
        ``op, res, data, more``, instead, uncounted (its op is handed to nobody, so the owner
        must not take it for one of its own SQEs): its data copied out, its buffer given back
        and the CQE marked seen before the owner runs any handler, so a handler that raises
        can neither replay it nor lose or double a buffer (rule 17). Its last CQE (no
        ``IORING_CQE_F_MORE``) frees the slot and takes the op out of *standing*. The owner's
        tables are the one record of what is in flight: the ring keeps no copy of them.
        """
        return self._complete(slots, free, standing, done, shots)

    cdef Py_ssize_t _complete(self, list slots, list free, dict standing, list done,
                              list shots) except -1:
        """:meth:`complete`, a C call (its owner's, through :meth:`c_calls`)."""
        cdef io_uring* ring = &self._ring
        cdef io_uring_cqe* cqe
        cdef Py_ssize_t n = 0
        cdef unsigned long long ud
        cdef unsigned long long slot
        cdef int res
        cdef unsigned int flags
        cdef object data
        cdef object op
        cdef uint16_t bid
        cdef bint more
        cdef Py_ssize_t ready = io_uring_cq_ready(ring)
        if ready > 1:  # each CQE appends 2 entries to done, or 4 to shots (tc_list_reserve)
            tc_list_reserve(done, PyList_GET_SIZE(done) + 2 * ready)
            tc_list_reserve(shots, PyList_GET_SIZE(shots) + 4 * ready)
            tc_list_reserve(free, PyList_GET_SIZE(free) + ready)
        while True:
            cqe = _peek(ring)
            if cqe == NULL:
                return n
            ud = cqe.user_data
            res = cqe.res
            flags = cqe.flags
            # an index into the owner's list, where a dict keyed by user_data was looked up
            # and emptied per op (at 10,000 connections it rehashed and missed the cache);
            # slot 0 (SKIP_UD's) never holds an op, and a user_data beyond the table (none of
            # the owner's) holds none either. The size is read per CQE: the list is the owner's.
            slot = ud & ~_MULTI_UD_TAG
            if slot + 1 < <unsigned long long>PyList_GET_SIZE(slots):
                op = <object>PyList_GET_ITEM(slots, <Py_ssize_t>slot)
            else:
                op = None
            if op is None:  # one of the owner's own SQEs
                io_uring_cqe_seen(ring, cqe)
                n += 1
                continue
            # an armed op (RingOwner.arm tags its user_data): a multishot recv's CQE, one of
            # many; a send's CQE, untagged, is never taken for one
            if ud & _MULTI_UD_TAG:
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
                # four entries, not a tuple: a tuple per CQE, alive for the whole reap,
                # filled the collector's young generation at many connections
                tc_list_push(shots, op)
                tc_list_push(shots, res)
                tc_list_push(shots, data)
                tc_list_push(shots, more)
                if not more:
                    slots[<Py_ssize_t>slot] = None
                    tc_list_push(free, <object>PyList_GET_ITEM(slots, <Py_ssize_t>slot + 1))
                    standing.pop(ud, None)
                continue
            io_uring_cqe_seen(ring, cqe)
            n += 1
            slots[<Py_ssize_t>slot] = None
            # the slot's own int: a new one per completion was an allocation (and, at
            # 10,000 connections, often a cache miss) where ops number past 256
            tc_list_push(free, <object>PyList_GET_ITEM(slots, <Py_ssize_t>slot + 1))
            # two entries, not a tuple: as the shots above
            tc_list_push(done, op)
            tc_list_push(done, res)

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
        unmapped only after the ring has closed (:meth:`multishot_free`, or the dealloc of a
        core dropped unclosed), so no buffer the kernel may still write into is ever given
        back to the allocator."""
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
            ret = syscall(SYS_io_uring_register, self._ring.ring_fd, _REGISTER_PBUF_RING,
                          &reg, 1)
        self.incremental = ret >= 0
        if ret < 0:  # not asked for, or a kernel older than 6.12: whole buffers
            reg.flags = 0
            ret = syscall(SYS_io_uring_register, self._ring.ring_fd, _REGISTER_PBUF_RING,
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
        self._pb_unmap()
        self._pb_state = -1  # closed: no multishot any more

    cdef void _pb_unmap(self) noexcept nogil:
        if self._pb_ring != NULL:
            munmap(self._pb_ring, self._pb_ring_bytes)
            munmap(self._pb_mem, self._pb_mem_bytes)
            munmap(self._pb_used, self._pb_count * sizeof(uint32_t))
            self._pb_used = NULL
            self._pb_ring = NULL
            self._pb_mem = NULL

    def cq_ready(self):
        """CQEs posted and not reaped yet; when there is none but the kernel holds completions
        back (task work not run yet, its CQ overflow list), 1: reaping (``complete``) enters it
        with GETEVENTS to post them. With DEFER_TASKRUN the sleep point depends on it: the
        kernel writes the eventfd only for the first completion it holds back, so one held
        while notifications were off would otherwise be slept on, and no later one would
        write it either (a lost wake-up)."""
        return self._cq_ready()

    cdef unsigned _cq_ready(self) noexcept:
        cdef unsigned n = io_uring_cq_ready(&self._ring)
        if n == 0 and _kernel_holds_cqes(&self._ring):
            return 1
        return n

    def notify_on(self, bint enabled):
        """Let completions write the eventfd (before sleeping) or not (while awake)."""
        io_uring_cq_eventfd_toggle(&self._ring, enabled)

    def cq_watch(self):
        """The address of this ring's CQ watch (``core/cqwatch.pxd``): compiled, the owner's
        reap reads through it whether :meth:`complete` has anything to do, the same words it
        and :meth:`cq_ready` read, without calling it. Valid while this object lives; after
        :meth:`ring_exit` it says "look"."""
        return <size_t>&self._watch

    def c_calls(self):
        """The address of this module's table of the per-operation calls (``queue``,
        ``complete``, ``submit``, ``sq_ready``, ``cq_ready``, and the store of ``release_gil``
        before a submit) as C functions that take the ring as their first argument
        (``core/ringcalls.pxd``): compiled, the owner calls through it where, bound once,
        each was a Python-level call with its arguments parsed (~200 instructions per
        operation). 0 when this ring's class redefines any of them in Python: the owner then
        calls them by name, so the redefinition is what runs."""
        cdef type cls = type(self)
        for name in _CALL_NAMES:
            if getattr(cls, name) is not getattr(RingCore, name):
                return 0
        return <size_t>&_CALLS


# -- the owner's calls, as C (core/ringcalls.pxd) ------------------------------------------------
# The owner passes the ring that handed it the table out (RingOwner keeps it for good); the
# arguments get the checks the methods' signatures make.
_CALL_NAMES = ("queue", "complete", "submit", "sq_ready", "cq_ready", "release_gil")


cdef int _c_queue(object ring, object prep, object args, unsigned long long ud) except -1:
    if not isinstance(args, tuple):
        raise TypeError(f"queue() args must be a tuple, not {type(args).__name__}")
    return (<RingCore>ring)._queue(prep, <tuple>args, ud)


cdef Py_ssize_t _c_complete(object ring, object slots, object free, object standing,
                            object done, object shots) except -1:
    if not (isinstance(slots, list) and isinstance(free, list) and isinstance(standing, dict)
            and isinstance(done, list) and isinstance(shots, list)):
        raise TypeError("complete() takes four lists and a dict")
    return (<RingCore>ring)._complete(<list>slots, <list>free, <dict>standing, <list>done,
                                      <list>shots)


cdef int _c_submit(object ring) except -1:
    return (<RingCore>ring)._submit()


cdef unsigned _c_sq_ready(object ring) noexcept:
    return (<RingCore>ring)._sq_ready()


cdef unsigned _c_cq_ready(object ring) noexcept:
    return (<RingCore>ring)._cq_ready()


cdef void _c_set_release_gil(object ring, bint on) noexcept:
    (<RingCore>ring).release_gil = on


cdef RingCalls _CALLS
_CALLS.queue = _c_queue
_CALLS.complete = _c_complete
_CALLS.submit = _c_submit
_CALLS.sq_ready = _c_sq_ready
_CALLS.cq_ready = _c_cq_ready
_CALLS.set_release_gil = _c_set_release_gil
