"""Files through the current context's io_uring ring: open, read, write, fsync, close, stat,
rename, unlink, mkdir, and O_DIRECT with page-aligned buffers.

Every operation is one SQE on the ring of the context that runs the awaiting task. A cancelled
read keeps its buffer alive inside its :class:`~tinycoro.core.traps.Op` until the kernel has
posted the completion, so no buffer is ever freed while the kernel may still write into it.
Closing a file fails the reads and writes other tasks still await on it with
``tc.ClosedResourceError`` (see :mod:`tinycoro.closing`).

Reads of regular files that hit the page cache complete inline instead: a ``preadv2`` with
``RWF_NOWAIT`` copies what the cache holds and never blocks (see :meth:`AsyncFile._cached`).
``TINYCORO_FILE_READS=ring`` in the environment (read at ``open``) sends every read through
the ring.
"""

from __future__ import annotations

import ctypes
import errno
import math
import mmap
import os
import stat as _stat
from typing import Any, Awaitable, Callable, Generator, Union

from . import compiled, uring
# bound once: no module attribute lookup per operation
from .uring import (
    prep_fsync,
    prep_mkdirat,
    prep_openat,
    prep_read,
    prep_renameat,
    prep_statx,
    prep_unlinkat,
    prep_write,
)
from .buffers import MAX_OFFSET, MAX_RW, as_bytes_view, path_bytes, writable_view
from .closing import PendingOps, ResourceOp, close_fd
from .core.checks import check_int
from .core.errors import ClosedResourceError
from .core.local import thread_state as _local
from .core.traps import Op, Ready, run_outside, yield_now

