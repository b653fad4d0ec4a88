# The running task's read, as a C call for the compiled read path: io/file.pxd cimports it
# under the name io/file.py imports from core/local (this function, or its pure twin).

cpdef object running_task()

# This thread's ``engine``, as a C call for the compiled hot paths (net's ops) that cimport it
# under the name they import from core/local.
cpdef object running_engine()

# The engine's write of this thread's ``task`` at every step, as a C call (engine.pxd cimports it
# under the name engine.py imports from core/local).
cpdef set_running_task(object task)
