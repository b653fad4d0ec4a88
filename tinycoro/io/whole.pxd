# Augments whole.py when it is compiled (rule 14 of docs/design.md; setup.py cythonizes whole.py
# with this file beside it): the budget's check in read_file is a C call into the engine.

from ..core.engine cimport spend_inline
