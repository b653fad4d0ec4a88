"""A big whole-file read on two cores: the kernel copies one half on its io-wq worker while
the context copies the other, each into its offset of the one buffer the read returns.

Why: a cached read is a memory copy plus the page faults of a fresh destination buffer,
done by one thread in the builtin ``open().read()``. ``IOSQE_ASYNC`` sends a read straight
to the ring's io-wq worker (a kernel thread of this process), so the back half is copied
there while the front half is read inline from the page cache as before. Measured on the
2-core machine (cached, the process given the CPU to approximate a quiet machine): 512 MiB in
159-166 ms against the builtin's 220-232 ms, 32-64 MiB 1.40-1.44x, 12 MiB 1.06x (0.82x
unsplit), for ~1.15x the builtin's CPU. io-wq runs such work on one worker (three ``IOSQE_ASYNC`` chunks
took one worker's time in a row), so a second async chunk gains nothing: two halves.

Cancel safety (rule 8): the back half is a ring read, which holds its view (and so the
buffer) until its completion is in, the cancelled one included; the front half is a task
(``_front``) whose inline reads finish before it yields and whose ring reads are ring
reads. A read that fails or is cancelled cancels the front task and never returns the
buffer, so nothing hands it out while either half may still write into it.
"""

from __future__ import annotations

from typing import Any, Awaitable

from ..core.runtime import spawn_watched
from ..core.local import thread_state as _local
from ..uring import prep_read
from .ops import ring_read

__all__ = ["PARALLEL_MIN", "fill", "whole_fill"]

#: Whole-file reads of at least this many bytes (from the position) are split in two halves;
#: smaller ones are read as before. Below it read_file reads a cached file at the call, and a
#: split's task and turns (~0.1 ms) are what the second core saves (docs/io.md).
PARALLEL_MIN = 8 << 20
IOSQE_ASYNC = 1 << 4  # IOSQE_ASYNC_BIT (4): "go to io-wq at once, do not try inline"
_PAGE = 4096


def _prep_read_async(sqe: Any, fd: int, buf: Any, nbytes: int, offset: int) -> None:
    """prep_read, then IOSQE_ASYNC: the kernel copies on its worker, not in the submit."""
    prep_read(sqe, fd, buf, nbytes, offset)
    sqe.flags |= IOSQE_ASYNC


def _observed(task: Any) -> None:
    """The front task's outcome is its parent's (raised there, or moot after a failure)."""


def whole_fill(file: Any, view: memoryview, offset: int) -> Awaitable[int]:
    """What fills a whole read's buffer *view* from *offset* of *file*: :func:`fill`, split in
    two, when it is big and the caller is a tinycoro task (an asyncio task's reads run on its
    loop's ring, where there is no task to spawn); else ``file._fill``, as before."""
    if len(view) >= PARALLEL_MIN and _local.task is not None:
        return fill(file, view, offset)
    return file._fill(view, offset)


async def fill(file: Any, view: memoryview, offset: int) -> int:
    """Fill *view* from *offset* of *file* (an open, readable, buffered AsyncFile), short only
    at EOF: the front half by a task of its own through ``file._fill`` (inline from the page
    cache, misses through the ring), the back half by one ``IOSQE_ASYNC`` ring read. A file
    that shrank meanwhile gives the bytes before its new end; what it gained past *view* is
    the caller's to read."""
    size = len(view)
    half = (size // 2) & ~(_PAGE - 1)
    front = spawn_watched(file._fill(view[:half], offset), _observed, name="read_file front")
    try:
        back = ring_read(file._ops, file._fd, file.name, False, view[half:], offset + half)
        back.prep = _prep_read_async
        got_back = await back
        got_front = await front
    except BaseException:
        front.cancel()  # (a no-op when it is done)
        raise
    if got_front < half:  # EOF inside the front half: the file shrank; its bytes before EOF
        return got_front
    return half + got_back
