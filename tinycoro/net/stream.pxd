# Augments stream.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes stream.py
# with this file beside it). The .py is the source. Its classes stay Python classes (a stream
# is subclassed and given attributes freely); compiling the module makes the per-call steps of
# recv() and sendall() C code. Nothing needs declaring yet.
