"""The cell runner in-process: top-level await, spawning, errors, and SIGINT handling.

Interrupts are real SIGINTs sent to this process while a cell runs on the main thread; the
sender waits for the runtime state it needs (the cell asleep in its eventfd, parked, spinning)
instead of sleeping. (The core's own EINTR regressions, first found here, are in
tests/test_signals.py.)
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading

import pytest

pytest.importorskip("IPython")

from helpers.cells import ECHO_SERVER_CELL, TWO_CELL
from helpers.runtime import in_eventfd_read, open_fds, tinycoro_threads, wait_until
from helpers.shell import tinycoro_shell
from IPython.core.interactiveshell import InteractiveShell

from tinycoro import kernel_ext

pytestmark = pytest.mark.timeout(60)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


@pytest.fixture
def sh(monkeypatch):
    with tinycoro_shell(monkeypatch, 2, "import signal, tinycoro as tc") as shell:
        yield shell
    assert not tinycoro_threads()


def interrupt_when(predicate, what: str) -> threading.Thread:
    """From another thread: wait until *predicate()* holds, then SIGINT this process."""

    def send() -> None:
        wait_until(predicate, timeout=20, what=what)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=send, name="test-interrupter", daemon=True)
    t.start()
    return t


def cell_waits(sh) -> bool:
    """The cell task is suspended (on I/O, a timer or a primitive) and its thread asleep."""
    ext = kernel_ext.get_extension(sh)
    task = ext.runner.running
    return task is not None and task._waiting is not None and in_eventfd_read(ext.engine)


# -- plain cells ---------------------------------------------------------------------------
def test_top_level_await_returns_value_on_main_thread(sh):
    res = sh.run_cell(
        "import threading\nawait tc.sleep(0.05)\n"
        "(threading.current_thread() is threading.main_thread(), tc.current_context())"
    )
    assert res.success and res.result == (True, None)


def test_spawned_tasks_run_on_contexts_and_outlive_the_cell(sh):
    res = sh.run_cell(
        "ev = tc.Event()\n"
        "async def bg():\n"
        "    await ev.wait()\n"
        "    return tc.current_context()\n"
        "t = tc.spawn(bg())\n"
        "await tc.sleep(0)\n"
        "t.done()"
    )
    assert res.success and res.result is False
    assert sh.run_cell("t.done()").result is False  # still parked after its cell ended
    res = sh.run_cell("ev.set()\nawait t")
    assert res.success and res.result in (0, 1)


def test_exception_shows_a_normal_traceback(sh, capsys):
    res = sh.run_cell("await tc.sleep(0.01)\n1/0")
    assert isinstance(res.error_in_exec, ZeroDivisionError)
    out = _plain(capsys.readouterr().out)
    assert "ZeroDivisionError" in out and "1/0" in out
    assert sh.run_cell("await tc.sleep(0); 'fine'").result == "fine"


def test_a_future_of_another_loop_is_a_clear_error(sh):
    loop = asyncio.new_event_loop()
    try:
        sh.user_ns["fut"] = loop.create_future()
        res = sh.run_cell("await fut")
    finally:
        loop.close()
    assert isinstance(res.error_in_exec, RuntimeError)
    assert "different loop" in str(res.error_in_exec)
    assert sh.run_cell("await tc.sleep(0); 'kernel survives'").result == "kernel survives"


def test_a_cell_awaits_asyncio_and_tinycoro_together(sh, contexts):
    """The cell is a tinycoro task (combinators, tc.timeout, current_task work) and asyncio
    awaitables in it run on the runner's loop; asyncio tasks there may await tinycoro."""
    sh.run_line_magic("tinycoro", f"restart -n {contexts}")
    res = sh.run_cell(
        "import asyncio\n"
        + TWO_CELL
        + "await asyncio.sleep(0)\n"
        "await asyncio.sleep(0.01)\n"
        "r = await asyncio.gather(tc.sleep(0.01), asyncio.sleep(0.01, result=1), tc.spawn(two()))\n"
        "w = await tc.when_all(two(), tc.aio(asyncio.sleep(0.01, result='a')))\n"
        "try:\n"
        "    async with tc.timeout(0.05):\n"
        "        await asyncio.sleep(30)\n"
        "    timed_out = False\n"
        "except TimeoutError:\n"
        "    timed_out = True\n"
        "(r, w, timed_out, tc.current_task() is not None, await asyncio.wait_for(two(), 5))\n"
    )
    assert res.error_in_exec is None
    assert res.result == ([None, 1, 2], [2, "a"], True, True, 2)
    loop = kernel_ext.get_extension(sh).runner.cell_loop.loop
    assert not [t for t in asyncio.all_tasks(loop) if not t.done()]  # the timeout cancelled it


