"""In-process IPython shell tests: load/unload/reload of the extension and the %tinycoro magics.

These drive ``InteractiveShell.run_line_magic`` / ``run_cell`` directly (no kernel process);
tests/test_kernel_protocol.py covers the same ground through a real kernel.
"""

from __future__ import annotations

import re
import threading

import pytest

pytest.importorskip("IPython")

from helpers.cells import HELD_MUTEX_CELL
from helpers.runtime import tinycoro_threads, wait_until
from helpers.shell import tinycoro_shell
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from tinycoro import kernel_ext
import tinycoro as tc

pytestmark = pytest.mark.timeout(60)


def _no_tinycoro_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tinycoro")]


@pytest.fixture
def shell(monkeypatch):
    """The process's InteractiveShell, with tinycoro unloaded again afterwards."""
    with tinycoro_shell(monkeypatch, 2, setup=None) as sh:
        yield sh
    assert _no_tinycoro_threads() == []


@pytest.fixture
def loaded(shell):
    shell.run_line_magic("load_ext", "tinycoro")
    shell.run_cell("import tinycoro as tc")  # each test can run alone
    return shell


def run_ok(sh: InteractiveShell, code: str):
    res = sh.run_cell(code)
    if not res.success:
        raise AssertionError(f"cell failed: {res.error_before_exec or res.error_in_exec!r}")
    return res.result


# -- load / unload / reload ------------------------------------------------------------------
def test_load_installs_runner_scheduler_and_magic(loaded):
    ext = kernel_ext.get_extension(loaded)
    assert ext is not None
    assert loaded.loop_runner is ext.runner and loaded.autoawait is True
    assert "tinycoro" in loaded.magics_manager.magics["line"]
    assert tc.get_default_scheduler() is ext.scheduler
    assert ext.scheduler.contexts == 2 and ext.scheduler.stats().running
    assert len(tinycoro_threads()) == 2
    assert run_ok(loaded, "import tinycoro as tc\nawait tc.sleep(0.01)\n'awaited'") == "awaited"


def test_loading_twice_is_harmless(loaded):
    ext = kernel_ext.get_extension(loaded)
    loaded.run_line_magic("load_ext", "tinycoro")  # IPython: already loaded
    kernel_ext.load_ipython_extension(loaded)  # and straight into the hook, as --ext would
    tc.load_ipython_extension(loaded)
    assert kernel_ext.get_extension(loaded) is ext
    assert len(tinycoro_threads()) == 2
    assert run_ok(loaded, "await tc.sleep(0); 1") == 1


def test_unload_restores_previous_state_and_leaves_no_threads(shell):
    shell.loop_runner = "sync"  # a non-default runner, with autoawait off, to be restored
    before_runner, before_autoawait = shell.loop_runner, shell.autoawait
    assert before_autoawait is False
    shell.run_line_magic("load_ext", "tinycoro")
    assert shell.autoawait is True and shell.loop_runner is not before_runner
    shell.run_line_magic("unload_ext", "tinycoro")
    assert shell.loop_runner is before_runner and shell.autoawait is before_autoawait
    assert kernel_ext.get_extension(shell) is None
    assert "tinycoro" not in shell.magics_manager.magics["line"]
    with pytest.raises(UsageError):
        shell.run_line_magic("tinycoro", "status")
    assert tc.get_default_scheduler() is None
    assert _no_tinycoro_threads() == []


def test_reload_ext_replaces_scheduler_cleanly(loaded):
    old = kernel_ext.get_extension(loaded)
    old_sched = old.scheduler
    loaded.run_line_magic("reload_ext", "tinycoro")
    new = kernel_ext.get_extension(loaded)
    assert new is not old and new.scheduler is not old_sched
    assert not old_sched.stats().running and old.engine.ring.closed
    assert loaded.loop_runner is new.runner
    assert len(tinycoro_threads()) == 2
    assert run_ok(loaded, "await tc.spawn(tc.sleep(0.01)); 'reloaded'") == "reloaded"
    loaded.run_line_magic("unload_ext", "tinycoro")
    # the runner saved by the reloaded extension is the one from before the first load
    assert loaded.loop_runner is not new.runner and loaded.loop_runner is not old.runner


