# What compiled modules use of tokens.py: its new(), take(), give() and spare() as C functions
# (the module doc says why). A module cimports it under the name its .py imports it by
# (``from ..core cimport tokens`` beside ``from ..core import tokens``), as with fence.pxd.
# Not a compiled module itself: there is nothing here to compile.

cdef extern from *:
    """
    /* A token is a list of one element (None) while it is free, of none while taken; a free
       list of spares is a list. Each step below reads and writes the list's own fields and
       calls nothing: under the GIL no other thread runs between its read of the size and
       its write (no Python code, no allocation, no decref that could free anything: the
       element is None, immortal from 3.12 and never freed before). Without the GIL the same
       step runs under the list's own lock (a critical section), as list.pop and
       list.append do. No exception is set on any path but a give's allocation failure, and
       none is saved or restored: no read of the thread state (a call into the shared
       libpython's thread-local storage on 3.12 and later). */
    #ifdef Py_GIL_DISABLED
    /* Py_BEGIN_CRITICAL_SECTION opens a block and ends without a semicolon */
    #define TC_TOKEN_LOCK(l) Py_BEGIN_CRITICAL_SECTION(l);
    #define TC_TOKEN_UNLOCK() Py_END_CRITICAL_SECTION()
    #define TC_TOKEN_STORE(slot, v) _Py_atomic_store_ptr_release((slot), (v))
    #else
    #define TC_TOKEN_LOCK(l) {
    #define TC_TOKEN_UNLOCK() }
    #define TC_TOKEN_STORE(slot, v) (*(slot) = (v))
    #endif

    /* The last element of *list*, removed (a new reference), or NULL if it is empty. The
       slot is left as list.pop leaves it: outside the size, so nothing reads it. */
    static CYTHON_INLINE PyObject *tc_token_pop(PyObject *list) {
        PyListObject *l = (PyListObject *)list;
        PyObject *item = NULL;
        Py_ssize_t n;
        TC_TOKEN_LOCK(list)
        n = Py_SIZE(l);
        if (n > 0) {
            item = l->ob_item[n - 1];
            Py_SET_SIZE(l, n - 1);
        }
        TC_TOKEN_UNLOCK()
        return item;
    }

    static CYTHON_INLINE int tc_token_take(PyObject *token) {
        PyObject *item = tc_token_pop(token);
        if (item == NULL)
            return 0;
        Py_DECREF(item);  /* None: never the last reference */
        return 1;
    }

    /* Put the token back unless it is there: giving twice still leaves one. */
    static CYTHON_INLINE int tc_token_give(PyObject *token) {
        PyListObject *l = (PyListObject *)token;
        int room;
        TC_TOKEN_LOCK(token)
        room = Py_SIZE(l) == 0 && l->allocated >= 1;
        if (room) {
            TC_TOKEN_STORE(&l->ob_item[0], Py_NewRef(Py_None));
            Py_SET_SIZE(l, 1);
        }
        TC_TOKEN_UNLOCK()
        /* a list made empty has room for one: this append is for one that never had it */
        if (!room && PyList_GET_SIZE(token) == 0)
            return PyList_Append(token, Py_None);
        return 0;
    }

    static CYTHON_INLINE PyObject *tc_token_spare(PyObject *spares) {
        PyObject *item = tc_token_pop(spares);
        return item != NULL ? item : Py_NewRef(Py_None);
    }

    /* A free token: untracked by the collector (it holds None, so it is in no cycle). */
    static PyObject *tc_token_new(void) {
        PyObject *token = PyList_New(1);
        if (token == NULL)
            return NULL;
        PyList_SET_ITEM(token, 0, Py_NewRef(Py_None));
        PyObject_GC_UnTrack(token);
        return token;
    }
    """
    list new "tc_token_new"()
    bint take "tc_token_take"(object token) noexcept
    int give "tc_token_give"(object token) except -1
    object spare "tc_token_spare"(object spares)
