# What compiled modules use of directview.py: its direct_view() as a C function (the module doc
# says why). A module cimports it under the name its .py imports it by (``from . cimport
# directview`` beside ``from . import directview``), as with core/fence.pxd.
# Not a compiled module itself: there is nothing here to compile.

cdef extern from *:
    """
    #include <string.h>
    #include <unistd.h>

    /* O_DIRECT's alignment: the page size, as direct.DIRECT_ALIGN (mmap.PAGESIZE). Read once
       per module; a data race on first use writes the same value twice. */
    static Py_ssize_t tc_direct_page = 0;

    /* A new memoryview of buf, when buf is a writable, flat (one dimension, one byte an item,
       format "B", contiguous) buffer of a non-zero multiple of the page size that starts on a
       page boundary, and offset is a page multiple: everything O_DIRECT and a ring read ask
       of a read's buffer, read from the view's own Py_buffer. None (no error set) for anything
       else, which the caller sends through the checks that say what is wrong: a failed
       memoryview() is retried there, so its error is raised with the call's own words. */
    static PyObject *tc_direct_view(PyObject *buf, long long offset) {
        Py_ssize_t page = tc_direct_page;
        PyObject *view;
        Py_buffer *b;
        if (page == 0) {
            long p = sysconf(_SC_PAGESIZE);
            tc_direct_page = page = p > 0 ? (Py_ssize_t)p : 4096;
        }
        if (offset & (page - 1))
            Py_RETURN_NONE;
        view = PyMemoryView_FromObject(buf);
        if (view == NULL) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        b = PyMemoryView_GET_BUFFER(view);
        if (b->readonly || b->ndim != 1 || b->itemsize != 1 || b->len <= 0
                || (b->len & (page - 1)) || ((size_t)b->buf & (size_t)(page - 1))
                || (b->strides != NULL && b->strides[0] != 1) || b->suboffsets != NULL
                || (b->format != NULL && strcmp(b->format, "B") != 0)) {
            Py_DECREF(view);
            Py_RETURN_NONE;
        }
        return view;
    }
    """
    object direct_view "tc_direct_view" (object buf, long long offset)
