"""The per-thread runtime state (tinycoro.core.local): compiled and pure, the same behaviour."""

from __future__ import annotations

import gc
import importlib.util
import threading
import weakref

import pytest

from tinycoro import compiled
from tinycoro.core import local

IMPLS = [pytest.param(local._Local, id="threading.local")]
if importlib.util.find_spec("tinycoro._clocal") is not None:
    from tinycoro._clocal import Local

    IMPLS.append(pytest.param(Local, id="compiled"))


class _Thing:
    pass


def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(10)
    assert not t.is_alive()
    return out[0]


@pytest.mark.parametrize("impl", IMPLS)
def test_values_are_per_thread_and_none_until_set(impl):
    state = impl()
    # The compiled Local keeps its values in C thread-locals shared by every instance, so
    # start and end from None on this thread.
    assert (state.engine, state.task) == (None, None)
    engine, task = _Thing(), _Thing()
    state.engine, state.task = engine, task
    try:
        assert state.engine is engine and state.task is task
        assert _in_thread(lambda: (state.engine, state.task)) == (None, None)

        def set_there():
            state.task = _Thing()
            return state.task is not task

        assert _in_thread(set_there)
        assert state.task is task  # the other thread's write did not reach this one
    finally:
        state.engine = state.task = None
    assert (state.engine, state.task) == (None, None)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_value_is_released_when_replaced(impl):
    state = impl()
    thing = _Thing()
    ref = weakref.ref(thing)
    state.task = thing
    del thing
    gc.collect()
    assert ref() is not None  # the state holds it
    state.task = None
    gc.collect()
    assert ref() is None  # and lets it go: no reference leaked


def test_the_compiled_state_is_used_when_built():
    built = importlib.util.find_spec("tinycoro._clocal") is not None
    forced_pure = compiled.pure_requested() is not None
    assert local.COMPILED is (built and not forced_pure)


def test_running_task_reads_the_task_this_thread_runs():
    # running_task() is the call spelling of thread_state.task that compiled hot paths
    # cimport: the same value, on every runtime, per thread, None outside a step.
    import tinycoro as tc

    assert local.running_task() is None

    async def main():
        return local.running_task(), local.thread_state.task, tc.current_task()

    for contexts in (1, 2):
        with tc.Scheduler(contexts) as s:
            seen, state, task = s.run_sync(main(), timeout=30)
        assert seen is state is task is not None
    assert _in_thread(local.running_task) is None


def test_running_engine_reads_the_engine_this_thread_drives():
    # running_engine() is the call spelling of thread_state.engine that net's compiled send
    # and recv cimport: the same value, on every runtime, per thread, None outside a context.
    import tinycoro as tc

    assert local.running_engine() is None

    async def main():
        return local.running_engine(), local.thread_state.engine, tc.current_task()._engine

    for contexts in (1, 2, 4):
        with tc.Scheduler(contexts) as s:
            seen, state, engine = s.run_sync(main(), timeout=30)
        assert seen is state is engine is not None
    assert _in_thread(local.running_engine) is None


def test_set_running_task_is_the_store_of_thread_state_task():
    # set_running_task(x) is the call spelling of `thread_state.task = x` that the compiled
    # engine cimports: the same store, per thread, that releases what it replaces.
    thing = _Thing()
    ref = weakref.ref(thing)
    local.set_running_task(thing)
    try:
        assert local.thread_state.task is thing and local.running_task() is thing
        assert _in_thread(local.running_task) is None
    finally:
        local.set_running_task(None)
    assert local.thread_state.task is None
    del thing
    gc.collect()
    assert ref() is None
