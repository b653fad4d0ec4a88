# Augments buffers.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes buffers.py
# with this file beside it). The .py is the source; it has no classes to lay out. Compiled,
# the checks every read, write, send and recv makes on its buffer argument run as C: on an
# O_DIRECT readinto_at they were two of the five Python calls per read.

# C calls from file.pxd's read and write paths (an O_DIRECT readinto_at made two Python calls
# here per read, ~100 instructions of call overhead); still Python functions for everyone else.
cpdef object as_bytes_view(object data, object what, object param=*)
cpdef object writable_view(object buf, object what)
