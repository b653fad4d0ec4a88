# What compiled modules use of _untrack.py: its untracked() as a C function (the module doc says
# why). A module cimports it under the name its .py imports it by (``from . cimport _untrack``
# beside ``from . import _untrack``), as with core/iterslots.pxd. Not a compiled module itself.

cdef extern from *:
    """
    static PyObject *tc_untracked(PyObject *obj) {
        PyObject_GC_UnTrack(obj);  /* a no-op on an untracked object */
        Py_INCREF(obj);
        return obj;
    }
    """
    object untracked "tc_untracked"(object obj)
