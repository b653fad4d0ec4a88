"""tinycoro awaitables inside a running asyncio loop, under asyncio and uvloop.

Each test runs its main coroutine with ``asyncio.run`` and with ``uvloop.run``. I/O goes to the
ring hosted by that loop; synchronisation is on events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading

import pytest

import tinycoro as tc
import tinycoro.lowlevel as ll
from tinycoro import uring
from tinycoro.aio import host as aio_host

from helpers.runtime import cancel_and_wait, open_fds, opened_since

uvloop = pytest.importorskip("uvloop")

pytestmark = pytest.mark.timeout(60)


def _run_asyncio(coro):
    return asyncio.run(coro)


def _run_uvloop(coro):
    return uvloop.run(coro)


@pytest.fixture(params=[_run_asyncio, _run_uvloop], ids=["asyncio", "uvloop"])
def arun(request):
    """Run a coroutine to completion on a fresh loop of the parametrised kind, checking that no
    thread and no descriptor outlive it (the hosted ring closes with the loop)."""
    runner = request.param
    runner(asyncio.sleep(0))  # libuv keeps one pipe for the process from its first loop on

    def run(coro):
        gc.collect()
        fds, threads = open_fds(), set(threading.enumerate())
        result = runner(coro)
        assert not opened_since(fds), "a descriptor outlived the asyncio loop"
        assert set(threading.enumerate()) == threads, "a thread outlived the asyncio loop"
        return result

    return run


def _host() -> aio_host.LoopHost:
    return aio_host.host_for(asyncio.get_running_loop())


def _ring_timer(seconds: float):
    """An io_uring timeout on the hosted ring (its result, -ETIME, as is): an operation in
    the kernel for *seconds*. tc.sleep waits on the loop's own timers, not on the ring."""
    return ll.perform_raw(ll.Op(uring.prep_timeout, uring.timespec(seconds), 0, 0))


# -- files and timers -------------------------------------------------------------------------
def test_file_write_then_read_back(arun, tmp_path):
    path = tmp_path / "data.bin"
    payload = os.urandom(200_000)

    async def main():
        assert await tc.io.write_file(path, payload) == len(payload)
        async with await tc.io.open(path, "rb") as f:
            head = await f.read_at(1000, 5)
            rest = await f.read()
        return head, rest, await tc.io.read_file(path)

    head, rest, whole = arun(main())
    assert head == payload[5:1005]
    assert rest == payload
    assert whole == payload


def test_io_error_keeps_errno(arun, tmp_path):
    async def main():
        with pytest.raises(FileNotFoundError):
            await tc.io.open(tmp_path / "missing", "rb")

    arun(main())


def test_a_bad_sqe_argument_fails_at_the_await_and_the_ring_goes_on(arun):
    # Rule 11 on the hosted ring: the prep raises, the ring queues a NOP in that SQE's place,
    # and the next operation on the same ring works.
    from tinycoro import uring
    from tinycoro.core.traps import Op

    async def main():
        with pytest.raises(TypeError):
            await Op(uring.prep_nop, "not an argument of a NOP")
        assert await Op(uring.prep_nop) == 0
        await tc.sleep(0)

    arun(main())


def test_tc_sleep_does_not_block_other_asyncio_tasks(arun):
    # While one task awaits tc.sleep, another keeps running: it counts to a fixed number and
    # then sets an Event, so the sleeper cannot have blocked the loop (ordering, not time).
    async def main():
        order = []
        counted = asyncio.Event()

        async def counter():
            for _ in range(100):
                await asyncio.sleep(0)
            order.append("counted")
            counted.set()

        async def sleeper():
            await tc.sleep(3600)  # longer than the test timeout: only the cancel ends it
            order.append("slept")

        s = asyncio.create_task(sleeper())
        c = asyncio.create_task(counter())
        await counted.wait()
        assert not s.done()
        s.cancel()
        with pytest.raises(asyncio.CancelledError):
            await s
        await c
        await tc.sleep(0.001)  # a short one completes normally
        order.append("short sleep done")
        return order

    assert arun(main()) == ["counted", "short sleep done"]


def test_yield_now_lets_other_asyncio_tasks_run(arun):
    async def main():
        seen = []

        async def other():
            seen.append("other")

        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(other()))
        for _ in range(5):
            await tc.yield_now()
        return seen

    assert arun(main()) == ["other"]


