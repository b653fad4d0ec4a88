"""A file read blocked in the kernel (a FIFO with no data yet), then cancelled: the cancel
lands at the read's await only once the kernel is done with the read's buffer, and the read
consumed nothing, so the bytes written afterwards go to the next read."""

import asyncio
import errno
import fcntl
import os
import resource
import signal
import struct
import termios

import pytest

import tinycoro as tc
from tinycoro.io.ops import RingRead
from tinycoro.testing import is_blocked, wait_blocked

from helpers.runtime import cancel_and_wait
from helpers.sync import spawn_here, until

pytestmark = pytest.mark.timeout(60)

PAYLOAD = b"0123456789"


def _in_flight(task):
    """The ring operation *task* waits on (it is blocked in the kernel)."""
    op = task.waiting_on()
    assert op is not None and task.engine.inflight.get(op.ud) is op, f"{task!r} is not in the ring"
    return op


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_a_cancelled_fifo_read_leaves_the_next_read_its_bytes(fifo, contexts, how):
    path, wfd = fifo

    async def main():
        async with await tc.io.open(path) as f:
            async def reader():
                if how == "timeout":
                    async with tc.timeout(0.05):
                        return await f.read_at(len(PAYLOAD), 0)
                return await f.read_at(len(PAYLOAD), 0)

            t = tc.spawn(reader())
            await wait_blocked(t)  # suspended in an io_uring read of the empty FIFO
            op = _in_flight(t)
            if how == "cancel":
                await cancel_and_wait(t)
            else:
                with pytest.raises(TimeoutError):
                    await t
            # The interrupt arrived only after the read's completion was reaped: nothing
            # in the kernel may still write into the buffer the read was given.
            assert t.engine.inflight.get(op.ud) is not op
            assert len(f._ops) == 0

            os.write(wfd, PAYLOAD)
            async with tc.timeout(10):
                return await f.read_at(len(PAYLOAD), 0)

    assert tc.run(main(), contexts=contexts) == PAYLOAD


def test_bytes_a_cancelled_fifo_read_took_are_not_lost(fifo, contexts):
    """The cancel and the writer's bytes arrive in the same turn: the read's completion
    carries bytes it took out of the FIFO, with the cancel pending. Those bytes are the
    read's result (short: a FIFO's read waits for more only while nothing interrupts it),
    never dropped; the cancel lands at the reader's next await."""
    path, wfd = fifo

    async def main():
        async with await tc.io.open(path) as f:
            got = []

            async def reader():
                got.append(await f.read_at(2 * len(PAYLOAD), 0))
                await tc.yield_now()  # the cancel lands here

            t = spawn_here(reader())
            await wait_blocked(t)
            op = _in_flight(t)
            # In one step on the reader's thread: the write completes the read (its
            # task work runs as the write returns) before the engine acts on the cancel.
            t.cancel()
            os.write(wfd, PAYLOAD)
            with pytest.raises(tc.Cancelled):
                await t
            assert t.engine.inflight.get(op.ud) is not op
            # Whatever the read did not take is still in the FIFO for the next read.
            rest = len(PAYLOAD) - len(b"".join(got))
            async with tc.timeout(10):
                return b"".join(got) + (await f.read_at(rest, 0) if rest else b"")

    assert tc.run(main(), contexts=contexts) == PAYLOAD


# -- bytes a write gave away ----------------------------------------------------------------
# A write to a FIFO larger than the pipe holds: the pipe takes what it has room for, and the
# write waits in the ring for room for the rest. Interrupted then, it has given bytes away that
# no one can take back; whoever ends it must say how many (the exception's
# ``characters_written``, as Python's BlockingIOError does), or the writer cannot tell the
# record it cut short from one that never started.


