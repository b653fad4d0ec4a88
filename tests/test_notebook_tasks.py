"""Tasks that behave in a notebook, through real kernels (jupyter_client): output lands in the
cell that spawned the task, unawaited failures speak up there, ``%tinycoro tasks`` says what
is parked on what, ``%load_ext tinycoro`` and ``await`` work in one cell, and the Jupyter
snippets of README.md and docs/jupyter.md run as they are pasted.

Every wait is on a message (a stream line, a status, a reply) or on runtime state polled by
the kernel itself; the timeouts only bound how long a broken build takes to fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

import helpers.kernel as kp


pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def kernel(kernel_dirs):
    k = kp.start_kernel(kernel_dirs, "plain")
    yield k
    k.shutdown()


def test_a_line_cut_across_stream_messages_is_read_whole(kernel):
    """ipykernel sends a stream's text as it is flushed, so one printed line can reach the
    client in two messages (``print`` writes its newline separately; a background thread's
    flush may land between the two). Tests judge the joined text (``stream_until``), never
    one message's end."""
    a = kernel.cell(
        "import sys\n"
        "sys.stdout.write('tick 9'); sys.stdout.flush(); sys.stdout.write('\\n')"
    )
    assert [m["content"]["text"] for m in kernel.of(a, "stream")] == ["tick 9", "\n"]
    assert kernel.stream_until(a, lambda text: text.endswith("tick 9\n")) == "tick 9\n"


def test_load_ext_and_await_in_the_same_cell(kernel):
    cell = kernel.cell(
        "%load_ext tinycoro\n"
        "import tinycoro as tc\n"
        "await tc.sleep(0.01)\n"
        "t = tc.spawn(tc.sleep(0))\n"
        "await t\n"
        "print('awaited in the loading cell')\n"
        "async def on_a_tinycoro_task():\n"
        "    return tc.current_task() is not None\n"
        "(await on_a_tinycoro_task(), str(get_ipython().loop_runner))"
    )
    assert kernel.stream(cell) == "awaited in the loading cell\n"
    assert kernel.result_of(cell) == "(True, 'tinycoro')"
    # the next cells run on the tinycoro runner as usual, and a plain asyncio cell is left alone
    # once the extension is unloaded again
    assert kernel.result_of(kernel.cell("await tc.sleep(0.01); 'next cell'")) == "'next cell'"
    kernel.cell("%unload_ext tinycoro")
    cell = kernel.cell("import asyncio\nawait asyncio.sleep(0.01)\n'asyncio again'")
    assert kernel.result_of(cell) == "'asyncio again'"

    # the stop button works in the loading cell too: the pending sleep is cancelled, the
    # cell's finally block runs, and the next cell works
    cell = kernel.submit(
        "%load_ext tinycoro\n"
        "try:\n"
        "    print('started', flush=True)\n"
        "    await tc.sleep(30)\n"
        "finally:\n"
        "    print('finally ran')\n"
    )
    kernel.until(
        lambda m: m["parent_header"].get("msg_id") == cell
        and m["msg_type"] == "stream" and "started" in m["content"]["text"],
        what="the loading cell to start sleeping",
    )
    kernel.km.interrupt_kernel()
    kernel.idle(cell, timeout=20)  # a bound, not a timing: the cell would sleep 30 s otherwise
    assert [m["content"]["ename"] for m in kernel.of(cell, "error")] == ["KeyboardInterrupt"]
    assert "finally ran" in kernel.stream(cell)
    assert kernel.result_of(kernel.cell("await tc.sleep(0.01); 'after'")) == "'after'"


