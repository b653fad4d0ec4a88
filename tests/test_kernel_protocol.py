"""A real ipykernel process driven through jupyter_client: what a notebook frontend sees.

Each test starts a fresh kernel from this interpreter (a throwaway kernelspec, plus the
"Python 3 (tinycoro)" one written by ``python -m tinycoro.kernel_ext install --prefix``) and talks the
Jupyter messaging protocol to it. Tests synchronise on messages (a stream line, a reply, an
idle status), never on sleeps.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from helpers.cells import ECHO_SERVER_CELL, HELD_MUTEX_CELL, LONG_SLEEP_CELL, TWO_CELL
from helpers.kernel import ANSI, interrupt_after_started, interrupted_after_finally, start_kernel
from jupyter_client.kernelspec import KernelSpecManager

from tinycoro.kernel_ext.dashboard import cell_text

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
    """After %load_ext, asyncio awaitables and tinycoro awaitables share a cell."""
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
    content, msgs = interrupt_after_started(tc_kernel, LONG_SLEEP_CELL)
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
    [result] = r.of_type("display_data")  # displayed by the magic, from any line of a cell
    assert result["content"]["data"]["text/plain"] == "<tinycoro dashboard: 2 contexts>"
    assert "application/vnd.jupyter.widget-view+json" in result["content"]["data"]
    states = _widget_states(r.msgs)
    by_class = {tuple(s.get("_dom_classes", ())): cid for cid, s in states.items()}
    table = by_class[("tc-table-widget",)]
    summary = by_class[("tc-summary",)]

    # A real load on both contexts, running in the background after its cell returned. The
    # refresher's messages keep arriving; read them until every context's counter has moved.
    load = tc_kernel.ok(
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
    # what the summary showed while the load's cell ran counts too: it changes only when a
    # refresh finds something new
    seen: dict[str, list[Any]] = {summary: _updates(load.msgs, summary, "value")}

    def shown(field: str, c: int) -> list[str]:
        return [cell_text(v, c, field) for v in seen.get(table, [])]

    def moved() -> bool:
        counts = [{int(v) for v in shown("tasks_run", c)} for c in (0, 1)]
        busy_seen = [max((int(v.rstrip("%")) for v in shown("busy", c)), default=0) for c in (0, 1)]
        # the summary too: a refresh that finds both contexts with work. Read until it comes,
        # not asserted on what the table's three updates happened to bring along with them
        both = any("contexts with work <b>2</b>" in v for v in seen.get(summary, []))
        return all(len(v) >= 3 for v in counts) and all(b > 5 for b in busy_seen) and both

    tc_kernel.comm_updates(moved, seen, timeout=30)
    for c in (0, 1):
        values = [int(v) for v in shown("tasks_run", c)]
        assert values == sorted(values), values  # a counter, shown in order
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
    # dashboard (the one the previous cell displayed) shows the new count, i.e. until the
    # refresher thread has shown it: rounds are counted in refreshes, not paced by sleeps.
    r = tc_kernel.ok(
        "import threading, time\n"
        "board = get_ipython().magics_manager.registry['TinycoroMagics'].last_dashboard\n"
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


# -- tracebacks about the user's code, the dashboard from any line --------------------
def _frames(tb: str) -> list[str]:
    """The file names a formatted (ANSI-free) IPython traceback shows frames of."""
    return re.findall(r'(?:File |Cell In\[\d+\]|^\S+\.py)[^\n]*', tb, re.M)


def test_an_interrupted_cell_traceback_holds_no_tinycoro_frame(tc_kernel):
    content, msgs = interrupt_after_started(tc_kernel, LONG_SLEEP_CELL)
    tb = interrupted_after_finally(content, msgs)
    assert "await tc.sleep(30)" in tb, tb  # the user's line is there ...
    for runtime in ("tinycoro/", "kernel_ext/", "cell_loop", "runner.py", "noqa"):
        assert runtime not in tb, tb  # ... and nothing of the runtime's


def test_a_join_of_a_failed_task_shows_the_users_frames_only(tc_kernel):
    r = tc_kernel.run(
        "async def inner():\n"
        "    await tc.sleep(0)\n"
        "    raise ValueError('from the task')\n"
        "await tc.spawn(inner())\n"
    )
    assert r.content["ename"] == "ValueError"
    tb = ANSI.sub("", "\n".join(r.error()["traceback"]))
    assert "raise ValueError('from the task')" in tb and "await tc.spawn(inner())" in tb, tb
    assert "tinycoro/" not in tb and "kernel_ext/" not in tb, tb


def test_the_runtime_frames_come_back_with_the_documented_switch(tc_kernel):
    tc_kernel.ok("%env TINYCORO_TRACEBACK=full")
    r = tc_kernel.run(
        "async def inner():\n"
        "    await tc.sleep(0)\n"
        "    raise ValueError('from the task')\n"
        "await tc.spawn(inner())\n"
    )
    tb = ANSI.sub("", "\n".join(r.error()["traceback"]))
    assert "tinycoro/" in tb or "kernel_ext/" in tb, tb
    tc_kernel.ok("%env TINYCORO_TRACEBACK=")


def test_a_background_failure_names_the_cell_as_ipython_does(tc_kernel):
    msg_id = tc_kernel.cell(
        "async def doomed():\n"
        "    await tc.sleep(0.01)\n"
        "    raise ValueError('boom in the background')\n"
        "d = tc.spawn(doomed(), name='doomed')\n"
    )
    count = tc_kernel.reply_to(msg_id)["content"]["execution_count"]
    err = tc_kernel.until(
        lambda m: m["msg_type"] == "stream" and "boom in the background" in m["content"]["text"],
        what="the background failure's traceback",
    )["content"]["text"]
    text = ANSI.sub("", err)
    assert f"Cell In[{count}], line 3" in text, text
    assert "ipykernel_" not in text and "tinycoro/" not in text, text


def test_the_dashboard_shows_from_a_line_that_is_not_the_last(tc_kernel):
    r = tc_kernel.ok("%tinycoro dashboard\nx = 1\n")
    shown = [m for m in r.of_type("display_data")
             if "application/vnd.jupyter.widget-view+json" in m["content"]["data"]]
    assert len(shown) == 1, r.msgs
    assert shown[0]["content"]["data"]["text/plain"] == "<tinycoro dashboard: 2 contexts>"
    assert not r.of_type("execute_result")


def test_restart_says_how_many_tasks_it_cancelled(tc_kernel):
    tc_kernel.ok("ts = [tc.spawn(tc.sleep(3600)) for _ in range(4)]\nawait tc.sleep(0.05)")
    r = tc_kernel.ok("%tinycoro restart")
    assert r.stdout() == "tinycoro: restarted with 2 contexts (round_robin); cancelled 4 tasks\n"
    assert tc_kernel.ok("all(t.cancelled() for t in ts)").result() == "True"


def test_tasks_words_in_a_real_kernel(tc_kernel):
    tc_kernel.ok(
        HELD_MUTEX_CELL +
        "h = tc.spawn(holder(), name='holder')\n"
        "while not m.locked():\n"
        "    await tc.sleep(0.001)\n"
        "c = tc.spawn(contender(), name='contender')\n"
        "nap = tc.spawn(tc.sleep(60), name='napper')\n"
        "fan = tc.spawn(tc.when_all(*(gate.wait() for _ in range(5))), name='fan-out')\n"
        "lst = await tc.net.listen('127.0.0.1', 0)\n"
        "acc = tc.spawn(lst.accept(), name='acceptor')\n"
        "sched = tc.get_default_scheduler()\n"
        "while sum(i.state != 'running' and i.waits_on != '' for i in sched.tasks()) < 6:\n"
        "    await tc.sleep(0.01)\n"
    )
    out = tc_kernel.ok("%tinycoro tasks").stdout()
    rows = {line.split()[1]: line for line in out.splitlines() if re.match(r"\s*\d+ ", line)}
    assert re.search(r"sleeping .*sleep 60 s \(\d+(\.\d)? s left\)$", rows["napper"]), out
    assert rows["contender"].endswith("Mutex held by 'holder' (1 waiting)"), out
    assert rows["fan-out"].endswith("when_all: 5 of 5 left"), out
    assert re.search(r" I/O .*accept on 127\.0\.0\.1:\d+$", rows["acceptor"]), out
    lines = out.splitlines()
    headline = " ".join(" ".join(lines[:[ln.split()[:1] for ln in lines].index(["id"])]).split())
    assert "1 sleeping" in headline and "in I/O" in headline, out  # it wraps at words when long
    tc_kernel.ok("gate.set()\nnap.cancel()\nacc.cancel()\nawait fan\nawait lst.close()")


def test_cells_queued_while_an_awaiting_cell_runs_run_after_it_in_order(tc_kernel):
    """Run All sends every execute_request at once: while the first cell awaits (its turns of
    the kernel's loop step asyncio tasks), the queued requests wait for it, and each runs in
    its own cell. They once failed with "cannot enter context" and never ran."""
    cells = [
        "await tc.sleep(0.3)\nprint('first')",
        "print('second')",
        "await tc.sleep(0.01)\nprint('third')",
        "x = await tc.spawn(tc.sleep(0.01))\nprint('fourth')",
    ]
    ids = [tc_kernel.submit(code) for code in cells]
    for msg_id in ids:
        tc_kernel.until(
            lambda m, i=msg_id: m["parent_header"].get("msg_id") == i
            and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle",
            timeout=30, what="the queued cell's end",
        )
    assert [tc_kernel.stream(i) for i in ids] == ["first\n", "second\n", "third\n", "fourth\n"]
    assert [tc_kernel.stream(i, "stderr") for i in ids] == ["", "", "", ""]
    assert all(tc_kernel.of(i, "error") == [] for i in ids)
