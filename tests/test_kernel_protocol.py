"""A real ipykernel process driven through jupyter_client: what a notebook frontend sees.

Each test starts a fresh kernel from this interpreter (a throwaway kernelspec, plus the
"Python 3 (tinycoro)" one written by ``python -m kernel_ext install --prefix``) and talks the
Jupyter messaging protocol to it. Tests synchronise on messages (a stream line, a reply, an
idle status), never on sleeps.
"""

from __future__ import annotations

from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from helpers.cells import ECHO_SERVER_CELL, TWO_CELL
from jupyter_client.kernelspec import KernelSpecManager
from helpers.kernel import ANSI, interrupt_after_started, interrupted_after_finally, start_kernel
from kernel_ext.dashboard import cell_text

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


@pytest.fixture
def kernel(kernel_dirs):
    k = start_kernel(kernel_dirs, "plain")
    yield k
    k.shutdown()


@pytest.fixture
def tc_kernel(kernel):
    kernel.ok("%load_ext tinycoro\nimport tinycoro as tc")
    return kernel


THREADS = "import threading; sorted(t.name for t in threading.enumerate() if t.name.startswith('tinycoro'))"


# -- loading and awaiting ----------------------------------------------------------------------
def test_load_ext_and_await_a_sleep_returning_a_value(kernel):
    r = kernel.ok("%load_ext tinycoro")
    assert r.stdout() == "" and r.error() is None
    r = kernel.ok(
        "import time, tinycoro as tc\n"
        "t0 = time.monotonic()\n"
        "await tc.sleep(0.2)\n"
        "print('printed from the cell')\n"
        "display('displayed from the cell')\n"
        "('slept', time.monotonic() - t0 >= 0.2)"  # a sleep never ends early
    )
    assert r.result() == "('slept', True)"
    assert r.stdout() == "printed from the cell\n"  # lands in its own cell
    assert [m["content"]["data"]["text/plain"] for m in r.of_type("display_data")] == [
        "'displayed from the cell'"
    ]
    assert kernel.ok(THREADS).result() == "['tinycoro-0-ctx0', 'tinycoro-0-ctx1']"
    assert kernel.ok("%load_ext tinycoro").error() is None  # twice: harmless
    assert kernel.ok(THREADS).result() == "['tinycoro-0-ctx0', 'tinycoro-0-ctx1']"


def test_exception_in_an_awaiting_cell_shows_a_normal_traceback(tc_kernel):
    r = tc_kernel.run("await tc.sleep(0.01)\n{}['missing']")
    assert r.status == "error" and r.content["ename"] == "KeyError"
    tb = ANSI.sub("", "\n".join(r.error()["traceback"]))
    assert "{}['missing']" in tb and "KeyError" in tb
    assert tc_kernel.ok("await tc.sleep(0); 1").result() == "1"


def test_a_cell_awaits_asyncio_and_tinycoro_together(tc_kernel):
    """After %load_ext, asyncio awaitables and tinycoro awaitables share a cell (issue 10.4)."""
    r = tc_kernel.ok(
        "import asyncio\n"
        "await asyncio.sleep(0.01)\n"
        "await tc.sleep(0.01)\n"
        + TWO_CELL
        + "r = await asyncio.gather(tc.sleep(0.01), asyncio.sleep(0.01, result=1), tc.spawn(two()))\n"
        "print(r, tc.current_task() is not None)\n"
    )
    assert r.stdout().strip() == "[None, 1, 2] True"  # the cell is a tinycoro task
    # the same loop serves every cell: an asyncio task from one cell is awaited in the next
    tc_kernel.ok("pending = asyncio.ensure_future(asyncio.sleep(0.01, result='kept'))\nawait asyncio.sleep(0)")
    assert tc_kernel.ok("await pending").result() == "'kept'"


def test_an_asyncio_streams_client_talks_to_a_tinycoro_server_task(tc_kernel):
    r = tc_kernel.ok(
        ECHO_SERVER_CELL
        + "writer.write(b'hello'); await writer.drain()\n"
        "got = await reader.readexactly(5)\n"
        "writer.close(); await writer.wait_closed(); await server\n"
        "print(got)\n"
    )
    assert r.stdout().strip() == "b'HELLO'"


