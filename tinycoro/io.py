"""Files through the current context's io_uring ring: open, read, write, fsync, close.

Every operation is one SQE on the ring of the context that runs the awaiting task. A cancelled
read keeps its buffer alive inside its :class:`~tinycoro.core.traps.Op` until the kernel has
posted the completion, so no buffer is ever freed while the kernel may still write into it.
"""

from __future__ import annotations

import os
from typing import Any, Union

from . import uring
from .core.traps import Op, perform

__all__ = ["AsyncFile", "open", "read_file", "write_file"]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_AT_FDCWD = -100
_CURRENT_POSITION = (1 << 64) - 1  # offset -1 as the kernel's u64: "use the file position"
_READ_CHUNK = 1 << 20


def _flags_for(mode: str) -> tuple[int, bool, bool, bool]:
    """open(2) flags and (readable, writable, append) for a built-in-style binary mode."""
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, got {mode!r}")
    chars = set(mode)
    if len(mode) != len(chars) or not chars <= set("rwaxb+") or "t" in mode:
        raise ValueError(f"invalid mode {mode!r}: tinycoro files are binary, e.g. 'rb', 'wb', 'r+b'")
    if "b" not in chars:
        raise ValueError(f"invalid mode {mode!r}: tinycoro files are binary only; add 'b' ({mode}b)")
    kinds = chars & set("rwax")
    if len(kinds) != 1:
        raise ValueError(f"invalid mode {mode!r}: exactly one of r, w, a, x is needed")
    kind = kinds.pop()
    plus = "+" in chars
    flags = {
        "r": os.O_RDONLY,
        "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
        "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    }[kind]
    if plus:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    return flags | os.O_CLOEXEC, kind == "r" or plus, kind != "r" or plus, kind == "a"


def _as_bytes_view(data: Any, what: str) -> memoryview:
    if isinstance(data, str):
        raise TypeError(f"{what}() takes bytes-like data, not str; encode it first")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"{what}() takes bytes-like data, got {type(data).__name__}") from None
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _check_size(size: Any, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"{what} must be an int, got {size!r}")
    return size


def _check_offset(offset: Any) -> int:
    offset = _check_size(offset, "offset")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    return offset


class AsyncFile:
    """A file opened with :func:`open`. Reads and writes go through io_uring.

    ``read``/``write`` use and advance the file's own position, as a built-in file does;
    ``read_at``/``write_at`` take an explicit offset and leave the position alone, so many
    tasks can use one file at once.
    """

    def __init__(self, fd: int, name: str, mode: str, readable: bool, writable: bool, append: bool):
        self._fd = fd
        self.name = name
        self.mode = mode
        self._readable = readable
        self._writable = writable
        self._append = append
        self._pos = 0

    def __repr__(self) -> str:
        state = "closed" if self._fd < 0 else f"fd={self._fd}"
        return f"<tinycoro.io.AsyncFile {self.name!r} mode={self.mode!r} {state}>"

    def fileno(self) -> int:
        self._check_open()
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def _check_open(self) -> None:
        if self._fd < 0:
            raise ValueError(f"I/O operation on closed file {self.name!r}")

    # -- reading -------------------------------------------------------------------------------
    async def read(self, size: int = -1) -> bytes:
        """Up to *size* bytes from the current position; everything up to EOF if size < 0."""
        size = _check_size(size, "size")
        self._check_open()
        if not self._readable:
            raise OSError(9, f"file {self.name!r} is not open for reading")
        if size >= 0:
            data = await self._pread(size, self._pos)
            self._pos += len(data)
            return data
        chunks = []
        hint = max(os.fstat(self._fd).st_size - self._pos, 0)
        want = min(max(hint + 1, 4096), _READ_CHUNK) if hint else 65536
        while True:
            data = await self._pread(want, self._pos)
            if not data:
                break
            chunks.append(data)
            self._pos += len(data)
            want = _READ_CHUNK
        return b"".join(chunks)

    async def read_at(self, size: int, offset: int) -> bytes:
        """Up to *size* bytes at *offset*; short only at EOF."""
        size = _check_size(size, "size")
        if size < 0:
            raise ValueError(f"read_at size must be >= 0, got {size}")
        offset = _check_offset(offset)
        self._check_open()
        return await self._pread(size, offset)

    async def _pread(self, size: int, offset: int) -> bytes:
        if size == 0:
            return b""
        buf = bytearray(size)
        # One read almost always fills the buffer (page cache); the loop is for short reads.
        got = await perform(Op(uring.prep_read, self._fd, buf, size, offset))
        if got == size:
            return bytes(buf)
        if got == 0:
            return b""
        view = memoryview(buf)
        while got < size:
            n = await perform(Op(uring.prep_read, self._fd, view[got:], size - got, offset + got))
            if n == 0:
                break
            got += n
        return bytes(view[:got]) if got != size else bytes(buf)

    # -- writing -------------------------------------------------------------------------------
    async def write(self, data: Any) -> int:
        """Write all of *data* at the current position (the end, in append mode)."""
        view = _as_bytes_view(data, "write")
        self._check_open()
        if not self._writable:
            raise OSError(9, f"file {self.name!r} is not open for writing")
        if self._append:
            n = await self._pwrite(view, _CURRENT_POSITION)
        else:
            n = await self._pwrite(view, self._pos)
            self._pos += n
        return n

    async def write_at(self, data: Any, offset: int) -> int:
        """Write all of *data* at *offset*; returns the number of bytes written."""
        view = _as_bytes_view(data, "write_at")
        offset = _check_offset(offset)
        self._check_open()
        return await self._pwrite(view, offset)

    async def _pwrite(self, view: memoryview, offset: int) -> int:
        total = len(view)
        done = 0
        while done < total:
            chunk = view[done:]
            off = offset if offset == _CURRENT_POSITION else offset + done
            done += await perform(Op(uring.prep_write, self._fd, chunk, total - done, off))
        return total

    async def fsync(self) -> None:
        self._check_open()
        await perform(Op(uring.prep_fsync, self._fd, 0))

    async def close(self) -> None:
        """Close the file descriptor (an io_uring close). Closing twice is a no-op."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        await perform(Op(uring.prep_close, fd))

    async def __aenter__(self) -> "AsyncFile":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open(path: PathLike, mode: str = "rb", *, perms: int = 0o666) -> AsyncFile:  # noqa: A001
    """Open *path* with an io_uring ``openat``; *mode* as for the built-in ``open``, binary."""
    flags, readable, writable, append = _flags_for(mode)
    try:
        raw = os.fsencode(os.fspath(path))
    except TypeError:
        raise TypeError(f"path must be str, bytes or os.PathLike, got {path!r}") from None
    if b"\0" in raw:
        raise ValueError("embedded null byte in path")
    name = os.fsdecode(raw)
    op = Op(uring.prep_openat, raw, flags, perms, _AT_FDCWD)  # the op keeps `raw` alive
    op.what = name
    fd = await perform(op)
    return AsyncFile(fd, name, mode, readable, writable, append)


async def read_file(path: PathLike) -> bytes:
    """The whole content of *path*."""
    async with await open(path, "rb") as f:
        return await f.read()


async def write_file(path: PathLike, data: Any) -> int:
    """Replace *path*'s content with *data*; returns the number of bytes written."""
    view = _as_bytes_view(data, "write_file")
    async with await open(path, "wb") as f:
        return await f.write(view)