def _queued(fd: int) -> int:
    """Bytes waiting in the pipe of *fd* (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _drain(fd: int) -> bytes:
    """Everything the non-blocking *fd* holds now."""
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return bytes(out)
        if not chunk:
            return bytes(out)
        out += chunk


def _more_than_the_pipe_holds(fd: int) -> bytes:
    size = 4 * fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    return bytes(range(256)) * (size // 256)  # a prefix of it is told from any other slice


_INTERRUPTS = {
    "cancel": (lambda t: t.cancel(), tc.Cancelled),
    "keyboard": (lambda t: tc.lowlevel.interrupt(t, KeyboardInterrupt()), KeyboardInterrupt),
    "asyncio": (lambda t: tc.lowlevel.interrupt(t, asyncio.CancelledError()), asyncio.CancelledError),
}


async def _stalled(t, wfd: int) -> None:
    """Until the FIFO holds what *t* wrote and *t* waits in the ring for room (or *t* ended)."""
    await until(lambda: t.done() or (_queued(wfd) > 0 and is_blocked(t)))


@pytest.mark.parametrize("how", [*_INTERRUPTS, "timeout"])
def test_a_fifo_write_interrupted_after_bytes_went_says_how_many(fifo, contexts, how):
    path, wfd = fifo
    data = _more_than_the_pipe_holds(wfd)

    async def main():
        async with await tc.io.open(path, "wb") as f:
            async def writer():
                if how == "timeout":
                    async with tc.timeout(0.2):
                        await f.write(data)
                else:
                    await f.write(data)

            t = tc.spawn(writer())
            await _stalled(t, wfd)
            if how == "timeout":
                expected = TimeoutError
            else:
                interrupt, expected = _INTERRUPTS[how]
                interrupt(t)
            with pytest.raises(expected) as info:
                await t
            # A timeout shows TimeoutError; the interrupt it cut the write with is its context.
            err = info.value.__context__ if how == "timeout" else info.value
            went = _drain(wfd)
            assert err.characters_written == len(went)
            assert went == data[: len(went)]
            if how != "timeout":  # synchronised: the pipe was full when the interrupt came
                assert 0 < len(went) < len(data)
            assert len(f._ops) == 0

    tc.run(main(), contexts=contexts)


# The two reads that take from a FIFO: one read_at reading on for the rest of its buffer, and
# f.read() reading chunk after chunk until EOF (whose chunk ends short and whose interrupt
# would otherwise land at the next chunk's read).
_READS = {
    "read_at": lambda f: f.read_at(2 * len(PAYLOAD), 0),
    "read to EOF": lambda f: f.read(),
}


@pytest.mark.parametrize("read", list(_READS))
@pytest.mark.parametrize("how", list(_INTERRUPTS))
def test_bytes_a_fifo_read_took_are_not_lost_to_any_interrupt(fifo, contexts, how, read):
    """A read of a FIFO interrupted after it took bytes returns them, short, and the interrupt
    lands at the task's next await: a cancel, a notebook's Ctrl-C (KeyboardInterrupt, through
    ``task.interrupt``) and an asyncio cancel of a ``tc.aio`` cell (asyncio.CancelledError)."""
    path, wfd = fifo
    interrupt, expected = _INTERRUPTS[how]
    reading = _READS[read]

    async def main():
        async with await tc.io.open(path) as f:
            got = []

            async def reader():
                got.append(await reading(f))
                await tc.yield_now()  # the interrupt lands here

            t = spawn_here(reader())
            await wait_blocked(t)
            interrupt(t)
            os.write(wfd, PAYLOAD)
            with pytest.raises(expected):
                await t
            rest = len(PAYLOAD) - len(b"".join(got))
            async with tc.timeout(10):
                return b"".join(got) + (await f.read_at(rest, 0) if rest else b"")

    assert tc.run(main(), contexts=contexts) == PAYLOAD

def test_write_file_to_a_fifo_cancelled_says_how_many_bytes_went(fifo, contexts):
    """``tc.io.write_file`` closes its file on the way out: the count survives the close."""
    path, wfd = fifo
    data = _more_than_the_pipe_holds(wfd)

    async def main():
        t = tc.spawn(tc.io.write_file(path, data))
        await _stalled(t, wfd)
        err = await cancel_and_wait(t)
        went = _drain(wfd)
        assert 0 < err.characters_written == len(went)
        assert went == data[: len(went)]

    tc.run(main(), contexts=contexts)


@pytest.fixture
def file_size_limit():
    """``limit(n)``: files of this process may grow to *n* bytes only (RLIMIT_FSIZE, SIGXFSZ
    ignored: a write across the limit is short, the next fails with EFBIG); restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield lambda n: resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_write_that_fails_after_bytes_went_says_how_many(tmp_path, file_size_limit):
    """An error after a short write (EFBIG here; EPIPE, ENOSPC alike) carries the count too,
    and the file's position moves past the bytes that went, so the rest goes after them."""
    path = tmp_path / "f"
    data = bytes(range(256)) * 64

    async def main():
        async with await tc.io.open(path, "wb") as f:
            file_size_limit(1000)
            with pytest.raises(OSError) as info:
                await f.write(data)
            file_size_limit(resource.RLIM_INFINITY)
            assert info.value.errno == errno.EFBIG
            went = info.value.characters_written
            await f.write(data[went:])
        return path.read_bytes()

    assert tc.run(main(), contexts=1) == data