# -- interrupts --------------------------------------------------------------------------------
def test_interrupt_during_a_long_sleep(tc_kernel):
    content, msgs = interrupt_after_started(
        tc_kernel,
        "try:\n"
        "    print('started', flush=True)\n"
        "    await tc.sleep(30)\n"
        "finally:\n"
        "    print('finally ran')\n",
    )
    interrupted_after_finally(content, msgs)
    assert tc_kernel.ok("await tc.sleep(0.05); 'next cell works'").result() == "'next cell works'"
    r = tc_kernel.ok("await tc.when_all(*(tc.spawn(tc.sleep(0.01)) for _ in range(4)))")
    assert r.result() == "[None, None, None, None]"


def test_interrupt_during_a_long_asyncio_sleep(tc_kernel):
    content, msgs = interrupt_after_started(
        tc_kernel,
        "import asyncio\n"
        "try:\n"
        "    print('started', flush=True)\n"
        "    await asyncio.sleep(30)\n"
        "finally:\n"
        "    await asyncio.sleep(0.01)\n"
        "    await tc.sleep(0.01)\n"
        "    print('finally ran')\n",
    )
    tb = interrupted_after_finally(content, msgs)
    assert "await asyncio.sleep(30)" in tb and "CancelledError" not in tb
    r = tc_kernel.ok("await asyncio.sleep(0.01); await tc.sleep(0.01); 'next cell works'")
    assert r.result() == "'next cell works'"


def test_interrupt_while_parked_leaves_spawned_tasks_alone(tc_kernel):
    content, _ = interrupt_after_started(
        tc_kernel,
        "ev = tc.Event()\n"
        "async def child():\n"
        "    return await ev.wait()\n"
        "t = tc.spawn(child())\n"
        "print('started', flush=True)\n"
        "await t\n",
    )
    assert content["ename"] == "KeyboardInterrupt"
    assert tc_kernel.ok("ev.set('woken')\nawait t").result() == "'woken'"


def test_interrupt_of_a_cell_computing_between_awaits(tc_kernel):
    content, _ = interrupt_after_started(
        tc_kernel, "await tc.sleep(0.01)\nprint('started', flush=True)\nwhile True:\n    pass\n"
    )
    assert content["ename"] == "KeyboardInterrupt"
    assert tc_kernel.ok("await tc.sleep(0); 'ok'").result() == "'ok'"


