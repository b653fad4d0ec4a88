"""Whole files in one call: :func:`read_file` and :func:`write_file`.

``read_file`` of a cached small file is done at the call (the name in the dentry cache, the
pages in the page cache: see ``tinycoro._cfile.read_cached_file``); any other file is opened
through the ring and read to its end by :meth:`AsyncFile.read`, into one buffer of its size.
"""

from __future__ import annotations

import os
from typing import Any

from ..buffers import as_bytes_view, path_bytes
from ..core.engine import spend_inline
from ..core.local import thread_state as _local
from ..core.traps import consume_budget
from .file import FILL_CHUNK, AsyncFile, open
from .ops import queue_again, takes_for_good
from .pagecache import inline_reads, read_cached_file
from .paths import PathLike

__all__ = ["read_file", "write_file"]


async def read_file(path: PathLike) -> bytes:
    """The whole content of *path*, as ``open(path, "rb").read()`` gives it.

    A cached small file (its name in the dentry cache, its pages in the page cache, at most
    FILL_CHUNK) is read at the call, on the budget (rule 16), in four system calls and with
    no ring round trip (``read_cached_file``); any other opens and reads through the ring (or
    inline as far as the page cache has it), into one buffer of the file's size."""
    task = _local.task
    if task is not None and read_cached_file is not None:  # (asyncio tasks: their loop's ring)
        if not spend_inline(task):
            await consume_budget()  # budget spent, or an interrupt is due (see AsyncFile._cached)
        got = read_cached_file(path, FILL_CHUNK)
        if got is not None:
            if isinstance(got, bytes):
                return got
            # Opened inline but not read: the rest is the general path's, on this descriptor.
            name = os.fsdecode(path_bytes(path))
            f = AsyncFile(got, name, "rb", True, False, False, False, inline_reads(got))
            return await _read_then_close(f)
    return await _read_then_close(await open(path, "rb"))


async def _read_then_close(f: AsyncFile) -> bytes:
    """*f* read to its end, then closed.

    A read of a FIFO (a pipe, a character device) that an interrupt cut short after it took
    bytes returns them and leaves the interrupt for the task's next await (``io/ops``'
    ``_keep_taken``). Here that await is the close, and the bytes, gone from the FIFO, would
    go with the exception. So the close releases the descriptor whatever lands there (rule
    10), and then the interrupt goes on to the caller's next await and the bytes are the
    result, as ``f.read()``'s are. A file that gives its bytes again (a regular one) keeps
    the interrupt at the close; a failure of the close itself (an OSError) is raised."""
    try:
        data = await f.read()
    except BaseException:
        await f.close()
        raise
    gone = bool(data) and takes_for_good(f.fileno())
    try:
        await f.close()
    except BaseException as interrupt:
        if not gone or isinstance(interrupt, OSError) or not queue_again(interrupt):
            raise
    return data


async def write_file(path: PathLike, data: Any) -> int:
    """Replace *path*'s content with *data*; returns the number of bytes written."""
    view = as_bytes_view(data, "write_file")
    async with await open(path, "wb") as f:
        return await f.write(view)

