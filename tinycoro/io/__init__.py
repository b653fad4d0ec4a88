"""Files and paths through the current context's io_uring ring: open, read, write, fsync, close,
stat, rename, unlink, rmdir, mkdir, and O_DIRECT with page-aligned buffers.

Every operation is one SQE on the ring of the context that runs the awaiting task; reads of
regular files that hit the page cache complete inline instead. One thing per module:
:mod:`.file` (``AsyncFile``, ``open``), :mod:`.whole` (``read_file``, ``write_file``),
:mod:`.ops` (the ring's read and write awaitables), :mod:`.pagecache` (inline reads from the
page cache), :mod:`.direct` (O_DIRECT's aligned buffers and checks), :mod:`.paths` (the calls
on paths).
"""

from __future__ import annotations

from .direct import DIRECT_ALIGN, aligned_buffer
from .file import AsyncFile, open
from .whole import read_file, write_file
from .pagecache import FILE_READS_ENV
from .paths import PathLike, mkdir, rename, rmdir, stat, unlink

__all__ = [
    "DIRECT_ALIGN",
    "FILE_READS_ENV",
    "AsyncFile",
    "PathLike",
    "aligned_buffer",
    "mkdir",
    "open",
    "read_file",
    "rename",
    "rmdir",
    "stat",
    "unlink",
    "write_file",
]
