# The running task's read, as a C call for the compiled read path: io/file.pxd cimports it
# under the name io/file.py imports from core/local (this function, or its pure twin).

cpdef object running_task()
