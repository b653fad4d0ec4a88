"""The cluster's edges as a notebook user meets them, through a real kernel (jupyter_client)
with the extension loaded and a real two-engine cluster started in a cell, once for the module:

* the start progress ticks its clock and says what the engines are doing while they come up;
* a remote traceback names the cell and shows the source line of a function shipped by value,
  names the engine once, and ``await`` shows no empty ``RemoteTraceback:`` header;
* a remote task's child that prints after its parent's outcome came home still prints in the
  cell that submitted the parent, and nothing is kept on the ipyparallel client; the same after
  ``stop()`` of a connected handle;
* an unpicklable global names the function and the global;
* ``%tinycoro cluster tasks`` right after submits shows what was submitted;
* the words (one engine, a stopped cluster, ``await tc.run(main())`` in a cell);
* last (it loses an engine): ``%px`` keeps working on the engines left, and says which is gone.
"""

from __future__ import annotations

import re
import socket

import psutil
import pytest

pytest.importorskip("ipyparallel")
pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

import helpers.cluster as cs
import helpers.kernel as kp

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

T = 30
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def k(kernel_dirs):
    with cs.engines_can_import_helpers():
        kernel = kp.start_kernel(kernel_dirs, "plain")
    pids: list[int] = []
    try:
        kernel.start_cell = kernel.cell(
            "%load_ext tinycoro\n"
            "import tinycoro as tc\n"
            "import helpers.cluster_tasks as h\n"
            "cluster = tc.cluster.start(2, timeout=120)\n",
            timeout=150,
        )
        listed = kernel.result_of(kernel.cell(
            "import psutil\n"
            "[p.pid for p in psutil.Process().children(recursive=True)\n"
            " if 'ipyparallel' in ' '.join(p.cmdline())]"
        ))
        pids = [int(p) for p in listed.strip("[]").split(",")]
        procs = [psutil.Process(p) for p in pids]
        procs += [c for p in procs for c in p.children(recursive=True)]
        yield kernel
        kernel.cell("cluster.stop()", timeout=60)
        assert cs.gone(procs)
    finally:
        kernel.shutdown()
        cs.kill_leftovers([psutil.Process(p) for p in pids if psutil.pid_exists(p)])


def error_text(k, msg_id: str) -> tuple[str, str]:
    """The (ename, traceback as plain text) of the error of cell *msg_id*."""
    k.idle(msg_id, timeout=T)
    [err] = k.of(msg_id, "error")
    return err["content"]["ename"], ANSI.sub("", "\n".join(err["content"]["traceback"]))


def execution_count(k, msg_id: str) -> int:
    return k.reply_to(msg_id)["content"]["execution_count"]


def test_start_progress_ticks_and_says_what_the_engines_do(k):
    texts = [m["content"]["data"]["text/plain"]
             for m in k.of(k.start_cell, "display_data", "update_display_data")]
    final = texts[-1]
    m = re.fullmatch(r"tinycoro cluster: 2 engines up \((\d+\.\d) s\)", final)
    assert m, final
    ticking = texts[:-1]
    # the clock moves while nothing registers (the engines take seconds to import before the
    # first one does): redrawn by the clock, not only by registrations
    before_any = {re.search(r"\((\d+\.\d) s\)", t).group(1)
                  for t in ticking if t.startswith("tinycoro cluster: 0 of 2 engines up")}
    assert len(before_any) >= 2, ticking
    clock = [float(re.search(r"\((\d+\.\d) s\)", t).group(1)) for t in texts]
    assert clock == sorted(clock), texts
    # and says what is going on meanwhile
    assert any("controller" in t for t in ticking), ticking
    assert any("engine processes" in t for t in ticking), ticking