def test_an_empty_write_interrupted_leaves_the_position(tmp_path, contexts):
    """An empty write writes nothing, so the position stays, whatever the interrupt raised at
    its await carries: one that ended an earlier write (re-delivered by whoever caught it)
    still has that write's ``characters_written``."""
    path = tmp_path / "f"

    async def main():
        async with await tc.io.open(path, "wb") as f:
            earlier = KeyboardInterrupt()
            earlier.characters_written = 5  # as the write it ended left it
            tc.lowlevel.interrupt(tc.current_task(), earlier)
            with pytest.raises(KeyboardInterrupt):
                await f.write(b"")
            await f.write(b"ab")
        return path.read_bytes()

    assert tc.run(main(), contexts=contexts) == b"ab"


# -- read_file: the whole-file read closes its file after the read -------------------------------
# Its read of a FIFO ends short on an interrupt and leaves the interrupt for the next await, as
# f.read() does; read_file's own next await is its file's close, so the close must not be where
# the interrupt lands, or the bytes the read took vanish with it.


def _expire(scope: tc.timeout) -> None:
    """What the engine's deadline heap does when *scope*'s time passes, done by hand: so that
    the expiry and the writer's bytes land in one turn, whatever the machine's load."""
    scope._fire()


@pytest.mark.parametrize("how", [*_INTERRUPTS, "timeout"])
def test_read_file_of_a_fifo_keeps_the_bytes_it_took_from_any_interrupt(fifo, contexts, how):
    """``tc.io.read_file`` of a FIFO interrupted after its read took bytes returns them, short,
    as ``f.read()`` does, and the interrupt lands at the caller's next await (for a timeout:
    TimeoutError at the block's end, the bytes already the caller's)."""
    path, wfd = fifo
    expected = TimeoutError if how == "timeout" else _INTERRUPTS[how][1]

    async def main():
        got = []
        scopes = []

        async def reader():
            if how == "timeout":
                async with tc.timeout(3600) as scope:
                    scopes.append(scope)
                    got.append(await tc.io.read_file(path))
                    await tc.yield_now()  # the interrupt lands here
            else:
                got.append(await tc.io.read_file(path))
                await tc.yield_now()  # the interrupt lands here

        t = spawn_here(reader())
        # In the ring's read of the empty FIFO (not its open, which is a ring op too).
        await until(lambda: is_blocked(t) and isinstance(t.waiting_on(), RingRead))
        if how == "timeout":
            _expire(scopes[0])
        else:
            _INTERRUPTS[how][0](t)
        os.write(wfd, PAYLOAD)  # completes the read in this same step, before the interrupt acts
        with pytest.raises(expected):
            await t
        # The read took what the FIFO held; what it did not take is still there.
        return b"".join(got) + _drain(wfd), got

    data, got = tc.run(main(), contexts=contexts)
    assert data == PAYLOAD
    assert got, "read_file raised instead of returning the bytes it took"


# -- the same reads in an asyncio task (the ring hosted by its loop) -----------------------------
_ASYNCIO_READS = {**_READS, "read_file": None}


@pytest.mark.parametrize("read", list(_ASYNCIO_READS))
def test_an_asyncio_task_s_fifo_read_keeps_the_bytes_it_took_from_a_cancel(fifo, read):
    """In an asyncio task, a FIFO read cancelled as it reads on after taking bytes returns
    them, short, and the cancellation is asked for again, for the task's next await: as in a
    tinycoro task (the ring is the loop's own here, so there are no contexts to vary)."""
    from tinycoro.aio.host import host_for

    path, wfd = fifo

    async def main():
        host = None
        async with _asyncio_file(path) as f:
            got = []

            async def reader():
                if read == "read_file":
                    got.append(await tc.io.read_file(path))
                else:
                    got.append(await _READS[read](f))
                await asyncio.sleep(0)  # the cancellation lands here

            t = asyncio.ensure_future(reader())
            host = host_for(asyncio.get_running_loop())
            reads = lambda: [op for op in host.inflight.values() if isinstance(op, RingRead)]  # noqa: E731
            for _ in range(10_000):  # until the read waits in the ring (its open is a ring op too)
                if reads():
                    break
                await asyncio.sleep(0)
            first = reads()[0]
            os.write(wfd, PAYLOAD)
            for _ in range(10_000):  # until it took the bytes and reads on for the rest
                if first.got or first.args[3] > 0 or not reads():
                    break
                await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            return b"".join(got) + _drain(wfd), got

    data, got = asyncio.run(main())
    assert data == PAYLOAD
    assert got, "the read raised instead of returning the bytes it took"


class _asyncio_file:
    """``async with``: the FIFO opened for reading in the running asyncio task."""

    def __init__(self, path):
        self.path = path

    async def __aenter__(self):
        self.f = await tc.io.open(self.path)
        return self.f

    async def __aexit__(self, *exc):
        await self.f.close()
