"""Tasks, nested awaits, joins, results and misuse errors."""

from __future__ import annotations

import asyncio
import sys

import pytest

import tinycoro as tc


async def fib(n: int) -> int:
    if n < 2:
        return n
    return await fib(n - 1) + await fib(n - 2)


def test_fib_by_recursive_awaits(contexts):
    assert tc.run(fib(20), contexts=contexts) == 6765


async def chain(depth: int) -> int:
    if depth == 0:
        return 0
    return 1 + await chain(depth - 1)


def test_deep_await_chain_adds_no_runtime_recursion(contexts):
    # CPython itself needs one frame per awaited level (even asyncio fails at 2,000 under the
    # default limit of 1,000). The runtime may add only a constant number of frames on top:
    # a limit of depth + 100 must be enough.
    depth = 2000
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 100)
    try:
        assert tc.run(chain(depth), contexts=contexts) == depth
    finally:
        sys.setrecursionlimit(old)


async def task_chain(depth: int) -> int:
    # Each level runs in its own task and joins the next one: completion of a task wakes its
    # joiner by rescheduling, never by resuming it inline, so no stack builds up.
    if depth == 0:
        return 0
    return 1 + await tc.spawn(task_chain(depth - 1))


def test_chain_of_2000_joined_tasks(contexts):
    assert tc.run(task_chain(2000), contexts=contexts) == 2000


def test_join_many_results_in_order(contexts):
    async def square(i):
        await tc.yield_now()
        return i * i

    async def main():
        tasks = [tc.spawn(square(i)) for i in range(1000)]
        return [await t for t in tasks]

    assert tc.run(main(), contexts=contexts) == [i * i for i in range(1000)]


def test_exception_propagates_through_join(contexts):
    class Boom(Exception):
        pass

    async def fail():
        await tc.yield_now()
        raise Boom("x")

    async def main():
        t = tc.spawn(fail())
        with pytest.raises(Boom):
            await t
        assert t.done() and isinstance(t.exception(), Boom)
        with pytest.raises(Boom):
            t.result()
        return "ok"

    assert tc.run(main(), contexts=contexts) == "ok"


def test_run_reraises_main_exception():
    async def main():
        raise KeyError("k")

    with pytest.raises(KeyError):
        tc.run(main(), contexts=1)


def test_task_api_and_repr():
    # The child waits for the go-ahead: on 2 contexts it may run on the other one, which could
    # otherwise finish it between the two checks below.
    async def child(go):
        await go.wait()
        return 5

    async def main():
        go = tc.Event()
        t = tc.spawn(child(go), name="kid")
        assert not t.done()
        with pytest.raises(RuntimeError, match="has not finished"):
            t.result()
        go.set()
        assert await t == 5
        assert t.done() and t.result() == 5 and t.exception() is None
        assert t.context in (0, 1)
        assert "kid" in repr(t) and "done" in repr(t)
        assert tc.current_task() is not None
        return tc.current_context()

    assert tc.run(main(), contexts=2) in (0, 1)


def test_current_context_outside_is_none():
    assert tc.current_context() is None
    assert tc.current_task() is None


def test_yield_now_interleaves_on_one_context():
    order = []

    async def worker(name):
        for i in range(3):
            order.append((name, i))
            await tc.yield_now()

    async def main():
        a = tc.spawn(worker("a"))
        b = tc.spawn(worker("b"))
        await a
        await b

    tc.run(main(), contexts=1)
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_tasks_stay_on_their_context(contexts):
    async def probe():
        seen = set()
        for _ in range(20):
            seen.add(tc.current_context())
            await tc.yield_now()
            await tc.sleep(0.0001)
        return seen

    async def main():
        tasks = [tc.spawn(probe()) for _ in range(contexts * 3)]
        return [await t for t in tasks]

    for seen in tc.run(main(), contexts=contexts):
        assert len(seen) == 1


# -- misuse gets a clear error at the call ------------------------------------------------------


def test_run_rejects_non_coroutines():
    async def main():
        return 1

    with pytest.raises(TypeError, match="call it first"):
        tc.run(main)
    with pytest.raises(TypeError, match="coroutine object"):
        tc.run(42)


def test_spawn_outside_scheduler():
    async def child():
        pass

    with pytest.raises(RuntimeError, match="needs a running scheduler"):
        tc.spawn(child())


def test_await_tinycoro_awaitable_outside_scheduler():
    # Outside any scheduler and any asyncio loop (inside asyncio it runs on the loop's hosted
    # ring: tests/test_aio_host.py).
    coro = tc.sleep(0.01)
    with pytest.raises(RuntimeError, match="outside a tinycoro task"):
        coro.send(None)
    coro.close()


def test_await_asyncio_future_inside_task_is_a_type_error():
    loop = asyncio.new_event_loop()
    try:

        async def main():
            with pytest.raises(TypeError, match="asyncio object"):
                await loop.create_future()
            # asyncio's own coroutines ask for their loop before yielding anything to tinycoro;
            # they get the same TypeError there (tests/test_aio_in_tasks.py), not asyncio's own
            # "no running event loop":
            with pytest.raises(TypeError, match=r"asyncio\.sleep needs .*tc\.aio"):
                await asyncio.sleep(0.01)
            return "survived"

        assert tc.run(main(), contexts=1) == "survived"
    finally:
        loop.close()


def test_run_inside_a_task_is_refused():
    async def inner():
        return 1

    async def main():
        coro = inner()
        with pytest.raises(RuntimeError, match="cannot be called from inside") as info:
            tc.run(coro)
        # in a notebook cell (a task too) the fix is to await the coroutine itself
        assert str(info.value).endswith("await inner() instead")

    tc.run(main(), contexts=1)


def test_awaiting_a_cancelled_task_names_it(contexts):
    async def main():
        t = tc.spawn(tc.sleep(60), name="napper")
        await tc.yield_now()
        t.cancel()
        with pytest.raises(tc.Cancelled) as info:
            await t
        return str(info.value)

    assert tc.run(main(), contexts=contexts) == "task 'napper' was cancelled"


def test_task_cannot_await_itself():
    async def main():
        me = tc.current_task()
        with pytest.raises(RuntimeError, match="itself"):
            await me

    tc.run(main(), contexts=1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="contexts"):
        tc.Scheduler(0)
    with pytest.raises(ValueError, match="dispatch"):
        tc.Scheduler(1, dispatch="random")
    with pytest.raises(ValueError, match="ring_entries"):
        tc.Scheduler(1, ring_entries=0)

    async def main():
        with pytest.raises(TypeError, match="seconds"):
            await tc.sleep("1")
        with pytest.raises(TypeError, match="seconds"):
            await tc.sleep(float("nan"))

    tc.run(main(), contexts=1)
