# What compiled modules use of _nbsend.py: its send() as a C function (the module doc says
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
        if (n < 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        return n;
    }
    """
    Py_ssize_t send "tc_nb_send"(object sock, int fd, object data, int flags) except -1
