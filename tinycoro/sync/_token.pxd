# What compiled modules use of _token.py: its take() and give() as C functions (the module doc
# says why). A module cimports it under the name its .py imports it by (``from . cimport
# _token`` beside ``from . import _token``), as with core/fence.pxd. Not a compiled module
# itself: there is nothing here to compile.

cdef extern from *:
    """
    /* The set's own C calls: each one step under the GIL (no Python code runs: the element is
       the int 0, whose hash and equality are C), and under the set's own lock (a critical
       section) without it. Discard says whether the element was there, so taking needs no
       exception when it was not. */
    static int tc_token_take(PyObject *token) {
        static PyObject *zero = NULL;
        if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
            return -1;
        return PySet_Discard(token, zero);
    }
    static int tc_token_give(PyObject *token) {
        static PyObject *zero = NULL;
        if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
            return -1;
        return PySet_Add(token, zero);
    }
    """
    bint take "tc_token_take" (object token) except -1
    int give "tc_token_give" (object token) except -1