def test_unload_from_an_awaiting_cell_closes_the_engine_after_the_cell(loaded):
    ext = kernel_ext.get_extension(loaded)
    run_ok(loaded, "await tc.sleep(0.01)\n%unload_ext tinycoro\nawait tc.sleep(0.01)")
    assert ext.engine.ring.closed
    assert _no_tinycoro_threads() == []


def test_contexts_from_environment(shell, monkeypatch):
    monkeypatch.setenv("TINYCORO_CONTEXTS", "1")
    monkeypatch.setenv("TINYCORO_DISPATCH", "least_loaded")
    shell.run_line_magic("load_ext", "tinycoro")
    sched = kernel_ext.get_extension(shell).scheduler
    assert (sched.contexts, sched.dispatch) == (1, "least_loaded")


@pytest.mark.parametrize(
    "name, value", [("TINYCORO_CONTEXTS", "many"), ("TINYCORO_CONTEXTS", "0"), ("TINYCORO_DISPATCH", "random")]
)
def test_bad_environment_fails_the_load_with_a_clear_error(shell, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        kernel_ext.load_ipython_extension(shell)
    assert kernel_ext.get_extension(shell) is None and _no_tinycoro_threads() == []


def test_load_ext_and_await_in_the_same_cell(shell):
    # IPython chose its asyncio runner for this cell before %load_ext ran
    assert "asyncio" in str(shell.loop_runner) and shell.autoawait
    res = shell.run_cell(
        "%load_ext tinycoro\n"
        "import tinycoro as tc\n"
        "await tc.sleep(0.01)\n"
        "async def on_a_tinycoro_task():\n"
        "    return tc.current_task() is not None\n"
        "(await tc.spawn(on_a_tinycoro_task()), await on_a_tinycoro_task())"
    )
    assert res.success, res.error_in_exec
    assert res.result == (True, True)
    assert "run_code" not in shell.__dict__  # the hand-over ended with the loading cell
    assert run_ok(shell, "await tc.sleep(0); 'next'") == "next"


def test_a_failing_await_in_the_loading_cell_shows_its_error(shell):
    res = shell.run_cell("%load_ext tinycoro\nimport tinycoro as tc\nawait tc.sleep(0)\n{}['missing']")
    assert isinstance(res.error_in_exec, KeyError)
    res = shell.run_cell("await tc.io.read_file('/nonexistent/tinycoro')")
    assert isinstance(res.error_in_exec, FileNotFoundError)


# -- %tinycoro help, comments, status / tasks / restart / stop ----------------------------------
def test_help_is_printed_once(loaded, capsys):
    for line in ("-h", "--help", "restart -h"):
        assert loaded.run_line_magic("tinycoro", line) is None
        out = capsys.readouterr().out
        assert out.count("%tinycoro [") == 1 and out.count("positional arguments") == 1, out
        for command in ("status", "tasks", "dashboard", "restart", "stop"):
            assert command in out


def test_a_trailing_comment_is_not_an_argument(loaded, capsys):
    loaded.run_line_magic("tinycoro", "status   # per-context load")
    assert capsys.readouterr().out.startswith("tinycoro scheduler:")
    res = loaded.run_cell("%tinycoro restart -n 1   # one context is enough here")
    assert res.success, res.error_in_exec
    assert kernel_ext.get_extension(loaded).scheduler.contexts == 1


def test_status_says_what_tasks_run_and_failed_count(loaded, capsys):
    loaded.run_line_magic("tinycoro", "status")
    out = capsys.readouterr().out
    assert ", 0 failed with nobody awaiting" in " ".join(_head(out.splitlines()).split())
    assert "finished = tasks that ended on this context" in out  # the legend
    assert "sleeping = tasks in tc.sleep" in out and "has work = yes while" in out


def test_tasks_lists_live_tasks_and_recent_failures(loaded, capsys):
    run_ok(
        loaded,
        "gate = tc.Event()\n"
        "async def waiter():\n"
        "    await gate.wait()\n"
        "async def doomed():\n"
        "    raise ValueError('boom')\n"
        "w = tc.spawn(waiter(), name='gate-waiter')\n"
        "d = tc.spawn(doomed(), name='doomed')\n",
    )
    sched = kernel_ext.get_extension(loaded).scheduler
    wait_until(lambda: sched.stats().failed == 1, what="the failure to be counted")
    wait_until(
        lambda: any(i.name == "gate-waiter" and i.state == "parked" for i in sched.tasks()),
        what="the waiter to park",
    )
    capsys.readouterr()
    loaded.run_line_magic("tinycoro", "tasks")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "tinycoro: 1 live task: 1 parked on Event"
    assert out[1].split() == ["id", "name", "context", "state", "age", "waits", "on"]
    [row] = [line for line in out if "gate-waiter" in line]
    assert row.split()[3] == "parked" and row.endswith(" Event")
    assert any(line.startswith("legend: state = running: running now;") for line in out)
    i = out.index("recent failures nobody awaited (1):")
    assert out[i + 1].split() == ["id", "name", "context", "when", "error"]
    assert "doomed" in out[i + 2] and out[i + 2].endswith("ValueError: boom")
    assert isinstance(loaded.run_cell("await d").error_in_exec, ValueError)  # still raises
    run_ok(loaded, "gate.set()\nawait w")
    loaded.run_line_magic("tinycoro", "tasks")
    assert "tinycoro: 0 live tasks\n" in capsys.readouterr().out


@pytest.mark.parametrize("contexts", [None, 1, 2, 4])
def test_a_failure_nobody_awaits_prints_its_traceback_at_once(loaded, capsys, contexts):
    if contexts is not None:  # every scheduler the extension starts reports its failures
        loaded.run_line_magic("tinycoro", f"restart -n {contexts}")
    run_ok(
        loaded,
        "async def doomed():\n"
        "    await tc.sleep(0)\n"
        "    raise ValueError('boom in the background')\n"
        "d = tc.spawn(doomed(), name='doomed')",
    )
    err = ""

    def reported() -> bool:
        nonlocal err
        err += capsys.readouterr().err  # written by the hook on the context thread
        return "ValueError: boom in the background\n" in re.sub(r"\x1b\[[0-9;]*m", "", err)

    wait_until(reported, what="the failure's traceback on stderr")
    head, tb = re.sub(r"\x1b\[[0-9;]*m", "", err).split("\n", 1)
    assert head.startswith("tinycoro: task 'doomed' (id ") and "failed and nothing awaited it:" in head
    assert "Traceback (most recent call last)" in tb  # as IPython formats a cell's error
    assert "raise ValueError('boom in the background')" in tb
    assert "tinycoro/" not in tb and "kernel_ext/" not in tb  # the user's code only
    assert kernel_ext.get_extension(loaded).scheduler.stats().failed == 1
    assert isinstance(loaded.run_cell("await d").error_in_exec, ValueError)  # still raises


def _head(out: list[str]) -> str:
    """The headline of %tinycoro status, its continuation lines (indented) joined."""
    head = [out[0]] + [line for line in _until_header(out)[1:]]
    return " ".join(head)


def _until_header(out: list[str]) -> list[str]:
    return out[:next(i for i, line in enumerate(out) if line.startswith("context "))]


def _rows(out: list[str]) -> list[str]:
    """The per-context rows of %tinycoro status: the lines after the table's header."""
    i = len(_until_header(out))
    return [line for line in out[i + 1:] if line.split()[0].isdigit()]


def test_status_prints_a_table(loaded, capsys):
    loaded.run_line_magic("tinycoro", "status")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "tinycoro scheduler: 2 contexts (round_robin), running, accepting work, ")
    assert all(line.startswith("  ") for line in _until_header(out)[1:])  # wrapped at words
    out = out[len(_until_header(out)) - 1:]
    assert out[1].split() == [
        "context", "has", "work", "busy", "ready", "in", "I/O", "sleeping", "parked", "finished",
        "I/O", "ops", "thread",
    ]
    assert [line.split()[0] for line in out[2:4]] == ["0", "1"]
    assert out[4].split()[0] == "cells"  # the cells' own context, last
    assert out[5].startswith("legend: has work = ")
    loaded.run_line_magic("tinycoro", "")  # no subcommand means status
    assert capsys.readouterr().out.startswith("tinycoro scheduler:")


