# What compiled modules use of resume.py: its send() in C (resume.py's doc says why). The engine
# cimports it under the name its .py imports it by (``from . cimport resume`` beside ``from .
# import resume``), as it does fence. Not a compiled module itself: there is nothing here to
# compile.

from cpython.ref cimport PyObject, Py_XDECREF

from .task cimport Task

cdef extern from *:
    """
    /* The object send() returns when the coroutine returned: static and never freed (its
       reference count starts at one and stays above; immortal where CPython has them), and
       private, so no trap a coroutine yields can be taken for it. */
    static struct { PyObject_HEAD } tc_resume_returned = { PyObject_HEAD_INIT(&PyBaseObject_Type) };

    /* Context.run(coro.send, value) without the two method calls: enter the context, resume
       the coroutine through its am_send slot, leave the context (also when it raised, as
       Context.run does). A return is not raised as StopIteration(value), as coroutine.send
       says it, but handed back by value, as PyIter_Send gives it (PYGEN_RETURN): the value in
       *returned (a new reference), the result tc_resume_returned. */
    static PyObject *tc_resume_send(PyObject *context, PyObject *coro, PyObject *value,
                                    PyObject **returned) {
        PyObject *result = NULL;
        PySendResult status;
        if (PyContext_Enter(context) < 0)
            return NULL;
        status = PyIter_Send(coro, value, &result);
        if (PyContext_Exit(context) < 0) {
            Py_XDECREF(result);
            return NULL;
        }
        if (status == PYGEN_NEXT)
            return result;
        if (status == PYGEN_RETURN) {
            *returned = result;
            Py_INCREF((PyObject *)&tc_resume_returned);
            return (PyObject *)&tc_resume_returned;
        }
        return NULL;
    }
    """
    PyObject *RETURNED "((PyObject *)&tc_resume_returned)"
    object _send_in_context "tc_resume_send"(object context, object coro, object value,
                                             PyObject **returned)


# The engine's _step tells a return (returned) from a trap after its try block, where a
# StopIteration caught would have cost two traceback entries (resume.py's doc).
cdef inline object send(Task task, object value):
    cdef PyObject *returned = NULL
    y = _send_in_context(task._context, task._coro, value, &returned)
    if returned is not NULL:
        task._resume_value = <object>returned
        Py_XDECREF(returned)
    return y


cdef inline bint returned(object y):
    return <PyObject *>y == RETURNED
