"""asyncio inside tinycoro: ``await tc.aio(awaitable)`` on the scheduler's companion loop
on 1, 2 and 4 contexts."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

from helpers.runtime import cancel_and_wait, open_fds, opened_since

pytestmark = pytest.mark.timeout(60)

DEADLOCK = 20.0


def _aio_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tinycoro-aio-")]


@pytest.fixture
def no_leaks():
    gc.collect()
    fds = open_fds()
    yield
    gc.collect()
    assert _aio_threads() == [], "the companion loop's thread outlived its scheduler"
    assert not opened_since(fds), "a descriptor outlived the scheduler"


def run(coro, contexts):
    return tc.run(coro, contexts=contexts, deadlock_timeout=DEADLOCK)


def test_result_and_exception(contexts, no_leaks):
    async def fails():
        await asyncio.sleep(0)
        raise KeyError("from asyncio")

    async def main():
        assert await tc.aio(asyncio.sleep(0.001, result=42)) == 42
        loop_thread = await tc.aio(_thread_name())
        with pytest.raises(KeyError, match="from asyncio"):
            await tc.aio(fails())
        # many concurrent calls from several tinycoro tasks on several contexts
        async def one(i):
            return await tc.aio(asyncio.sleep(0, result=i))

        results = await tc.when_all(*[one(i) for i in range(50)])
        return loop_thread, results

    loop_thread, results = run(main(), contexts)
    assert loop_thread.startswith("tinycoro-aio-")
    assert results == list(range(50))


async def _thread_name():
    return threading.current_thread().name


def test_asyncio_futures_and_tasks_are_accepted(contexts, no_leaks):
    async def main():
        async def make_future():
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(fut.set_result, "fut")
            return await fut

        return await tc.aio(make_future())

    assert run(main(), contexts) == "fut"


def test_cancelling_the_tinycoro_task_cancels_the_asyncio_side_first(contexts, no_leaks):
    events = []

    async def asyncio_side(started: tc.Event):
        try:
            started.set()  # a tinycoro primitive set from the companion loop's thread
            await asyncio.sleep(3600)
        finally:
            events.append("asyncio side finished")

    async def worker(started):
        try:
            await tc.aio(asyncio_side(started))
        finally:
            events.append("tinycoro side unwound")

    async def main():
        started = tc.Event()
        t = tc.spawn(worker(started))
        await started.wait()
        await wait_blocked(t)
        await cancel_and_wait(t)
        return events

    assert run(main(), contexts) == ["asyncio side finished", "tinycoro side unwound"]


def test_asyncio_side_cancellation_surfaces_as_tc_cancelled(contexts, no_leaks):
    async def cancels_itself():
        asyncio.current_task().cancel()
        await asyncio.sleep(0)

    async def main():
        with pytest.raises(tc.Cancelled):
            await tc.aio(cancels_itself())
        return "ok"

    assert run(main(), contexts) == "ok"


def test_tc_timeout_around_tc_aio(contexts, no_leaks):
    started, finished = [], []

    async def slow():
        started.append("cancelled on the asyncio side")  # unless cancelled before it began
        try:
            await asyncio.sleep(3600)
        finally:
            finished.append("cancelled on the asyncio side")

    async def main():
        with pytest.raises(TimeoutError):
            async with tc.timeout(0.02):
                await tc.aio(slow())
        # a timeout that does not expire leaves the result alone
        async with tc.timeout(30):
            value = await tc.aio(asyncio.sleep(0, result="in time"))
        return value

    assert run(main(), contexts) == "in time"
    # The asyncio task had unwound before TimeoutError reached the tinycoro task. (On a busy
    # machine the timeout can expire before the asyncio task began: it is then cancelled
    # before its first step, and its body never runs at all.)
    assert finished == started


def test_a_coroutine_cancelled_before_its_asyncio_task_began_is_closed(contexts, no_leaks):
    # A timeout that has expired at the first await cancels the call while the companion loop
    # is still creating its asyncio task: that task is cancelled before its first step, so the
    # coroutine handed to tc.aio never starts. It must still be closed, as asyncio closes a
    # task's coroutine cancelled before it began, not left for the garbage collector to warn
    # "coroutine ... was never awaited" (seen in CI on a loaded machine).
    coros = []

    async def never():
        await asyncio.sleep(3600)

    async def main():
        for _ in range(20):
            coro = never()
            coros.append(coro)
            with pytest.raises(TimeoutError):
                async with tc.timeout(0):
                    await tc.aio(coro)
        return "done"

    assert run(main(), contexts) == "done"
    import inspect

    states = {inspect.getcoroutinestate(c) for c in coros}
    assert states == {inspect.CORO_CLOSED}, states


def test_tinycoro_awaitables_inside_the_companion_loop(contexts, no_leaks, tmp_path):
    # Round trip: an asyncio coroutine run by tc.aio awaits tinycoro I/O, which runs on the
    # ring hosted by the companion loop; the ring closes when the scheduler stops.
    path = tmp_path / "f"

    async def asyncio_side():
        await tc.io.write_file(path, b"round trip")
        await tc.sleep(0.001)
        return await tc.io.read_file(path)

    async def main():
        return await tc.aio(asyncio_side())

    assert run(main(), contexts) == b"round trip"


def test_long_lived_scheduler_stops_its_companion(contexts, no_leaks):
    s = tc.Scheduler(contexts).start()
    try:
        assert s.run_sync(_via_aio(), timeout=30) == "companion"
        assert len(_aio_threads()) == 1
    finally:
        s.stop()
    assert _aio_threads() == []


async def _via_aio():
    return await tc.aio(asyncio.sleep(0, result="companion"))


def test_waiting_on_asyncio_is_not_a_deadlock(contexts, no_leaks):
    # The contexts are idle while the asyncio side works: that is not the all-parked state.
    async def main():
        return await tc.aio(asyncio.sleep(0.3, result="done"))

    assert tc.run(main(), contexts=contexts, deadlock_timeout=0.05) == "done"


def test_scheduler_stop_cancels_pending_aio_calls(no_leaks):
    finished = []
    started = tc.Event()

    async def forever():
        started.set()  # from the companion loop's thread
        try:
            await asyncio.sleep(3600)
        finally:
            finished.append(True)

    s = tc.Scheduler(2).start()
    t = s.submit(tc.aio(forever()))
    try:
        s.run_sync(started.wait(), timeout=30)
    finally:
        s.stop(timeout=10)
    assert t.cancelled()
    assert finished == [True]


def test_bad_arguments_and_outside_use(no_leaks):
    async def main():
        with pytest.raises(TypeError, match="awaitable"):
            await tc.aio(42)
        return "ok"

    assert run(main(), 1) == "ok"
    with pytest.raises(RuntimeError, match="outside both"):
        tc.aio(asyncio.sleep(0)).send(None)


def test_inside_asyncio_tc_aio_just_awaits():
    async def main():
        return await tc.aio(asyncio.sleep(0, result="direct"))

    assert asyncio.run(main()) == "direct"
