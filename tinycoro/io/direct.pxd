# Augments direct.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes direct.py
# with this file beside it). The .py is the source; it has no classes of its own to lay out
# (the ctypes structure stays a Python class). Compiled, the alignment check that every
# O_DIRECT read and write makes runs as C instead of one more Python call per read.

cimport cython

# A C call from file.pxd's read path, with C arithmetic: every O_DIRECT read makes it. Callers
# pass a size and an offset checked already (a length, an offset <= MAX_OFFSET).
@cython.locals(a=Py_ssize_t)
cpdef check_direct(object view, Py_ssize_t size, long long offset)
