"""The asyncio loop of awaiting cells, in a real kernel: the
loop a cell's asyncio awaitables run on, and asyncio awaited inside tasks.

After ``%load_ext tinycoro`` the loop that serves a cell's asyncio work (the kernel's own) says
it runs while the cell runs (asyncio libraries check ``is_running()``), and it keeps serving
asyncio background tasks between cells, as in a plain kernel; asyncio's structured code
(``asyncio.timeout``, ``TaskGroup``) finds the cell as its current task. asyncio awaitables
inside tasks spawned from a cell fail with the TypeError that names ``tc.aio``. The last tests
run the runner in process, called from a running loop as ipykernel calls it, and without one.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

import helpers.kernel as kp
from helpers.shell import tinycoro_shell

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def tck(kernel_dirs):
    with kp.loaded_kernel(kernel_dirs, "import asyncio, tinycoro as tc") as k:
        yield k


def test_the_cells_loop_reports_running_in_an_awaiting_cell(tck):
    r = tck.ok(
        "await tc.sleep(0)\n"
        "loop = asyncio.get_running_loop()\n"
        "await asyncio.sleep(0)\n"
        "from tornado.ioloop import IOLoop  # what dask's LoopRunner looks at\n"
        "print(loop.is_running(), asyncio.get_running_loop() is loop,"
        " IOLoop.current().asyncio_loop is loop)\n"
    )
    assert r.stdout().strip() == "True True True"


def test_an_asyncio_background_task_advances_between_cells(tck):
    # The heartbeat starts beating when the cell's last statement (no await after it) sets
    # `go`, so its beats happen after the cell, on the loop the kernel turns between cells. It
    # prints once its counter reached 3; the test waits for that line (a bounded wait).
    cell = tck.cell(
        "beats = 0\n"
        "go = asyncio.Event()\n"
        "async def heartbeat():\n"
        "    global beats\n"
        "    await go.wait()\n"
        "    while True:\n"
        "        await asyncio.sleep(0.01)\n"
        "        beats += 1\n"
        "        if beats == 3:\n"
        "            print('three beats', flush=True)\n"
        "hb = asyncio.create_task(heartbeat())\n"
        "await asyncio.sleep(0)\n"
        "go.set()\n"
    )
    tck.until(
        lambda m: m["msg_type"] == "stream" and "three beats" in m["content"]["text"],
        timeout=20,
        what="the heartbeat's third beat after its cell ended",
    )
    assert "three beats" in tck.stream(cell)  # in the cell that started it (rule 9)
    # the next cell sees the moved counter; the task also keeps going while a cell awaits
    r = tck.ok(
        "seen = beats\n"
        "while beats < seen + 3:\n"
        "    await tc.sleep(0.005)\n"
        "hb.cancel()\n"
        "try:\n"
        "    await hb\n"
        "except asyncio.CancelledError:\n"
        "    pass\n"
        "(seen >= 3, hb.cancelled())"
    )
    assert r.result() == "(True, True)"
    # a cell without await makes its asyncio objects on the same loop: an awaiting cell awaits them
    tck.ok(
        "ev = asyncio.Event()\n"
        "async def waiter():\n"
        "    await ev.wait()\n"
        "    return 'made in a cell without await'\n"
        "f = asyncio.ensure_future(waiter())\n"
    )
    assert tck.ok("ev.set()\nawait f").result() == "'made in a cell without await'"


def test_asyncio_structured_code_sees_the_cell_as_its_current_task(tck):
    """asyncio.timeout, asyncio.TaskGroup (and wait_for on Python 3.12+) need a current task,
    as asyncio libraries do (dask's Server.start wraps its start in asyncio.timeout)."""
    r = tck.ok(
        "async def slow():\n"
        "    await asyncio.sleep(10)\n"
        "outcomes = []\n"
        "for body in (asyncio.sleep(10), tc.sleep(10), slow()):\n"
        "    try:\n"
        "        async with asyncio.timeout(0.02):\n"
        "            await body\n"
        "    except TimeoutError:\n"
        "        outcomes.append('timed out')\n"
        "async with asyncio.timeout(10):\n"
        "    await asyncio.sleep(0)\n"
        "async def fail():\n"
        "    await asyncio.sleep(0.001)\n"
        "    raise ValueError('child')\n"
        "try:\n"
        "    async with asyncio.TaskGroup() as g:\n"
        "        g.create_task(fail())\n"
        "        g.create_task(asyncio.sleep(10))\n"
        "except* ValueError as eg:\n"
        "    outcomes.append(repr(eg.exceptions[0]))\n"
        "await asyncio.sleep(0.001)\n"
        "await tc.sleep(0.001)\n"
        "(outcomes, asyncio.current_task() is not None)"
    )
    assert r.result() == "(['timed out', 'timed out', 'timed out', \"ValueError('child')\"], True)"


def test_asyncio_in_spawned_tasks_names_tc_aio(tck):
    r = tck.run("await tc.when_all(asyncio.sleep(0.1), tc.sleep(0.1))")
    assert r.status == "error" and r.content["ename"] == "TypeError", r.content
    assert "tc.aio" in r.content["evalue"] and "no running event loop" not in r.content["evalue"]
    r = tck.run(
        "async def job():\n"
        "    await asyncio.sleep(0.01)\n"
        "await tc.spawn(job())\n"
    )
    assert r.status == "error" and r.content["ename"] == "TypeError", r.content
    assert "tc.aio" in r.content["evalue"]
    # tc.aio is the way, and it works in the same places
    r = tck.ok(
        "async def job():\n"
        "    return await tc.aio(asyncio.sleep(0.01, result='via tc.aio'))\n"
        "await tc.when_all(tc.spawn(job()), tc.aio(asyncio.sleep(0.01, result=2)))\n"
    )
    assert r.result() == "['via tc.aio', 2]"


def test_interrupting_an_asyncio_await_still_works(tck):
    content, msgs = kp.interrupt_after_started(
        tck,
        "try:\n"
        "    print('started', flush=True)\n"
        "    await asyncio.sleep(30)\n"
        "finally:\n"
        "    await asyncio.sleep(0.01)\n"
        "    print('finally ran')\n",
    )
    kp.interrupted_after_finally(content, msgs)
    assert tck.ok("await asyncio.sleep(0.01); 'next'").result() == "'next'"


def test_the_loading_cell_serves_asyncio_from_the_kernels_loop_too(kernel_dirs):
    k = kp.start_kernel(kernel_dirs, "plain")
    try:
        r = k.ok(
            "%load_ext tinycoro\n"
            "import asyncio, tinycoro as tc\n"
            "await tc.sleep(0)\n"
            "f = asyncio.ensure_future(asyncio.sleep(0.01, result='kept'))\n"
            "(asyncio.get_running_loop().is_running(), asyncio.current_task().get_name(), await f)"
        )
        assert r.result() == "(True, '<cell>', 'kept')"
    finally:
        k.shutdown()


# -- in process: the runner called from a running asyncio loop, as ipykernel calls it -----------
@pytest.fixture
def sh(monkeypatch):
    pytest.importorskip("IPython")
    with tinycoro_shell(monkeypatch, 2, "import asyncio, tinycoro as tc") as shell:
        yield shell


def test_cells_run_from_a_loop_use_it_and_its_tasks_go_on_between_cells(sh):
    """ipykernel runs a cell from a callback of its loop, with other callbacks queued behind it
    in the same iteration; the cell's asyncio work goes to that loop, which keeps it going."""

    async def kernel():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        order: list[int] = []

        def cell() -> None:  # one callback of this iteration; five more are queued behind it
            done.set_result(
                sh.run_cell(
                    "beats = 0\n"
                    "async def heartbeat():\n"
                    "    global beats\n"
                    "    while True:\n"
                    "        await asyncio.sleep(0.001)\n"
                    "        beats += 1\n"
                    "hb = asyncio.create_task(heartbeat())\n"
                    "await asyncio.sleep(0)\n"
                    "(asyncio.get_running_loop().is_running(), asyncio.current_task().get_name())\n"
                )
            )

        loop.call_soon(cell)
        for i in range(5):
            loop.call_soon(order.append, i)
        res = await done
        assert res.error_in_exec is None and res.result == (True, "<cell>")
        assert sh.user_ns["hb"].get_loop() is loop and order == [0, 1, 2, 3, 4]
        # between cells this loop turns: the heartbeat moves with no cell running
        async with asyncio.timeout(10):
            while sh.user_ns["beats"] < 3:
                await asyncio.sleep(0.001)
        res = sh.run_cell("seen = beats\nwhile beats < seen + 3:\n    await tc.sleep(0.001)\nhb.cancel()")
        assert res.error_in_exec is None
        return asyncio.current_task() is not None  # the calling task was given back

    assert asyncio.run(kernel()) is True


def test_without_a_kernel_loop_the_private_loop_runs_during_the_cell(sh):
    res = sh.run_cell(
        "loop = asyncio.get_running_loop()\n"
        "await asyncio.sleep(0)\n"
        "(loop.is_running(), asyncio.get_running_loop() is loop)\n"
    )
    assert res.error_in_exec is None and res.result == (True, True)
    assert sh.run_cell("await asyncio.sleep(0.001); loop.is_running()").result is True


def test_an_awaiting_cell_run_by_the_cells_own_asyncio_work_is_refused(sh):
    """A callback on the cells' loop (a widget handler, say) that runs an awaiting cell while
    a cell runs gets the runner's clear error; the running cell carries on."""
    res = sh.run_cell(
        "inner = []\n"
        "asyncio.get_running_loop().call_soon(\n"
        "    lambda: inner.append(get_ipython().run_cell('await tc.sleep(0)').error_in_exec))\n"
        "while not inner:\n"
        "    await asyncio.sleep(0)\n"
        "await tc.sleep(0.001)\n"
        "repr(inner[0])\n"
    )
    assert res.error_in_exec is None
    assert "RuntimeError" in res.result and "one cell at a time" in res.result
    assert sh.run_cell("await asyncio.sleep(0); await tc.sleep(0); 'next'").result == "next"


def test_asyncio_cancelling_the_cell_behaves_as_for_an_asyncio_task(sh, caplog):
    """asyncio.timeout cancels the cell's asyncio face: the awaited future is cancelled and the
    cell takes its outcome (a task that absorbs the cancellation returns its value), and a
    cancelled gather's outcome is retrieved, not logged as "never retrieved"."""
    res = sh.run_cell(
        "started = asyncio.Event()\n"
        "async def stubborn():\n"
        "    started.set()\n"
        "    try:\n"
        "        await asyncio.sleep(10)\n"
        "    except asyncio.CancelledError:\n"
        "        return 'kept'\n"
        "t = asyncio.ensure_future(stubborn())\n"
        "await started.wait()  # cancelled before it ran, it could absorb nothing\n"
        "async with asyncio.timeout(0.02):\n"
        "    kept = await t\n"
        "try:\n"
        "    async with asyncio.timeout(0.02):\n"
        "        await asyncio.gather(asyncio.sleep(10), tc.sleep(10))\n"
        "except TimeoutError:\n"
        "    gathered = 'timed out'\n"
        "await tc.sleep(0.001)\n"
        "await asyncio.sleep(0.001)\n"
        "(kept, gathered, asyncio.current_task().cancelling())\n"
    )
    gc.collect()
    assert res.error_in_exec is None and res.result == ("kept", "timed out", 0)
    assert "never retrieved" not in caplog.text
