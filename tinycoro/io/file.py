"""A file opened through the current context's io_uring ring: :class:`AsyncFile` (read, write,
readinto, readline, fsync, close, positioned or at an offset) and :func:`open`.
Size: the file object is one compiled class, whose reads share its typed fields and checks.

Every operation is one SQE on the ring of the context that runs the awaiting task. A cancelled
read keeps its buffer alive inside its :class:`~tinycoro.core.traps.Op` until the kernel has
posted the completion, so no buffer is ever freed while the kernel may still write into it.
Closing a file fails the reads and writes other tasks still await on it with
``tc.ClosedResourceError`` (see :mod:`tinycoro.closing`). Reads of regular files that hit the
page cache complete inline instead (:mod:`.pagecache`; see :meth:`AsyncFile._cached`).
"""

from __future__ import annotations

import errno
import os
import stat as _stat
from typing import Any, Awaitable

# bound once: no module attribute lookup per operation
from ..uring import prep_fsync, prep_openat
from ..buffers import MAX_OFFSET, as_bytes_view, path_bytes, writable_view
from ..closing import PendingOps, ResourceOp, close_fd
from ..core.checks import check_int
from ..core.engine import spend_inline
from ..core.errors import ClosedResourceError
from ..core.local import running_task
from ..core.traps import YIELD, Op, Ready, consume_budget, thrown
from ..core import iterslots
from .direct import aligned_buffer, check_direct
from . import directview
from ._parallel import whole_fill
from .ops import CURRENT_POSITION, RingWrite, _keep_taken, ring_read
from .pagecache import (
    NOT_CACHED, done, filling, inline_reads, offset_ok, pread_nowait, pread_nowait_into,
)
from .paths import AT_FDCWD, PathLike

__all__ = ["AsyncFile", "open"]

_READ_CHUNK = 1 << 20
_LINE_CHUNK = 1 << 16
# A whole-file read copies at most this much from the page cache per inline read, each one
# unit of the budget (rule 16): a 512 MiB file lets its context's other tasks run every
# INLINE_BUDGET * 8 MiB (~50 ms), and releases the GIL 64 times, not 512.
FILL_CHUNK = 8 << 20


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


def _closed_file_error(name: str) -> Any:
    return lambda: ValueError(f"I/O operation on closed file {name!r}")


_ZERO = Ready(0)
_EMPTY = Ready(b"")


