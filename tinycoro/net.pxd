# Augments net.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes net.py with this
# file beside it). The .py is the source: this declares the layouts of a stream's operation
# awaitables (recv, sendall, accept), whose __await__ runs once per I/O call.

from .closing cimport ResourceOp

cdef class _RecvOp(ResourceOp):
    cdef public object view
    cdef public object token
    cdef public object owner

cdef class _SendallOp(ResourceOp):
    cdef public object token
    cdef public object owner

cdef class _AcceptOp(ResourceOp):
    cdef public object listener

cdef class _MsRecvOp(ResourceOp):
    cdef public object queue
    cdef public Py_ssize_t queued
    cdef public bint armed
    cdef public bint stopping
    cdef public object engine
    cdef public object waiter
    cdef public object ticket
    cdef public Py_ssize_t want
    cdef public object token
    cdef public object owner
    cdef public bint waited
