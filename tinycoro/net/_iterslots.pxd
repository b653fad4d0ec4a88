# What compiled modules use of _iterslots.py: its install() as a C function (the module doc
# says why). A module cimports it under the name its .py imports it by (``from . cimport
# _iterslots`` beside ``from . import _iterslots``), as with core/fence.pxd. Not a compiled
# module itself: there is nothing here to compile.

cdef extern from *:
    """
    typedef PyObject *(*tc_iter_fn)(PyObject *);
    typedef PyObject *(*tc_iter_step_fn)(PyObject *, PyObject *);
    static tc_iter_step_fn tc_iter_step = NULL;
    static tc_iter_fn tc_iter_result = NULL;

    /* step(obj, value): resumed with value (None from __next__, what am_send is given);
       the await is over when the step returns the object itself: its result is then
       tc_iter_result(obj). NULL is an error, raised as it is (no traceback entry added). */
    static PyObject *tc_iter_next(PyObject *self) {
        PyObject *r = tc_iter_step(self, Py_None);
        PyObject *exc;
        if (r != self)
            return r;
        Py_DECREF(r);
        r = tc_iter_result(self);
        if (r == NULL)
            return NULL;
        exc = PyObject_CallOneArg(PyExc_StopIteration, r);  /* a tuple result stays whole */
        Py_DECREF(r);
        if (exc != NULL) {
            PyErr_SetObject(PyExc_StopIteration, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }

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

    static int tc_iter_install(PyObject *cls, tc_iter_step_fn step, tc_iter_fn result) {
        PyTypeObject *t = (PyTypeObject *)cls;
        if (!PyType_Check(cls) || t->tp_as_async == NULL) {
            PyErr_SetString(PyExc_TypeError, "_iterslots.install: a class with __await__");
            return -1;
        }
        tc_iter_step = step;
        tc_iter_result = result;
        t->tp_iternext = tc_iter_next;
        t->tp_as_async->am_send = tc_iter_send;
        PyType_Modified(t);
        return 0;
    }
    """
    ctypedef object (*tc_iter_fn)(object)
    ctypedef object (*tc_iter_step_fn)(object, object)
    int install "tc_iter_install"(object cls, tc_iter_step_fn step, tc_iter_fn result) except -1
