"""Tasks that behave in a notebook, through real kernels (jupyter_client): output lands in the
cell that spawned the task, unawaited failures speak up there, ``%tinycoro tasks`` says what
is parked on what, ``%load_ext tinycoro`` and ``await`` work in one cell, and the Jupyter
snippets of README.md and docs/jupyter.md run as they are pasted.

Every wait is on a message (a stream line, a status, a reply) or on runtime state polled by
the kernel itself; the timeouts only bound how long a broken build takes to fail.
"""

from __future__ import annotations

import json
import queue
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parent.parent
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
Msg = dict[str, Any]


@pytest.fixture(scope="module")
def kernel_dirs(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("jupyter") / "kernels"
    plain = root / "plain"
    plain.mkdir(parents=True)
    (plain / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "plain",
                "language": "python",
            }
        )
    )
    return [str(root)]


class Kernel:
    """A kernel that keeps every IOPub message, whatever cell it belongs to: a background
    task's output may arrive while a later cell runs, and must still be seen (and checked)."""

    def __init__(self, kernel_dirs: list[str]) -> None:
        import os

        ksm = KernelSpecManager(kernel_dirs=kernel_dirs, ensure_native_kernel=False)
        self.km = KernelManager(kernel_name="plain", kernel_spec_manager=ksm)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        self.km.start_kernel(env={**env, "TINYCORO_CONTEXTS": "2"})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.seen: list[Msg] = []

    def submit(self, code: str) -> str:
        return self.kc.execute(code)

    def until(self, stop: Callable[[Msg], bool], timeout: float = 30, what: str = "") -> Msg:
        """Read IOPub (keeping everything in ``seen``) until *stop(msg)*; fail after *timeout*."""
        for m in self.seen:
            if stop(m):
                return m
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what or 'matching message'} within {timeout} s")
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(msg)
            if stop(msg):
                return msg

    def idle(self, msg_id: str, timeout: float = 30) -> None:
        self.until(
            lambda m: m["parent_header"].get("msg_id") == msg_id
            and m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle",
            timeout,
            f"idle status of {msg_id}",
        )

    def of(self, msg_id: str, *types: str) -> list[Msg]:
        return [
            m for m in self.seen
            if m["parent_header"].get("msg_id") == msg_id and (not types or m["msg_type"] in types)
        ]

    def stream(self, msg_id: str, name: str = "stdout") -> str:
        return "".join(
            m["content"]["text"] for m in self.of(msg_id, "stream") if m["content"]["name"] == name
        )

    def run(self, code: str, timeout: float = 30) -> str:
        """Run a cell to its end; return its msg_id; fail with the traceback if it raised."""
        msg_id = self.submit(code)
        self.idle(msg_id, timeout)
        for m in self.of(msg_id, "error"):
            tb = _ANSI.sub("", "\n".join(m["content"]["traceback"]))
            raise AssertionError(f"cell failed:\n{code}\n{tb}")
        return msg_id

    def result(self, msg_id: str) -> str | None:
        for m in self.of(msg_id, "execute_result"):
            return m["content"]["data"]["text/plain"]
        return None

    def shutdown(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture
def kernel(kernel_dirs):
    k = Kernel(kernel_dirs)
    yield k
    k.shutdown()


def test_load_ext_and_await_in_the_same_cell(kernel):
    cell = kernel.run(
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
    assert kernel.result(cell) == "(True, 'tinycoro')"
    # the next cells run on the tinycoro runner as usual, and a plain asyncio cell is left alone
    # once the extension is unloaded again
    assert kernel.result(kernel.run("await tc.sleep(0.01); 'next cell'")) == "'next cell'"
    kernel.run("%unload_ext tinycoro")
    cell = kernel.run("import asyncio\nawait asyncio.sleep(0.01)\n'asyncio again'")
    assert kernel.result(cell) == "'asyncio again'"


def test_tasks_output_failures_and_the_inspector(kernel):
    kernel.run("%load_ext tinycoro\nimport tinycoro as tc")

    # -- cell A spawns a ticker; cells B and C each wait (on the ticker's count) for more ticks
    a = kernel.run(
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
    b = kernel.run("await more_ticks(5)\nprint('cell B done')")
    c = kernel.run("await more_ticks(5)\nprint('cell C done')")
    d = kernel.run("stop.set()\nawait ticker_task")
    total = int(kernel.result(d))
    assert total >= 10
    last = f"tick {total - 1}\n"
    kernel.until(
        lambda m: m["msg_type"] == "stream" and m["content"]["text"].endswith(last),
        what="the ticker's last line",
    )
    ticks = [m for m in kernel.seen if m["msg_type"] == "stream" and "tick" in m["content"]["text"]]
    assert {m["parent_header"]["msg_id"] for m in ticks} == {a}  # every tick went to cell A
    assert kernel.stream(a) == "".join(f"tick {i}\n" for i in range(total))
    assert kernel.stream(b) == "cell B done\n" and kernel.stream(c) == "cell C done\n"

    # -- cell E spawns a task that fails later, while cell F runs; nothing awaits it
    e = kernel.run(
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
    # the traceback arrives on stderr, parented to E (the spawning cell), within 2 s
    tb = kernel.until(
        lambda m: m["msg_type"] == "stream"
        and m["content"]["name"] == "stderr"
        and "boom in the background" in m["content"]["text"],
        timeout=2,
        what="the background failure's traceback",
    )
    assert tb["parent_header"]["msg_id"] == e
    text = tb["content"]["text"]
    assert "'doomed'" in text and "Traceback" in text and "ValueError: boom in the background" in text
    kernel.idle(f)
    assert kernel.stream(f) == "failed 1\n" and kernel.stream(f, "stderr") == ""
    assert kernel.of(f, "error") == []

    # -- %tinycoro tasks: the parked task and what it waits on, then the failure
    g = kernel.run(
        "while not any(i.name == 'gate-waiter' and i.state == 'parked' for i in sched.tasks()):\n"
        "    await tc.sleep(0.01)\n"
        "%tinycoro tasks"
    )
    out = kernel.stream(g)
    [row] = [line for line in out.splitlines() if "gate-waiter" in line]
    assert "parked" in row.split() and "<Event unset waiters=1>" in row
    failures = out[out.index("recent failures") :]
    assert "doomed" in failures and "ValueError: boom in the background" in failures

    # awaiting the failed task later still raises its exception
    h = kernel.submit("await doomed_task")
    kernel.idle(h)
    [err] = kernel.of(h, "error")
    assert err["content"]["ename"] == "ValueError"
    kernel.run("gate.set()\nawait waiter_task")

    # -- after %tinycoro stop, tc.spawn says how to get a scheduler back, in either kind of cell
    kernel.run("%tinycoro stop")
    for code in ("tc.spawn(tc.sleep(0))", "await tc.sleep(0)\ntc.spawn(tc.sleep(0))"):
        msg_id = kernel.submit(code)
        kernel.idle(msg_id)
        [err] = kernel.of(msg_id, "error")
        assert err["content"]["ename"] == "RuntimeError"
        assert "%tinycoro restart" in err["content"]["evalue"], err["content"]["evalue"]
    kernel.run("%tinycoro restart")
    assert kernel.result(kernel.run("await tc.spawn(tc.sleep(0.01), name='back')\n'back'")) == "'back'"


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def _readme_jupyter_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## In Jupyter\n") :]
    section = section[: section.index("\n## ", 1)]
    [block] = _python_blocks(section)
    return block


def test_the_jupyter_snippets_of_the_docs_run_pasted_as_they_are(kernel):
    cell = kernel.run(_readme_jupyter_block())  # one cell, fresh kernel: loads and awaits
    assert kernel.of(cell, "error") == []
    assert "tinycoro dashboard" in (kernel.result(cell) or "")
    docs = _python_blocks((ROOT / "docs" / "jupyter.md").read_text())
    assert docs
    for block in docs:
        cell = kernel.run(block)
        assert kernel.of(cell, "error") == []
