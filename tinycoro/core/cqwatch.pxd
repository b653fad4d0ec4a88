# The engine's "is there anything to reap?" as a few loads, without a call into the ring: a module
# cimports it under the name its .py imports it by (``from . cimport cqwatch`` beside ``from .
# import cqwatch``), as with fence.pxd. The compiled ring (_cring.pyx) fills a Watch with the
# addresses of its CQ's head and tail and of the flags where the kernel says it holds
# completions back, and hands its address out (RingCore.cq_watch). Not a compiled module
# itself: there is nothing here to compile.

cdef extern from *:
    """
    #include <stddef.h>
    typedef struct {
        const unsigned *head;   /* the CQ's head: we advance it as we reap */
        const unsigned *tail;   /* the CQ's tail: the kernel advances it as it posts */
        const unsigned *kflags; /* the SQ ring's flags: the kernel holds CQEs back */
        unsigned held;          /* the kflags bits that say so (CQ overflow, task work) */
    } tc_cq_watch;

    /* Nothing to reap: no CQE posted, none held back (the ring's cq_ready and its reap's peek
       look at the same words). 0 (look) for no watch or a closed ring. */
    static inline int tc_cq_idle(size_t addr) {
        const tc_cq_watch *w = (const tc_cq_watch *)addr;
        if (w == NULL || w->head == NULL)
            return 0;
        return __atomic_load_n(w->tail, __ATOMIC_ACQUIRE) == *w->head
            && (__atomic_load_n(w->kflags, __ATOMIC_RELAXED) & w->held) == 0;
    }
    """
    ctypedef struct Watch "tc_cq_watch":
        const unsigned* head
        const unsigned* tail
        const unsigned* kflags
        unsigned held
    bint idle "tc_cq_idle" (size_t watch) noexcept nogil
