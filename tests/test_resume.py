"""One step of a task (tinycoro.core.resume, C when compiled): what the coroutine returns,
raises or yields reaches the task as it would through ``Context.run(coro.send, value)``, on
1, 2 and 4 contexts."""

from __future__ import annotations

import contextvars
from types import SimpleNamespace

import pytest

import tinycoro as tc
from tinycoro.core import resume

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


class _Boom(Exception):
    pass


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_a_task_returns_what_its_coroutine_returns_whatever_it_is(contexts):
    # A return is StopIteration(value) between the step and the engine: a tuple, None, an
    # exception object or a StopIteration must come out as the value itself, not unpacked.
    stop = StopIteration("inner")
    values = [(1, 2), (), None, 0, "x", _Boom("as a value"), stop, [3]]

    async def returns(v):
        await tc.yield_now()
        return v

    async def main():
        tasks = [tc.spawn(returns(v)) for v in values]
        return [await t for t in tasks]

    got = tc.run(main(), contexts=contexts)
    assert got == values[:5] + got[5:6] + [stop, [3]]
    assert got[5] is values[5] and got[6] is stop


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_a_task_raises_what_its_coroutine_raises_and_keeps_its_context(contexts):
    async def fails():
        var.set("set in the task")
        await tc.yield_now()
        assert var.get() == "set in the task"
        raise _Boom("from the coroutine")

    async def stops():
        await tc.yield_now()
        raise StopIteration("inside a coroutine")  # Python makes it a RuntimeError

    async def main():
        var.set("parent")
        t1, t2 = tc.spawn(fails()), tc.spawn(stops())
        with pytest.raises(_Boom, match="from the coroutine"):
            await t1
        with pytest.raises(RuntimeError, match="coroutine raised StopIteration"):
            await t2
        return var.get()

    assert tc.run(main(), contexts=contexts) == "parent"


def test_send_refuses_a_context_entered_already_as_context_run_does():
    async def coro():
        return 1

    # The interpreted seam (the compiled engine cimports a C twin, which the tests above
    # drive): a stand-in with the fields a step reads
    ctx = contextvars.copy_context()
    task = SimpleNamespace(_coro=coro(), _context=ctx, _coro_send=None)

    def inside():
        with pytest.raises(RuntimeError, match="already entered"):
            resume.send(task, None)

    ctx.run(inside)
    with pytest.raises(StopIteration) as e:  # and outside it, the step runs
        resume.send(task, None)
    assert e.value.value == 1