def test_status_counts_tasks_run(loaded, capsys):
    run_ok(loaded, "_ = await tc.when_all(*(tc.spawn(tc.sleep(0)) for _ in range(10)))")
    loaded.run_line_magic("tinycoro", "status")
    rows = _rows(capsys.readouterr().out.splitlines())
    assert len(rows) == 2 and sum(int(r.split()[7]) for r in rows) >= 10  # finished


def _tasks_out(sh: InteractiveShell, capsys) -> list[str]:
    capsys.readouterr()
    sh.run_line_magic("tinycoro", "tasks")
    return capsys.readouterr().out.splitlines()


def test_tasks_says_what_each_waits_on_in_plain_words(loaded, capsys):
    """docs/design.md, API contract: a sleep, a socket recv, a held Mutex and a when_all, in words
    a user understands; sleeps counted apart from I/O; ages that grow."""
    run_ok(
        loaded,
        "import socket\n" +
        HELD_MUTEX_CELL +
        "async def napper():\n"
        "    await tc.sleep(3600)\n"
        "async def fan_out():\n"
        "    return await tc.when_all(*(gate.wait() for _ in range(20)))\n"
        "lst = await tc.net.listen('127.0.0.1', 0)\n"
        "async def server():\n"
        "    async with await lst.accept() as conn:\n"
        "        return await conn.recv()\n"
        "h = tc.spawn(holder(), name='holder')\n"
        "while not m.locked():\n"
        "    await tc.sleep(0.001)\n"
        "cs = [tc.spawn(contender(), name=f'contender-{i}') for i in range(3)]\n"
        "nap = tc.spawn(napper(), name='napper')\n"
        "fan = tc.spawn(fan_out(), name='fan-out')\n"
        "srv = tc.spawn(server(), name='server')\n"
        "client = await tc.net.connect('127.0.0.1', lst.port)\n",
    )
    sched = kernel_ext.get_extension(loaded).scheduler

    def settled() -> bool:
        by = {i.name: i for i in sched.tasks()}
        return (
            all(by.get(f"contender-{i}") and by[f"contender-{i}"].state == "parked"
                for i in range(3))
            and by["napper"].state == "sleeping"
            # in I/O, and past its accept (the client's connect may complete first)
            and by["server"].state == "io" and by["server"].waits_on.startswith("recv")
            and by["fan-out"].state == "parked"
        )

    wait_until(settled, what="every task to reach its wait")
    out = _tasks_out(loaded, capsys)
    names = ("napper", "server", "fan-out", *(f"contender-{i}" for i in range(3)))
    rows = {n: line for line in out for n in names if f" {n} " in line}
    assert re.search(r"sleeping .* sleep 1 h \(1 h left\)$", rows["napper"]), rows["napper"]
    assert re.search(r" recv from 127\.0\.0\.1:\d+$", rows["server"]), rows["server"]
    assert " I/O " in rows["server"]
    for i in range(3):
        assert rows[f"contender-{i}"].endswith("Mutex held by 'holder' (3 waiting)")
    assert rows["fan-out"].endswith("when_all: 20 of 20 left"), rows["fan-out"]
    # the headline: every line above the table's header (it wraps at words when long)
    summary = " ".join(" ".join(out[:out.index(next(x for x in out if x.split()[:1] == ["id"]))]).split())
    assert "3 parked on Mutex" in summary and "1 sleeping" in summary
    assert "1 in I/O" in summary and "1 parked on when_all" in summary, summary
    # sleeps apart from I/O in the stats too: one sleeping task, its timer not I/O
    stats = sched.stats().contexts
    assert sum(c.sleeps for c in stats) == 1 and sum(c.in_io for c in stats) == 1
    old = {i.name: i.age for i in sched.tasks()}
    wait_until(lambda: all(i.age > old[i.name] + 0.05 for i in sched.tasks() if i.name in old),
               what="the ages to grow")
    run_ok(loaded, "gate.set()\nawait client.sendall(b'x')\nawait client.close()\n"
                   "await srv\nawait fan\nnap.cancel()\nawait lst.close()")


