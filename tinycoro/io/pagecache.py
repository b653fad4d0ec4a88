"""Reads served inline from the page cache: a ``preadv2`` with ``RWF_NOWAIT`` copies what the
cache holds and never blocks, so a cached read needs no SQE, no CQE and no suspension (see
:meth:`tinycoro.io.file.AsyncFile._cached` for why every guarantee of the ring path still holds).

``TINYCORO_FILE_READS=ring`` in the environment (read at ``open``) sends every read through the
ring. The read itself is ``tinycoro._cfile.pread_nowait`` when compiled, or its Python spelling
here (:mod:`tinycoro.compiled` chooses; ``TINYCORO_PURE=1`` runs the Python one); so are
:data:`done`, the awaitable of a read that finished at its call, :data:`filling`, the buffer a
whole-file read fills (the bytes object it returns), and :data:`read_cached_file`, a whole
cached file in one call (compiled only).
"""

from __future__ import annotations

import errno
import os
import stat as _stat
from typing import Any, Awaitable, Callable

from .. import compiled
from ..core.traps import Ready

__all__ = [
    "FILE_READS_ENV", "NOT_CACHED", "RWF_NOWAIT", "done", "filling", "inline_reads", "offset_ok",
    "pread_nowait", "pread_nowait_into", "preadv", "read_cached_file",
]

# preadv2(RWF_NOWAIT): Linux >= 4.14. Where os lacks it, every read goes through the ring.
preadv: Callable[..., int] | None = getattr(os, "preadv", None)
RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
FILE_READS_ENV = "TINYCORO_FILE_READS"  # "ring": no inline page-cache reads (tests, A/B runs)


def inline_reads(fd: int) -> bool:
    """Whether reads of *fd* may try the page cache inline: a regular file (a FIFO or a device
    would block or not support it), the platform has RWF_NOWAIT, and the switch allows it."""
    if preadv is None or not RWF_NOWAIT or os.environ.get(FILE_READS_ENV) == "ring":
        return False
    try:
        return _stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def offset_ok_py(x: Any) -> bool:
    """Whether *x* is an exact int in 0..2**63 - 1 (``MAX_OFFSET``): read_at's check of its
    size and offset before its fast path (compiled, ``_cfile.pxd``'s C twin, cimported
    under this name by io/file.pxd)."""
    return type(x) is int and 0 <= x <= 0x7FFF_FFFF_FFFF_FFFF


#: What :func:`pread_nowait_into` returns when the first page is not cached: minus EAGAIN.
NOT_CACHED = -errno.EAGAIN


def pread_nowait_py(fd: int, size: int, offset: int) -> bytes | int | None:
    """What ``tinycoro._cfile.pread_nowait`` does, in Python: up to *size* bytes at *offset*
    from the page cache (short at EOF or before a page that is not cached), None when the
    first page is not cached; the errno (an int) of any other failure."""
    buf = bytearray(size)
    try:
        n = preadv(fd, (buf,), offset, RWF_NOWAIT)  # type: ignore[misc]  # None: never called
    except BlockingIOError:
        return None
    except OSError as e:
        return e.errno
    return bytes(buf) if n == size else bytes(memoryview(buf)[:n])


def pread_nowait_into_py(fd: int, buf: Any, start: int, offset: int) -> int:
    """What ``tinycoro._cfile.pread_nowait_into`` does, in Python: read from the page cache
    into *buf* from its byte *start* on, at *offset*; the count (short at EOF or before a page
    that is not cached), or minus the errno of a failure (``-EAGAIN``: not cached)."""
    view = memoryview(buf)[start:] if start else buf
    try:
        return preadv(fd, (view,), offset, RWF_NOWAIT)  # type: ignore[misc]  # None: never called
    except OSError as e:
        return -(e.errno or errno.EIO)  # (one from a system call always has its errno)


def filling_py(size: int) -> tuple[Any, memoryview]:
    """What ``tinycoro._cfile.filling`` does, in Python: a bytearray of *size* and a view of it.
    The result is then a copy of it (a bytes object cannot be filled in place from Python):
    the pure runtime holds a whole file twice, for a moment."""
    buf = bytearray(size)
    return buf, memoryview(buf)


# The compiled read saves a zero-filled buffer and a copy per read (~0.5 us of ~3).
_cfile = compiled.load("_cfile")
pread_nowait: Callable[[int, int, int], bytes | int | None] = (
    _cfile.pread_nowait if _cfile is not None else pread_nowait_py
)

pread_nowait_into: Callable[[int, Any, int, int], int] = (
    _cfile.pread_nowait_into if _cfile is not None else pread_nowait_into_py
)

offset_ok: Callable[[Any], bool] = _cfile.offset_ok if _cfile is not None else offset_ok_py
# A read finished at its call, as the awaitable the call returns: the compiled one is awaited
# through a C slot, with no generator (~600 instructions less per cached read_at); traps'
# Ready, the same contract, runs where _cfile is not built or TINYCORO_PURE is set.
done: Callable[[Any], Awaitable[Any]] = _cfile.done if _cfile is not None else Ready

# A whole cached file in one call (openat2 with RESOLVE_CACHED, fstat, preadv2, close), and
# the buffer a whole-file read fills, the very bytes object it returns; see _cfile. Python's
# os has no openat2, and an open that may wait for a lookup must not run inline: the pure
# runtime (None here) opens every file through the ring.
read_cached_file: Callable[[Any, int], bytes | int | None] | None = (
    _cfile.read_cached_file if _cfile is not None else None
)
filling: Callable[[int], tuple[Any, memoryview]] = (
    _cfile.filling if _cfile is not None else filling_py
)
