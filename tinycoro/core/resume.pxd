# What compiled modules use of resume.py: its send() in C (resume.py's doc says why). The engine
# cimports it under the name its .py imports it by (``from . cimport resume`` beside ``from .
# import resume``), as it does fence. Not a compiled module itself: there is nothing here to
# compile.

from .task cimport Task

cdef extern from *:
    """
    /* Context.run(coro.send, value) without the two method calls: enter the context, resume
       the coroutine through its am_send slot, leave the context (also when it raised, as
       Context.run does). A return is StopIteration(value), as coroutine.send says it. */
    static PyObject *tc_resume_send(PyObject *context, PyObject *coro, PyObject *value) {
        PyObject *result = NULL;
        PySendResult status;
        PyObject *stop;
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
            stop = PyObject_CallOneArg(PyExc_StopIteration, result);
            Py_DECREF(result);
            if (stop != NULL) {
                PyErr_SetObject(PyExc_StopIteration, stop);
                Py_DECREF(stop);
            }
        }
        return NULL;
    }
    """
    object _send_in_context "tc_resume_send"(object context, object coro, object value)


cdef inline object send(Task task, object value):
    return _send_in_context(task._context, task._coro, value)