def test_restart_and_stop_say_how_many_tasks_they_cancelled(loaded, capsys):
    run_ok(loaded, "ts = [tc.spawn(tc.sleep(3600)) for _ in range(3)]")
    sched = kernel_ext.get_extension(loaded).scheduler
    wait_until(lambda: len(sched.tasks()) == 3, what="three sleepers")
    capsys.readouterr()
    loaded.run_line_magic("tinycoro", "restart")
    assert capsys.readouterr().out == (
        "tinycoro: restarted with 2 contexts (round_robin); cancelled 3 tasks\n"
    )
    assert run_ok(loaded, "all(t.cancelled() for t in ts)") is True
    run_ok(loaded, "t = tc.spawn(tc.sleep(3600))")
    wait_until(lambda: len(kernel_ext.get_extension(loaded).scheduler.tasks()) == 1,
               what="one sleeper")
    capsys.readouterr()
    loaded.run_line_magic("tinycoro", "stop")
    assert capsys.readouterr().out == (
        "tinycoro: scheduler stopped, cancelled 1 task; %tinycoro restart starts a new one\n"
    )


@pytest.mark.parametrize("contexts", [1, 2, 4])
@pytest.mark.parametrize("magic", ["%tinycoro restart", "%tinycoro stop", "%unload_ext tinycoro"])
def test_a_magic_that_stops_the_scheduler_right_after_a_spawn_in_the_same_step(
    shell, monkeypatch, contexts, magic
):
    # In an awaiting cell, a spawn waits for the end of the cell's turn (rule 18); the magic
    # stops the scheduler in that same step, waiting for every task to unwind. It used to
    # wait its whole timeout for the spawned task, which could not start (an hour here: the
    # test's own timeout fails first).
    from tinycoro.kernel_ext import extension

    monkeypatch.setenv("TINYCORO_CONTEXTS", str(contexts))
    monkeypatch.setattr(extension, "STOP_TIMEOUT", 3600.0)
    shell.run_line_magic("load_ext", "tinycoro")
    run_ok(shell, "import tinycoro as tc\nasync def forever():\n    await tc.Event().wait()")
    run_ok(shell, f"await tc.sleep(0)\nt = tc.spawn(forever())\n{magic}")
    assert run_ok(shell, "t.cancelled()") is True


