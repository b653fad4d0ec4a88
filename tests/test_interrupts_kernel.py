"""Interrupting awaiting cells at random moments, through a real kernel (rule 12, section 5).

Each test reuses one tinycoro kernel for 30 executions of the same cell. The cell prints
"started" and then loops on awaits forever; its ``finally`` block awaits and prints a marker.
The test waits for "started" (synchronisation), then a random 0-50 ms from a seeded generator
(this *chooses the moment* of the interrupt, it synchronises nothing), then interrupts the
kernel. Every interrupt must end that cell with KeyboardInterrupt after its ``finally`` block
ran to the end, and nothing may ever run a coroutine outside the runtime ("awaited outside a
tinycoro task", the symptom of a cell coroutine left suspended and finalised later by GC).
"""

from __future__ import annotations

import random
import re
import time

import pytest

import helpers.kernel as kp


pytestmark = [pytest.mark.kernel, pytest.mark.timeout(240)]

RUNS = 30
MARKER = "finally-marker"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

LOOPS = {
    "yield_now": "        await tc.yield_now()\n",
    "sleep": "        await tc.sleep(0.001)\n",
    "asyncio_sleep": "        await asyncio.sleep(0.001)\n",
    "gather": "        await asyncio.gather(asyncio.sleep(0.001), tc.sleep(0.001))\n",
    "compute": (
        "        x = 0\n"
        "        for i in range(3000):\n"
        "            x += i * i % 7\n"
        "        await tc.yield_now()\n"
    ),
}


def _cell(loop: str) -> str:
    return (
        "try:\n"
        "    print('started', flush=True)\n"
        "    while True:\n"
        f"{loop}"
        "finally:\n"
        "    await tc.sleep(0.01)\n"
        f"    print('{MARKER}', flush=True)\n"
    )


def _texts(msgs: list[dict]) -> str:
    """Every piece of text the frontend was shown: streams, errors with their tracebacks."""
    out = []
    for m in msgs:
        c = m["content"]
        if m["msg_type"] == "stream":
            out.append(c["text"])
        elif m["msg_type"] == "error":
            out.append(f"{c['ename']}: {c['evalue']}\n" + "\n".join(c["traceback"]))
    return _ANSI.sub("", "\n".join(out))


def _stdout(msgs: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")


@pytest.fixture
def tck(kernel_dirs):
    with kp.loaded_kernel(kernel_dirs, "import asyncio, tinycoro as tc") as k:
        yield k


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_thirty_interrupts_at_random_moments(tck: kp.Kernel, kind: str):
    rng = random.Random(f"ki-{kind}")
    code = _cell(LOOPS[kind])
    outcomes, markers, seen = [], [], []
    for _ in range(RUNS):
        msg_id = tck.submit(code)
        msgs = tck.iopub_until(
            msg_id, lambda m: m["msg_type"] == "stream" and "started" in m["content"]["text"]
        )
        time.sleep(rng.uniform(0.0, 0.05))  # the moment of the interrupt, not a synchronisation
        tck.km.interrupt_kernel()
        reply = tck.reply_to(msg_id, timeout=20)
        msgs += tck.idle(msg_id)
        text = _texts(msgs)
        seen.append(text)
        outcomes.append(reply["content"].get("ename"))
        markers.append(_stdout(msgs).count(MARKER))
    # Whatever a late finaliser would print arrives with a later cell: collect garbage and look.
    tail = tck.ok(
        "import gc\nfrom tinycoro import kernel_ext\n"
        "gc.collect()\n"
        "_e = kernel_ext.get_extension(get_ipython()).engine\n"
        "_l = kernel_ext.get_extension(get_ipython()).runner.cell_loop.loop\n"
        "print(len(_e.inflight), len(_e.ready), len(_e.parked), len(_e.calls),\n"
        # the cells' loop is the kernel's own: ipykernel's tasks (this request's) are there too
        "      len([t for t in asyncio.all_tasks(_l) if not t.done()\n"
        "           and '/ipykernel/' not in t.get_coro().cr_code.co_filename]))\n"
    )
    seen.append(_texts(tail.msgs))
    assert outcomes == ["KeyboardInterrupt"] * RUNS
    assert markers == [1] * RUNS
    everything = "\n".join(seen)
    assert "awaited outside" not in everything
    assert "_on_sigint" not in everything  # no runtime frame in the user's traceback
    assert tail.stdout().split() == ["0", "0", "0", "0", "0"]
    assert tck.ok("await tc.sleep(0.01); 'next cell works'").result() == "'next cell works'"
