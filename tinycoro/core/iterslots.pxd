# What compiled modules use of iterslots.py: its install() as a C function (the module doc
# says why). In core, beside the traps: the trap layer's own awaitables and the stream's
# (net) use it, and core cannot import net (net imports core). A module cimports it under the name its .py imports it by (``from . cimport
# iterslots`` beside ``from . import iterslots``), as with core/fence.pxd. Not a compiled
# module itself: there is nothing here to compile. The C below is copied into each module
# that cimports this one, so its statics (the steps) are that module's own: up to
# TC_ITER_MAX classes per module, each with slot functions of its own. The spare
# StopIteration is the process's one, shared through tinycoro.core.iterslots (see below).

cdef extern from *:
    """
    typedef PyObject *(*tc_iter_fn)(PyObject *);
    typedef PyObject *(*tc_iter_step_fn)(PyObject *, PyObject *);

    /* One installed class: its steps. The slot functions below are made once per index
       (TC_ITER_SLOTS), each reading its own entry, so a class's await pays no lookup of
       which class it is, and a module may install several (an op and a ready value, a
       file's read and write). */
    #define TC_ITER_MAX 4
    typedef struct {
        PyTypeObject *type;
        tc_iter_step_fn step;
        tc_iter_step_fn send_step;
        tc_iter_fn result;
        PyObject *end;  /* what the steps return once the await is over; NULL: the object itself */
    } tc_iter_entry;
    static tc_iter_entry tc_iter_entries[TC_ITER_MAX];
    static int tc_iter_count = 0;

    /* Set StopIteration(value) (value borrowed); -1 if that failed (another error is set).
       A tuple value stays whole (the exception is made with one argument). 3.12 and later
       keep an exception only as an instance, so each set made one (allocated, initialised,
       torn down by the await that takes its value). With the GIL, one spare instance is
       reused instead while this module holds its only reference: no one else can see it
       then, so its value can change under nobody's eyes. Only for None, exact ints (an op's
       count, a write's total) and bytes of at most TC_ITER_SPARE_MAX (a recv's chunk, a
       small read): the spare keeps its last value until
       the next, which must be nothing bigger or livelier (no __del__ to run, no large read
       held; the args tuple holds atoms only, as the collector expects of one it untracked).
       One still referenced (kept by an except clause, say) or carrying anything besides
       its value (a traceback, a context, notes) is left to its holder, and a new spare made. The error indicator
       takes it as raised (PyErr_SetRaisedException), with no implicit __context__: the
       awaits that take it fetch it at once. Free-threaded builds make one per set: a
       reference count read by one thread says nothing about another's.

       One spare for the process, not one per module: the spare keeps the value of the await
       it ended last, and a module that reuses that value (_cfile's bytes) must know all of
       its dead references (tc_iter_holds). With one per module, io/file's kept the bytes of
       each read that ended after a budget yield, and the next read allocated 4 KiB anew. The first module to install a class publishes its slot in
       tinycoro.core.iterslots (a capsule); the others use that one (tc_iter_link_spare). */
    #if PY_VERSION_HEX >= 0x030C0000 && !defined(Py_GIL_DISABLED)
    #define TC_ITER_SPARE_MAX 65536
    #define TC_ITER_SPARE_CAPSULE "tinycoro.core.iterslots._spare_stop_slot"
    static PyObject *tc_iter_spare_own = NULL;  /* the process's slot, if this module was first */
    static PyObject **tc_iter_spare_slot = &tc_iter_spare_own;
    #define tc_iter_spare_stop (*tc_iter_spare_slot)

    /* Point this module's spare at the process's slot; once per module, at its first install
       (module import). This code runs only with the GIL, and from the attribute's look-up
       to the publish nothing releases it, so two modules never both publish. The import
       before it may (when it is the first import of tinycoro.core.iterslots), but the
       look-up comes after. Import locks are per module and would not ensure this. */
    static int tc_iter_link_spare(void) {
        static int linked = 0;
        PyObject *mod, *cap;
        void *slot;
        if (linked)
            return 0;
        mod = PyImport_ImportModule("tinycoro.core.iterslots");
        if (mod == NULL)
            return -1;
        cap = PyObject_GetAttrString(mod, "_spare_stop_slot");
        if (cap == NULL) {
            Py_DECREF(mod);
            return -1;
        }
        if (!PyCapsule_IsValid(cap, TC_ITER_SPARE_CAPSULE)) {
            Py_DECREF(cap);
            cap = PyCapsule_New((void *)&tc_iter_spare_own, TC_ITER_SPARE_CAPSULE, NULL);
            if (cap == NULL || PyObject_SetAttrString(mod, "_spare_stop_slot", cap) < 0) {
                Py_XDECREF(cap);
                Py_DECREF(mod);
                return -1;
            }
        }
        Py_DECREF(mod);
        slot = PyCapsule_GetPointer(cap, TC_ITER_SPARE_CAPSULE);
        Py_DECREF(cap);  /* the module keeps the capsule; the slot is a static of a module never unloaded */
        if (slot == NULL)
            return -1;
        tc_iter_spare_slot = (PyObject **)slot;
        linked = 1;
        return 0;
    }

    static int tc_iter_stop(PyObject *value) {
        PyObject *exc = tc_iter_spare_stop;
        PyStopIterationObject *e = (PyStopIterationObject *)exc;
        int small = value == Py_None || PyLong_CheckExact(value)
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
    /* The references the spare holds to *value* from the await it ended last, when only
       this module holds the spare (a reference count of 1, its args tuple's too): dead to
       everyone then, they are references the holder of a reused object (_cfile's spare
       bytes) may count as its own. Counting them costs a read of the spare; letting go of
       them (as this did) cost four reference count updates per cached read, and setting
       them again at the next await's end as many. 0 when anyone else holds the spare. */
    static inline Py_ssize_t tc_iter_holds(PyObject *value) {
        PyObject *exc = tc_iter_spare_stop;
        PyStopIterationObject *e = (PyStopIterationObject *)exc;
        if (exc == NULL || Py_REFCNT(exc) != 1 || e->args == NULL || Py_REFCNT(e->args) != 1
                || PyTuple_GET_SIZE(e->args) != 1)
            return 0;
        return (e->value == value) + (PyTuple_GET_ITEM(e->args, 0) == value);
    }
    #else
    static int tc_iter_link_spare(void) {
        return 0;  /* no spare: nothing to share */
    }
    static inline Py_ssize_t tc_iter_holds(PyObject *value) {
        (void)value;  /* no spare: a StopIteration is made per set, and gone with its await */
        return 0;
    }
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
       method is given); the await is over when the step returns the entry's end marker
       (the object itself, unless the class yields itself as its trap: an op): its result
       is then result(obj). NULL is an error, raised as it is (no traceback entry added). */
    /* What a step returned, passed on while the await goes on; once the step returned the
       object itself, NULL with the result as StopIteration. With none_ends, a None result
       sets no exception: NULL with none is "exhausted", which every caller of tp_iternext
       (the interpreter's await on 3.12+, yield from, next(), a for loop) takes as a return
       of None, so no StopIteration is made at all. */
    static PyObject *tc_iter_finish(const tc_iter_entry *e, PyObject *self, PyObject *r,
                                    int none_ends) {
        if (r != (e->end != NULL ? e->end : self))
            return r;
        Py_DECREF(r);
        r = e->result(self);
        if (r == NULL)
            return NULL;
        if (!(none_ends && r == Py_None))
            tc_iter_stop(r);
        Py_DECREF(r);
        return NULL;
    }

    /* am_send (3.10+): PyIter_Send, the interpreter's await on 3.10 and 3.11, and a compiled
       coroutine's await (Cython delegates through it) take the result as a return. */
    static PySendResult tc_iter_am_send(const tc_iter_entry *e, PyObject *self, PyObject *arg,
                                        PyObject **presult) {
        PyObject *r = e->step(self, arg);
        if (r == NULL) {
            *presult = NULL;
            return PYGEN_ERROR;
        }
        if (r != (e->end != NULL ? e->end : self)) {
            *presult = r;
            return PYGEN_NEXT;
        }
        Py_DECREF(r);
        r = e->result(self);
        *presult = r;
        return r == NULL ? PYGEN_ERROR : PYGEN_RETURN;
    }

    /* The slots of entry i: tp_iternext; the type's `send` method, which 3.12 and later
       resume an await on a non-generator through by name whenever the value sent is not
       None (an op's result) (a C method: a compiled `def send` ending in `raise
       StopIteration` took Cython's error exit, which adds a traceback entry, a frame and a
       code object, per call; a method must set an exception when it returns NULL, so a
       None result sets one too); and am_send. */
    #define TC_ITER_SLOTS(i) \
        static PyObject *tc_iter_next_##i(PyObject *self) { \
            const tc_iter_entry *e = &tc_iter_entries[i]; \
            return tc_iter_finish(e, self, e->step(self, Py_None), 1); \
        } \
        static PyObject *tc_iter_send_method_##i(PyObject *self, PyObject *arg) { \
            const tc_iter_entry *e = &tc_iter_entries[i]; \
            return tc_iter_finish(e, self, e->send_step(self, arg), 0); \
        } \
        static PySendResult tc_iter_send_##i(PyObject *self, PyObject *arg, PyObject **presult) { \
            return tc_iter_am_send(&tc_iter_entries[i], self, arg, presult); \
        }
    TC_ITER_SLOTS(0)
    TC_ITER_SLOTS(1)
    TC_ITER_SLOTS(2)
    TC_ITER_SLOTS(3)

    #define TC_ITER_SEND_DOC "send(value): resume the await with value; StopIteration(result) once it is over."
    static PyMethodDef tc_iter_send_defs[TC_ITER_MAX] = {
        {"send", (PyCFunction)tc_iter_send_method_0, METH_O, TC_ITER_SEND_DOC},
        {"send", (PyCFunction)tc_iter_send_method_1, METH_O, TC_ITER_SEND_DOC},
        {"send", (PyCFunction)tc_iter_send_method_2, METH_O, TC_ITER_SEND_DOC},
        {"send", (PyCFunction)tc_iter_send_method_3, METH_O, TC_ITER_SEND_DOC},
    };
    static iternextfunc tc_iter_nexts[TC_ITER_MAX] = {
        tc_iter_next_0, tc_iter_next_1, tc_iter_next_2, tc_iter_next_3,
    };
    static sendfunc tc_iter_sends[TC_ITER_MAX] = {
        tc_iter_send_0, tc_iter_send_1, tc_iter_send_2, tc_iter_send_3,
    };

    static int tc_iter_install(PyObject *cls, tc_iter_step_fn step, tc_iter_fn result,
                               tc_iter_step_fn send, PyObject *end) {
        PyTypeObject *t = (PyTypeObject *)cls;
        PyObject *descr;
        int rc, j, i = tc_iter_count;
        if (!PyType_Check(cls) || t->tp_as_async == NULL || t->tp_dict == NULL) {
            PyErr_SetString(PyExc_TypeError, "iterslots.install: a compiled class with __await__");
            return -1;
        }
        for (j = 0; j < tc_iter_count; j++) {
            if (tc_iter_entries[j].type == t) {
                PyErr_SetString(PyExc_TypeError, "iterslots.install: this class has its slots already");
                return -1;
            }
        }
        if (i >= TC_ITER_MAX) {
            PyErr_SetString(PyExc_TypeError,
                            "iterslots.install: more classes in one module than TC_ITER_MAX");
            return -1;
        }
        if (tc_iter_link_spare() < 0)
            return -1;
        /* the slots written below belong to this type alone: a base's async struct (which a
           static subtype may point at) would hand these steps to its other subtypes */
        if (t->tp_base != NULL && t->tp_base->tp_as_async == t->tp_as_async) {
            PyErr_SetString(PyExc_TypeError, "iterslots.install: the class shares its base's tp_as_async");
            return -1;
        }
        descr = PyDescr_NewMethod(t, &tc_iter_send_defs[i]);
        if (descr == NULL)
            return -1;
        rc = PyDict_SetItemString(t->tp_dict, "send", descr);
        Py_DECREF(descr);
        if (rc < 0)
            return -1;
        tc_iter_entries[i].type = t;
        tc_iter_entries[i].step = step;
        tc_iter_entries[i].send_step = send;
        tc_iter_entries[i].result = result;
        /* held for good, as the type is: the entry lives as long as the module */
        if (end == Py_None)
            end = NULL;
        Py_XINCREF(end);
        tc_iter_entries[i].end = end;
        tc_iter_count = i + 1;
        t->tp_iternext = tc_iter_nexts[i];
        t->tp_as_async->am_send = tc_iter_sends[i];
        PyType_Modified(t);  /* the method caches keyed by the type's version see the new send */
        return 0;
    }
    /* Whether obj has at most n references, the ones its caller knows of: under the GIL
       nobody else can see it then, so the caller may reuse it (io/ops' spare reads).
       Free-threaded builds: never (a reference count read by one thread says nothing about
       another's). */
    #if defined(Py_GIL_DISABLED)
    #define tc_iter_held_only(obj, n) 0
    #else
    #define tc_iter_held_only(obj, n) (Py_REFCNT(obj) <= (n))
    #endif
    """
    ctypedef object (*tc_iter_fn)(object)
    ctypedef object (*tc_iter_step_fn)(object, object)
    int _install "tc_iter_install"(object cls, tc_iter_step_fn step, tc_iter_fn result,
                                   tc_iter_step_fn send, object end) except -1
    # (compiled modules only: _cfile's reused bytes; see tc_iter_holds)
    Py_ssize_t holds "tc_iter_holds"(object value)
    bint held_only "tc_iter_held_only"(object obj, Py_ssize_t n)


# iterslots.py's install() and advance(), for the compiled modules: install() with the C
# function, advance() as a C function (a class's ``__next__`` and ``send`` called by name).
cdef inline int install(object cls, tc_iter_step_fn step, tc_iter_fn result, tc_iter_step_fn send,
                        object end=None) except -1:
    return _install(cls, step, result, send, end)


cdef inline object advance(object obj, object value, tc_iter_step_fn step, tc_iter_fn result,
                           object end=None):
    y = step(obj, value)
    if y is (obj if end is None else end):
        raise StopIteration(result(obj))
    return y
