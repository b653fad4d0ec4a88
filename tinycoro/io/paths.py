"""Operations on paths, each one io_uring SQE: ``stat`` (statx), ``rename``, ``unlink``,
``rmdir`` and ``mkdir``. They fail with the ``OSError`` subclass of the kernel's errno, naming
the path."""

from __future__ import annotations

import math
import os
from typing import Any, Union

from .. import uring
from ..buffers import path_bytes
from ..core.checks import check_int
from ..core.traps import Op
from ..uring import prep_mkdirat, prep_renameat, prep_statx, prep_unlinkat

__all__ = ["AT_FDCWD", "PathLike", "mkdir", "rename", "rmdir", "stat", "unlink"]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

AT_FDCWD = -100  # a path relative to the current directory, as os.* functions take it
_AT_SYMLINK_NOFOLLOW = 0x100


def _split_ns(t: float) -> tuple[int, int]:
    # The binding hands statx times over as float seconds (tv_sec + tv_nsec * 1e-9, computed
    # exactly as os.stat computes st_mtime); the nanoseconds are recovered from it, to about
    # 0.5 us for present-day times.
    sec = math.floor(t)
    return sec, sec * 1_000_000_000 + round((t - sec) * 1e9)


def _stat_result(sx: Any) -> os.stat_result:
    at, at_ns = _split_ns(sx.stx_atime)
    mt, mt_ns = _split_ns(sx.stx_mtime)
    ct, ct_ns = _split_ns(sx.stx_ctime)
    return os.stat_result((
        sx.stx_mode, sx.stx_ino, os.makedev(sx.stx_dev_major, sx.stx_dev_minor), sx.stx_nlink,
        sx.stx_uid, sx.stx_gid, sx.stx_size, at, mt, ct,
        sx.stx_atime, sx.stx_mtime, sx.stx_ctime, at_ns, mt_ns, ct_ns,
        sx.stx_blksize, sx.stx_blocks, os.makedev(sx.stx_rdev_major, sx.stx_rdev_minor),
    ))


async def stat(path: PathLike, *, follow_symlinks: bool = True) -> os.stat_result:
    """``os.stat(path)`` through an io_uring statx. ``st_*_ns`` are accurate to about 0.5 us
    (the binding exposes statx times as floats only); the float ``st_*time`` equal os.stat's."""
    raw = path_bytes(path)
    buf = uring.statx()
    flags = 0 if follow_symlinks else _AT_SYMLINK_NOFOLLOW
    op = Op(prep_statx, buf, raw, flags, uring.STATX_BASIC_STATS, AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op
    return _stat_result(buf)


async def rename(src: PathLike, dst: PathLike) -> None:
    """Rename *src* to *dst* (an io_uring renameat); replaces *dst* like ``os.rename``."""
    a, b = path_bytes(src, "src"), path_bytes(dst, "dst")
    op = Op(prep_renameat, a, b, AT_FDCWD, AT_FDCWD, 0)
    op.what = os.fsdecode(a)
    await op


async def unlink(path: PathLike) -> None:
    """Remove the file *path* (an io_uring unlinkat)."""
    raw = path_bytes(path)
    op = Op(prep_unlinkat, raw, 0, AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op


async def rmdir(path: PathLike) -> None:
    """Remove the empty directory *path* (an io_uring unlinkat with AT_REMOVEDIR)."""
    raw = path_bytes(path)
    op = Op(prep_unlinkat, raw, uring.AT_REMOVEDIR, AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op


async def mkdir(path: PathLike, mode: int = 0o777) -> None:
    """Create the directory *path* (an io_uring mkdirat); *mode* before the umask."""
    mode = check_int("mode", mode, min=0, max=0o7777)
    raw = path_bytes(path)
    op = Op(prep_mkdirat, raw, mode, AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op