# -- cancellation: the asyncio task sees CancelledError only after the CQE -----------------
def test_cancel_waits_for_the_kernel_to_release_the_operation(arun):
    async def main():
        host_seen = []

        async def sleeper():
            try:
                await _ring_timer(3600)
            except asyncio.CancelledError:
                # By the time the cancellation arrives, the timeout's CQE is in: the ring
                # holds nothing for this op any more (rule 8).
                host_seen.append(dict(_host().inflight))
                raise

        t = asyncio.create_task(sleeper())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(_host().inflight) == 1
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        return host_seen

    assert arun(main()) == [{}]


def test_asyncio_timeout_around_tinycoro_io(arun):
    async def main():
        if sys.version_info >= (3, 11):  # asyncio.timeout came in 3.11
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.01):
                    await tc.sleep(3600)
        with pytest.raises(asyncio.TimeoutError):  # the builtin TimeoutError from 3.11 on
            await asyncio.wait_for(tc.sleep(3600), 0.01)
        assert _host().inflight == {}
        return "ok"

    assert arun(main()) == "ok"


def test_cancelled_recv_keeps_the_stream_usable(arun):
    # A recv cancelled in the kernel takes no bytes: what the peer sends afterwards arrives
    # whole at the next recv.
    async def main():
        got = asyncio.Queue()

        async def handle(reader, writer):
            await got.put(writer)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await tc.net.connect("127.0.0.1", port)
        writer = await got.get()
        r = asyncio.create_task(conn.recv())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        r.cancel()
        with pytest.raises(asyncio.CancelledError):
            await r
        writer.write(b"after the cancel")
        await writer.drain()
        data = b""
        while len(data) < len(b"after the cancel"):
            data += await conn.recv()
        await conn.close()
        writer.close()
        server.close()
        await server.wait_closed()
        return data

    assert arun(main()) == b"after the cancel"


def test_close_ends_a_recv_pending_in_another_asyncio_task(arun):
    # rule 10 on the hosted ring: closing a stream fails the recv another task awaits
    # with ClosedResourceError (not a cancellation of that task), and releases the descriptor.
    async def main():
        accepted = asyncio.Queue()

        async def handle(reader, writer):
            await accepted.put(writer)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await tc.net.connect("127.0.0.1", port)
        writer = await accepted.get()
        r = asyncio.create_task(conn.recv())
        while not _host().inflight:
            await asyncio.sleep(0)
        await conn.close()
        with pytest.raises(tc.ClosedResourceError):
            await r
        writer.close()
        server.close()
        await server.wait_closed()
        return _host().inflight

    assert arun(main()) == {}


# -- TCP echo, both directions -----------------------------------------------------------------
def _echo_server_task(port_box: tc.Event, rounds: int):
    async def server():
        lst = await tc.net.listen("127.0.0.1", 0)
        port_box.set(lst.port)
        conn = await lst.accept()
        total = 0
        while True:
            data = await conn.recv()
            if not data:
                break
            total += len(data)
            await conn.sendall(data)
        await conn.close()
        await lst.close()
        return total

    return server()


def test_tcp_echo_tc_listener_on_scheduler_and_asyncio_client(arun, contexts):
    async def main():
        with tc.Scheduler(contexts) as s:
            port_box = tc.Event()  # set on a context thread, awaited here: a shared primitive
            server = s.submit(_echo_server_task(port_box, 50))
            port = await port_box.wait()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for i in range(50):
                msg = f"message {i}\n".encode()
                writer.write(msg)
                await writer.drain()
                assert await reader.readexactly(len(msg)) == msg
            writer.close()
            await writer.wait_closed()
            total = await server  # joining a tc.Task from asyncio
        return total

    assert arun(main()) == sum(len(f"message {i}\n") for i in range(50))


def test_tcp_echo_asyncio_server_and_tc_connect_in_asyncio(arun):
    async def main():
        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with await tc.net.connect("127.0.0.1", port) as conn:
            for i in range(50):
                msg = os.urandom(100 + i)
                await conn.sendall(msg)
                got = b""
                while len(got) < len(msg):
                    got += await conn.recv()
                assert got == msg
        server.close()
        await server.wait_closed()
        return "ok"

    assert arun(main()) == "ok"


# -- joining tinycoro tasks ----------------------------------------------------------------
def test_join_tc_task_result_exception_and_cancel(arun, contexts):
    async def boom():
        await tc.sleep(0.001)
        raise ValueError("boom")

    async def forever(started: tc.Event):
        started.set()
        await tc.Event().wait()

    async def main():
        with tc.Scheduler(contexts) as s:
            assert await s.submit(tc.sleep(0.001)) is None
            with pytest.raises(ValueError, match="boom"):
                await s.submit(boom())
            # Cancelling the asyncio joiner leaves the tinycoro task running
            started = tc.Event()
            t = s.submit(forever(started))
            await started.wait()
            j = asyncio.create_task(_await(t))
            await asyncio.sleep(0)
            j.cancel()
            with pytest.raises(asyncio.CancelledError):
                await j
            assert not t.done()
            await cancel_and_wait(t)
        return "ok"

    assert arun(main()) == "ok"


