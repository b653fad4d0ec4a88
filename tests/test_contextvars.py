"""Rule 9: every task runs in its own contextvars.Context, copied from whoever spawned it
(rule 9); and failures nobody awaits are reported when they end."""

from __future__ import annotations

import contextvars
import logging
import os
import threading

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


@pytest.mark.timeout(30)
def test_a_context_variable_follows_a_task_across_timers_io_and_waits(contexts, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"data")

    async def child(i, ev, m):
        var.set(f"child {i}")
        seen = [var.get()]
        await tc.sleep(0.001)
        seen.append(var.get())
        assert await tc.io.read_file(path) == b"data"
        seen.append(var.get())
        await ev.wait()
        seen.append(var.get())
        async with m:
            await tc.yield_now()
            seen.append(var.get())
        return seen

    async def main():
        var.set("parent")
        ev, m = tc.Event(), tc.Mutex()
        kids = [tc.spawn(child(i, ev, m)) for i in range(8)]
        await wait_blocked(*kids)  # every child waits on the event, on its own context
        ev.set()
        got = [await k for k in kids]
        return got, var.get()

    got, parent = tc.run(main(), contexts=contexts)
    assert got == [[f"child {i}"] * 5 for i in range(8)]
    assert parent == "parent"  # a value set in a task does not leak to its parent


@pytest.mark.timeout(30)
def test_a_task_starts_with_a_copy_of_its_spawners_context(contexts):
    async def child():
        before = var.get()
        var.set("changed by the child")
        return before

    async def main():
        var.set("from the parent")
        got = await tc.spawn(child())
        return got, var.get()

    token = var.set("from the caller of tc.run")
    try:
        assert tc.run(main(), contexts=contexts) == ("from the parent", "from the parent")
        assert var.get() == "from the caller of tc.run"  # tc.run's main task ran in a copy
    finally:
        var.reset(token)


@pytest.mark.timeout(30)
def test_context_argument_runs_the_task_in_exactly_that_context(contexts):
    ctx = contextvars.Context()
    ctx.run(var.set, "in ctx")

    async def child():
        await tc.sleep(0.001)
        seen = var.get()
        var.set("written by the task")
        return seen

    async def main():
        var.set("parent")
        return await tc.spawn(child(), context=ctx)

    assert tc.run(main(), contexts=contexts) == "in ctx"
    assert ctx[var] == "written by the task"  # it ran in that very Context, not a copy

    with tc.Scheduler(contexts) as s:
        ctx2 = contextvars.Context()
        assert s.run_sync(_get_after_sleep(), timeout=10) == "unset"
        t = s.submit(child(), context=ctx2)
        done = threading.Event()
        t.add_done_callback(lambda _t: done.set())
        assert done.wait(10)
        assert t.result() == "unset" and ctx2[var] == "written by the task"
        with pytest.raises(TypeError, match="context"):
            s.submit(child(), context={"not": "a Context"})


async def _get_after_sleep():
    await tc.sleep(0.001)
    return var.get()


@pytest.mark.timeout(30)
def test_submit_from_a_foreign_thread_copies_that_threads_context(contexts):
    with tc.Scheduler(contexts) as s:
        out = {}

        def foreign(i):
            var.set(f"thread {i}")
            out[i] = s.run_sync(_get_after_sleep(), timeout=10)
            out[f"after {i}"] = var.get()

        threads = [threading.Thread(target=foreign, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert out == {**{i: f"thread {i}" for i in range(4)}, **{f"after {i}": f"thread {i}" for i in range(4)}}


# -- failures speak up at once ----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_failure_hook_is_called_once_in_the_spawners_context_on_the_tasks_thread(contexts):
    calls = []
    reported = threading.Event()

    def hook(task, exc):
        calls.append((task, exc, var.get(), threading.current_thread().name))
        reported.set()

    async def boom():
        await tc.sleep(0.001)
        raise ValueError("boom")

    with tc.Scheduler(contexts) as s:
        s.failure_hook = hook

        async def spawner():
            var.set("the spawning cell")
            return tc.spawn(boom())

        t = s.run_sync(spawner(), timeout=10)
        assert reported.wait(10)
        [(task, exc, value, thread)] = calls
        assert task is t and isinstance(exc, ValueError) and value == "the spawning cell"
        assert thread == f"tinycoro-{s.id}-ctx{t.context}"
        st = s.stats()
        assert st.failed == 1
        assert [f.error for f in s.failures()] == ["ValueError: boom"]

        # Awaiting it later still raises, and nothing is reported a second time.
        async def join():
            await t

        with pytest.raises(ValueError, match="boom"):
            s.run_sync(join(), timeout=10)
        assert len(calls) == 1
        # ... and it is no longer among the failures nobody awaited (still counted as failed)
        assert s.failures() == ()
        assert s.stats().failed == 1


@pytest.mark.timeout(30)
def test_observed_tasks_are_not_reported(contexts, caplog):
    async def boom():
        raise KeyError("seen by its joiner")

    async def main():
        with pytest.raises(KeyError):
            await tc.spawn(boom())  # joined
        with pytest.raises(KeyError):
            async with tc.TaskGroup() as g:  # a child that fails at once is the group's
                g.spawn(boom())
        with pytest.raises(KeyError):
            await tc.when_all(boom(), tc.sleep(1))
        t = tc.spawn(_cancelled_soon())
        t.cancel()  # a cancelled task is no failure
        raise KeyError("main's own failure is raised by tc.run")

    with caplog.at_level(logging.ERROR, logger="tinycoro"):
        with pytest.raises(KeyError, match="main's own"):
            tc.run(main(), contexts=contexts)
        with tc.Scheduler(contexts) as s:
            with pytest.raises(KeyError):
                s.run_sync(boom(), timeout=10)
            assert s.stats().failed == 0
    assert not [r for r in caplog.records if r.name == "tinycoro"]


async def _cancelled_soon():
    await tc.sleep(60)


@pytest.mark.timeout(30)
def test_a_failing_hook_is_logged_and_the_context_carries_on(caplog):
    def bad_hook(task, exc):
        raise RuntimeError("the hook itself is broken")

    async def boom():
        raise ValueError("x")

    with caplog.at_level(logging.ERROR, logger="tinycoro"):
        with tc.Scheduler(1) as s:
            s.failure_hook = bad_hook

            async def main():
                t = tc.spawn(boom())
                while not t.done():
                    await tc.yield_now()
                return os.getpid()

            assert s.run_sync(main(), timeout=10) == os.getpid()
            assert s.stats().failed == 1
            assert s.run_sync(_get_after_sleep(), timeout=10) == "unset"
    assert "failure_hook raised" in caplog.text and "the hook itself is broken" in caplog.text