def _whole(data: bytes, size: int) -> bool:
    """Whether what an inline read got is the whole answer: all *size* bytes, or EOF."""
    return len(data) == size or not data


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
        if not self.direct:
            st = os.fstat(self._fd)
            want = st.st_size - self._pos
            if want > 0 and _stat.S_ISREG(st.st_mode):
                return await self._read_whole(want)
            # No size to go by (a pipe, a /proc file, or at the end already): read on until EOF.
        return await self._read_chunks(want=_READ_CHUNK if self.direct else 65536)

    async def _read_whole(self, want: int) -> bytes:
        """read() of a regular file of *want* bytes from the position: the builtin's one buffer,
        the bytes object returned, filled at offsets (page cache inline, misses through the
        ring), then one read more for what the file gained meanwhile. A file that shrank ends
        early: the bytes before its new end."""
        out, view = filling(want)
        got = await whole_fill(self, view, self._pos)  # a big one: half on the kernel's worker
        self._pos += got
        del view  # (the pure runtime's bytearray cannot be resized while a view is exported)
        if got < want:  # EOF came early: the file shrank
            return bytes(memoryview(out)[:got])
        more = await self._read_chunks(want=65536)
        if type(out) is not bytes:
            out = bytes(out)  # the pure runtime's bytearray: one copy
        return out + more if more else out

    async def _read_chunks(self, want: int) -> bytes:
        """From the position to EOF in chunks, joined: for a file whose size says nothing."""
        chunks: list[bytes] = []
        while True:
            try:
                data = await self._pread(want, self._pos)
            except BaseException as interrupt:
                # A chunk of a FIFO interrupted as it read on ended short and left the
                # interrupt for the next await: this one. What the chunks took is gone from
                # the FIFO, so it is the result, short, and the interrupt goes on to the next.
                if not chunks or not _keep_taken(self._fd, interrupt):
                    raise
                break
            if not data:
                break
            chunks.append(data)
            self._pos += len(data)
            if self.direct and len(data) < want:
                break  # short O_DIRECT read: EOF (the next offset would be unaligned)
            want = _READ_CHUNK
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _fill(self, view: memoryview, offset: int) -> int:
        """Fill *view* from *offset*; short only at EOF. Inline reads go FILL_CHUNK at a time,
        each on the budget (see _read_into); the ring reads the whole view at once."""
        if not self._inline:
            return await self._ring_read(view, offset, 0)
        size = len(view)
        got = 0
        while got < size:
            end = min(got + FILL_CHUNK, size)
            got += await self._read_into(view[got:end], offset + got)
            if got < end:
                break  # EOF
        return got

    def read_at(self, size: int, offset: int) -> Awaitable[bytes]:
        """Up to *size* bytes at *offset*; short only at EOF. The awaited result is the bytes
        (the awaitable is the read itself: rule 14)."""
        # The hot path of random reads. When the page cache has the bytes, the read is done
        # right here, at the call, and the awaitable returned is the finished result
        # (pagecache.done: no coroutine, no suspension). Exact-int arguments in range skip the
        # checks' calls (anything else, bool and int subclasses included, takes them);
        # compiled, offset_ok reads each int in C (_cfile.pxd).
        if not (offset_ok(size) and offset_ok(offset)):
            size = check_int("size", size, min=0, max=MAX_OFFSET)
            offset = _check_offset(offset)
        # (size != 0, not the int's truth: compiled, an inline compare, not PyObject_IsTrue)
        if self._inline and size != 0:  # open, readable, a regular file, not O_DIRECT
            task = running_task()
            if task is not None:  # (an asyncio task's reads go to its loop's hosted ring)
                if spend_inline(task):
                    return self._read_cached(size, offset)
                return _read_later(self, size, offset)
        self._check_readable()
        return self._pread(size, offset)

    def _read_cached(self, size: int, offset: int) -> Awaitable[bytes]:
        """read_at's page-cache read, done now: the finished result when the cache held all
        of it (or EOF), else the awaitable that reads the rest through the ring."""
        data = self._read_inline(size, offset)
        if data is not None and _whole(data, size):
            return done(data)
        return self._read_rest(size, offset, data)

    def _read_inline(self, size: int, offset: int) -> bytes | None:
        """What the page cache holds of the range (see _cached for why an inline read keeps
        every guarantee of the ring's): the bytes, short when a later page is not cached or at
        EOF, or None when the first page is not (or the read failed: the ring reports it)."""
        data = pread_nowait(self._fd, size, offset)
        if isinstance(data, int):  # an errno: the ring reads it and reports the failure
            self._refused(data)
            data = None
        if self._ops.closed:
            raise ClosedResourceError("the file was closed while this read ran")
        return data

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
        in_range = offset_ok(offset)  # (read_at's check: compiled, a C read of the int)
        if self.direct and in_range and self._fd >= 0 and self._readable:
            # The O_DIRECT read's hot path: a new view of *buf* (the ring read holds it, an
            # export the caller cannot release, until the completion) with every check in
            # one pass (compiled, C reads of its Py_buffer: directview.pxd); None sends an
            # unusual or bad buffer through the checks below, which say what is wrong.
            view = directview.direct_view(buf, offset)
            if view is not None:
                return ring_read(self._ops, self._fd, self.name, True, view, offset)
        view = writable_view(buf, "readinto_at")
        if not in_range:
            offset = _check_offset(offset)
        self._check_readable()
        if self._inline:  # a cached range is read at the call, as read_at does: no coroutine
            task = running_task()
            if task is not None and len(view) and spend_inline(task):
                got = self._cached(view, len(view), offset)
                return done(got) if got >= 0 else self._ring_read(view, offset, ~got)
            return self._read_into(view, offset)
        size = len(view)
        if not size:
            return _ZERO
        if self.direct:
            check_direct(view, size, offset)
        return ring_read(self._ops, self._fd, self.name, self.direct, view, offset)

    def _pread(self, size: int, offset: int) -> Awaitable[bytes]:
        if size == 0:
            if self.direct:
                check_direct(None, 0, offset)
            return _EMPTY
        if self.direct:
            check_direct(None, size, offset)
            buf = view = aligned_buffer(size)
        else:
            # the bytes returned, filled in place (pagecache.filling): no zero-fill, no copy
            buf, view = filling(size)
        if not self._inline:  # the ring only: its read op is the awaitable, and makes bytes
            return ring_read(self._ops, self._fd, self.name, self.direct, view, offset, 0, buf)
        return self._pread_inline(buf, view, size, offset)

    async def _pread_inline(self, buf: Any, view: memoryview, size: int, offset: int) -> bytes:
        got = await self._read_into(view, offset, checked=True)
        if got == size and not self.direct:
            return bytes(buf)  # (compiled: buf itself, a bytes object)
        return bytes(view[:got])

    async def _read_into(self, view: memoryview, offset: int, checked: bool = False) -> int:
        """Fill *view* from *offset*; short only at EOF. The kernel writes into *view*."""
        size = len(view)
        if size == 0:
            return 0
        if self._inline:
            task = running_task()
            if task is not None:
                if not spend_inline(task):
                    await consume_budget()  # budget spent, or an interrupt is due (see _cached)
                got = self._cached(view, size, offset)
                if got >= 0:
                    return got
                return await self._ring_read(view, offset, ~got)
        if self.direct and not checked:
            check_direct(view, size, offset)
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

        Fairness and interrupts: the callers ask ``spend_inline(task)`` before each read and
        await rule 16's gate (``consume_budget()``: one yield) on False, so a task reading a
        cached file in a loop lets the other tasks of its context run every INLINE_BUDGET
        reads, and a cancel or an expired ``tc.timeout`` still lands at the read's await.
        """
        fd = self._fd
        while True:
            n = pread_nowait_into(fd, buf, got, offset + got)
            if n < 0:  # minus an errno: -EAGAIN, not cached; any other, the ring reports it
                if n != NOT_CACHED:
                    self._refused(-n)
                return ~got
            if self._ops.closed:
                raise ClosedResourceError("the file was closed while this read ran")
            got += n
            if n == 0 or got == size:
                return got

    def _refused(self, err: int | None) -> None:
        """An inline read failed with the errno *err*: the ring will do it and report the
        failure. A file system without RWF_NOWAIT (EOPNOTSUPP) gets ring-only reads from now on."""
        if err == errno.EOPNOTSUPP:
            self._inline = False

    async def _read_rest(self, size: int, offset: int, head: bytes | None) -> bytes:
        """read_at's end when the page cache held only *head* (None: not even the first
        page): on inline while the cache has it, then through the ring."""
        buf, view = filling(size)  # (see _pread)
        got = ~0  # nothing yet: the ring reads from 0
        if head:
            n = len(head)
            view[:n] = head
            got = self._cached(view, size, offset, n)
        if got < 0:
            got = await self._ring_read(view, offset, ~got)
        return bytes(buf) if got == size else bytes(view[:got])

    def _ring_read(self, view: memoryview, offset: int, got: int) -> Awaitable[int]:
        """Fill *view* from *offset* through the ring, its first *got* bytes being there
        already; the total, short only at EOF (see RingRead)."""
        return ring_read(self._ops, self._fd, self.name, self.direct, view, offset, got)

    async def readline(self) -> bytes:
        """The next line from the current position, with its ``b"\\n"``; ``b""`` at EOF."""
        self._check_readable()
        # A line in the read-ahead completes at once: rule 16's gate, asked as read_at asks
        task = running_task()
        if task is not None and not spend_inline(task):
            await consume_budget()
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
        """Write all of *data* at the current position (the end, in append mode); the count.

        All of it or an exception: one that ends the write once it started (an interrupt, an
        error) carries ``characters_written``, the bytes that went before it (see
        :class:`~tinycoro.io.ops.RingWrite`), and the position moves past those."""
        view = as_bytes_view(data, "write")
        self._check_open()
        if not self._writable:
            raise OSError(9, f"file {self.name!r} is not open for writing")
        if self._append:
            n = await self._pwrite(view, CURRENT_POSITION)
        else:
            try:
                n = await self._pwrite(view, self._pos)
            except BaseException as e:
                # What went is in the file: writing the rest must go after it, as after a
                # short write(2) (a check that failed before the write says nothing: 0).
                # Not for an empty write, which wrote nothing: an interrupt raised at its
                # await may still carry the count of an earlier write it ended.
                if len(view):
                    self._pos += getattr(e, "characters_written", 0)
                raise
            self._pos += n
        return n

    def write_at(self, data: Any, offset: int) -> Awaitable[int]:
        """Write all of *data* at *offset*; the awaited result is the number of bytes written
        (the write op itself: rule 14). An exception that ends it once it started says how
        many went before it, as :meth:`write`'s does (``characters_written``)."""
        view = as_bytes_view(data, "write_at")
        offset = _check_offset(offset)
        self._check_open()
        return self._pwrite(view, offset)

    def _pwrite(self, view: memoryview, offset: int) -> Awaitable[int]:
        total = len(view)
        self._lbuf = b""
        if self.direct and total:
            check_direct(view, total, 0 if offset == CURRENT_POSITION else offset)
        if not total:
            return _ZERO
        write = RingWrite(self._ops, self._fd, self.name, view, offset)
        if self.direct:
            write.eager = True  # the device's write: to the kernel at once (Op.eager)
        return write

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



