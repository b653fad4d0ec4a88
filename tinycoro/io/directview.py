"""The O_DIRECT read's buffer checks in one pass: :func:`direct_view`.

An O_DIRECT ``readinto_at`` must make its own view of the caller's buffer (the ring read holds
that view, an export of the buffer, until the kernel's completion: the caller cannot release
or resize the memory under a read in flight, nor can a cancel leave it to the kernel) and
check that view: writable, flat bytes, and its address, size and offset aligned for O_DIRECT.
Done as ``writable_view`` then ``check_direct``, that was ~2,400 instructions per read, compiled:
a memoryview, its attributes read one Python attribute at a time, and a second buffer
export for the address. None of it can be done once per buffer instead: a view's address
never changes, but a bytearray's moves when it is resized between reads, and nothing can
mark a memoryview as checked. So it is done per read, cheaply: compiled code cimports
``directview.pxd`` under this module's name (as ``core/fence``), where ``direct_view`` is a C
function that reads the new view's own ``Py_buffer``. This is the pure-Python twin, with the
same answers.

Only the common case is answered here; anything else (None) goes through the checks that say
what is wrong, at the call, in their own words.
"""

from __future__ import annotations

from typing import Any

from .direct import DIRECT_ALIGN, address

__all__ = ["direct_view"]


def direct_view(buf: Any, offset: int) -> memoryview | None:
    """A new memoryview of *buf* when *buf* is writable, flat bytes (format ``"B"``,
    contiguous), non-empty, page-aligned at its start and in its size, and *offset* (an int
    in range) is a page multiple; None for anything else."""
    a = DIRECT_ALIGN
    if offset % a:
        return None
    try:
        view = memoryview(buf)
    except Exception:  # not a buffer, a released view: the caller's checks say which
        return None
    n = view.nbytes
    if (view.readonly or view.ndim != 1 or view.format != "B" or not view.c_contiguous
            or not n or n % a or address(view) % a):
        return None
    return view