def test_tasks_output_failures_and_the_inspector(kernel):
    kernel.cell("%load_ext tinycoro\nimport tinycoro as tc")

    # -- cell A spawns a ticker; cells B and C each wait (on the ticker's count) for more ticks
    a = kernel.cell(
        "count = 0\n"
        "stop = tc.Event()\n"
        "async def ticker():\n"
        "    global count\n"
        "    while not stop.is_set():\n"
        "        print(f'tick {count}', flush=True)\n"
        "        count += 1\n"
        "        await tc.sleep(0.01)\n"
        "    return count\n"
        "ticker_task = tc.spawn(ticker(), name='ticker')\n"
        "async def more_ticks(n):\n"
        "    target = count + n\n"
        "    while count < target:\n"
        "        await tc.sleep(0.01)\n"
    )
    b = kernel.cell("await more_ticks(5)\nprint('cell B done')")
    c = kernel.cell("await more_ticks(5)\nprint('cell C done')")
    d = kernel.cell("stop.set()\nawait ticker_task")
    total = int(kernel.result_of(d) or 0)
    assert total >= 10
    last = f"tick {total - 1}\n"
    kernel.stream_until(a, lambda text: text.endswith(last), what="the ticker's last line")
    ticks = [m for m in kernel.log if m["msg_type"] == "stream" and "tick" in m["content"]["text"]]
    assert {m["parent_header"]["msg_id"] for m in ticks} == {a}  # every tick went to cell A
    assert kernel.stream(a) == "".join(f"tick {i}\n" for i in range(total))
    assert kernel.stream(b) == "cell B done\n" and kernel.stream(c) == "cell C done\n"

    # -- cell E spawns a task that fails later, while cell F runs; nothing awaits it
    e = kernel.cell(
        "release = tc.Event()\n"
        "async def doomed():\n"
        "    await release.wait()\n"
        "    raise ValueError('boom in the background')\n"
        "doomed_task = tc.spawn(doomed(), name='doomed')\n"
        "gate = tc.Event()\n"
        "async def waiter():\n"
        "    await gate.wait()\n"
        "waiter_task = tc.spawn(waiter(), name='gate-waiter')\n"
    )
    f = kernel.submit(
        "sched = tc.get_default_scheduler()\n"
        "release.set()\n"
        "while sched.stats().failed < 1:\n"
        "    await tc.sleep(0.01)\n"
        "print('failed', sched.stats().failed)\n"
    )
    # the traceback arrives on stderr, parented to E (the spawning cell). How soon ("within a
    # second") is a property of the runtime, not asserted here: a loaded machine may take longer
    tb = kernel.until(
        lambda m: m["msg_type"] == "stream"
        and m["content"]["name"] == "stderr"
        and "boom in the background" in m["content"]["text"],
        what="the background failure's traceback",
    )
    assert tb["parent_header"]["msg_id"] == e
    text = re.sub(r"\x1b\[[0-9;]*m", "", tb["content"]["text"])  # coloured as the kernel's own
    assert "'doomed'" in text and "Traceback" in text and "ValueError: boom in the background" in text
    assert "Cell In[" in text and "tinycoro/" not in text  # the user's cell, not the runtime
    kernel.until(  # F may have ended before the traceback came: its idle may be logged already
        lambda m: m["parent_header"].get("msg_id") == f and m["msg_type"] == "status"
        and m["content"]["execution_state"] == "idle",
        what="cell F's end",
    )
    assert kernel.stream(f) == "failed 1\n" and kernel.stream(f, "stderr") == ""
    assert kernel.of(f, "error") == []

    # -- %tinycoro tasks: the parked task and what it waits on, then the failure
    g = kernel.cell(
        "while not any(i.name == 'gate-waiter' and i.state == 'parked' for i in sched.tasks()):\n"
        "    await tc.sleep(0.01)\n"
        "%tinycoro tasks"
    )
    out = kernel.stream(g)
    [row] = [line for line in out.splitlines() if "gate-waiter" in line]
    assert "parked" in row.split() and row.endswith(" Event")
    failures = out[out.index("recent failures") :]
    assert "doomed" in failures and "ValueError: boom in the background" in failures

    # awaiting the failed task later still raises its exception
    h = kernel.submit("await doomed_task")
    kernel.idle(h)
    [err] = kernel.of(h, "error")
    assert err["content"]["ename"] == "ValueError"
    kernel.cell("gate.set()\nawait waiter_task")

    # -- after %tinycoro stop, tc.spawn says how to get a scheduler back, in either kind of cell
    kernel.cell("%tinycoro stop")
    for code in ("tc.spawn(tc.sleep(0))", "await tc.sleep(0)\ntc.spawn(tc.sleep(0))"):
        msg_id = kernel.submit(code)
        kernel.idle(msg_id)
        [err] = kernel.of(msg_id, "error")
        assert err["content"]["ename"] == "RuntimeError"
        assert "%tinycoro restart" in err["content"]["evalue"], err["content"]["evalue"]
    kernel.cell("%tinycoro restart")
    assert kernel.result_of(kernel.cell("await tc.spawn(tc.sleep(0.01), name='back')\n'back'")) == "'back'"


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def _readme_jupyter_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## In Jupyter\n") :]
    section = section[: section.index("\n## ", 1)]
    [block] = _python_blocks(section)
    return block


def test_the_jupyter_snippets_of_the_docs_run_pasted_as_they_are(kernel):
    cell = kernel.cell(_readme_jupyter_block())  # one cell, fresh kernel: loads and awaits
    assert kernel.of(cell, "error") == []
    shown = [m["content"]["data"].get("text/plain", "") for m in kernel.of(cell, "display_data")]
    assert any("tinycoro dashboard" in t for t in shown), shown
    docs = _python_blocks((ROOT / "docs" / "jupyter.md").read_text())
    assert docs
    for block in docs:
        cell = kernel.cell(block)
        assert kernel.of(cell, "error") == []