def test_an_asyncio_streams_client_and_a_tinycoro_server_in_one_cell(sh, contexts):
    sh.run_line_magic("tinycoro", f"restart -n {contexts}")
    res = sh.run_cell(
        ECHO_SERVER_CELL
        + "got = []\n"
        "for i in range(20):\n"
        "    writer.write(b'line %d\\n' % i); await writer.drain()\n"
        "    got.append(await reader.readline())\n"
        "writer.close(); await writer.wait_closed(); await server\n"
        "got == [b'LINE %d\\n' % i for i in range(20)]\n"
    )
    assert res.error_in_exec is None and res.result is True


def test_unload_closes_the_cell_loop_and_its_ring_and_leaves_no_descriptor(monkeypatch):
    from tinycoro.aio import host

    monkeypatch.setenv("TINYCORO_CONTEXTS", "2")
    shell = InteractiveShell.instance()
    saved = (shell.loop_runner, shell.autoawait)
    before = open_fds()
    shell.run_line_magic("load_ext", "tinycoro")
    try:
        loop = kernel_ext.get_extension(shell).runner.cell_loop.loop
        res = shell.run_cell(
            "import asyncio, tinycoro as tc\n"
            "left = asyncio.ensure_future(asyncio.sleep(3600))  # never awaited: cancelled at unload\n"
            "await asyncio.gather(tc.io.stat('/'), asyncio.sleep(0.001))  # an op: the ring\n"
        )
        assert res.error_in_exec is None and host.hosted_ring_open(loop)
    finally:
        shell.run_line_magic("unload_ext", "tinycoro")
        shell.loop_runner, shell.autoawait = saved
    assert loop.is_closed() and not host.hosted_ring_open(loop)
    assert shell.user_ns["left"].cancelled()
    assert not tinycoro_threads()
    assert open_fds() <= before


def test_runner_refuses_to_nest(sh):
    res = sh.run_cell("await tc.sleep(0)\nget_ipython().run_cell('await tc.sleep(0)').error_in_exec")
    assert res.success
    assert isinstance(res.result, RuntimeError) and "inside a tinycoro task" in str(res.result)


def test_runner_serves_one_cell_at_a_time(sh):
    """A second thread (an ipykernel subshell, say) cannot drive the cell engine concurrently."""
    ext = kernel_ext.get_extension(sh)
    errors: list[str] = []

    def other_thread() -> None:
        async def cell():
            return 1

        try:
            ext.runner(cell())
        except RuntimeError as e:
            errors.append(str(e))

    sh.user_ns["other_thread"] = other_thread
    res = sh.run_cell(
        "import threading\n"
        "await tc.sleep(0)\n"
        "th = threading.Thread(target=other_thread)\n"
        "th.start()\n"
        "th.join()\n"
        "await tc.sleep(0)\n"
        "'main cell done'"
    )
    assert res.result == "main cell done"
    assert len(errors) == 1 and "one cell at a time" in errors[0]


# -- interrupts ----------------------------------------------------------------------------
def test_interrupt_during_sleep_runs_finally_and_next_cell_works(sh, capsys):
    before = signal.getsignal(signal.SIGINT)
    interrupt_when(lambda: cell_waits(sh), "the cell to sleep")
    res = sh.run_cell("try:\n    await tc.sleep(30)\nfinally:\n    print('finally ran')")
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    out = _plain(capsys.readouterr().out)
    assert "finally ran" in out and "KeyboardInterrupt" in out
    assert signal.getsignal(signal.SIGINT) is before  # the kernel's handler is back
    ext = kernel_ext.get_extension(sh)
    assert ext.runner.running is None and not ext.engine.inflight and not ext.engine.ready
    assert sh.run_cell("await tc.sleep(0.01); 'next'").result == "next"


