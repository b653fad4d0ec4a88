"""asyncio awaitables awaited directly inside tinycoro tasks.

A tinycoro task runs on a context thread, where no asyncio loop runs; ``tc.aio(...)`` is the way
to await asyncio work there. Awaiting asyncio directly must fail at once with the TypeError that
docs/design.md, API contract promises, naming ``tc.aio``, never asyncio's "no running event loop".
"""

from __future__ import annotations

import asyncio

import pytest

import tinycoro as tc

pytestmark = pytest.mark.timeout(30)


def _is_the_promised_error(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, TypeError) and "tc.aio" in text and "no running event loop" not in text


async def _outcome(aw) -> BaseException | None:
    try:
        await aw
    except Exception as e:  # noqa: BLE001 - the outcome is what the test looks at
        return e
    return None


def test_asyncio_awaitables_in_tasks_fail_with_a_typeerror_naming_tc_aio(contexts):
    async def in_task(make):
        return await _outcome(make())

    async def main():
        ev = asyncio.Event()
        fails = {
            "sleep": await _outcome(asyncio.sleep(0.05)),
            "sleep(0)": await _outcome(asyncio.sleep(0)),
            "event": await _outcome(ev.wait()),
            "when_all": await _outcome(tc.when_all(asyncio.sleep(0.05), tc.sleep(0.05))),
            "when_any": await _outcome(tc.when_any(asyncio.sleep(0.05), tc.sleep(10))),
            "spawned": await tc.spawn(in_task(lambda: asyncio.sleep(0.05))),
            "spawned coroutine": await _outcome(tc.spawn(asyncio.sleep(0.05))),
        }
        inner = tc.sleep(0)  # asyncio.wait_for fails before it takes this coroutine over
        fails["wait_for"] = await _outcome(asyncio.wait_for(inner, 1))
        inner.close()
        # what works stays working, in the same tasks: tc.aio, and tinycoro's own awaitables
        ok = await tc.when_all(tc.aio(asyncio.sleep(0.01, result="a")), tc.sleep(0.01))
        return fails, ok

    fails, ok = tc.run(main(), contexts=contexts)
    assert ok == ["a", None]
    for what, exc in fails.items():
        assert exc is not None and _is_the_promised_error(exc), (what, exc)
    assert "main awaited asyncio work (asyncio.sleep needs" in str(fails["sleep"])


def test_a_task_named_in_the_error_and_asyncio_usable_on_the_thread_afterwards():
    async def main():
        return await _outcome(asyncio.sleep(0.01))

    exc = tc.run(main(), contexts=1)
    assert _is_the_promised_error(exc)
    # the caller's thread is untouched: asyncio runs here as before
    assert asyncio.run(asyncio.sleep(0, result="fine")) == "fine"


def test_blocking_asyncio_run_inside_a_task_is_refused_as_inside_an_asyncio_task():
    async def main():
        coro = asyncio.sleep(0)
        try:
            asyncio.run(coro)
        except RuntimeError as e:
            return str(e)
        finally:
            coro.close()

    assert "running event loop" in tc.run(main(), contexts=1)


def test_registries_of_loops_drop_the_stand_in():
    """A registry of asyncio loops that a task's code reached (tornado maps loops to IOLoops
    and, whenever it makes a new one, drops the entries whose loop is_closed()) must not break
    on the context threads' stand-in loop later, on another thread."""
    ioloop = pytest.importorskip("tornado.ioloop")
    from tornado.platform.asyncio import AsyncIOLoop

    async def main():
        return await _outcome(_current_ioloop(ioloop))

    exc = tc.run(main(), contexts=1)
    assert _is_the_promised_error(exc)
    AsyncIOLoop().close()  # on this thread, after the task: no TypeError from the stand-in


async def _current_ioloop(ioloop):
    ioloop.IOLoop.current().add_callback(print)