def test_a_remote_traceback_shows_the_cell_and_its_lines(k):
    defining = k.submit(
        "async def remote_bad(x):\n"
        "    await tc.sleep(0)\n"
        "    y = x * 2\n"
        "    raise ValueError(f'bad {y}')\n"
    )
    k.idle(defining, T)
    n = execution_count(k, defining)
    cell = k.submit("rb = cluster.submit(remote_bad, 21)\nawait rb")
    ename, tb = error_text(k, cell)
    assert ename == "ValueError"
    assert f"Cell In[{n}], line 4, in remote_bad" in tb, tb
    assert "raise ValueError(f'bad {y}')" in tb, tb
    assert "<dynamic-code>" not in tb, tb
    assert not re.search(r"RemoteTraceback: *\n", tb), tb  # a header that says something
    assert re.search(r"RemoteTraceback: remote_bad failed on engine \d \(", tb), tb

    # unawaited: the report in the submitting cell, the engine named once
    unawaited = k.cell("rb2 = cluster.submit(remote_bad, 1)")
    k.until(lambda m: m["msg_type"] == "stream" and "bad 2" in m["content"]["text"],
            timeout=T, what="the failure report")
    report = k.stream(unawaited, "stderr")
    assert "failed and nothing awaited it" in report
    assert len(re.findall(r"engine \d \(", report)) == 1, report
    assert f"Cell In[{n}], line 4, in remote_bad" in report, report
    assert "raise ValueError(f'bad {y}')" in report, report


def test_a_child_prints_home_after_its_parents_outcome(k):
    lst = socket.create_server(("127.0.0.1", 0))
    lst.settimeout(T)
    port = lst.getsockname()[1]
    try:
        k.cell(
            "async def child(port):\n"
            "    conn = await tc.net.connect('127.0.0.1', port)\n"
            "    async with conn:\n"
            "        await conn.recv(1)\n"
            "    print('the child speaks late', flush=True)\n"
            "async def parent(port):\n"
            "    tc.spawn(child(port))\n"
            "    return 'parent done'\n"
        )
        submitting = k.cell(f"await cluster.submit(parent, {port})")
        assert k.result_of(submitting) == "'parent done'"
        peer = lst.accept()[0]
        peer.sendall(b"x")
        peer.close()
        out = k.until(lambda m: m["msg_type"] == "stream" and "the child speaks late" in
                      m["content"]["text"], timeout=T, what="the child's print")
        assert out["parent_header"]["msg_id"] == submitting
        held = k.result_of(k.cell("'the child speaks late' in repr(cluster.client.metadata)"))
        assert held == "False"

        # a child that fails after its parent ended: the engine's report comes home too, its
        # frames read back to the cell that defined the child
        defining = k.submit("async def kid():\n"
                            "    await tc.sleep(0.2)\n"
                            "    raise KeyError('the kid failed')\n"
                            "async def par():\n"
                            "    tc.spawn(kid())\n"
                            "    return 1\n")
        k.idle(defining, T)
        n = execution_count(k, defining)
        submitting = k.cell("await cluster.submit(par)")
        report = k.until(lambda m: m["msg_type"] == "stream" and "the kid failed" in
                         m["content"]["text"], timeout=T, what="the child's failure report")
        assert report["parent_header"]["msg_id"] == submitting
        text = ANSI.sub("", report["content"]["text"])
        assert "failed and nothing awaited it" in text, text
        assert f"Cell In[{n}], line 3, in kid()" in text, text
        assert "raise KeyError('the kid failed')" in text, text
        assert "<dynamic-code>" not in text, text

        # a connected handle, stopped while its task's child still runs: the child's output
        # still comes home, and nothing of it stays on that client
        k.cell(
            "import glob, ipyparallel as ipp, os\n"
            "[conn] = glob.glob(os.path.join(cluster.profile_dir, 'security',\n"
            "                                'ipcontroller-*-client.json'))\n"
            "other = ipp.Client(conn)\n"
            "connected = tc.cluster.connect(other)\n"
        )
        submitting = k.cell(f"await connected.submit(parent, {port})\nconnected.stop()")
        peer = lst.accept()[0]
        peer.sendall(b"x")
        peer.close()
        out = k.until(lambda m: m["msg_type"] == "stream" and "the child speaks late" in
                      m["content"]["text"] and m["parent_header"]["msg_id"] == submitting,
                      timeout=T, what="the child's print after stop()")
        held = k.result_of(k.cell(
            "held = 'the child speaks late' in repr(other.metadata)\n"
            "other.close()\n"
            "held"))
        assert held == "False"
    finally:
        lst.close()