@pytest.mark.parametrize("fails", [True, False], ids=["failure", "value"])
def test_a_join_cancelled_after_the_task_ended_takes_its_outcome(arun, contexts, caplog, fails):
    # The tinycoro task ends, its done callback hands that to the asyncio joiner, and the
    # joiner is cancelled before it runs again. As in a tinycoro join, the outcome handed over
    # is the join's (returned, or raised at the await; the cancel comes at the next await):
    # dropped, a failure would be one that nothing ever retrieves, logged when collected.
    async def end(gate: tc.Event):
        await gate.wait()
        if fails:
            raise ValueError("handed over")
        return "handed over"

    async def main():
        got = []

        async def joiner(t):
            try:
                got.append(await t)
            except ValueError as e:
                got.append(str(e))
            await asyncio.sleep(0)
            got.append("not reached")

        with tc.Scheduler(contexts) as s:
            gate = tc.Event()
            t = s.submit(end(gate))
            j = asyncio.create_task(joiner(t))
            await asyncio.sleep(0)  # j waits on t's done callback now
            finished = threading.Event()
            t.add_done_callback(lambda _t: finished.set())  # runs after j's
            gate.set()
            assert finished.wait(10)  # the loop is blocked: j's wake-up is queued, not run
            j.cancel()
            with pytest.raises(asyncio.CancelledError):
                await j
            del t
        gc.collect()
        return got

    assert arun(main()) == ["handed over"]
    assert "never retrieved" not in caplog.text


async def _await(aw):
    return await aw


# -- primitives: parked asyncio waiters, cancellation and give-back ------------------------
@pytest.mark.parametrize("cancel_first", [False, True], ids=["unlock-then-cancel", "cancel-then-unlock"])
def test_mutex_handed_to_a_cancelled_asyncio_waiter_is_passed_on(arun, cancel_first):
    # unlock() hands the mutex to "a" (baton passing) and "a" is cancelled before it runs: it
    # must give the mutex to "b" instead of keeping it. In either order: when the cancel comes
    # first, unlock() still finds "a" queued, and the wake lands on a cancelled future; it must
    # be kept for "a" to give the mutex back.
    async def main():
        m = tc.Mutex()
        await m.lock()
        order = []

        async def waiter(name):
            async with m:
                order.append(name)

        a = asyncio.create_task(waiter("a"))
        b = asyncio.create_task(waiter("b"))
        while m.statistics().waiters < 2:
            await asyncio.sleep(0)
        if cancel_first:
            a.cancel()
            m.unlock()
        else:
            m.unlock()
            a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        await b
        return order, m.locked()

    assert arun(main()) == (["b"], False)


def test_semaphore_permit_of_a_cancelled_asyncio_waiter_is_given_back(arun):
    async def main():
        sem = tc.Semaphore(0)
        a = asyncio.create_task(sem.acquire())
        while sem.statistics().waiters < 1:
            await asyncio.sleep(0)
        sem.release()  # handed to a ...
        a.cancel()  # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await a
        return sem.statistics().value

    assert arun(main()) == 1


def test_event_value_is_kept_and_the_cancel_comes_at_the_next_await(arun):
    async def main():
        e = tc.Event()
        got = []

        async def waiter():
            got.append(await e.wait())
            await asyncio.sleep(0)
            got.append("not reached")

        a = asyncio.create_task(waiter())
        while e.statistics().waiters < 1:
            await asyncio.sleep(0)
        e.set("v")
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        return got

    assert arun(main()) == ["v"]


def test_cancel_a_parked_asyncio_waiter(arun):
    async def main():
        m = tc.Mutex()
        await m.lock()
        a = asyncio.create_task(m.lock())
        while m.statistics().waiters < 1:
            await asyncio.sleep(0)
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        assert m.statistics().waiters == 0
        m.unlock()
        return m.locked()

    assert arun(main()) is False


def test_mutex_ownership_is_per_asyncio_task(arun):
    async def main():
        m = tc.Mutex()
        await m.lock()

        async def other():
            m.unlock()

        with pytest.raises(RuntimeError, match="does not hold it"):
            await asyncio.create_task(other())
        with pytest.raises(RuntimeError, match="not reentrant"):
            await m.lock()
        cv = tc.Condition(m)
        cv.notify_one()
        m.unlock()
        return "ok"

    assert arun(main()) == "ok"


