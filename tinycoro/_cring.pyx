# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot half of :class:`tinycoro.uring.Ring`, compiled: take SQEs, submit, reap completions.

Each method here is one Python call that does its whole loop in C. It cimports the ``liburing``
binding's declarations and calls the binding's ``cpdef`` functions through their exported C
API, so no ``liburing.name`` lookup, no bound-method call and no ``io_uring_cqe`` attribute
property is paid per completion: reaping costs 44-70 ns per CQE instead of 172-302 through
the Python API (docs/benchmarks.md, "The compiled ring"). Nothing is linked against liburing itself: the binding's module does the
system calls.

Only the per-operation paths live here. Creating and closing the ring, the eventfd and the
error messages stay in Python (``tinycoro/uring.py``), shared with the pure-Python ring.
"""

from liburing.queue cimport (
    io_uring,
    io_uring_cqe,
    io_uring_sqe,
    io_uring_get_sqe,
    io_uring_submit,
    io_uring_sq_ready,
    io_uring_cq_ready,
    io_uring_peek_cqe,
    io_uring_cqe_seen,
    io_uring_cq_has_overflow,
    io_uring_cq_eventfd_toggle,
)


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
    def get_sqe(self):
        """A free SQE; when the SQ is full, submit what is queued and take one again.

        A fresh ``io_uring_sqe`` object each time (the binding's own constructor), so an
        SQE handed out earlier stays valid until it is submitted, as with the Python ring.
        """
        cdef io_uring_sqe sqe = io_uring_get_sqe(self._ring)
        if sqe.ptr is NULL:
            self.submit()
            sqe = io_uring_get_sqe(self._ring)
            if sqe.ptr is NULL:  # the kernel consumed nothing; cannot happen
                raise RuntimeError("io_uring SQ still full after submit")
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
    def reap(self, list out not None, Py_ssize_t limit=1 << 30):
        """Append ``(user_data, res)`` for each ready CQE to *out*; return how many.

        ``io_uring_peek_cqe`` flushes the kernel's CQ overflow list when it has to, so no
        completion beyond the CQ's 2 x entries is lost (same as the Python ring).
        """
        cdef io_uring ring = self._ring
        cdef io_uring_cqe cqe = self._cqe
        cdef Py_ssize_t n = 0
        while n < limit and io_uring_peek_cqe(ring, cqe) == 0:
            out.append((cqe.ptr.user_data, cqe.ptr.res))
            io_uring_cqe_seen(ring, cqe)
            n += 1
        return n

    def cq_ready(self):
        return io_uring_cq_ready(self._ring)

    def has_overflow(self):
        return io_uring_cq_has_overflow(self._ring)

    def notify_on(self, bint enabled):
        """Let completions write the eventfd (before sleeping) or not (while awake)."""
        io_uring_cq_eventfd_toggle(self._ring, enabled)