def test_restart_with_contexts_and_dispatch(loaded, capsys):
    ext = kernel_ext.get_extension(loaded)
    old = ext.scheduler
    run_ok(loaded, "async def forever():\n    await tc.Event().wait()\nt = tc.spawn(forever())")
    loaded.run_line_magic("tinycoro", "restart -n 1 --dispatch least_loaded")
    assert "restarted with 1 context (least_loaded)" in capsys.readouterr().out
    assert not old.stats().running
    assert run_ok(loaded, "t.cancelled()") is True  # the old scheduler's tasks were cancelled
    new = ext.scheduler
    assert (new.contexts, new.dispatch) == (1, "least_loaded")
    assert tc.get_default_scheduler() is new and ext.engine.scheduler is new
    assert len(tinycoro_threads()) == 1
    assert run_ok(loaded, "(await tc.spawn(tc.sleep(0.01)), tc.spawn(tc.sleep(0)).context)") == (None, 0)
    loaded.run_line_magic("tinycoro", "restart")  # same settings again
    assert (ext.scheduler.contexts, ext.scheduler.dispatch) == (1, "least_loaded")


@pytest.mark.parametrize(
    "line",
    [
        "restart -n 0", "restart --dispatch random", "restart -n x", "bogus", "status 'unbalanced",
        "status -n 2", "tasks --dispatch least_loaded", "stop --bogus",
    ],
)
def test_bad_arguments_are_usage_errors(loaded, line):
    sched = kernel_ext.get_extension(loaded).scheduler
    with pytest.raises(UsageError):
        loaded.run_line_magic("tinycoro", line)
    assert sched.stats().running  # nothing was stopped