# -- dashboard -----------------------------------------------------------------------------------
def _widget_states(msgs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """comm_id -> state, from the comm_open messages of jupyter widgets."""
    return {
        m["content"]["comm_id"]: m["content"]["data"]["state"]
        for m in msgs
        if m["msg_type"] == "comm_open" and m["content"].get("target_name") == "jupyter.widget"
    }


def _updates(msgs: list[dict[str, Any]], comm_id: str, key: str) -> list[Any]:
    return [
        m["content"]["data"]["state"][key]
        for m in msgs
        if m["msg_type"] == "comm_msg"
        and m["content"]["comm_id"] == comm_id
        and m["content"]["data"].get("method") == "update"
        and key in m["content"]["data"].get("state", {})
    ]


def test_dashboard_comm_messages_change_while_a_load_runs(tc_kernel):
    r = tc_kernel.ok("%tinycoro dashboard")
    [result] = r.of_type("execute_result")
    assert result["content"]["data"]["text/plain"] == "<tinycoro dashboard: 2 contexts>"
    assert "application/vnd.jupyter.widget-view+json" in result["content"]["data"]
    states = _widget_states(r.msgs)
    by_class = {tuple(s.get("_dom_classes", ())): cid for cid, s in states.items()}
    table = by_class[("tc-table-widget",)]
    summary = by_class[("tc-summary",)]

    # A real load on both contexts, running in the background after its cell returned. The
    # refresher's messages keep arriving; read them until every context's counter has moved.
    tc_kernel.ok(
        "stop = tc.Event()\n"
        "async def work():\n"
        "    x = 0\n"
        "    for i in range(3000):\n"
        "        x += i * i\n"
        "    await tc.sleep(0.001)\n"
        "async def driver():\n"
        "    while not stop.is_set():\n"
        "        await tc.when_all(*(tc.spawn(work()) for _ in range(20)))\n"
        "drivers = [tc.spawn(driver()) for _ in range(2)]\n"
    )
    seen: dict[str, list[Any]] = {}

    def shown(field: str, c: int) -> list[str]:
        return [cell_text(v, c, field) for v in seen.get(table, [])]

    def moved() -> bool:
        counts = [{int(v) for v in shown("tasks_run", c)} for c in (0, 1)]
        busy_seen = [max((int(v.rstrip("%")) for v in shown("busy", c)), default=0) for c in (0, 1)]
        return all(len(v) >= 3 for v in counts) and all(b > 5 for b in busy_seen)

    updates = tc_kernel.comm_updates(moved, seen, timeout=30)
    for c in (0, 1):
        values = [int(v) for v in shown("tasks_run", c)]
        assert values == sorted(values), values  # a counter, shown in order
    tokens = [u["value"] for cid, u in updates if cid == summary and "value" in u]
    assert any("stop token <b>2</b>" in v for v in tokens), tokens  # both contexts had work
    tc_kernel.ok("stop.set()\n_ = await tc.when_all(*drivers)")

    r = tc_kernel.ok("%tinycoro stop")
    final = _updates(r.msgs, summary, "value")
    assert final and "stopped" in final[-1] and "not accepting" in final[-1]
    assert tc_kernel.ok(THREADS).result() == "[]"  # the refresher ended with the scheduler


def test_dashboard_updates_while_the_main_thread_is_blocked(tc_kernel):
    r = tc_kernel.ok("%tinycoro dashboard")
    states = _widget_states(r.msgs)
    by_class = {tuple(s.get("_dom_classes", ())): cid for cid, s in states.items()}
    table = by_class[("tc-table-widget",)]
    # No await in this cell: it runs synchronously and blocks the main thread throughout,
    # while tasks submitted to the scheduler finish on the contexts. Each round waits until the
    # dashboard (``_``, the previous cell's result) shows the new count, i.e. until the
    # refresher thread has shown it: rounds are counted in refreshes, not paced by sleeps.
    r = tc_kernel.ok(
        "import threading, time\n"
        "board = _\n"
        "sched = tc.get_default_scheduler()\n"
        "never = threading.Event()  # a bounded wait between looks at the board\n"
        "def shown():\n"
        "    return board.shown(0, 'tasks_run'), board.shown(1, 'tasks_run')\n"
        "for i in range(4):\n"
        "    before = shown()\n"
        "    for j in range(20):\n"
        "        sched.submit(tc.sleep(0))\n"
        "    deadline = time.monotonic() + 20\n"
        "    while shown() == before:\n"
        "        assert time.monotonic() < deadline, f'no refresh showed round {i}'\n"
        "        never.wait(0.005)\n"
    )
    values = [
        int(cell_text(v, c, "tasks_run")) for v in _updates(r.msgs, table, "value") for c in (0, 1)
    ]
    assert len(set(values)) >= 3, values


# -- unload and the installed kernelspec ---------------------------------------------------------
def test_unload_ext_leaves_no_tinycoro_threads(tc_kernel):
    tc_kernel.ok("%tinycoro dashboard")
    tc_kernel.ok("async def forever():\n    await tc.Event().wait()\nt = tc.spawn(forever())")
    assert len(eval(tc_kernel.ok(THREADS).result())) == 3  # two contexts + the refresher
    tc_kernel.ok("%unload_ext tinycoro")
    assert tc_kernel.ok(THREADS).result() == "[]"
    assert tc_kernel.ok("t.cancelled()").result() == "True"
    assert "asyncio" in tc_kernel.ok("str(get_ipython().loop_runner)").result()
    r = tc_kernel.run("%tinycoro status")
    assert r.status == "error" and r.content["ename"] == "UsageError"
    tc_kernel.ok("%load_ext tinycoro")  # and back
    assert tc_kernel.ok("await tc.sleep(0.01); tc.get_default_scheduler().contexts").result() == "2"


def test_installed_kernelspec_preloads_the_extension(kernel_dirs):
    ksm = KernelSpecManager(kernel_dirs=kernel_dirs, ensure_native_kernel=False)
    spec = ksm.get_kernel_spec("tinycoro")
    assert spec.display_name == "Python 3 (tinycoro)"
    assert spec.env == {"TINYCORO_CONTEXTS": "2"} and "--ext=tinycoro" in spec.argv
    k = start_kernel(kernel_dirs, "tinycoro")
    try:
        r = k.ok("import tinycoro as tc\nawait tc.sleep(0.01)\n'tinycoro' in get_ipython().extension_manager.loaded")
        assert r.result() == "True"
        assert k.ok("str(get_ipython().loop_runner)").result() == "'tinycoro'"
    finally:
        k.shutdown()
