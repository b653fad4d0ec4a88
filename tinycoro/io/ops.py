"""The ring's read and write of a file: the awaitables a file's ring read and write are, one
frame per operation (rule 14), reading or writing on in that same frame until done."""

from __future__ import annotations

import os
import stat
from typing import Any, Generator

from ..buffers import MAX_RW
from ..closing import PendingOps, ResourceOp
from ..core import iterslots
from ..core.iterslots import END
from ..core import traps
from ..core.local import running_engine, running_task
from ..core.traps import Op, foreign_waiter, run_outside, thrown
from ..uring import prep_read, prep_write

__all__ = ["CURRENT_POSITION", "RingRead", "RingWrite", "ring_read"]

CURRENT_POSITION = (1 << 64) - 1  # offset -1 as the kernel's u64: "use the file position"


def _size_words(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


_MAX_RW = MAX_RW  # (compiled, a C constant: a read's size is checked against it in C)

# Where a RingRead's await is (Op._state; the same values as core.traps' for Op)
_IDLE = 0  # not awaited through its steps (a generator's await, or none)
_HANDED = 1  # __await__ entered the read and returned it: its first step yields it
_WAITING = 2  # yielded to the engine: the next step takes the count


class RingRead(ResourceOp):
    """Fill a buffer from an offset through the ring, for the file *fd* (named *name*, its
    operations pending in *pending*). One read almost always fills it; it reads on after a short read (short
    only at EOF; an O_DIRECT read that comes back short is EOF) and for buffers beyond what
    one read(2) moves, in this same await. Its result is the byte count, or with *out* (the
    buffer *view* looks at) the bytes read. Interrupted while reading on from a file that
    cannot give the bytes taken again (a FIFO: see _keep_taken), it ends short with them and
    the interrupt lands at the task's next await.

    Inside a task the read is its own iterator, as an :class:`~tinycoro.core.traps.Op` is
    (``_state`` where its await is, ``_res`` the count so far, then its result): compiled, C slots
    (core/iterslots), where a generator and its send and clear were ~2,650 instructions per
    O_DIRECT read. Outside any task, or awaited again while an await runs, the generator
    :meth:`_awaiting`."""

    __slots__ = ("view", "offset", "got", "direct", "out", "name", "_size")

    def __init__(
        self, pending: PendingOps, fd: int, name: str, direct: bool, view: memoryview,
        offset: int, got: int = 0, out: Any = None,
    ) -> None:
        self._size = 0  # the int object of the size its first read asks for (_setup)
        self._setup(pending, fd, name, direct, view, offset, got, out)

    def _setup(
        self, pending: PendingOps, fd: int, name: str, direct: bool, view: memoryview,
        offset: int, got: int, out: Any,
    ) -> None:
        want = len(view) - got
        if want > _MAX_RW:
            want = _MAX_RW
        # The size's int object is this op's from its last use when the number is the same (a
        # spare read is reused, read after read of one size): a 4 KiB int is past the small
        # ints CPython keeps, and one made for the size and one for the count were each
        # allocated and freed on every O_DIRECT read. The op is one task's at a time, so the
        # object is never another read's (whatever thread, whatever build).
        have = self._size  # (compiled, a C int read off the object)
        if have != want:
            self._size = want
        if got:
            self._fill_for(pending, prep_read, (fd, view[got:], self._size, offset + got))
        else:
            self._fill_for(pending, prep_read, (fd, view, self._size, offset))
        self.view = view
        self.offset = offset
        self.got = got
        self.direct = direct
        self.eager = direct  # the device's read: to the kernel at once (Op.eager)
        self.out = out
        self.name = name

    def describe(self) -> str:
        args = self.args
        if not args:
            return f"read from {self.name}"
        return f"read {_size_words(args[2])} at {args[3]} from {os.path.basename(self.name)}"

    def __await__(self) -> Generator[Any, Any, Any]:
        engine = running_engine()  # compiled, a C read (~130 instructions less than the attribute's)
        if self._state != _IDLE or engine is None:
            return self._awaiting()
        # Into the pending set now, its closed check at the first step (ResourceOp._enter_on
        # in two): nothing may raise here, since a compiled coroutine's await turns an
        # exception out of __await__ into a TypeError about the awaitable.
        self.pending._ops[self] = engine
        self._res = self.got
        self._state = _HANDED
        return self  # type: ignore[return-value]  # an iterator will do

    def _awaiting(self) -> Generator[Any, Any, Any]:
        """The read's await as a generator (the steps of :func:`_read_step`, one frame)."""
        pending = self.pending
        size = len(self.view)
        got = self.got
        engine = self._enter()
        try:
            while got < size:
                if pending.closed:
                    raise pending._error()
                if engine is not None and not got:
                    res = yield self  # nothing taken yet: an interrupt here loses nothing
                elif engine is not None:
                    try:
                        res = yield self
                    except BaseException as interrupt:
                        if not _keep_taken(self.args[0], interrupt):
                            raise
                        break  # the bytes taken are the result, short
                elif not got:
                    res = yield from run_outside(self)
                else:
                    try:
                        res = yield from run_outside(self)
                    except BaseException as interrupt:
                        if not _keep_taken(self.args[0], interrupt):
                            raise
                        break  # the bytes taken are the result, short
                got = self._took(got, res)
                if got < 0:
                    got = ~got
                    break
        finally:
            del pending._ops[self]
        return self._result_of(got)

    # The coroutine protocol (``await`` takes the C slots that iterslots installs; these
    # serve a call by name, and the interpreted source).
    def __next__(self) -> Any:
        return iterslots.advance(self, None, _read_step, traps.op_result, END)

    def send(self, value: Any) -> Any:
        return iterslots.advance(self, value, _read_step, traps.op_result, END)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Raise the exception at the await, out of the pending set; a cancel while reading
        on from a file that cannot give the bytes taken again (any interrupt but GeneratorExit)
        ends the read short with them instead (see _keep_taken). An await driven by hand: into its generator."""
        state = self._state
        if state == _IDLE:
            return Op.throw(self, typ, val, tb)
        exc = thrown(typ, val, tb)
        got = self._res
        self._leave()
        if state == _WAITING and got and _keep_taken(self.args[0], exc):
            raise StopIteration(self._result_of(got))
        raise exc

    def close(self) -> None:
        if self._state == _IDLE:
            Op.close(self)
        else:
            self._leave()

    def _step_by_hand(self, value: Any) -> Any:
        """A step of an await by name, not through ``__await__`` (see ``Op._by_hand``)."""
        gen = self._by_hand()
        if gen is None:  # __await__ handed the read itself: its steps run the await
            return _read_step(self, value)
        return self._drive(gen, value)

    def _leave(self) -> None:
        """The await through the steps is over: out of the pending set."""
        self._state = _IDLE
        del self.pending._ops[self]

    def _took(self, got: int, res: int) -> int:
        """After a read that returned *res* with *got* bytes taken before it: the total, the
        args set for the next read; ``~total`` when the read is over (EOF, the buffer full, an
        O_DIRECT read short); the error of a negative *res*."""
        if res < 0:
            raise self._failure(res)
        if res == 0:
            return ~got  # EOF
        args = self.args
        want = args[2]
        got += res
        view = self.view
        size = len(view)
        if got >= size or (self.direct and res < want):
            return ~got
        self.args = (args[0], view[got:], min(size - got, MAX_RW), self.offset + got)
        return got

    def _result_of(self, got: int) -> Any:
        """The await's result, *got* bytes read: the count, or with ``out`` the bytes."""
        out = self.out
        if out is None:
            have = self._size  # a whole read's count is its size: that same object
            return self._size if got == have else got
        if got == len(self.view) and not self.direct:
            return bytes(out)
        return bytes(out[:got])


def _read_step(read: Any, value: Any) -> Any:
    """A :class:`RingRead`'s next step (compiled, a C function its C slots run): the read to
    yield, until resumed with the count that ends it: then END (the result kept for
    :func:`~tinycoro.core.traps.op_result`), or the error of a negative count."""
    r = read
    state = r._state
    if state == _WAITING:
        try:
            got = r._took(r._res, value)
        except BaseException:
            r._leave()
            raise
        if got < 0:
            r._leave()
            r._res = r._result_of(~got)
            _spare(r)
            return END
        r._res = got
    elif state == _HANDED:
        got = r._res  # (compiled, a C int: the compare below is C's, not a rich compare)
        if got >= len(r.view) and not r.pending.closed:  # nothing to read
            r._leave()
            r._res = r._result_of(got)
            _spare(r)
            return END
        r._state = _WAITING
    else:
        return r._step_by_hand(value)
    pending = r.pending
    if pending.closed:
        r._leave()
        raise pending._error()
    return r


# its result taken as an Op's: the count, or the bytes, that its last step kept in _res
iterslots.install(RingRead, _read_step, traps.op_result, _read_step, END)


def _keep_taken(fd: int, interrupt: BaseException) -> bool:
    """A read that took bytes and reads on for more is interrupted (a RingRead, or the chunks
    of ``AsyncFile.read()`` to EOF): whether the bytes taken must be its result. They must when the file cannot give them again (a FIFO, a pipe, a
    character device: what a read takes is gone from them), so the read ends short and
    *interrupt* is queued again for the task's next await; a regular file (or block device)
    still holds them, and the read stays "short only at EOF".

    *interrupt* is whatever was thrown in at the read's await: ``tc.Cancelled`` (a cancel, an
    expired timeout), but as well anything ``task.interrupt`` delivers (a notebook's Ctrl-C is
    KeyboardInterrupt, an asyncio cancel of a ``tc.aio`` cell asyncio.CancelledError): each
    would drop the bytes alike. Not GeneratorExit: see :func:`queue_again`."""
    if isinstance(interrupt, GeneratorExit):
        return False
    return takes_for_good(fd) and queue_again(interrupt)


def takes_for_good(fd: int) -> bool:
    """Whether what a read takes from *fd* is gone from the file: a FIFO, a pipe, a character
    device, not a regular file or block device (which give the bytes again). False once *fd*
    is closed."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:  # closed meanwhile: the interrupt goes on as before
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISBLK(mode))


def queue_again(interrupt: BaseException) -> bool:
    """*interrupt*, thrown in where a read's bytes must be its result instead, queued again for
    the running task's next await; False (nothing queued) for GeneratorExit: the coroutine is
    being closed (rule 13), it has no next await, and it must not run on as if the read had
    returned."""
    if isinstance(interrupt, GeneratorExit):
        return False
    task = running_task()
    if task is None:  # an asyncio task's read, on its loop's ring: its stand-in asks again
        waiter = foreign_waiter()
        return waiter is not None and bool(waiter.interrupt(interrupt.with_traceback(None)))
    task.interrupt(interrupt.with_traceback(None))
    return True


# Reads whose await is over, kept for the next (ring_read), up to SPARE_READS of them. A new
# RingRead and its teardown cost ~1,300 instructions per O_DIRECT read (callgrind: the type's
# allocation, its fields' initialisation up three classes, the GC's tracking, the dealloc).
# Only a read nobody else can see goes here, and comes out (iterslots.held_only: compiled
# under the GIL; never free-threaded or interpreted, where the list stays empty).
SPARE_READS = 64
_spares: list = [None] * SPARE_READS  # a stack of _nspares: a list that never resizes
_nspares = 0


def _spare(r: Any) -> None:  # (compiled, a RingRead: ops.pxd)
    """*r*'s await is over (its result in ``_res`` for the step that takes it): when only
    that await holds it (and this step's own reference), let go of what it read into, its
    buffer's export released now as its teardown would, and keep it for :func:`ring_read`.
    An awaitable the caller kept is left as it is: awaited again, it reads again."""
    global _nspares
    if _nspares < SPARE_READS and iterslots.held_only(r, 2):
        r.view = None  # (a buffer's release may run code, and let another thread push)
        r.out = None
        r.args = None
        r.pending = None
        n = _nspares
        if n < SPARE_READS:
            _spares[n] = r  # (the slot above the top holds None: nothing to tear down)
            _nspares = n + 1


def ring_read(
    pending: PendingOps, fd: int, name: str, direct: bool, view: memoryview, offset: int,
    got: int = 0, out: Any = None,
) -> RingRead:
    """``RingRead(...)``, for the file's read path: compiled, a C call that makes the op
    without a type call and its arguments parsed (~600 instructions per O_DIRECT read), or
    fills a spare one (:func:`_spare`) that nobody holds any more."""
    global _nspares
    n = _nspares
    op = None
    if n:
        n -= 1
        op = _spares[n]
        _spares[n] = None
        _nspares = n
        if not iterslots.held_only(op, 1):  # someone took hold of it meanwhile: theirs
            op = None
    if op is None:
        op = RingRead.__new__(RingRead)
        op._size = 0
    op._setup(pending, fd, name, direct, view, offset, got, out)
    return op


class RingWrite(ResourceOp):
    """Write all of a buffer at an offset (or at the file position: CURRENT_POSITION)
    to the file *fd* through the ring, in as many writes as it takes, in this one frame; the total.

    All of it, or an exception: an interrupt (a cancel, a timeout, a Ctrl-C) or an error
    (EPIPE, ENOSPC, EFBIG, a close) that ends it raises at its own await and says how many
    bytes went before it, ``characters_written``, as Python's BlockingIOError does for a
    buffered write. A FIFO or a pipe takes what it has room for while the rest waits for
    room, and what went is the reader's: without the count the writer could not tell a record
    it cut short from one that never started. Not a short return, as the read's (see
    _keep_taken): a read's bytes can only be delivered as its result, a count need not be;
    callers of a write-all do not check it (Python's ``BufferedWriter.write`` and
    ``socket.sendall``, trio's ``send_all``, asyncio's ``sock_sendall`` raise, none returns
    short), and under ``tc.timeout`` a short return would be silent, the scope withdrawing its
    re-queued signal as the block ends (docs/io.md)."""

    __slots__ = ("view", "offset", "name")

    def __init__(self, pending: PendingOps, fd: int, name: str, view: memoryview, offset: int) -> None:
        self._fill_for(pending, prep_write, (fd, view, min(len(view), MAX_RW), offset))
        self.view = view
        self.offset = offset
        self.name = name

    def describe(self) -> str:
        args = self.args
        where = "" if self.offset == CURRENT_POSITION else f" at {args[3]}"
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
                off = offset if offset == CURRENT_POSITION else offset + done
                self.args = (self.args[0], view[done:], min(total - done, MAX_RW), off)
        except BaseException as e:
            # Set on whatever ends it (any BaseException takes attributes), as BlockingIOError
            # carries its own; 0 too: an interrupt delivered again (a scope's signal) must not
            # keep the count an earlier write left on it.
            setattr(e, "characters_written", done)
            raise
        finally:
            del pending._ops[self]
