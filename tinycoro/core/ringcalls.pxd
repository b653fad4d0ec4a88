# The compiled ring's per-operation calls (and its release_gil switch) as C function pointers, for
# its owner: a module cimports it under the name its .py imports it by (``from . cimport ringcalls``
# beside ``from . import ringcalls``), as with cqwatch.pxd. The compiled ring (_cring.pyx) fills one
# table of these with its own C functions and hands its address out (RingCore.c_calls); the owner
# (ring.py) calls through it with the ring object as the first argument. Not a compiled module
# itself: there is nothing here to compile.

cdef extern from *:
    """
    #include <stddef.h>
    typedef struct {
        /* RingCore.queue: 0, or -1 with an exception set */
        int (*queue)(PyObject *ring, PyObject *prep, PyObject *args, unsigned long long ud);
        /* RingCore.complete: the CQEs counted, or -1 with an exception set */
        Py_ssize_t (*complete)(PyObject *ring, PyObject *slots, PyObject *free,
                               PyObject *standing, PyObject *done, PyObject *shots);
        /* RingCore.submit: the SQEs the kernel took, or -1 with an exception set */
        int (*submit)(PyObject *ring);
        /* RingCore.sq_ready and RingCore.cq_ready: never fail */
        unsigned (*sq_ready)(PyObject *ring);
        unsigned (*cq_ready)(PyObject *ring);
        /* RingCore.release_gil = on: never fails */
        void (*set_release_gil)(PyObject *ring, int on);
    } tc_ring_calls;

    #define tc_ring_queue(calls, ring, prep, args, ud) \\
        (((const tc_ring_calls *)(calls))->queue((ring), (prep), (args), (ud)))
    #define tc_ring_complete(calls, ring, slots, free, standing, done, shots) \\
        (((const tc_ring_calls *)(calls))->complete((ring), (slots), (free), (standing), \\
                                                    (done), (shots)))
    #define tc_ring_submit(calls, ring) (((const tc_ring_calls *)(calls))->submit(ring))
    #define tc_ring_sq_ready(calls, ring) (((const tc_ring_calls *)(calls))->sq_ready(ring))
    #define tc_ring_cq_ready(calls, ring) (((const tc_ring_calls *)(calls))->cq_ready(ring))
    #define tc_ring_set_release_gil(calls, ring, on) \
        (((const tc_ring_calls *)(calls))->set_release_gil((ring), (on)))

    /* free.pop() for the owner's list of free slots, without letting its storage go: list.pop
       shrinks a list that falls below half its room, and the reap that frees the slots again
       grows it back, a realloc each way (~15,000 per 77,000 echo requests, ~60 instructions
       per request; callgrind, CPython 3.11). The list's last reference is handed over as
       list.pop hands it, and its length is one less. Only on a GIL build before 3.14 (what
       _cring.pyx's tc_list_reserve vouches for): elsewhere, and for an empty list, list.pop. */
    static CYTHON_INLINE PyObject *tc_pop_keep(PyObject *list) {
    #if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX < 0x030E0000
        Py_ssize_t n = Py_SIZE(list);
        if (n > 0) {
            Py_SET_SIZE(list, n - 1);
            return ((PyListObject *)list)->ob_item[n - 1];
        }
    #endif
        return PyObject_CallMethod(list, "pop", NULL);
    }
    """
    ctypedef struct RingCalls "tc_ring_calls":
        int (*queue)(object ring, object prep, object args, unsigned long long ud) except -1
        Py_ssize_t (*complete)(object ring, object slots, object free, object standing,
                               object done, object shots) except -1
        int (*submit)(object ring) except -1
        unsigned (*sq_ready)(object ring) noexcept
        unsigned (*cq_ready)(object ring) noexcept
        void (*set_release_gil)(object ring, bint on) noexcept
    # *calls*: the table's address (RingCore.c_calls), never 0 here
    int queue "tc_ring_queue" (size_t calls, object ring, object prep, object args,
                               unsigned long long ud) except -1
    Py_ssize_t complete "tc_ring_complete" (size_t calls, object ring, object slots,
                                            object free, object standing, object done,
                                            object shots) except -1
    int submit "tc_ring_submit" (size_t calls, object ring) except -1
    unsigned sq_ready "tc_ring_sq_ready" (size_t calls, object ring) noexcept
    unsigned cq_ready "tc_ring_cq_ready" (size_t calls, object ring) noexcept
    void set_release_gil "tc_ring_set_release_gil" (size_t calls, object ring, bint on) noexcept
    # the last entry of the owner's free-slot list, taken off (a new reference), as list.pop
    object pop_keep "tc_pop_keep" (list free)