# -- errors and lifetime ------------------------------------------------------------------------
def test_in_a_loop_callback_a_primitive_wait_fails_clearly():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def cb():
            coro = tc.Event().wait()
            try:
                coro.send(None)
            except RuntimeError as e:
                fut.set_result(str(e))
            finally:
                coro.close()

        loop.call_soon(cb)
        return await fut

    assert "outside a tinycoro task" in asyncio.run(main())


def test_ring_is_created_on_first_use_and_closed_with_the_loop(arun):
    loops = []

    async def main():
        loop = asyncio.get_running_loop()
        loops.append(loop)
        assert not aio_host.hosted_ring_open(loop)
        await _ring_timer(0.001)
        assert aio_host.hosted_ring_open(loop)
        return aio_host.host_for(loop)

    h = arun(main())  # arun checks that no descriptor is left
    assert h.closed and h.ring.closed


def test_ring_of_a_loop_closed_without_shutdown_asyncgens_is_freed_by_the_backstop():
    gc.collect()
    fds = open_fds()
    loop = asyncio.new_event_loop()
    host = loop.run_until_complete(_use_ring())
    assert len(open_fds()) > len(fds)
    loop.close()  # no shutdown_asyncgens(): only the finalizer on the loop can close the ring
    del loop
    gc.collect()
    assert host.closed
    assert not opened_since(fds)


async def _use_ring():
    await _ring_timer(0.001)
    return _host()


def test_one_ring_per_loop_across_threads():
    # Two loops on two threads each get their own ring; neither touches the other's.
    results = {}
    both = threading.Barrier(2)

    def worker(i):
        async def main():
            await _ring_timer(0.001)
            both.wait(10)  # both rings are open at once here
            return _host().ring.efd

        results[i] = asyncio.run(main())

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(set(results.values())) == 2


def test_under_uvloop_event_loop_policy(tmp_path):
    # asyncio.run with uvloop's policy: the loop is a uvloop.Loop made by the policy.
    async def main():
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        await tc.io.write_file(tmp_path / "f", b"policy")
        await tc.sleep(0.001)
        return await tc.io.read_file(tmp_path / "f")

    uvloop.run(asyncio.sleep(0))  # libuv's process-wide pipe, before counting
    gc.collect()
    fds = open_fds()
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        assert asyncio.run(main()) == b"policy"
    finally:
        asyncio.set_event_loop_policy(old)
    assert not opened_since(fds)


def test_no_ring_reopens_after_the_loop_shut_down_its_async_generators():
    # After shutdown_asyncgens() closed the ring, an operation on that loop fails clearly
    # instead of opening a ring that nothing would close any more.
    loop = asyncio.new_event_loop()
    try:
        gc.collect()
        fds = open_fds()  # the loop's own descriptors included
        loop.run_until_complete(_use_ring())
        loop.run_until_complete(loop.shutdown_asyncgens())
        assert not opened_since(fds)
        with pytest.raises(RuntimeError, match="closed"):
            loop.run_until_complete(_ring_timer(0.001))
        assert not opened_since(fds)
    finally:
        loop.close()


# -- the host is a RingOwner, as an engine is: the same accounting of its own SQEs -------------
@pytest.mark.timeout(30)
def test_a_bad_argument_fails_at_the_await_and_its_placeholder_is_reaped(arun, tmp_path):
    # Rule 11 on the hosted ring: the prep's error is raised in the asyncio task, the NOP left
    # in the SQE's place counts as the host's own SQE until its CQE is reaped, and the next
    # operation on the ring works.
    from tinycoro import uring
    from tinycoro.core.traps import Op

    path = tmp_path / "data"
    path.write_bytes(b"abc")

    async def main():
        fd = os.open(path, os.O_RDONLY)
        try:
            buf = bytearray(1)
            with pytest.raises(OverflowError):
                await Op(uring.prep_read, fd, buf, 1, 1 << 64)  # offset past u64
            assert _host().own_inflight == 1  # the placeholder NOP, not yet reaped
            n = await Op(uring.prep_read, fd, buf, 1, 1)
            while _host().own_inflight:  # reaped with that read's CQE, or just after
                await asyncio.sleep(0)
            return n, bytes(buf), _host().inflight
        finally:
            os.close(fd)

    assert arun(main()) == (1, b"b", {})