@pytest.mark.parametrize("sleep", ["asyncio.sleep(30)", "asyncio.gather(asyncio.sleep(30), tc.sleep(30))"])
def test_interrupt_during_an_asyncio_await_runs_finally_and_next_cell_works(sh, capsys, sleep):
    def parked() -> bool:
        ext = kernel_ext.get_extension(sh)
        task = ext.runner.running
        return task is not None and task._waiting is not None and ext.engine.sleeping

    interrupt_when(parked, "the cell to wait on asyncio")
    res = sh.run_cell(
        "import asyncio\n"
        f"try:\n    await {sleep}\n"
        "finally:\n    await asyncio.sleep(0.001)\n    print('finally ran')"
    )
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    out = _plain(capsys.readouterr().out)
    assert "finally ran" in out and "KeyboardInterrupt" in out
    assert "cell_loop" not in out and "_on_sigint" not in out  # no runtime frame shown
    ext = kernel_ext.get_extension(sh)
    assert ext.runner.running is None and not ext.engine.inflight and not ext.engine.ready
    loop = ext.runner.cell_loop.loop
    assert not [t for t in asyncio.all_tasks(loop) if not t.done()]  # gather's children too
    assert sh.run_cell("await asyncio.sleep(0.01); 'next'").result == "next"


def test_interrupt_while_parked_on_a_join(sh):
    interrupt_when(lambda: cell_waits(sh), "the cell to park")
    res = sh.run_cell(
        "ev = tc.Event()\n"
        "async def child():\n"
        "    await ev.wait()\n"
        "    return 'child done'\n"
        "t = tc.spawn(child())\n"
        "cleanup = []\n"
        "try:\n"
        "    await t\n"
        "finally:\n"
        "    cleanup.append(await tc.io.read_file('/proc/self/stat') != b'')\n"
    )
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    assert sh.user_ns["cleanup"] == [True]  # a finally block may still await
    # the child is untouched by the interrupt and can still be joined
    assert sh.run_cell("ev.set()\nawait t").result == "child done"


def test_interrupt_that_misses_the_system_call_wakes_the_engine(sh):
    """A SIGINT whose Python handler cannot run until the thread wakes (here: the main thread
    blocks SIGINT, so another thread takes it and the main thread's read is not interrupted)
    still wakes the cell's engine, through the signal wakeup fd, although the cell is parked
    with no timer and nothing else would ever wake it."""
    interrupt_when(lambda: cell_waits(sh), "the cell to park")
    res = sh.run_cell(
        "import signal\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
        "try:\n"
        "    await tc.Event().wait()\n"
        "finally:\n"
        "    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
    )
    # nothing sets the event: the cell ends only because the tick delivered the interrupt
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    assert sh.run_cell("await tc.sleep(0); 'next'").result == "next"


def test_signal_wakeup_fd_is_restored_and_other_signals_pass_through(sh):
    """While a cell runs, the wakeup fd is the runner's; signals other than SIGINT are passed on
    to the previous wakeup fd (asyncio's, say), which is back in place after the cell."""
    import socket

    r, w = socket.socketpair()
    r.setblocking(False)
    w.setblocking(False)
    previous_handler = signal.signal(signal.SIGUSR1, lambda *_: None)
    previous_fd = signal.set_wakeup_fd(w.fileno())
    try:
        res = sh.run_cell(
            "import os, signal\n"
            "during = signal.set_wakeup_fd(-1); signal.set_wakeup_fd(during)\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\n"
            "await tc.sleep(0.01)\n"
        )
        assert res.success, res.error_in_exec
        assert sh.user_ns["during"] not in (-1, w.fileno())
        assert signal.set_wakeup_fd(w.fileno()) == w.fileno()  # ours is back
        assert r.recv(16) == bytes([signal.SIGUSR1])
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGUSR1, previous_handler)
        r.close()
        w.close()


def test_interrupt_of_a_cell_computing_between_awaits(sh, capsys):
    capsys.readouterr()
    interrupt_when(lambda: sh.user_ns.get("spinning"), "the cell to spin")
    res = sh.run_cell(
        "await tc.sleep(0)\n"
        "spinning = True\n"
        "try:\n"
        "    while True:\n"
        "        pass\n"
        "finally:\n"
        "    spinning = 'stopped'\n"
    )
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    assert sh.user_ns["spinning"] == "stopped"
    shown = _plain(capsys.readouterr().out)
    assert "KeyboardInterrupt" in shown and "while True" in shown
    assert "_on_sigint" not in shown  # the handler's frame is not part of the user's story
    assert sh.run_cell("await tc.sleep(0); 'next'").result == "next"


