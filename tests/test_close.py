"""Close ends what waits on a resource, always releases its descriptor, and bad arguments fail
at the call instead of crashing a context (rules 10, 11); a close never closes a number twice."""

from __future__ import annotations

import errno
import os

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

from helpers.runtime import cancel_and_wait, open_fds, opened_since

pytestmark = pytest.mark.timeout(30)


def _closed(exc: BaseException) -> bool:
    return isinstance(exc, tc.ClosedResourceError) and exc.errno == errno.EBADF


# -- bad arguments fail at the call; the context and its other tasks carry on ------------------
def test_bad_offset_and_perms_fail_at_the_call_and_the_context_survives(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")

    async def neighbour(ev):
        await ev.wait()
        return "alive"

    async def main():
        ev = tc.Event()
        other = tc.spawn(neighbour(ev))  # same context (contexts=1)
        async with await tc.io.open(path, "r+b") as f:
            with pytest.raises(ValueError, match="offset"):
                await f.read_at(1, 1 << 64)
            with pytest.raises(ValueError, match="offset"):
                await f.write_at(b"x", 1 << 63)
            with pytest.raises(ValueError, match="offset"):
                await f.readinto_at(bytearray(1), -1)
            with pytest.raises(TypeError, match="size"):
                await f.read_at(1.5, 0)
            assert await f.read_at(3, 0) == b"abc"
        with pytest.raises(ValueError, match="perms"):
            await tc.io.open(tmp_path / "g", "wb", perms=-1)
        with pytest.raises(ValueError, match="perms"):
            await tc.io.open(tmp_path / "g", "wb", perms=1 << 40)
        with pytest.raises(TypeError, match="perms"):
            await tc.io.open(tmp_path / "g", "wb", perms="rw")
        with pytest.raises(TypeError, match="direct"):
            await tc.io.open(path, "rb", direct=1)
        with pytest.raises(ValueError, match="mode"):
            await tc.io.mkdir(tmp_path / "d", mode=-1)
        ev.set()
        return await other

    assert tc.run(main(), contexts=1) == "alive"


def test_bad_socket_arguments_fail_at_the_call():
    async def main():
        with pytest.raises(ValueError, match="port"):
            await tc.net.listen("127.0.0.1", 65536)
        with pytest.raises(TypeError, match="port"):
            await tc.net.connect("127.0.0.1", "80")
        with pytest.raises(ValueError, match="backlog"):
            await tc.net.listen("127.0.0.1", 0, backlog=-1)
        with pytest.raises(ValueError, match="backlog"):
            await tc.net.listen("127.0.0.1", 0, backlog=1 << 40)
        with pytest.raises(TypeError, match="backlog"):
            await tc.net.listen_unix("/tmp/x", backlog=None)
        with pytest.raises(TypeError, match="ssl"):
            await tc.net.listen(ssl=True)
        lst = await tc.net.listen()
        conn = await tc.net.connect("127.0.0.1", lst.port)
        with pytest.raises(ValueError, match="max_bytes"):
            await conn.recv(1 << 40)
        with pytest.raises(ValueError, match="offset"):
            await conn.sendfile(0, offset=-1)
        u = await tc.net.udp()
        with pytest.raises(ValueError, match="max_bytes"):
            await u.recvfrom(0)
        with pytest.raises(TypeError, match="address"):
            await u.sendto(b"x", "127.0.0.1")
        for c in (u, conn, lst):
            await c.close()

    tc.run(main(), contexts=1)


# -- close ends the operations other tasks wait on (any context) --------------------------------
def test_close_ends_a_recv_pending_in_another_task(contexts):
    async def main():
        lst = await tc.net.listen()
        client = await tc.net.connect("127.0.0.1", lst.port)
        conn = await lst.accept()
        r = tc.spawn(conn.recv())
        await wait_blocked(r)
        await conn.close()
        with pytest.raises(tc.ClosedResourceError) as info:
            await r
        assert info.value.errno == errno.EBADF
        with pytest.raises(tc.ClosedResourceError):
            await conn.recv()  # use after close
        with pytest.raises(tc.ClosedResourceError):
            await conn.send(b"x")
        await conn.close()  # twice is a no-op
        await client.close()
        await lst.close()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


def test_close_ends_an_accept_pending_in_another_task(contexts):
    async def main():
        lst = await tc.net.listen()
        a = tc.spawn(lst.accept())
        await wait_blocked(a)
        await lst.close()
        with pytest.raises(tc.ClosedResourceError):
            await a
        with pytest.raises(tc.ClosedResourceError):
            await lst.accept()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


def test_close_ends_several_waiters_on_several_contexts(contexts):
    # Four tasks (spread over the contexts) wait on the same listener; one close ends them all.
    async def main():
        lst = await tc.net.listen()
        waiters = [tc.spawn(lst.accept()) for _ in range(4)]
        await wait_blocked(*waiters)
        await lst.close()
        for w in waiters:
            with pytest.raises(tc.ClosedResourceError):
                await w

    tc.run(main(), contexts=contexts)


def test_close_ends_a_udp_recvfrom(contexts):
    async def main():
        u = await tc.net.udp()
        r = tc.spawn(u.recvfrom())
        await wait_blocked(r)
        await u.close()
        with pytest.raises(tc.ClosedResourceError):
            await r
        with pytest.raises(tc.ClosedResourceError):
            await u.sendto(b"x", ("127.0.0.1", 9))

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


def test_close_ends_a_file_read_pending_in_another_task(tmp_path, contexts):
    # A FIFO opened read-write has no data: a read on it waits in the kernel until the close.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    async def main():
        f = await tc.io.open(fifo, "r+b")
        r = tc.spawn(f.read(10))
        await wait_blocked(r)
        await f.close()
        with pytest.raises(tc.ClosedResourceError):
            await r
        with pytest.raises(ValueError, match="closed file"):  # use after close: as built-in files
            await f.read(1)

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


def test_close_while_not_waiting_leaves_no_trace(contexts):
    # Many short-lived connections, closed from the accepting side while the client receives.
    async def main():
        lst = await tc.net.listen()
        for _ in range(50):
            client = await tc.net.connect("127.0.0.1", lst.port)
            conn = await lst.accept()
            r = tc.spawn(client.recv())
            await conn.close()
            assert await r == b""  # the peer's close is EOF, not an error
            await client.close()
        await lst.close()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


# -- a close always releases its descriptor ----------------------------------------------------
def test_file_close_with_an_interrupt_pending_still_releases_the_fd(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    seen = {}

    async def worker():
        f = await tc.io.open(tmp_path / "f")
        seen["fd"] = f.fileno()
        tc.current_task().cancel()  # a cancel arrives before the close reaches the ring
        await f.close()

    async def main():
        t = tc.spawn(worker())
        with pytest.raises(tc.Cancelled):
            await t

    before = open_fds()
    tc.run(main(), contexts=1)
    assert not opened_since(before), f"fd {seen['fd']} leaked"


def test_socket_close_with_an_interrupt_pending_still_releases_the_fd(contexts):
    async def worker(lst):
        conn = await tc.net.connect("127.0.0.1", lst.port)
        tc.current_task().cancel()
        await conn.close()

    async def main():
        lst = await tc.net.listen()
        t = tc.spawn(worker(lst))
        with pytest.raises(tc.Cancelled):
            await t
        peer = await lst.accept()
        assert await peer.recv() == b""  # the client's socket really was closed
        await peer.close()

        async def close_listener():
            tc.current_task().cancel()
            await lst.close()

        with pytest.raises(tc.Cancelled):
            await tc.spawn(close_listener())
        assert lst.closed

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


def test_cancelled_closer_in_finally_releases_the_fd(tmp_path, contexts):
    # The usual shape: a task is cancelled while it waits, and its finally closes the file
    # while a second interrupt (here: a second cancel) is already pending.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    async def worker(started):
        f = await tc.io.open(fifo, "r+b")
        try:
            started.set()
            await f.read(1)
        finally:
            tc.current_task().cancel()
            await f.close()

    async def main():
        started = tc.Event()
        t = tc.spawn(worker(started))
        await started.wait()
        await wait_blocked(t)
        await cancel_and_wait(t)

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


# -- the "already receiving" guard is atomic: two receivers never share a stream's buffer ---------
def test_only_one_of_many_concurrent_receivers_gets_the_stream(contexts):
    # Tasks on every context race for recv on one stream, many rounds: each round exactly one
    # receives and all others are refused, never two sharing the stream's buffer.
    n = 6

    async def try_recv(conn, go):
        await go.wait()
        try:
            return await conn.recv()
        except RuntimeError as exc:
            assert "already receiving" in str(exc)
            return None

    async def main():
        lst = await tc.net.listen()
        client = await tc.net.connect("127.0.0.1", lst.port)
        conn = await lst.accept()
        for i in range(30):
            go = tc.Event()
            tasks = [tc.spawn(try_recv(conn, go)) for _ in range(n)]
            await wait_blocked(*tasks)
            go.set()
            while sum(t.done() for t in tasks) < n - 1:
                await tc.yield_now()
            await client.sendall(b"%d" % i)
            results = [await t for t in tasks]
            assert [r for r in results if r is not None] == [b"%d" % i]
        for c in (client, conn, lst):
            await c.close()

    tc.run(main(), contexts=contexts)


def test_stop_with_zero_timeout_releases_the_descriptors_of_abandoned_tasks(tmp_path, contexts):
    # stop(timeout=0) abandons tasks blocked in a read; their `async with` closes run while the
    # engine shuts down, where the io_uring close can no longer be submitted.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    async def reader(opened):
        async with await tc.io.open(fifo, "r+b") as f:
            opened.count_down()
            await f.read(1)

    before = open_fds()
    s = tc.Scheduler(contexts)
    s.start()
    opened = tc.Latch(4)
    tasks = [s.submit(reader(opened)) for _ in range(4)]
    s.run_sync(opened.wait(), timeout=10)
    s.stop(timeout=0)
    assert all(t.done() for t in tasks)
    assert not opened_since(before)


# -- close_fd never closes a number that the kernel's close may have released ----------------------
@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_an_interrupted_close_never_closes_the_number_again(tmp_path, monkeypatch, contexts, how):
    """Once a close reached the ring, the kernel may have released the number (a close that
    fails, with EINTR or EIO, has released it too), and another thread may own it now: the
    interrupt that arrives in the close's place must not be followed by ``os.close``.

    Simulated: the close's SQE is replaced by one that first releases the number and puts
    another descriptor there (what a second thread's ``open`` may do at that moment), then
    waits in the kernel (opening a FIFO for writing with no reader) until the task is interrupted.
    """
    import tinycoro.closing
    from tinycoro import uring

    fifo = os.fsencode(tmp_path / "fifo")
    os.mkfifo(fifo)
    other = os.open(os.devnull, os.O_RDONLY)
    other_id = os.fstat(other)[:2]  # (mode, inode): the other descriptor's file

    def released_then_waits(sqe, fd):
        os.close(fd)
        os.dup2(other, fd)  # "another thread's new descriptor" takes the number
        uring.prep_openat(sqe, fifo, os.O_WRONLY | os.O_CREAT, 0o600, -100)  # AT_FDCWD; blocks

    monkeypatch.setattr(tinycoro.closing, "prep_close", released_then_waits)
    numbers = []

    async def closer():
        fd = os.open(os.devnull, os.O_RDONLY)
        numbers.append(fd)
        if how == "timeout":
            async with tc.timeout(0.05):
                await tinycoro.closing.close_fd(fd)
        else:
            await tinycoro.closing.close_fd(fd)

    async def main():
        t = tc.spawn(closer())
        await wait_blocked(t)
        if how == "cancel":
            await cancel_and_wait(t)
        else:
            with pytest.raises(TimeoutError):
                await t

    try:
        tc.run(main(), contexts=contexts)
        (n,) = numbers
        assert os.fstat(n)[:2] == other_id, "close_fd closed the number again after the kernel's close"
        os.close(n)
    finally:
        os.close(other)