def test_stop_then_restart(loaded, capsys):
    ext = kernel_ext.get_extension(loaded)
    loaded.run_line_magic("tinycoro", "stop")
    assert "scheduler stopped" in capsys.readouterr().out
    assert _no_tinycoro_threads() == []
    loaded.run_line_magic("tinycoro", "status")
    out = capsys.readouterr().out
    assert "stopped, not accepting work" in out and "%tinycoro restart" in out
    loaded.run_line_magic("tinycoro", "stop")
    assert "was not running" in capsys.readouterr().out
    # awaiting still works (the cell has its own engine); spawning says why it cannot
    assert run_ok(loaded, "await tc.sleep(0.01); 'still awaits'") == "still awaits"
    for cell in ("tc.spawn(tc.sleep(0))", "await tc.sleep(0)\ntc.spawn(tc.sleep(0))"):
        res = loaded.run_cell(cell)  # a plain cell, and an awaiting one (on the cell engine)
        assert isinstance(res.error_in_exec, RuntimeError)
        assert "%tinycoro restart" in str(res.error_in_exec), res.error_in_exec
    loaded.run_line_magic("tinycoro", "restart -n 2")
    assert ext.scheduler.stats().running
    assert run_ok(loaded, "await tc.spawn(tc.sleep(0.01)); 'back'") == "back"


# -- %tinycoro dashboard ---------------------------------------------------------------------
def test_dashboard_widget_updates_from_its_refresher_thread(loaded):
    pytest.importorskip("ipywidgets")
    from tinycoro.kernel_ext.dashboard import Dashboard

    ext = kernel_ext.get_extension(loaded)
    assert loaded.run_line_magic("tinycoro", "dashboard") is None  # displayed, not returned
    board = loaded.magics_manager.registry["TinycoroMagics"].last_dashboard
    assert isinstance(board, Dashboard)
    assert repr(board) == "<tinycoro dashboard: 2 contexts>"
    assert board._repr_mimebundle_()["text/plain"] == "<tinycoro dashboard: 2 contexts>"
    refresher = ext.refresher
    assert [t.name for t in threading.enumerate() if t.name == "tinycoro-dashboard"] == [
        "tinycoro-dashboard"
    ]
    run_ok(loaded, "await tc.when_all(*(tc.spawn(tc.sleep(0)) for _ in range(20)))")

    def tasks_run() -> int:
        return sum(int(board.shown(c, "tasks_run")) for c in (0, 1))

    wait_until(lambda: tasks_run() >= 20, what="the dashboard to show the tasks run")
    assert "stop token" in board._summary.value and "running" in board._summary.value
    loaded.run_line_magic("tinycoro", "dashboard")
    second = loaded.magics_manager.registry["TinycoroMagics"].last_dashboard
    assert ext.refresher is refresher  # one refresher thread serves every dashboard
    loaded.run_line_magic("tinycoro", "stop")
    assert not refresher.alive
    for b in (board, second):
        assert "stopped" in b._summary.value and "not accepting" in b._summary.value
    with pytest.raises(UsageError, match="stopped"):
        loaded.run_line_magic("tinycoro", "dashboard")


def test_dashboard_without_ipywidgets_is_a_usage_error(loaded, monkeypatch):
    import tinycoro.kernel_ext.widgets as widgets

    monkeypatch.setattr(widgets, "ipywidgets", None)
    with pytest.raises(UsageError, match="needs ipywidgets"):
        loaded.run_line_magic("tinycoro", "dashboard")
    assert not [t for t in threading.enumerate() if t.name == "tinycoro-dashboard"]


def test_python_m_tinycoro_speaks_the_words_of_status_with_a_legend(loaded, capsys):
    """One vocabulary for python -m tinycoro, %tinycoro status and the dashboard."""
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "tinycoro", "-n", "2", "--files", "2", "--clients", "2",
         "--rounds", "5", "--timers", "10"],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout
    loaded.run_line_magic("tinycoro", "status")
    status = capsys.readouterr().out.splitlines()
    head = status[len(_until_header(status))]
    assert head in out.splitlines(), out  # the same column names
    assert "legend: has work = " in out and "sleeping = tasks in tc.sleep" in out
    help_text = subprocess.run([sys.executable, "-m", "tinycoro", "--help"], capture_output=True,
                               text=True, timeout=60, check=True).stdout
    assert help_text.count("(default:") == 7  # every option is described, with its default


