"""The page cache, as tests of the file paths see it: a file made resident, evicted (checked by
mincore), and whether the file system has a page cache to evict from at all."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess

import pytest

PAGE = 4096


def cached_file(path, data: bytes) -> None:
    """Write *data* to *path* and read it back, so every page of it is in the page cache."""
    path.write_bytes(data)
    with open(path, "rb") as f:
        assert f.read() == data


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def resident(path) -> list[bool]:
    """Which pages of *path* are in the page cache, by mincore(2) on a mapping of it. Unlike a
    read, even an RWF_NOWAIT one (which starts read-ahead on a miss here), it does no I/O."""
    size = os.path.getsize(path)
    pages = -(-size // PAGE)
    vec = (ctypes.c_ubyte * pages)()
    # A private (copy-on-write) mapping, so ctypes may take its address; nothing touches it.
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        start = ctypes.c_char.from_buffer(m)
        try:
            if _libc.mincore(ctypes.addressof(start), size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del start  # the mapping cannot close while ctypes holds a pointer into it
    return [b & 1 == 1 for b in vec]


def evict(path, keep_first_page: bool = False) -> None:
    """Drop *path*'s pages from the page cache (all, or all but page 0), checked by mincore.

    POSIX_FADV_DONTNEED skips a page still held in a per-CPU LRU batch, so it is repeated
    until mincore agrees (a bounded number of times)."""
    want = None
    for _ in range(50):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if keep_first_page:
                # Page 0 alone: FADV_RANDOM turns read-ahead off for this read.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                os.pread(fd, PAGE, 0)
        finally:
            os.close(fd)
        got = resident(path)
        want = [keep_first_page] + [False] * (len(got) - 1)
        if got == want:
            return
    pytest.fail(f"could not evict {path} from the page cache: {got} is not {want}")


def page_cache_fs(path) -> bool:
    """False on tmpfs and the like, where files live in the page cache and cannot be evicted."""
    out = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return out.stdout.strip() not in ("tmpfs", "ramfs")


def cold_file(tmp_path, size: int) -> tuple:
    """``(path, data)``: *size* random bytes in a file under *tmp_path*, none of its pages in
    the page cache, so that a read of it waits on the disk; skips where files cannot be evicted
    (tmpfs)."""
    if not page_cache_fs(tmp_path):
        pytest.skip("tmpfs keeps every page in the page cache")
    data = os.urandom(size)
    path = tmp_path / "cold"
    cached_file(path, data)
    evict(path)
    return path, data


async def read_file_cancelled_while_blocked(path) -> bytes | None:
    """A task reading *path* whole with ``tc.io.read_file``, cancelled once it is seen blocked
    on the ring (or once it finished, if it never was): None when the cancel took, else the
    content it read first."""
    import tinycoro as tc
    from tinycoro.testing import wait_blocked

    t = tc.spawn(tc.io.read_file(path))
    try:
        await wait_blocked(t)
    except RuntimeError:
        pass  # it finished before it was ever seen blocked
    t.cancel()
    try:
        return await t
    except tc.Cancelled:
        return None
