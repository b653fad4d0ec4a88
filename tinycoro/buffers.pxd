# Augments buffers.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes buffers.py
# with this file beside it). The .py is the source; it has no classes to lay out. Compiled,
# the checks every read, write, send and recv makes on its buffer argument run as C: on an
# O_DIRECT readinto_at they were two of the five Python calls per read.