# _ReadLater's states
_NEW = 0  # made, not awaited yet
_YIELDED = 1  # yielded once for the budget: the next step reads
_DELEGATED = 2  # the page cache held part of it only: the rest is the ring read's (sub)
_OVER = 3  # its await has ended


class _ReadLater:
    """``read_at``'s awaitable when the step's inline budget is spent, or an interrupt is due
    (rule 16): yield once, then read as ``read_at`` does, at the first step of the new turn.

    Its own iterator, all of the read's state in this one object: the ``async def`` it
    replaces made a coroutine, its frame's scope and the gate's ``_Spend`` per budget, each
    allocated, resumed and torn down when the reader came round again, 63 other tasks later
    on the 64-in-flight benchmark, its code and data cold by then (cachegrind: ~60 L1
    instruction misses per yield). A due interrupt is thrown in at the yield, where nothing is
    in flight, and raised from :meth:`throw` as it is. When the page cache holds only part of
    the range, the rest is the ring read's (``_read_rest``), delegated to as ``yield from``
    would: its throw and close reach the ring op, which keeps its buffer until the kernel is
    done with it."""

    __slots__ = ("file", "size", "offset", "state", "sub", "result")

    def __init__(self, file: AsyncFile, size: int, offset: int) -> None:
        self._setup(file, size, offset)

    def _setup(self, file: AsyncFile, size: int, offset: int) -> None:
        """The fields, for ``__init__`` and for :func:`_read_later` alike."""
        self.file = file
        self.size = size
        self.offset = offset
        self.state = _NEW
        self.sub: Any = None
        self.result: Any = None

    def __await__(self) -> Any:
        return self

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        # Compiled, the C slots that iterslots installs run instead (for ``await``); this is
        # the same step, for a call by name and for the interpreted source.
        return iterslots.advance(self, None, _later_step, _later_result)

    def send(self, value: Any) -> Any:
        # Compiled, the C method that iterslots installs runs instead.
        return iterslots.advance(self, value, _later_step, _later_result)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = thrown(typ, val, tb)
        if self.state == _DELEGATED:
            y = self._forward(None, exc)
            if y is self:
                raise StopIteration(_later_result(self))
            return y
        self.state = _OVER
        raise exc

    def close(self) -> None:
        sub = self.sub
        self.sub = None
        self.state = _OVER
        if sub is not None:
            sub.close()

    def _step(self, value: Any) -> Any:
        """The read's next step: the trap to yield, or this object once the read is over,
        its bytes in ``result``."""
        state = self.state
        if state == _DELEGATED:
            return self._forward(value, None)
        if state == _NEW:
            self.state = _YIELDED
            return YIELD
        if state != _YIELDED:
            raise RuntimeError("cannot reuse an already awaited read")
        task = running_task()
        if task is not None:
            spend_inline(task)  # a new step: this read counts in its budget
        f = self.file
        size = self.size
        offset = self.offset
        self.state = _OVER
        data = f._read_inline(size, offset)
        if data is not None and _whole(data, size):
            self.result = data
            return self
        self.sub = f._read_rest(size, offset, data)
        self.state = _DELEGATED
        return self._forward(None, None)

    def _forward(self, value: Any, exc: Any) -> Any:
        """A step of the ring read delegated to (``sub``): *exc* thrown into it, or *value*
        sent; its end is this read's."""
        try:
            if exc is None:
                return self.sub.send(value)
            return self.sub.throw(exc)
        except StopIteration as e:
            self.result = e.value
            self.state = _OVER
            self.sub = None
            return self
        except BaseException:
            self.state = _OVER
            self.sub = None
            raise


def _read_later(file: AsyncFile, size: int, offset: int) -> _ReadLater:
    """``_ReadLater(file, size, offset)``: compiled, a C call without the type call."""
    r = _ReadLater.__new__(_ReadLater)
    r._setup(file, size, offset)
    return r


def _later_step(read: Any, value: Any) -> Any:
    """A :class:`_ReadLater`'s next step (the trap to yield, or the read itself once over):
    compiled, a C function that its C slots run (core/iterslots)."""
    r = read
    return r._step(value)


def _later_result(read: Any) -> Any:
    """What the await of a :class:`_ReadLater` that is over returns, taken off it."""
    r = read
    data = r.result
    r.result = None
    return data


iterslots.install(_ReadLater, _later_step, _later_result, _later_step)


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
    op = Op(prep_openat, raw, flags, perms, AT_FDCWD, returns_fd=True)  # keeps `raw` alive
    op.what = name
    fd = await op
    inline = readable and not direct and inline_reads(fd)
    return AsyncFile(fd, name, mode, readable, writable, append, direct, inline)
