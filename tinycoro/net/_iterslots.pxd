# What compiled modules use of _iterslots.py: its install() as a C function (the module doc
# says why). A module cimports it under the name its .py imports it by (``from . cimport
# _iterslots`` beside ``from . import _iterslots``), as with core/fence.pxd. Not a compiled
# module itself: there is nothing here to compile. The C below is copied into each module
# that cimports this one, so its statics (the steps, the spare StopIteration) are that
# module's own: one class per module (install refuses a second).

cdef extern from *:
    """
    typedef PyObject *(*tc_iter_fn)(PyObject *);
    typedef PyObject *(*tc_iter_step_fn)(PyObject *, PyObject *);
    static PyTypeObject *tc_iter_type = NULL;
    static tc_iter_step_fn tc_iter_step = NULL;
    static tc_iter_step_fn tc_iter_send_step = NULL;
    static tc_iter_fn tc_iter_result = NULL;

    /* Set StopIteration(value) (value borrowed); -1 if that failed (another error is set).
       A tuple value stays whole (the exception is made with one argument). 3.12 and later
       keep an exception only as an instance, so each set made one (allocated, initialised,
       torn down by the await that takes its value). With the GIL, one spare instance is
       reused instead while this module holds its only reference: no one else can see it
       then, so its value can change under nobody's eyes. Only for None and bytes of at most
       TC_ITER_SPARE_MAX (a recv's chunk, a small read): the spare keeps its last value until
       the next, which must be nothing bigger or livelier (no __del__ to run, no large read
       held; the args tuple holds atoms only, as the collector expects of one it untracked).
       One still referenced (kept by an except clause, say) or carrying anything besides
       its value (a traceback, a context, notes) is left to its holder, and a new spare made. The error indicator
       takes it as raised (PyErr_SetRaisedException), with no implicit __context__: the
       awaits that take it fetch it at once. Free-threaded builds make one per set: a
       reference count read by one thread says nothing about another's. */
    #if PY_VERSION_HEX >= 0x030C0000 && !defined(Py_GIL_DISABLED)
    #define TC_ITER_SPARE_MAX 65536
    static PyObject *tc_iter_spare_stop = NULL;

    static int tc_iter_stop(PyObject *value) {
        PyObject *exc = tc_iter_spare_stop;
        PyStopIterationObject *e = (PyStopIterationObject *)exc;
        int small = value == Py_None
            || (PyBytes_CheckExact(value) && PyBytes_GET_SIZE(value) <= TC_ITER_SPARE_MAX);
        if (small && exc != NULL && Py_REFCNT(exc) == 1 && e->args != NULL && Py_REFCNT(e->args) == 1
                && e->dict == NULL && e->notes == NULL && e->traceback == NULL
                && e->context == NULL && e->cause == NULL) {
            PyObject *args = e->args;
            PyObject *old_arg = PyTuple_GET_ITEM(args, 0);
            PyObject *old_value = e->value;
            Py_INCREF(value);
            PyTuple_SET_ITEM(args, 0, value);
            Py_INCREF(value);
            e->value = value;
            e->suppress_context = 0;
            Py_INCREF(exc);
            PyErr_SetRaisedException(exc);
            Py_XDECREF(old_arg);  /* None or bytes: freeing them runs no code */
            Py_XDECREF(old_value);
            return 0;
        }
        exc = PyObject_CallOneArg(PyExc_StopIteration, value);
        if (exc == NULL)
            return -1;
        e = (PyStopIterationObject *)exc;
        if (small && Py_TYPE(exc) == (PyTypeObject *)PyExc_StopIteration && e->args != NULL
                && PyTuple_CheckExact(e->args) && PyTuple_GET_SIZE(e->args) == 1) {
            Py_INCREF(exc);
            Py_XSETREF(tc_iter_spare_stop, exc);
        }
        PyErr_SetRaisedException(exc);
        return 0;
    }
    #else
    static int tc_iter_stop(PyObject *value) {
        PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, value);
        if (exc == NULL)
            return -1;
        PyErr_SetObject(PyExc_StopIteration, exc);
        Py_DECREF(exc);
        return 0;
    }
    #endif

    /* step(obj, value): resumed with value (None from __next__, what am_send or the send
       method is given); the await is over when the step returns the object itself: its
       result is then tc_iter_result(obj). NULL is an error, raised as it is (no traceback
       entry added). */
    /* What a step returned, passed on while the await goes on; once the step returned the
       object itself, NULL with the result as StopIteration. With none_ends, a None result
       sets no exception: NULL with none is "exhausted", which every caller of tp_iternext
       (the interpreter's await on 3.12+, yield from, next(), a for loop) takes as a return
       of None, so no StopIteration is made at all. */
    static PyObject *tc_iter_finish(PyObject *self, PyObject *r, int none_ends) {
        if (r != self)
            return r;
        Py_DECREF(r);
        r = tc_iter_result(self);
        if (r == NULL)
            return NULL;
        if (!(none_ends && r == Py_None))
            tc_iter_stop(r);
        Py_DECREF(r);
        return NULL;
    }

    static PyObject *tc_iter_next(PyObject *self) {
        return tc_iter_finish(self, tc_iter_step(self, Py_None), 1);
    }

    /* The type's `send` method: 3.12 and later resume an await on a non-generator through
       it whenever the value sent is not None (an op's result), by name. A C method: a
       compiled `def send` ending in `raise StopIteration` took Cython's error exit, which
       adds a traceback entry (a frame and a code object) per call. A method must set an
       exception when it returns NULL, so a None result sets one too. */
    static PyObject *tc_iter_send_method(PyObject *self, PyObject *arg) {
        return tc_iter_finish(self, tc_iter_send_step(self, arg), 0);
    }

    static PyMethodDef tc_iter_send_def = {
        "send", (PyCFunction)tc_iter_send_method, METH_O,
        "send(value): resume the await with value; StopIteration(result) once it is over."
    };

    /* am_send (3.10+): PyIter_Send, the interpreter's await on 3.10 and 3.11, and a compiled
       coroutine's await (Cython delegates through it) take the result as a return. */
    static PySendResult tc_iter_send(PyObject *self, PyObject *arg, PyObject **presult) {
        PyObject *r = tc_iter_step(self, arg);
        if (r == NULL) {
            *presult = NULL;
            return PYGEN_ERROR;
        }
        if (r != self) {
            *presult = r;
            return PYGEN_NEXT;
        }
        Py_DECREF(r);
        r = tc_iter_result(self);
        *presult = r;
        return r == NULL ? PYGEN_ERROR : PYGEN_RETURN;
    }

    static int tc_iter_install(PyObject *cls, tc_iter_step_fn step, tc_iter_fn result,
                               tc_iter_step_fn send) {
        PyTypeObject *t = (PyTypeObject *)cls;
        PyObject *descr;
        int rc;
        if (!PyType_Check(cls) || t->tp_as_async == NULL || t->tp_dict == NULL) {
            PyErr_SetString(PyExc_TypeError, "_iterslots.install: a compiled class with __await__");
            return -1;
        }
        if (tc_iter_type != NULL && tc_iter_type != t) {
            PyErr_SetString(PyExc_TypeError,
                            "_iterslots.install: one class per module (the steps are the module's)");
            return -1;
        }
        /* the slots written below belong to this type alone: a base's async struct (which a
           static subtype may point at) would hand these steps to its other subtypes */
        if (t->tp_base != NULL && t->tp_base->tp_as_async == t->tp_as_async) {
            PyErr_SetString(PyExc_TypeError, "_iterslots.install: the class shares its base's tp_as_async");
            return -1;
        }
        descr = PyDescr_NewMethod(t, &tc_iter_send_def);
        if (descr == NULL)
            return -1;
        rc = PyDict_SetItemString(t->tp_dict, "send", descr);
        Py_DECREF(descr);
        if (rc < 0)
            return -1;
        tc_iter_type = t;
        tc_iter_step = step;
        tc_iter_send_step = send;
        tc_iter_result = result;
        t->tp_iternext = tc_iter_next;
        t->tp_as_async->am_send = tc_iter_send;
        PyType_Modified(t);  /* the method caches keyed by the type's version see the new send */
        return 0;
    }
    """
    ctypedef object (*tc_iter_fn)(object)
    ctypedef object (*tc_iter_step_fn)(object, object)
    int install "tc_iter_install"(object cls, tc_iter_step_fn step, tc_iter_fn result,
                                  tc_iter_step_fn send) except -1