# -- text output as a notebook shows it -------------------------------------------------------
class _Writes:
    """A stdout that records each write call: what reaches the notebook as one message."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return len(s)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("line", ["status", "tasks", "stop", "restart -n 1"])
def test_a_magics_output_is_written_whole(loaded, monkeypatch, line):
    # a background task's print between two writes of one magic's output would land inside
    # it ("... since the task was spawnedtick 0"): each output is one write, newline included
    run_ok(loaded, "gate = tc.Event()\nw = tc.spawn(gate.wait(), name='waiter')")
    out = _Writes()
    monkeypatch.setattr("sys.stdout", out)
    loaded.run_line_magic("tinycoro", line)
    monkeypatch.undo()
    assert len(out.writes) == 1, out.writes
    assert out.writes[0].endswith("\n") and out.writes[0].count("\n") >= 1


def _legend_block(lines: list[str]) -> list[str]:
    i = next(i for i, line in enumerate(lines) if line.startswith("legend:"))
    block = [lines[i]]
    for line in lines[i + 1:]:
        if not line.startswith(" "):
            break
        block.append(line)
    return block


@pytest.mark.parametrize("line", ["status", "tasks"])
def test_legends_fit_the_notebook_and_wrap_at_words(loaded, capsys, line):
    from tinycoro.core.stats import COLUMNS, STATES
    from tinycoro.kernel_ext.textout import WIDTH

    run_ok(loaded, "gate = tc.Event()\nw = tc.spawn(gate.wait(), name='waiter')")
    capsys.readouterr()
    loaded.run_line_magic("tinycoro", line)
    out = capsys.readouterr().out.splitlines()
    block = _legend_block(out)
    assert all(len(x) <= WIDTH for x in block), [x for x in block if len(x) > WIDTH]
    # every word whole: the block, rejoined, holds each meaning as written
    text = " ".join(" ".join(block).split())
    meanings = ([w for _, w in COLUMNS[1:]] if line == "status"
                else ["; ".join(f"{k}: {v}" for k, v in STATES)])
    for meaning in meanings:
        assert meaning in text, (meaning, block)
    assert all(len(x) <= WIDTH for x in out if not x.startswith(("  ", "0", "1", "id", "con"))), out


def test_the_legend_helper_wraps_one_item_a_line_at_words():
    from tinycoro.core.stats import legend, wrap
    from tinycoro.kernel_ext.textout import WIDTH

    items = [("short", "one"), ("long", "word " * 40 + "end"), ("x", "a" * (WIDTH + 5))]
    lines = legend(items)
    assert lines[0] == "legend: short = one"
    assert lines[1].startswith("        long = word word")
    assert all(len(x) <= WIDTH for x in lines[:-1])  # a single word longer than a line stays whole
    assert lines[-1].strip() == "a" * (WIDTH + 5)
    assert " ".join(" ".join(lines).split()).endswith("word end x = " + "a" * (WIDTH + 5))
    assert wrap("word " * 40) == wrap(" ".join(["word"] * 40))
    assert all(len(x) <= WIDTH for x in wrap("word " * 40))


def test_the_magics_help_has_no_stray_rst_marker(loaded, capsys):
    # %tinycoro? shows the magic's docstring; magic_arguments starts it with an RST "::" line
    doc = loaded.find_line_magic("tinycoro").__doc__
    assert not any(line.strip() == "::" for line in doc.splitlines()), doc[:200]
    assert doc.lstrip().startswith("%tinycoro [")
    assert "Inspect and control the notebook's tinycoro scheduler." in doc
    loaded.run_line_magic("pinfo", "%tinycoro")
    shown = capsys.readouterr().out
    assert "%tinycoro [" in shown and not any(x.strip() == "::" for x in shown.splitlines())


def test_status_counts_the_io_of_the_cells_own_context(loaded, capsys, tmp_path):
    # a cell's awaits run on the main thread's own (guest) context: its file I/O must show in
    # a row of its own, not vanish between the scheduler's contexts
    path = tmp_path / "cell-io.bin"
    run_ok(loaded, f"await tc.io.write_file({str(path)!r}, b'x' * 100)\n"
                   f"_ = await tc.io.read_file({str(path)!r})")
    loaded.run_line_magic("tinycoro", "status")
    out = capsys.readouterr().out.splitlines()
    cells = [line for line in out if line.startswith("cells ")]
    assert len(cells) == 1, out
    io_ops = int(cells[0].split()[8])  # the I/O ops column
    assert io_ops >= 2, cells  # at least the write and the read
    assert any("cells = " in line for line in out), out  # and the legend says what it is
