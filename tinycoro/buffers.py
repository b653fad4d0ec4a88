"""What the resource modules (files, sockets, TLS) accept as data and paths, checked once.

The kernel takes one address and a length per operation, so data must be one flat run of
bytes; and it moves at most ``MAX_RW`` bytes per read or write, at offsets below
``MAX_OFFSET``. These helpers turn the caller's argument into that form, or refuse it at the
call with a message naming the argument (the API contract in docs/design.md), the same way
for :mod:`tinycoro.io`, :mod:`tinycoro.net` and :mod:`tinycoro.tls`.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["MAX_RW", "MAX_OFFSET", "as_bytes_view", "writable_view", "path_bytes"]

# The kernel's limits: one read/write moves at most MAX_RW_COUNT bytes (INT_MAX rounded down to
# a page), and file offsets are a signed 64-bit loff_t. Larger values are refused at the call.
MAX_RW = 0x7FFFF000
MAX_OFFSET = (1 << 63) - 1


def as_bytes_view(data: Any, what: str, param: str = "data") -> memoryview:
    """A flat byte view of *data*, the *param* argument of *what*(); TypeError for str,
    non-buffers and non-contiguous buffers (the kernel takes one address and a length)."""
    if isinstance(data, str):
        raise TypeError(f"{what}() takes bytes-like data, not str; encode it first")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"{what}() takes bytes-like data, got {type(data).__name__}") from None
    if not view.c_contiguous:
        raise TypeError(
            f"{what}() needs a C-contiguous buffer for {param}, got a non-contiguous "
            f"{type(data).__name__}; pass a copy (bytes(...)) or a contiguous slice"
        )
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def writable_view(buf: Any, what: str) -> memoryview:
    """A flat byte view of a writable buffer; TypeError for str, read-only or non-buffers."""
    view = as_bytes_view(buf, what, "buf")
    if view.readonly:
        raise TypeError(f"{what}() needs a writable buffer (bytearray, memoryview, array), "
                        f"got a read-only {type(buf).__name__}")
    return view


def path_bytes(path: Any, what: str = "path") -> bytes:
    """*path* (str, bytes or os.PathLike) as the bytes the kernel takes; ValueError for an
    embedded NUL, which would cut the path short."""
    try:
        raw = os.fsencode(os.fspath(path))
    except TypeError:
        raise TypeError(f"{what} must be str, bytes or os.PathLike, got {path!r}") from None
    if b"\0" in raw:
        raise ValueError(f"embedded null byte in {what}")
    return raw
