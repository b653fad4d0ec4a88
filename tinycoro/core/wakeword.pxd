# What compiled modules use of wakeword.py: its wait() and hand_over() as C functions (the
# module doc says why). A module cimports it under the name its .py imports it by
# (``from . cimport wakeword`` beside ``from . import wakeword``), as with core/fence.pxd. Not a
# compiled module itself: needed() and HAND_OVER_YIELDS stay the .py's.

cdef extern from *:
    """
    #include <errno.h>
    #include <poll.h>
    #include <sched.h>
    #include <stdint.h>
    #include <time.h>
    #include <unistd.h>

    /* The sleep point. The word is set before Py_END_ALLOW_THREADS asks for the GIL: that is
       the moment a busy peer must learn of, and the one Python code cannot see. Relaxed
       atomics: the word is a hint read at a turn's end, and a late read costs one turn. */
    static int tc_ww_wait(PyObject *word, int efd, double timeout) {
        char *w = PyByteArray_AS_STRING(word);
        uint64_t count;
        struct pollfd pfd;
        struct timespec ts;
        int ready = 1, err = 0;
        if (timeout >= 0) {
            if (timeout > 1e9)  /* ~31 years: the engine's loop waits again after that */
                timeout = 1e9;
            ts.tv_sec = (time_t)timeout;
            /* one nanosecond more than the truncation: never before the bound */
            ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9) + 1;
            if (ts.tv_nsec > 999999999L)
                ts.tv_nsec = 999999999L;
            pfd.fd = efd;
            pfd.events = POLLIN;
            pfd.revents = 0;
        }
        Py_BEGIN_ALLOW_THREADS
        if (timeout >= 0) {
            int r = ppoll(&pfd, 1, &ts, NULL);
            if (r < 0)
                err = errno;
            ready = r > 0;
        }
        if (ready && read(efd, &count, sizeof count) < 0)
            err = errno;
        __atomic_store_n(w, 1, __ATOMIC_RELAXED);
        Py_END_ALLOW_THREADS
        if (err == EINTR)  /* an early wake-up; a handler that raises propagates */
            return PyErr_CheckSignals() < 0 ? -1 : 0;
        if (err) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        return 0;
    }

    /* The hand-over. Once the peer has the GIL (or the bound is reached), the caller's own
       word says "waiting for the GIL" (2) until it has it back: the peer hands it back at its
       turn's end instead of keeping it until the switch interval. Set only after the peer's
       word cleared, so two contexts never wait on each other's words. */
    static int tc_ww_hand_over(PyObject *word, PyObject *own, Py_ssize_t limit) {
        char *w = PyByteArray_AS_STRING(word);
        char *o = PyByteArray_AS_STRING(own);
        Py_ssize_t n = 0;
        int cleared;
        Py_BEGIN_ALLOW_THREADS
        while (__atomic_load_n(w, __ATOMIC_RELAXED) && n < limit) {
            sched_yield();
            n++;
        }
        cleared = !__atomic_load_n(w, __ATOMIC_RELAXED);
        __atomic_store_n(o, 2, __ATOMIC_RELAXED);
        Py_END_ALLOW_THREADS
        __atomic_store_n(o, 0, __ATOMIC_RELAXED);
        return cleared;
    }
    """
    int wait "tc_ww_wait"(bytearray word, int efd, double timeout) except -1
    bint hand_over "tc_ww_hand_over"(bytearray word, bytearray own, Py_ssize_t limit)
