# What compiled modules use of deques.py: a deque's append, popleft and length as C calls (the
# module doc says why). A module cimports it under the name its .py imports it by
# (``from . cimport deques`` beside ``from . import deques``), as with fence.pxd; a module that
# calls them calls init() once as it is imported.
# Not a compiled module itself: there is nothing here to compile.

cdef extern from *:
    """
    /* deque.append and deque.popleft as the C functions of the deque type's method table,
       found once (tc_deques_init) and called directly: through a bound method, each call
       went through the generic call protocol (a vectorcall, its recursion check: a read of
       the thread state, a call into libpython's thread-local storage on 3.12 and later),
       ~126 instructions a push on 3.12 (callgrind). The same C functions that the methods
       run, so the same behaviour: on a free-threaded build they take the deque's own lock
       (a critical section) as the methods do. A subclass gets deque's own append and
       popleft, as deques.py's interpreted ``deque.append(d, x)`` does; anything that is not
       a deque, or a method table not as expected, goes through the ordinary method call. The length is
       read the same way: a truth test of an untyped deque went through the type's slots
       (PyObject_IsTrue). */
    static PyTypeObject *tc_deque_type = NULL;
    static PyCFunction tc_deque_append_fn = NULL;  /* METH_O */
    static PyCFunction tc_deque_popleft_fn = NULL;  /* METH_NOARGS */

    static PyCFunction tc_deque_method(PyObject *type, const char *name, int flags) {
        PyObject *descr = PyObject_GetAttrString(type, name);
        PyCFunction fn = NULL;
        if (descr == NULL) {
            PyErr_Clear();
            return NULL;
        }
        if (Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
            PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
            if ((def->ml_flags & ~METH_COEXIST) == flags)
                fn = def->ml_meth;
        }
        Py_DECREF(descr);
        return fn;
    }

    /* Once per module that calls them, as it is imported (under the import lock). */
    static int tc_deques_init(void) {
        PyObject *mod, *type;
        if (tc_deque_type != NULL)
            return 0;
        mod = PyImport_ImportModule("collections");
        if (mod == NULL)
            return -1;
        type = PyObject_GetAttrString(mod, "deque");
        Py_DECREF(mod);
        if (type == NULL)
            return -1;
        if (!PyType_Check(type)) {
            Py_DECREF(type);
            return 0;  /* the generic calls only */
        }
        tc_deque_append_fn = tc_deque_method(type, "append", METH_O);
        tc_deque_popleft_fn = tc_deque_method(type, "popleft", METH_NOARGS);
        tc_deque_type = (PyTypeObject *)type;  /* kept: a type is never freed while in use */
        return 0;
    }

    /* len(d): a deque's length is its object header's size field, which deque's own len()
       returns (read relaxed-atomically without the GIL, as deque's len() does there); a
       subclass, which may define its own __len__, is asked as len() asks it. */
    static CYTHON_INLINE Py_ssize_t tc_deque_size(PyObject *d) {
        if (tc_deque_type != NULL && Py_IS_TYPE(d, tc_deque_type)) {
    #ifdef Py_GIL_DISABLED
            return _Py_atomic_load_ssize_relaxed(&((PyVarObject *)d)->ob_size);
    #else
            return Py_SIZE(d);
    #endif
        }
        return PyObject_Size(d);
    }

    /* None on success (a new reference), NULL with the error set, as deque.append. */
    static CYTHON_INLINE PyObject *tc_deque_append(PyObject *d, PyObject *item) {
        if (tc_deque_append_fn != NULL && PyObject_TypeCheck(d, tc_deque_type))
            return tc_deque_append_fn(d, item);
        return PyObject_CallMethod(d, "append", "O", item);
    }

    /* The leftmost item (a new reference), or NULL with IndexError set, as deque.popleft. */
    static CYTHON_INLINE PyObject *tc_deque_popleft(PyObject *d) {
        if (tc_deque_popleft_fn != NULL && PyObject_TypeCheck(d, tc_deque_type))
            return tc_deque_popleft_fn(d, NULL);
        return PyObject_CallMethod(d, "popleft", NULL);
    }
    """
    int init "tc_deques_init"() except -1
    object append "tc_deque_append"(object d, object item)
    object popleft "tc_deque_popleft"(object d)
    Py_ssize_t size "tc_deque_size"(object d) except? -1
