"""A notebook's view of tc.cluster, through a real kernel (jupyter_client) with the extension
loaded that starts a real two-engine cluster with ``tc.cluster.start(2)`` in a cell, once for
the module:

* a function defined in the notebook runs on the engines with the globals it names (the
  notebook's ``tc``, a helper function, a constant): they travel with it (cloudpickle);
* the start shows its progress as one display, updated in place, that ends as the line of how
  many engines came up (never a stale half-drawn bar);
* what a remote task prints, and the report of a remote task that fails while nothing awaits
  it, carry the submitting cell's msg_id as their parent (rule 9), also when the tasks end after
  that cell (and a later one) finished; and a remote ``display()`` shows there.
"""

from __future__ import annotations

import re
import socket

import psutil
import pytest

pytest.importorskip("ipyparallel")
pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

import helpers.kernel as kp
import helpers.cluster as cs

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(240)]

T = 30


@pytest.fixture(scope="module")
def kernel_with_cluster(kernel_dirs):
    with cs.engines_can_import_helpers():
        k = kp.start_kernel(kernel_dirs, "plain")
    pids: list[int] = []
    try:
        k.start_cell = k.cell(
            "%load_ext tinycoro\n"
            "import tinycoro as tc\n"
            "import helpers.cluster_tasks as h\n"
            "cluster = tc.cluster.start(2, timeout=120)\n",
            timeout=150,
        )
        listed = k.result_of(k.cell(  # the controller, the engines and their nannies
            "import psutil\n"
            "[p.pid for p in psutil.Process().children(recursive=True)\n"
            " if 'ipyparallel' in ' '.join(p.cmdline())]"
        ))
        pids = [int(p) for p in listed.strip("[]").split(",")]
        procs = [psutil.Process(p) for p in pids]
        procs += [c for p in procs for c in p.children(recursive=True)]
        yield k
        k.cell("cluster.stop()", timeout=60)
        assert cs.gone(procs)
    finally:
        k.shutdown()
        cs.kill_leftovers([psutil.Process(p) for p in pids if psutil.pid_exists(p)])


def test_a_notebook_function_travels_with_the_globals_it_names(kernel_with_cluster):
    """The documented use: ``tc``, a helper and a constant of the notebook, on both engines."""
    k = kernel_with_cluster
    k.cell(
        "SCALE = 10\n"
        "def helper(x):\n"
        "    return x * SCALE\n"
        "async def sq(x):\n"
        "    await tc.sleep(0.01)\n"
        "    return helper(x * x)\n"
    )
    done = k.cell("await cluster.map(sq, range(8))")
    assert k.of(done, "error") == []
    assert k.result_of(done) == str([x * x * 10 for x in range(8)])
    # both engines ran it (one task each, at once: spread over the least loaded)
    spread = k.cell(
        "import os\n"
        "async def where():\n"
        "    await tc.sleep(0.2)\n"
        "    return os.getpid()\n"
        "both = [cluster.submit(where), cluster.submit(where)]\n"
        "sorted([await t for t in both]) == sorted(e.pid for e in cluster.engines)"
    )
    assert k.result_of(spread) == "True"


def test_start_shows_progress_that_ends_as_one_line(kernel_with_cluster):
    k = kernel_with_cluster
    shown = k.of(k.start_cell, "display_data")
    assert len(shown) == 1, shown
    display_id = shown[0]["content"]["transient"]["display_id"]
    updates = [m["content"] for m in k.of(k.start_cell, "update_display_data")]
    assert updates and all(u["transient"]["display_id"] == display_id for u in updates)
    final = updates[-1]["data"]
    assert final["text/plain"].startswith("tinycoro cluster: 2 engines up (")
    assert "text/html" not in final  # the bar is gone once the engines are up
    texts = [shown[0]["content"]["data"]["text/plain"]] + [u["data"]["text/plain"] for u in updates]
    assert not [t for t in texts if "%|" in t]  # no tqdm bar (it would be saved half-drawn)


def test_remote_output_and_unawaited_failures_land_in_the_submitting_cell(kernel_with_cluster):
    k = kernel_with_cluster
    lst = socket.create_server(("127.0.0.1", 0))
    lst.settimeout(T)
    port = lst.getsockname()[1]
    try:
        submitting = k.cell(
            f"t = cluster.submit(h.say_when_released, {port}, 'hello from the engine')\n"
            f"f = cluster.submit(h.fail_when_released, {port}, 'nobody awaits me')\n"
        )
        peers = [lst.accept()[0] for _ in range(2)]  # both tasks run on the engines
        later = k.cell("'a later cell'")  # the submitting cell is long over
        assert k.result_of(later) == "'a later cell'"
        for p in peers:
            p.sendall(b"x")
            p.close()
    finally:
        lst.close()

    out = k.until(lambda m: m["msg_type"] == "stream" and "hello from the engine" in
                  m["content"]["text"], timeout=T, what="the remote print")
    assert out["parent_header"]["msg_id"] == submitting
    assert out["content"]["name"] == "stdout"
    err = k.until(lambda m: m["msg_type"] == "stream" and "nobody awaits me" in
                  m["content"]["text"], timeout=T, what="the failure report")
    assert err["parent_header"]["msg_id"] == submitting
    assert err["content"]["name"] == "stderr"
    text = "".join(m["content"]["text"] for m in k.of(submitting, "stream")
                   if m["content"]["name"] == "stderr")
    assert re.search(r"remote task 'fail_when_released' on engine \d \(", text), text
    assert "failed and nothing awaited it" in text
    assert "RuntimeError: nobody awaits me" in text and "in fail_when_released" in text
    assert not [m for m in k.log if m["parent_header"].get("msg_id") == later
                and m["msg_type"] == "stream"]

    # display() in a remote task: rich output in the cell that submitted it
    shown = k.cell("await cluster.submit(h.show, '**rich**')")
    [disp] = k.of(shown, "display_data")
    assert disp["content"]["data"]["text/markdown"] == "**rich**"

    # awaited in a cell (the tinycoro cell runner) and from plain code, the results come back
    assert k.result_of(k.cell("await t")) == "'hello from the engine'"
    assert k.result_of(k.cell("await cluster.submit(h.add, 40, 2)")) == "42"
    cell = k.submit("await f")
    k.idle(cell, timeout=T)
    assert [m["content"]["evalue"] for m in k.of(cell, "error")] == ["nobody awaits me"]
