# What compiled modules use of _nbsend.py: its send() and recv_into() as C functions (the module doc says
# why). A module cimports it under the name its .py imports it by (``from . cimport _nbsend``
# beside ``from . import _nbsend``), as with core/fence.pxd. Not a compiled module itself.

cdef extern from *:
    """
    #include <errno.h>
    #include <sys/socket.h>

    static Py_ssize_t tc_nb_send(PyObject *sock, int fd, PyObject *data, int flags) {
        Py_buffer view;
        Py_ssize_t n;
        int err;
        (void)sock;  /* the pure-Python twin's way in */
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
            return -1;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            n = send(fd, view.buf, (size_t)view.len, flags);
            err = errno;
            Py_END_ALLOW_THREADS
            if (n >= 0 || err != EINTR)
                break;
            if (PyErr_CheckSignals() < 0) {  /* as the socket does: a handler may raise */
                PyBuffer_Release(&view);
                return -1;
            }
        }
        PyBuffer_Release(&view);
        if (n < 0)  /* the negative errno, no exception: EAGAIN is a common answer */
            return -(Py_ssize_t)err;
        return n;
    }

    /* recv(2) of at most n bytes into buf's writable buffer: the bytes that came (0 at EOF),
       -2 for EAGAIN with no exception set (an empty socket is the common answer, not an
       error), -1 with the OSError set for any other failure. */
    static Py_ssize_t tc_nb_recv_into(PyObject *sock, int fd, PyObject *buf, Py_ssize_t n,
                                      int flags) {
        Py_buffer view;
        Py_ssize_t got;
        int err;
        (void)sock;
        if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) < 0)
            return -1;
        if (n > view.len)
            n = view.len;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            got = recv(fd, view.buf, (size_t)n, flags);
            err = errno;
            Py_END_ALLOW_THREADS
            if (got >= 0 || err != EINTR)
                break;
            if (PyErr_CheckSignals() < 0) {
                PyBuffer_Release(&view);
                return -1;
            }
        }
        PyBuffer_Release(&view);
        if (got < 0) {
            if (err == EAGAIN || err == EWOULDBLOCK)
                return -2;
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        return got;
    }

    /* accept4(2) on the non-blocking listener fd: the new descriptor, or the negative errno
       with no exception set (-EAGAIN: nobody in the backlog), or -1 with an exception set
       when a signal handler raised (Cython tells that from -EPERM by the exception). */
    static int tc_nb_accept(PyObject *sock, int fd, int flags) {
        int got, err;
        (void)sock;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            got = accept4(fd, NULL, NULL, flags);
            err = errno;
            Py_END_ALLOW_THREADS
            if (got >= 0)
                return got;
            if (err != EINTR)
                return err == EWOULDBLOCK ? -EAGAIN : -err;
            if (PyErr_CheckSignals() < 0)
                return -1;
        }
    }
    """
    # -1 with an exception set: a signal handler raised (else it is -EPERM)
    Py_ssize_t send "tc_nb_send"(object sock, int fd, object data, int flags) except? -1
    Py_ssize_t recv_into "tc_nb_recv_into"(object sock, int fd, object buf, Py_ssize_t n,
                                           int flags) except -1
    int accept "tc_nb_accept"(object sock, int fd, int flags) except? -1
