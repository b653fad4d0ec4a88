# Augments direct.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes direct.py
# with this file beside it). The .py is the source; it has no classes of its own to lay out
# (the ctypes structure stays a Python class). Compiled, the alignment check that every
# O_DIRECT read and write makes runs as C instead of one more Python call per read.