def test_interrupt_during_many_short_awaits(sh):
    """Interrupts landing anywhere in a busy engine loop never corrupt it."""
    for _ in range(5):
        sh.user_ns["turns"] = 0
        interrupt_when(lambda: sh.user_ns.get("turns", 0) > 200, "the cell to churn")
        res = sh.run_cell(
            "while True:\n"
            "    await tc.yield_now()\n"
            "    await tc.spawn(tc.sleep(0))\n"
            "    turns += 1\n"
        )
        assert isinstance(res.error_in_exec, KeyboardInterrupt)
        ext = kernel_ext.get_extension(sh)
        assert not ext.engine.inflight and not ext.engine.ready and not ext.engine.parked
    assert sh.run_cell("await tc.spawn(tc.sleep(0.01)); 'ok'").result == "ok"


def _handler_defers_to_the_next_await(sh, prelude: str, call: str) -> None:
    """Run a cell that calls the runner's SIGINT handler as *call* (after *prelude*), as if the
    signal landed right there: the handler must not raise, and the cell must get
    KeyboardInterrupt at its next await."""
    sh.user_ns["runner"] = kernel_ext.get_extension(sh).runner
    body = "".join(f"    {line}\n" for line in call.splitlines())
    res = sh.run_cell(
        f"{prelude}where = None\n"
        "try:\n"
        f"{body}"
        "    where = 'after the handler'\n"
        "    await tc.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    got = where\n"
    )
    assert res.success, res.error_in_exec
    assert sh.user_ns["got"] == "after the handler"


def test_sigint_handler_takes_no_lock(sh):
    """The handler may run while the main thread holds the task lock (Task._finish, a join):
    it must only queue work for the engine, never take a lock itself."""
    _handler_defers_to_the_next_await(
        sh,
        "await tc.sleep(0)\n",
        "with tc.current_task()._lock:\n    runner._on_sigint(signal.SIGINT, None)\n",
    )


def test_interrupt_landing_in_the_engine_step_is_delivered_at_the_next_await(sh):
    """A signal handled while the engine's own ``_step`` frame executes (between resuming the
    cell and acting on what it yielded) must not raise there: that used to finish the cell
    task while its coroutine stayed suspended. It is delivered at the cell's next await."""
    from tinycoro import compiled
    from tinycoro.core import engine

    if compiled.is_compiled(engine):
        # Compiled (rule 14), _step has no Python frame: no signal can land in it.
        pytest.skip("the engine is compiled: its _step has no frame for a signal to land in")
    _handler_defers_to_the_next_await(
        sh,
        "import sys\n"
        "from tinycoro.core.engine import Engine\n"
        "async def step_frame():\n"
        "    f = sys._getframe()\n"
        "    while f.f_code is not Engine._step.__code__:\n"
        "        f = f.f_back\n"
        "    return f\n"
        "step = await step_frame()\n",
        "runner._on_sigint(signal.SIGINT, step)\n",
    )


def test_sigint_between_cells_is_the_kernels_business(sh):
    assert signal.getsignal(signal.SIGINT) is not kernel_ext.get_extension(sh).runner._on_sigint


def test_engine_failure_never_leaves_the_cell_suspended(sh):
    """If the engine itself raises mid-turn, the runner closes the cell coroutine (its finally
    blocks run) and drains the cell's I/O, and the next cell still works."""
    ext = kernel_ext.get_extension(sh)

    def boom() -> None:
        raise RuntimeError("engine failure")

    sh.user_ns["inject"] = lambda: ext.engine.call_soon(boom)
    res = sh.run_cell(
        "try:\n    inject()\n    await tc.sleep(30)\nfinally:\n    print('closed')\n    ran = True"
    )
    assert isinstance(res.error_in_exec, RuntimeError) and "engine failure" in str(res.error_in_exec)
    assert sh.user_ns["ran"] is True
    assert not ext.engine.inflight and ext.runner.running is None
    assert sh.run_cell("await tc.sleep(0.01); 'recovered'").result == "recovered"


def test_extension_contexts_do_not_receive_signals(sh):
    """Contexts run with asynchronous signals blocked, so the kernel routes them to the main
    thread (whose blocking read they interrupt at once); one sent to a context stays pending."""
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        sched = kernel_ext.get_extension(sh).scheduler
        wait_until(lambda: all(e.sleeping for e in sched._engines), what="contexts asleep")
        for t in tinycoro_threads():
            signal.pthread_kill(t.ident, signal.SIGUSR1)  # stays pending: blocked in that thread
        assert sh.run_cell("await tc.when_all(*(tc.spawn(tc.sleep(0.01)) for _ in range(4)))").success
        assert all(t.is_alive() for t in tinycoro_threads())
    finally:
        signal.signal(signal.SIGUSR1, previous)