def test_an_unpicklable_global_is_named(k):
    cell = k.submit(
        "import threading\n"
        "LOCK = threading.Lock()\n"
        "async def locked():\n"
        "    with LOCK:\n"
        "        return 1\n"
        "cluster.submit(locked)"
    )
    ename, tb = error_text(k, cell)
    assert ename == "TypeError"
    last = tb.strip().splitlines()[-1]
    assert "locked" in last and "'LOCK'" in last and "lock" in last, last
    assert "cannot pickle '_thread.lock' object" in tb  # the original, chained


def test_cluster_tasks_right_after_submits_shows_them(k):
    cell = k.cell(
        "six = [cluster.submit(h.sleep_forever) for _ in range(6)]\n"
        "%tinycoro cluster tasks\n"
    )
    text = k.stream(cell)
    assert "6 submitted from this kernel" in text, text
    # each one is listed: by its engine, or as one of ours that its engine does not list yet
    assert text.count("sleep_forever") >= 6, text
    k.cell("for t in six:\n    t.cancel()\nfor t in six:\n    try:\n        await t\n"
           "    except tc.Cancelled:\n        pass\n")


def test_words_in_a_cell(k):
    # tc.run in a cell: the cell is a task, say what to do instead
    cell = k.submit("async def main():\n    return 1\nawait tc.run(main())")
    ename, tb = error_text(k, cell)
    assert "await main() instead" in tb.strip().splitlines()[-1], tb
    # awaiting a cancelled task names it
    cell = k.submit("t = tc.spawn(tc.sleep(60), name='napper')\nt.cancel()\nawait t")
    ename, tb = error_text(k, cell)
    assert ename == "Cancelled"
    assert "napper" in tb.strip().splitlines()[-1], tb


def px_outputs(k, msg_id: str) -> list[str]:
    """What ``%px`` showed in cell *msg_id*: in a kernel ipyparallel shows each engine's output
    as a display (``[stdout:0] ...``), updated in place; the last text of each."""
    last: dict[str, str] = {}
    for m in k.of(msg_id, "display_data", "update_display_data"):
        last[m["content"]["transient"]["display_id"]] = m["content"]["data"]["text/plain"]
    return list(last.values())


def test_px_after_an_engine_is_lost(k):
    shown = px_outputs(k, k.cell("%px import os\n%px print(os.getpid())"))
    assert len([t for t in shown if t.startswith("[stdout:")]) == 2, shown
    cell = k.submit(
        "async def die():\n"
        "    import os\n"
        "    os._exit(1)\n"
        "await cluster.submit(die, engine=1)"
    )
    ename, _ = error_text(k, cell)
    assert ename == "EngineLost"
    px = k.submit("%px print('still here', os.getpid())")
    k.idle(px, T)
    assert k.of(px, "error") == [], ANSI.sub("", "\n".join(k.of(px, "error")[0]["content"]["traceback"]))
    out = px_outputs(k, px)
    assert [t.split()[0] for t in out if "still here" in t] == ["[stdout:0]"], out
    said = k.stream(px, "stderr")
    assert re.search(r"engine 1 \(\S+:\d+\) is lost; %px runs on 1 engine \(0\)", said), said
    again = k.cell("%px print('and again')")
    assert len([t for t in px_outputs(k, again) if "and again" in t]) == 1
    assert "lost" not in k.stream(again, "stderr")  # said once
    # the words about one engine
    assert k.result_of(k.cell("repr(cluster)")) == "'<tinycoro.cluster.Cluster 1 engine>'"
    html = k.result_of(k.cell("cluster._repr_html_()"))
    assert "1 engine<" in html and "1 engines" not in html