__all__ = [
    "AsyncFile",
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

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_CURRENT_POSITION = (1 << 64) - 1  # offset -1 as the kernel's u64: "use the file position"
_READ_CHUNK = 1 << 20
_LINE_CHUNK = 1 << 16
# O_DIRECT: buffer address, size and offset must be multiples of the device's logical block
# size (512 or 4096 here); requiring the page size satisfies every device.
DIRECT_ALIGN = mmap.PAGESIZE
# preadv2(RWF_NOWAIT): Linux >= 4.14. Where os lacks it, every read goes through the ring.
_preadv: Callable[..., int] | None = getattr(os, "preadv", None)
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
FILE_READS_ENV = "TINYCORO_FILE_READS"  # "ring": no inline page-cache reads (tests, A/B runs)


def _inline_reads(fd: int) -> bool:
    """Whether reads of *fd* may try the page cache inline: a regular file (a FIFO or a device
    would block or not support it), the platform has RWF_NOWAIT, and the switch allows it."""
    if _preadv is None or not _RWF_NOWAIT or os.environ.get(FILE_READS_ENV) == "ring":
        return False
    try:
        return _stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def _pread_nowait_py(fd: int, size: int, offset: int) -> bytes | None:
    """What ``tinycoro._cfile.pread_nowait`` does, in Python: up to *size* bytes at *offset*
    from the page cache (short at EOF or before a page that is not cached), None when the
    first page is not cached; OSError otherwise."""
    buf = bytearray(size)
    try:
        n = _preadv(fd, (buf,), offset, _RWF_NOWAIT)  # type: ignore[misc]  # None: never called
    except BlockingIOError:
        return None
    return bytes(buf) if n == size else bytes(memoryview(buf)[:n])




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


def _check_offset(offset: Any) -> int:
    return check_int("offset", offset, min=0, max=MAX_OFFSET)


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


def _address_py(view: memoryview) -> int:
    """The memory address of *view*'s first byte (read-only buffers included)."""
    pb = _PyBuffer()
    _get_buffer(view, ctypes.byref(pb), 0)
    try:
        return pb.buf or 0
    finally:
        _release_buffer(ctypes.byref(pb))


def _load_compiled() -> tuple[Any, Any]:
    """``tinycoro._cfile``'s page-cache read and buffer address, or their Python spellings.

    The compiled read saves a zero-filled buffer and a copy per read (~0.5 us of ~3), the
    compiled address ~3.5 us per O_DIRECT read. :mod:`tinycoro.compiled` chooses, so
    ``TINYCORO_PURE=1`` runs the Python spellings (and the pure-runtime suites test them).
    """
    cfile = compiled.load("_cfile")
    if cfile is not None:
        return cfile.pread_nowait, cfile.buffer_address
    return _pread_nowait_py, _address_py


_pread_nowait, _address = _load_compiled()


def _check_direct(view: memoryview | None, size: int, offset: int) -> None:
    a = DIRECT_ALIGN
    if view is not None and _address(view) % a:
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


def _closed_file_error(name: str) -> Any:
    return lambda: ValueError(f"I/O operation on closed file {name!r}")


_ZERO = Ready(0)
_EMPTY = Ready(b"")


def _size_words(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


class _RingRead(ResourceOp):
    """Fill a buffer from an offset through the ring: the awaitable a file's ring read is
    (rule 14). One read almost always fills it; it reads on after a short read (short
    only at EOF; an O_DIRECT read that comes back short is EOF) and for buffers beyond what
    one read(2) moves, in this same frame. Its result is the byte count, or with *out* (the
    buffer *view* looks at) the bytes read."""

    __slots__ = ("view", "offset", "got", "direct", "out", "name")

    def __init__(
        self, file: "AsyncFile", view: memoryview, offset: int, got: int = 0, out: Any = None
    ) -> None:
        want = min(len(view) - got, MAX_RW)
        ResourceOp.__init__(
            self, file._ops, prep_read, file._fd, view[got:] if got else view, want, offset + got
        )
        self.view = view
        self.offset = offset
        self.got = got
        self.direct = file.direct
        self.out = out
        self.name = file.name

    def describe(self) -> str:
        args = self.args
        if not args:
            return f"read from {self.name}"
        return f"read {_size_words(args[2])} at {args[3]} from {os.path.basename(self.name)}"

    def __await__(self) -> Generator[Any, Any, Any]:
        pending = self.pending
        view = self.view
        size = len(view)
        got = self.got
        engine = self._enter()
        try:
            while got < size:
                if pending.closed:
                    raise pending._error()
                if engine is not None:
                    res = yield self
                else:
                    res = yield from run_outside(self)
                if res < 0:
                    raise self._failure(res)
                if res == 0:
                    break  # EOF
                want = self.args[2]
                got += res
                if got >= size or (self.direct and res < want):
                    break
                self.args = (self.args[0], view[got:], min(size - got, MAX_RW), self.offset + got)
        finally:
            del pending._ops[self]
        out = self.out
        if out is None:
            return got
        if got == size and not self.direct:
            return bytes(out)
        return bytes(out[:got])


class _RingWrite(ResourceOp):
    """Write all of a buffer at an offset (or at the file position: _CURRENT_POSITION)
    through the ring, in as many writes as it takes, in this one frame; the total."""

    __slots__ = ("view", "offset", "name")

    def __init__(self, file: "AsyncFile", view: memoryview, offset: int) -> None:
        ResourceOp.__init__(
            self, file._ops, prep_write, file._fd, view, min(len(view), MAX_RW), offset
        )
        self.view = view
        self.offset = offset
        self.name = file.name

    def describe(self) -> str:
        args = self.args
        where = "" if self.offset == _CURRENT_POSITION else f" at {args[3]}"
        return f"write {_size_words(args[2])}{where} to {os.path.basename(self.name)}"

    def __await__(self) -> Generator[Any, Any, int]:
        pending = self.pending
        view = self.view
        total = len(view)
        offset = self.offset
        done = 0
        engine = self._enter()
        try:
            while True:
                if pending.closed:
                    raise pending._error()
                if engine is not None:
                    res = yield self
                else:
                    res = yield from run_outside(self)
                if res < 0:
                    raise self._failure(res)
                done += res
                if done >= total:
                    return total
                off = offset if offset == _CURRENT_POSITION else offset + done
                self.args = (self.args[0], view[done:], min(total - done, MAX_RW), off)
        finally:
            del pending._ops[self]


class AsyncFile:
    """A file opened with :func:`open`. Reads and writes go through io_uring.

    ``read``/``write``/``readinto`` use and advance the file's own position, as a built-in file
    does; ``read_at``/``write_at``/``readinto_at`` take an explicit offset and leave the
    position alone, so many tasks can use one file at once. ``async for line in f`` yields
    binary lines like a built-in binary file.
    """

    def __init__(
        self, fd: int, name: str, mode: str, readable: bool, writable: bool, append: bool,
        direct: bool = False, inline: bool = False,
    ):
        self._fd = fd
        self.name = name
        self.mode = mode
        self.direct = direct
        self._readable = readable
        self._writable = writable
        self._append = append
        self._pos = 0
        self._ops = PendingOps(_closed_file_error(name))
        # Reads try the page cache inline first (see _cached); off for O_DIRECT, for anything
        # but a regular file, once the file system refuses RWF_NOWAIT, and once closed, so
        # read_at's fast path needs no other check.
        self._inline = inline and readable and not direct
        # Read-ahead for readline: bytes of the file starting at offset _lstart. Any write
        # through this object drops it, so it never shows stale content of its own writes.
        self._lbuf = b""
        self._lstart = 0

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

    def _check_readable(self) -> None:
        self._check_open()
        if not self._readable:
            raise OSError(9, f"file {self.name!r} is not open for reading")

    # -- reading -------------------------------------------------------------------------------
    async def read(self, size: int = -1) -> bytes:
        """Up to *size* bytes from the current position; everything up to EOF if size < 0."""
        size = check_int("size", size, max=MAX_OFFSET)
        self._check_readable()
        if size >= 0:
            data = await self._pread(size, self._pos)
            self._pos += len(data)
            return data
        chunks = []
        if self.direct:
            want = _READ_CHUNK
        else:
            hint = max(os.fstat(self._fd).st_size - self._pos, 0)
            want = min(max(hint + 1, 4096), _READ_CHUNK) if hint else 65536
        while True:
            data = await self._pread(want, self._pos)
            if not data:
                break
            chunks.append(data)
            self._pos += len(data)
            if self.direct and len(data) < want:
                break  # short O_DIRECT read: EOF (the next offset would be unaligned)
            want = _READ_CHUNK
        return b"".join(chunks)

    async def read_at(self, size: int, offset: int) -> bytes:
        """Up to *size* bytes at *offset*; short only at EOF."""
        # The hot path of random reads, kept to one coroutine frame when the page cache has
        # the bytes: exact-int arguments in range skip the checks' calls (anything else, bool
        # and int subclasses included, takes them), and the inline read is done right here.
        if not (type(size) is int and type(offset) is int
                and 0 <= size <= MAX_OFFSET and 0 <= offset <= MAX_OFFSET):
            size = check_int("size", size, min=0, max=MAX_OFFSET)
            offset = _check_offset(offset)
        if self._inline and size:  # open, readable, a regular file, not O_DIRECT
            engine = _local.engine
            if engine is not None:  # (an asyncio task's reads go to its loop's hosted ring)
                if not engine.inline_ok():
                    await yield_now()  # budget spent, or an interrupt is due (see _cached)
                    engine.inline_ok()  # a new step: this read counts in its budget
                # See _cached for why an inline read keeps every guarantee of the ring's.
                try:
                    data = _pread_nowait(self._fd, size, offset)
                except OSError as e:
                    self._refused(e)
                    data = None
                if self._ops.closed:
                    raise ClosedResourceError("the file was closed while this read ran")
                if data is not None and (len(data) == size or not data):
                    return data  # all of it, or EOF
                return await self._read_rest(size, offset, data)
        self._check_readable()
        return await self._pread(size, offset)

    async def readinto(self, buf: Any) -> int:
        """Read into *buf* (any writable buffer) from the current position; 0 at EOF."""
        view = writable_view(buf, "readinto")
        self._check_readable()
        n = await self._read_into(view, self._pos)
        self._pos += n
        return n

    def readinto_at(self, buf: Any, offset: int) -> Awaitable[int]:
        """Read into *buf* from *offset*, straight from the kernel (no copy); 0 at EOF.

        A file read through the ring only (O_DIRECT, not a regular file) returns the ring
        read itself to await (rule 14); others may read the page cache inline first."""
        view = writable_view(buf, "readinto_at")
        offset = _check_offset(offset)
        self._check_readable()
        if self._inline:
            return self._read_into(view, offset)
        size = len(view)
        if not size:
            return _ZERO
        if self.direct:
            _check_direct(view, size, offset)
        return _RingRead(self, view, offset)

    def _pread(self, size: int, offset: int) -> Awaitable[bytes]:
        if size == 0:
            if self.direct:
                _check_direct(None, 0, offset)
            return _EMPTY
        buf: memoryview | bytearray
        if self.direct:
            _check_direct(None, size, offset)
            buf = aligned_buffer(size)
        else:
            # bytearray(n) is calloc'd: large ones come as untouched zero pages, so the one
            # real copy is bytes() below (a bytes object cannot be filled in place).
            buf = bytearray(size)
        if not self._inline:  # the ring only: its read op is the awaitable, and makes bytes
            return _RingRead(self, memoryview(buf), offset, 0, buf)
        return self._pread_inline(buf, size, offset)

    async def _pread_inline(self, buf: Any, size: int, offset: int) -> bytes:
        got = await self._read_into(memoryview(buf), offset, checked=True)
        if got == size and not self.direct:
            return bytes(buf)
        return bytes(buf[:got])

    async def _read_into(self, view: memoryview, offset: int, checked: bool = False) -> int:
        """Fill *view* from *offset*; short only at EOF. The kernel writes into *view*."""
        size = len(view)
        if size == 0:
            return 0
        if self._inline:
            engine = _local.engine
            if engine is not None:
                if not engine.inline_ok():
                    await yield_now()  # budget spent, or an interrupt is due (see _cached)
                    engine.inline_ok()  # a new step: this read counts in its budget
                got = self._cached(view, size, offset)
                if got >= 0:
                    return got
                return await self._ring_read(view, offset, ~got)
        if self.direct and not checked:
            _check_direct(view, size, offset)
        return await self._ring_read(view, offset, 0)

    def _cached(self, buf: Any, size: int, offset: int, got: int = 0) -> int:
        """Read *buf*'s range from the page cache, inline: the byte count when that is the
        whole answer (*size*, or less at EOF); ``~got`` when the ring must read on from *got*
        (a page that is not cached, an error). The first *got* bytes are there already.

        ``preadv2(RWF_NOWAIT)`` copies what the page cache holds and never waits for the disk:
        it fails with EAGAIN when the first page is not cached, returns short when a later one
        is not (that is not EOF: only 0 is), and 0 at EOF. It is the attempt io_uring itself
        makes first for a buffered read, without the SQE, the CQE and the suspension.

        Every guarantee of the ring path holds, because nothing is ever in flight: when this
        returns the kernel is done with *buf*, so a cancel has nothing to wait for (an
        interrupt is delivered at the task's next suspension) and close has nothing to
        cancel. A close on another context is seen by reading ``closed`` after the call:
        close sets it before the descriptor goes, so a number closed (and maybe reused)
        during the call is never read as this file's bytes. Errors other than EAGAIN go to
        the ring, which reports them with their errno as before. A miss costs one failed
        syscall (~1 us) next to the ring read's several; it also starts the read-ahead the
        ring read would start (RWF_NOWAIT does not imply IOCB_NOIO here). EOPNOTSUPP (a file
        system without RWF_NOWAIT) switches the file to ring-only reads for good.

        Fairness and interrupts: the callers ask ``engine.inline_ok()`` before each read and
        suspend with ``yield_now()`` on False, so a task reading a cached file in a loop lets
        the other tasks of its context run every INLINE_BUDGET reads, and a cancel or an
        expired ``tc.timeout`` still lands at the read's await, as on the ring. A yield
        (~1 us) is the cheapest suspension; a ring read would cost ~4 us to the same end.
        """
        fd = self._fd
        while True:
            try:
                n = _preadv(fd, (memoryview(buf)[got:] if got else buf,),  # type: ignore[misc]
                            offset + got, _RWF_NOWAIT)  # (None: _inline is never set)
            except BlockingIOError:
                return ~got
            except OSError as e:
                self._refused(e)
                return ~got
            if self._ops.closed:
                raise ClosedResourceError("the file was closed while this read ran")
            got += n
            if n == 0 or got == size:
                return got

    def _refused(self, e: OSError) -> None:
        """An inline read failed with *e*: the ring will do it and report its errno. A file
        system without RWF_NOWAIT (EOPNOTSUPP) gets ring-only reads from now on."""
        if e.errno == errno.EOPNOTSUPP:
            self._inline = False

    async def _read_rest(self, size: int, offset: int, head: bytes | None) -> bytes:
        """read_at's end when the page cache held only *head* (None: not even the first
        page): on inline while the cache has it, then through the ring."""
        buf = bytearray(size)
        got = ~0  # nothing yet: the ring reads from 0
        if head:
            n = len(head)
            buf[:n] = head
            got = self._cached(buf, size, offset, n)
        if got < 0:
            got = await self._ring_read(memoryview(buf), offset, ~got)
        return bytes(buf) if got == size else bytes(memoryview(buf)[:got])

    def _ring_read(self, view: memoryview, offset: int, got: int) -> Awaitable[int]:
        """Fill *view* from *offset* through the ring, its first *got* bytes being there
        already; the total, short only at EOF (see _RingRead)."""
        return _RingRead(self, view, offset, got)

    async def readline(self) -> bytes:
        """The next line from the current position, with its ``b"\\n"``; ``b""`` at EOF."""
        self._check_readable()
        pos = self._pos
        buf, start = self._lbuf, self._lstart
        if not start <= pos <= start + len(buf):
            buf, start = b"", pos
        i = scan = pos - start
        while True:
            nl = buf.find(b"\n", scan)
            if nl >= 0:
                end = nl + 1
                break
            chunk = await self._pread(_LINE_CHUNK, start + len(buf))
            if not chunk:
                end = len(buf)
                break
            if i:  # drop what earlier lines consumed before growing the buffer
                buf, start, i = buf[i:], start + i, 0
            scan = len(buf)  # only the new chunk can hold the newline
            buf += chunk
        line = buf[i:end]
        self._lbuf, self._lstart = buf, start
        self._pos = start + end
        return line

    def __aiter__(self) -> "AsyncFile":
        return self

    async def __anext__(self) -> bytes:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    # -- writing -------------------------------------------------------------------------------
    async def write(self, data: Any) -> int:
        """Write all of *data* at the current position (the end, in append mode)."""
        view = as_bytes_view(data, "write")
        self._check_open()
        if not self._writable:
            raise OSError(9, f"file {self.name!r} is not open for writing")
        if self._append:
            n = await self._pwrite(view, _CURRENT_POSITION)
        else:
            n = await self._pwrite(view, self._pos)
            self._pos += n
        return n

    def write_at(self, data: Any, offset: int) -> Awaitable[int]:
        """Write all of *data* at *offset*; the awaited result is the number of bytes written
        (the write op itself: rule 14)."""
        view = as_bytes_view(data, "write_at")
        offset = _check_offset(offset)
        self._check_open()
        return self._pwrite(view, offset)

    def _pwrite(self, view: memoryview, offset: int) -> Awaitable[int]:
        total = len(view)
        self._lbuf = b""
        if self.direct and total:
            _check_direct(view, total, 0 if offset == _CURRENT_POSITION else offset)
        if not total:
            return _ZERO
        return _RingWrite(self, view, offset)

    async def fsync(self) -> None:
        self._check_open()
        await ResourceOp(self._ops, prep_fsync, self._fd, 0)

    async def close(self) -> None:
        """Close the file (an io_uring close). Closing twice is a no-op.

        Reads and writes that other tasks still await on this file fail with
        ``tc.ClosedResourceError``; the descriptor is released even if this task is
        cancelled meanwhile.
        """
        if not self._ops.close() or self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        self._inline = False
        self._lbuf = b""
        await close_fd(fd)

    async def __aenter__(self) -> "AsyncFile":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open(  # noqa: A001
    path: PathLike, mode: str = "rb", *, perms: int = 0o666, direct: bool = False
) -> AsyncFile:
    """Open *path* with an io_uring ``openat``; *mode* as for the built-in ``open``, binary.

    *perms* are the permission bits of a file this creates (before the umask); ``direct=True``
    opens with O_DIRECT (page-aligned buffers, sizes and offsets: see :func:`aligned_buffer`).
    """
    flags, readable, writable, append = _flags_for(mode)
    perms = check_int("perms", perms, min=0, max=0o7777)
    if not isinstance(direct, bool):
        raise TypeError(f"direct must be a bool, got {direct!r}")
    if direct:
        flags |= os.O_DIRECT
    raw = path_bytes(path)
    name = os.fsdecode(raw)
    op = Op(prep_openat, raw, flags, perms, _AT_FDCWD, returns_fd=True)  # keeps `raw` alive
    op.what = name
    fd = await op
    inline = readable and not direct and _inline_reads(fd)
    return AsyncFile(fd, name, mode, readable, writable, append, direct, inline)


async def read_file(path: PathLike) -> bytes:
    """The whole content of *path*."""
    async with await open(path, "rb") as f:
        return await f.read()


async def write_file(path: PathLike, data: Any) -> int:
    """Replace *path*'s content with *data*; returns the number of bytes written."""
    view = as_bytes_view(data, "write_file")
    async with await open(path, "wb") as f:
        return await f.write(view)


# -- paths -------------------------------------------------------------------------------------
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
    op = Op(prep_statx, buf, raw, flags, uring.STATX_BASIC_STATS, _AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op
    return _stat_result(buf)


async def rename(src: PathLike, dst: PathLike) -> None:
    """Rename *src* to *dst* (an io_uring renameat); replaces *dst* like ``os.rename``."""
    a, b = path_bytes(src, "src"), path_bytes(dst, "dst")
    op = Op(prep_renameat, a, b, _AT_FDCWD, _AT_FDCWD, 0)
    op.what = os.fsdecode(a)
    await op


async def unlink(path: PathLike) -> None:
    """Remove the file *path* (an io_uring unlinkat)."""
    raw = path_bytes(path)
    op = Op(prep_unlinkat, raw, 0, _AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op


async def rmdir(path: PathLike) -> None:
    """Remove the empty directory *path* (an io_uring unlinkat with AT_REMOVEDIR)."""
    raw = path_bytes(path)
    op = Op(prep_unlinkat, raw, uring.AT_REMOVEDIR, _AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op


async def mkdir(path: PathLike, mode: int = 0o777) -> None:
    """Create the directory *path* (an io_uring mkdirat); *mode* before the umask."""
    mode = check_int("mode", mode, min=0, max=0o7777)
    raw = path_bytes(path)
    op = Op(prep_mkdirat, raw, mode, _AT_FDCWD)
    op.what = os.fsdecode(raw)
    await op
