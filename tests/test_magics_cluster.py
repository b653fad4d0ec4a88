"""``%tinycoro cluster ...`` in an in-process IPython shell, on real 2-engine ipyparallel
clusters (local processes): start, ``%px`` cells that await on the engines, status, the
dashboard grouped per engine, connect by connection file, stop and unload leaving no process.

Starting a cluster takes 5-30 s on a loaded 2-core machine, so the tests that need one are few
and do several things each; those that only stop or unload one start a single engine.
"""

from __future__ import annotations

import glob
import os
import re
import socket
import threading

import pytest

pytest.importorskip("IPython")
pytest.importorskip("ipyparallel")
psutil = pytest.importorskip("psutil")

from helpers.runtime import wait_until
from helpers.shell import tinycoro_shell
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import tinycoro as tc

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def shell(monkeypatch):
    """The process's InteractiveShell with tinycoro loaded; unloaded again afterwards (which
    stops a cluster the test left running), leaving no cluster process or thread behind."""
    with tinycoro_shell(monkeypatch, 1) as sh:
        yield sh
    assert cluster_processes() == []
    assert [t.name for t in threading.enumerate() if t.name.startswith("tinycoro")] == []


def cluster_processes() -> list[str]:
    """ipyparallel processes (controller, engines, nannies) that this test process started.

    Other sessions on the machine may run clusters of their own, so a machine-wide
    ``pgrep`` cannot tell; the processes ``tc.cluster.start`` launches are our descendants
    (while the controller lives; see :func:`remembered`)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "ipyparallel" in cmd:
            out.append(f"{p.pid} {cmd}")
    return out


def remembered() -> list[psutil.Process]:
    """The cluster processes now, to check after stop that each one has exited (also one
    that was re-parented when its parent exited first)."""
    return [psutil.Process(int(line.split()[0])) for line in cluster_processes()]


def gone(procs: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)


def run_ok(sh: InteractiveShell, code: str):
    res = sh.run_cell(code)
    if not res.success:
        raise AssertionError(f"cell failed: {res.error_before_exec or res.error_in_exec!r}")
    return res.result


def test_start_px_status_dashboard_connect_and_stop(shell, capsys):
    pytest.importorskip("ipywidgets")
    shell.run_line_magic("tinycoro", "cluster start -n 2 --contexts 2")
    captured = capsys.readouterr()
    out = captured.out
    assert out.startswith("tinycoro cluster started: 2 engines (0: "), out
    # outside a notebook the start says each engine as it comes up, on stderr
    ups = re.findall(r"^tinycoro cluster: engine (\d) up \((\d) of 2, ", captured.err, re.M)
    assert sorted(e for e, _ in ups) == ["0", "1"] and [k for _, k in ups] == ["1", "2"], captured.err
    cluster = shell.user_ns["cluster"]
    assert isinstance(cluster, tc.cluster.Cluster) and len(cluster.engines) == 2
    procs = remembered()
    assert len(procs) >= 3  # a controller and two engines (and their nannies)

    # %px cells run on every engine, which preloaded the extension (and the magic imported
    # tinycoro as tc there): a top-level await runs on that engine's tinycoro cell runner
    run_ok(shell, "%px await tc.sleep(0.1)")
    run_ok(shell, "%px import os")
    run_ok(shell, "%px ran = (os.getpid(), type(get_ipython().loop_runner).__name__)")
    ran = run_ok(shell, "cluster.client[:].pull('ran', block=True)")
    assert sorted(ran) == sorted((e.pid, "CellRunner") for e in cluster.engines)
    with pytest.raises(UsageError, match="already running"):
        shell.run_line_magic("tinycoro", "cluster start")

    # submit and map from a cell; a failure comes home with its remote traceback
    run_ok(
        shell,
        "async def square(x):\n"
        "    await tc.sleep(0)\n"
        "    return x * x\n"
        "async def fails():\n"
        "    raise ValueError('remote boom')\n"
        "squares = await cluster.map(square, range(6))\n"
        "one = await cluster.submit(square, 7, engine=1)",
    )
    assert shell.user_ns["squares"] == [0, 1, 4, 9, 16, 25] and shell.user_ns["one"] == 49
    res = shell.run_cell("await cluster.submit(fails)")
    assert isinstance(res.error_in_exec, ValueError) and "remote boom" in str(res.error_in_exec)

    # tasks: each engine's live tasks, what they wait on
    run_ok(shell, "async def napping():\n    await tc.sleep(3600)\nnap = cluster.submit(napping, engine=1)")
    # submit returns once the request is sent; the task starts on the engine a moment later
    wait_until(lambda: any(t.name == "napping" for t in cluster.tasks().get(1, ())),
               timeout=30, what="the remote task to start")
    capsys.readouterr()
    shell.run_line_magic("tinycoro", "cluster tasks")
    lines = capsys.readouterr().out.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("engine 1 · ")))
    assert lines[first + 1] == "  tinycoro: 1 live task: 1 sleeping"
    [row] = [line for line in lines[first:] if "napping" in line]
    assert re.search("sleep|timeout", row), row  # its state and what it waits on
    run_ok(shell, "nap.cancel()")
    res = shell.run_cell("await nap")
    assert isinstance(res.error_in_exec, tc.Cancelled), res.error_in_exec

    # a %px cell that blocks engine 0's shell (it awaits a recv from us) does not hold up
    # status, tasks or the dashboard's stats: the engines answer on their control thread
    with socket.create_server(("127.0.0.1", 0)) as srv:
        srv.settimeout(60)
        port = srv.getsockname()[1]
        run_ok(shell, "%%px --noblock --targets 0\n"
                      f"c = await tc.net.connect('127.0.0.1', {port})\n"
                      "got = await c.recv()")
        peer, _ = srv.accept()
        with peer:
            capsys.readouterr()
            shell.run_line_magic("tinycoro", "cluster tasks")
            out = capsys.readouterr().out
            assert "no answer" not in out and out.count("  tinycoro: ") == 2, out
            assert set(cluster.stats()) == {0, 1}
            peer.sendall(b"done")
        assert run_ok(shell, "cluster.client.wait(timeout=60)") is True
    assert run_ok(shell, "cluster.client[0].pull('got', block=True)") == b"done"

    capsys.readouterr()
    shell.run_line_magic("tinycoro", "cluster status")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "tinycoro cluster: 2 engines, 4 contexts (started here)"
    heads = [line for line in lines if line.startswith("engine ")]
    assert [h.split(" · ")[:2] for h in heads] == [
        [f"engine {e.id}", f"{e.host}:{e.pid}"] for e in cluster.engines
    ]
    assert all(re.search(r"process CPU \d+\.\d s so far$", h) for h in heads)
    tables = [line for line in lines if line.startswith("  tinycoro scheduler: 2 contexts")]
    assert len(tables) == 2

    board = _cluster_board(shell)
    assert repr(board) == "<tinycoro cluster dashboard: 2 engines>"
    assert board._repr_mimebundle_()["text/plain"] == repr(board)
    refresher = cluster.refresher
    keys = re.findall(r'<tr[^>]*><td class="tc-(\S+) tc-name"', board._table.value)
    assert keys == ["e0-engine", "e0-ctx-0", "e0-ctx-1", "e1-engine", "e1-ctx-0", "e1-ctx-1"]
    done = sum(int(board.shown(e.id, "engine", "tasks_run")) for e in cluster.engines)
    run_ok(shell, "_ = await cluster.map(square, range(20))")
    wait_until(lambda: sum(int(board.shown(e.id, "engine", "tasks_run"))
                           for e in cluster.engines) >= done + 20,
               timeout=30, what="the dashboard to count the mapped tasks")
    wait_until(lambda: all(re.search(r"CPU \d+%", board.shown(e.id, "engine", "busy"))
                           for e in cluster.engines),
               timeout=30, what="the engines' process CPU")

    # connect to the same cluster by its connection file; stop lets go of it only
    # (a second notebook would connect; here the started one is set aside for a moment: the
    # magics refuse a second cluster while the kernel's most recent one runs)
    [conn_file] = glob.glob(os.path.join(cluster.profile_dir, "security",
                                         "ipcontroller-*-client.json"))
    import tinycoro.cluster.registry as registry

    registry._running.remove(cluster)
    shell.run_line_magic("tinycoro", f"cluster connect --file {conn_file}")
    assert "tinycoro cluster connected to: 2 engines" in capsys.readouterr().out
    assert run_ok(shell, "await cluster.submit(square, 3)") == 9
    client = shell.user_ns["cluster"].client
    capsys.readouterr()
    shell.run_line_magic("tinycoro", "cluster stop")
    assert capsys.readouterr().out == "tinycoro cluster disconnected\n"
    assert all(p.is_running() for p in procs)  # not ours to stop
    assert client._closed  # the client the magic made for it is closed
    registry._running.append(cluster)
    shell.user_ns["cluster"] = cluster

    shell.run_line_magic("tinycoro", "cluster stop")
    assert capsys.readouterr().out == "tinycoro cluster stopped: no engine left\n"
    assert gone(procs) and cluster_processes() == []
    assert not refresher.alive and "stopped" in board._summary.value
    assert "cluster" not in shell.user_ns
    assert "px" not in shell.magics_manager.magics["line"]  # %px went with the cluster
    shell.run_line_magic("tinycoro", "cluster stop")
    assert capsys.readouterr().out == "tinycoro: no cluster is running\n"


def _cluster_board(shell):
    """%tinycoro cluster dashboard displays its widget (from any line of a cell) and returns
    None; the magic keeps the last one for code that wants it."""
    assert shell.run_line_magic("tinycoro", "cluster dashboard") is None
    return shell.magics_manager.registry["TinycoroMagics"].cluster.last_dashboard


def test_unloading_the_extension_stops_the_cluster_it_started(shell, capsys):
    pytest.importorskip("ipywidgets")
    shell.run_line_magic("tinycoro", "cluster start -n 1")
    procs = remembered()
    assert procs
    board = _cluster_board(shell)
    shell.run_line_magic("unload_ext", "tinycoro")
    assert gone(procs) and cluster_processes() == []
    assert "stopped" in board._summary.value  # and the fixture checks its thread ended


def test_the_magics_act_on_a_cluster_made_in_a_cell_and_see_it_stopped(shell, capsys):
    """``tc.cluster.start`` in a cell makes the kernel's most recent cluster, which the magics
    act on; ``cluster.dashboard()`` and its HTML summary work without them; after
    ``cluster.stop()`` in a cell the magics say it is stopped."""
    pytest.importorskip("ipywidgets")
    run_ok(shell, "import tinycoro as tc\ncluster = tc.cluster.start(1)")
    cluster = shell.user_ns["cluster"]
    procs = remembered()
    assert procs
    capsys.readouterr()
    shell.run_line_magic("tinycoro", "cluster status")
    assert capsys.readouterr().out.startswith("tinycoro cluster: 1 engine, 1 context (started here)")
    board = _cluster_board(shell)
    assert repr(board) == "<tinycoro cluster dashboard: 1 engine>"
    mine = run_ok(shell, "cluster.dashboard()")
    assert repr(mine) == repr(board)
    refresher = cluster.refresher
    assert refresher.alive
    summary = cluster._repr_html_()
    [e] = cluster.engines
    assert "1 engine<" in summary and "1 engines" not in summary
    assert f"<td>{e.pid}</td>" in summary and "started here" in summary

    run_ok(shell, "cluster.stop()")  # not through the magic
    assert gone(procs)
    assert not refresher.alive  # stop() ends the dashboards' refresher
    assert "stopped" in board._summary.value and "stopped" in cluster._repr_html_()
    # a stopped cluster offers nothing of a running one
    assert "dashboard()" not in cluster._repr_html_() and "%px" not in cluster._repr_html_()
    for action in ("status", "tasks", "dashboard"):
        with pytest.raises(UsageError, match="the cluster is stopped"):
            shell.run_line_magic("tinycoro", f"cluster {action}")
    capsys.readouterr()
    shell.run_line_magic("tinycoro", "cluster stop")
    assert capsys.readouterr().out == "tinycoro cluster stopped: no engine left\n"
    with pytest.raises(UsageError, match="no cluster"):
        shell.run_line_magic("tinycoro", "cluster status")


@pytest.mark.parametrize(
    "line, match",
    [
        ("cluster", "which action"),
        ("cluster bogus", "invalid choice"),
        ("cluster start -n 0", "positive"),
        ("cluster start --contexts 0", "positive"),
        ("cluster start -n x", "invalid int"),
        ("cluster status -n 2", "-n goes with start, not status"),
        ("cluster start --profile p", "--profile goes with connect"),
        ("cluster connect --profile p --file f", "not both"),
        ("cluster connect --file /nonexistent/tinycoro.json", "no connection file"),
        ("cluster status", "no cluster"),
        ("cluster tasks", "no cluster"),
        ("cluster dashboard", "no cluster"),
        ("-n 2 cluster", "go with restart"),
    ],
)
def test_bad_cluster_arguments_are_usage_errors(shell, line, match):
    with pytest.raises(UsageError, match=match):
        shell.run_line_magic("tinycoro", line)
    assert cluster_processes() == []


def test_cluster_help(shell, capsys):
    shell.run_line_magic("tinycoro", "cluster -h")
    out = capsys.readouterr().out
    assert out.count("%tinycoro cluster [") == 1
    for action in ("start", "connect", "status", "tasks", "dashboard", "stop"):
        assert action in out
    shell.run_line_magic("tinycoro", "-h")
    assert "(%tinycoro cluster -h)" in " ".join(capsys.readouterr().out.split())


def test_cluster_start_on_an_engine_is_a_usage_error_naming_why(shell, monkeypatch):
    # As tc.cluster.start() there: refused before anything is spawned (tests/test_cluster_nesting.py
    # runs it on real engines); the magic says so as a usage error, not a traceback.
    import tinycoro.cluster.api as api

    def no_launch(*args, **kwargs):
        raise AssertionError("the magic went on to launch processes")

    monkeypatch.setattr(api, "launch", no_launch)
    monkeypatch.setenv("TINYCORO_CLUSTER_ENGINE", "4242")
    with pytest.raises(UsageError, match=r"%tinycoro cluster start: .*inside an engine"):
        shell.run_line_magic("tinycoro", "cluster start -n 1")
    assert cluster_processes() == []
