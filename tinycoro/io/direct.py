"""O_DIRECT's rules: page-aligned buffers (:func:`aligned_buffer`), and the check that a read's
or write's buffer address, size and offset are aligned (:func:`check_direct`), which the kernel
would otherwise refuse with a bare EINVAL.

The buffer's address is ``tinycoro._cfile.buffer_address`` when compiled (~3.5 us less per
O_DIRECT read), or its Python spelling here through the C buffer protocol
(:mod:`tinycoro.compiled` chooses; ``TINYCORO_PURE=1`` runs the Python one).
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Callable

from .. import compiled
from ..buffers import MAX_RW
from ..core.checks import check_int

__all__ = ["DIRECT_ALIGN", "address", "aligned_buffer", "check_direct"]

# O_DIRECT: buffer address, size and offset must be multiples of the device's logical block
# size (512 or 4096 here); requiring the page size satisfies every device.
DIRECT_ALIGN = mmap.PAGESIZE


class _PyBuffer(ctypes.Structure):
    # The C Py_buffer (stable ABI since 3.3): only used to read the address of a buffer.
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = (ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int)
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = (ctypes.POINTER(_PyBuffer),)


def address_py(view: memoryview) -> int:
    """The memory address of *view*'s first byte (read-only buffers included)."""
    pb = _PyBuffer()
    _get_buffer(view, ctypes.byref(pb), 0)
    try:
        return pb.buf or 0
    finally:
        _release_buffer(ctypes.byref(pb))


_cfile = compiled.load("_cfile")
address: Callable[[memoryview], int] = _cfile.buffer_address if _cfile is not None else address_py


def check_direct(view: memoryview | None, size: int, offset: int) -> None:
    """ValueError unless *view*'s address (when given), *size* and *offset* suit O_DIRECT."""
    a = DIRECT_ALIGN  # (compiled: C integers, direct.pxd; the checks are C arithmetic)
    if view is not None and address(view) % a:
        raise ValueError(f"direct=True: the buffer's address must be aligned to {a} bytes; "
                         "use tc.io.aligned_buffer(size)")
    if size % a:
        raise ValueError(f"direct=True: the size must be a multiple of {a} bytes, got {size}")
    if offset % a:
        raise ValueError(f"direct=True: the offset must be a multiple of {a} bytes, got {offset}")


def aligned_buffer(size: int) -> memoryview:
    """A zero-filled, page-aligned, writable buffer of *size* bytes, for ``direct=True`` files.

    Anonymous ``mmap`` memory starts on a page boundary; the view keeps the mapping alive.
    """
    check_int("size", size, min=1, max=MAX_RW)
    return memoryview(mmap.mmap(-1, size))

