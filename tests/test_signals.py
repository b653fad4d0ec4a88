"""Signals and the sleep point: EINTR is a wake-up, never a crash.

``os.eventfd_read`` (unlike ``os.read``) does not retry after EINTR; a signal handler that
returns normally used to make it raise InterruptedError out of the engine's loop.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

import tinycoro as tc
from helpers.runtime import engine_bug_trap, in_eventfd_read, open_fds, opened_since, tinycoro_threads, wait_until
from tinycoro.core.engine import Engine
from tinycoro.core.task import Task


def test_engine_sleep_survives_a_signal_on_its_thread():
    # The main thread drives a (guest) engine; SIGINT arrives while it is blocked on the
    # eventfd (the wait bounded by the sleep's deadline); the handler returns; the sleep goes
    # on and ends.
    engine = Engine(None, None, 8, guest=True)
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:

        async def cell():
            await tc.sleep(0.3)
            return "slept"

        task = Task(cell(), engine)
        engine.push(task)

        def send():
            wait_until(lambda: in_eventfd_read(engine), timeout=20, what="the engine to sleep")
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=send, daemon=True).start()
        engine.run(until=task)
        assert task.result() == "slept"
    finally:
        signal.signal(signal.SIGINT, previous)
        engine.close()


def test_context_thread_survives_a_signal():
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    sched = tc.Scheduler(1).start()
    try:
        thread = next(t for t in tinycoro_threads() if t.name.startswith(f"tinycoro-{sched.id}-"))
        wait_until(lambda: in_eventfd_read(sched._engines[0], thread), what="the context to sleep")
        signal.pthread_kill(thread.ident, signal.SIGUSR1)

        async def ping():
            return "pong"

        assert sched.run_sync(ping(), timeout=5) == "pong"
        assert thread.is_alive()
    finally:
        sched.stop()
        signal.signal(signal.SIGUSR1, previous)


# -- Ctrl-C around tc.run (rules 12 and 13) --------------------------------------------
async def _workers(n: int, log: list[str], all_started: "tc.Latch | None" = None) -> None:
    async def worker(i: int) -> None:
        log.append(f"started {i}")
        if all_started is not None:
            all_started.count_down()
        try:
            while True:
                await (tc.yield_now() if i % 2 else tc.sleep(0.001))
        finally:
            await tc.sleep(0.001)  # a finally block that awaits still completes
            log.append(f"finally {i}")

    tasks = [tc.spawn(worker(i)) for i in range(n)]
    try:
        for t in tasks:
            await t
    finally:
        log.append("finally main")


@pytest.fixture
def patient_unwind(monkeypatch):
    """After Ctrl-C, tc.run gives the cancelled tasks INTERRUPT_UNWIND (1 s) to unwind and
    closes those still running then, whose finally blocks are cut at their await. The tests
    that check every finally block ran are about the unwinding, not about that bound (which
    test_ctrl_c_with_a_task_that_stays_ready_still_returns checks): on a loaded machine 1 s
    was too little for a context to be run at all (3.13t, pure runtime, 2 contexts, load 32:
    the two workers on one context were closed), so they get 20 s, under their 30 s timeout."""
    from tinycoro.core import scheduler

    monkeypatch.setattr(scheduler, "INTERRUPT_UNWIND", 20.0)


def _check_unwound(log: list[str], fds_before: set[int]) -> None:
    started = {e.split()[1] for e in log if e.startswith("started ")}
    finished = {e.split()[1] for e in log if e.startswith("finally ") and e != "finally main"}
    assert started and started == finished
    assert "finally main" in log
    assert not tinycoro_threads()
    assert not opened_since(fds_before)  # every ring and eventfd closed
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.timeout(30)
def test_ctrl_c_while_tasks_run_cancels_them_and_raises(contexts, patient_unwind):
    log: list[str] = []

    async def main():
        started = tc.Latch(4)

        async def interrupter():
            await started.wait()
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, while every worker runs

        tc.spawn(interrupter())
        await _workers(4, log, started)

    fds = open_fds()
    with pytest.raises(KeyboardInterrupt):
        tc.run(main(), contexts=contexts)
    _check_unwound(log, fds)


@pytest.mark.timeout(30)
def test_a_descriptor_closed_elsewhere_during_the_run_is_no_leak(patient_unwind):
    """The unwinding check counts what the run left open, not every change: a descriptor that
    was open before and is closed meanwhile by someone else (here a task stands in for a
    library's background thread) used to fail it, as one did under load in CI."""
    log: list[str] = []
    theirs, other_end = os.pipe()

    async def main():
        started = tc.Latch(4)

        async def interrupter():
            await started.wait()
            os.close(theirs)
            os.kill(os.getpid(), signal.SIGINT)

        tc.spawn(interrupter())
        await _workers(4, log, started)

    fds = open_fds()
    try:
        with pytest.raises(KeyboardInterrupt):
            tc.run(main(), contexts=1)
    finally:
        os.close(other_end)
    _check_unwound(log, fds)


@pytest.mark.timeout(30)
def test_ctrl_c_during_start_up_still_cancels_and_joins(contexts, monkeypatch, patient_unwind):
    """The signal is handled while loop() starts the context threads, before it waits: it used
    to escape from there, leaving the threads running and no finally block run."""
    log: list[str] = []
    start_threads = tc.Scheduler._start_threads

    def start_then_interrupt(self):
        start_threads(self)
        signal.raise_signal(signal.SIGINT)  # handled at the next bytecode, right here

    monkeypatch.setattr(tc.Scheduler, "_start_threads", start_then_interrupt)
    fds = open_fds()
    with pytest.raises(KeyboardInterrupt):
        tc.run(_workers(3, log), contexts=contexts)
    assert not tinycoro_threads() and not opened_since(fds)
    started = {e.split()[1] for e in log if e.startswith("started ")}
    assert started == {e.split()[1] for e in log if e.startswith("finally ") and e != "finally main"}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.timeout(30)
def test_ctrl_c_before_the_scheduler_exists_runs_nothing(monkeypatch):
    """Interrupted while tc.run builds the scheduler: no task starts, nothing is left."""
    ran = []

    async def main():
        ran.append(True)

    build = tc.Scheduler.__init__

    def build_then_interrupt(self, *args, **kwargs):
        build(self, *args, **kwargs)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(tc.Scheduler, "__init__", build_then_interrupt)
    fds = open_fds()
    with pytest.raises(KeyboardInterrupt):
        tc.run(main(), contexts=2)
    assert ran == [] and not tinycoro_threads() and not opened_since(fds)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_tc_run_leaves_a_custom_sigint_handler_alone():
    seen = []

    def handler(signum, frame):
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    try:

        async def main():
            os.kill(os.getpid(), signal.SIGINT)
            await tc.sleep(0.01)
            return "done"

        assert tc.run(main(), contexts=1) == "done"
        assert seen == [signal.SIGINT] and signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


# -- a task that stays ready never keeps a stopping context alive -------------------------------
async def _stubborn(log: list[str], started: "tc.Event") -> None:
    """Ignores every cancellation and stays ready forever: only closing its coroutine ends it."""
    started.set()
    try:
        while True:
            try:
                await tc.yield_now()
            except tc.Cancelled:
                log.append("ignored a cancel")
    finally:
        log.append("closed")


@pytest.mark.timeout(30)
def test_ctrl_c_with_a_task_that_stays_ready_still_returns(contexts):
    """After Ctrl-C the tasks get INTERRUPT_UNWIND seconds; one still running then is closed.
    A context whose ready queue never empties used to go on running it forever (the hang
    seen in CI's pure run), and tc.run never returned."""
    log: list[str] = []

    async def main():
        started = tc.Event()
        t = tc.spawn(_stubborn(log, started))
        await started.wait()
        os.kill(os.getpid(), signal.SIGINT)
        await t

    fds = open_fds()
    with pytest.raises(KeyboardInterrupt):
        tc.run(main(), contexts=contexts)
    assert "ignored a cancel" in log and log[-1] == "closed"
    assert not tinycoro_threads() and not opened_since(fds)


@pytest.mark.timeout(30)
def test_stop_past_its_timeout_closes_a_task_that_stays_ready(contexts):
    log: list[str] = []
    sched = tc.Scheduler(contexts).start()
    started = threading.Event()

    async def main():
        ev = tc.Event()
        t = tc.spawn(_stubborn(log, ev))
        await ev.wait()
        # Seen to ignore a cancel before the stop, not within the stop's 50 ms: on a loaded
        # machine the task may not step again before the stop's timeout ends.
        t.cancel()
        while "ignored a cancel" not in log:
            await tc.yield_now()
        started.set()
        await t

    sched.submit(main())
    assert started.wait(10)
    sched.stop(timeout=0.05)
    assert "ignored a cancel" in log and log[-1] == "closed"
    assert not tinycoro_threads()


# The timeout is a hang guard for ROUNDS runs, not a speed bound: each run starts its context
# threads, and Thread.start() waits for the new thread to be scheduled. On a loaded 2-core
# machine (load 14-20, 3.13t with the GIL off, pure runtime) a run took 0.003-5.2 s on one
# context and up to 8.1 s on two or four (medians 0.01-1.3 s), the start-up nearly all of it,
# with no run left unwound in 860; 20 of them had gone past the old 60 s at load ~24.
ROUNDS = 20


@pytest.mark.timeout(ROUNDS * 15)
def test_ctrl_c_at_start_up_under_load_unwinds_every_task(contexts, monkeypatch, patient_unwind):
    """The start-up interrupt, repeated with the GIL handed over every 10 us: a task a
    context spawns on itself while the shutdown cancels (its unlocked accepting check) must
    be cancelled too, so its finally block runs, and no context runs on for ever. Bounded by
    count, not time."""
    from helpers.runtime import switch_interval

    start_threads = tc.Scheduler._start_threads

    def start_then_interrupt(self):
        start_threads(self)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(tc.Scheduler, "_start_threads", start_then_interrupt)
    with switch_interval(1e-5):
        for _ in range(ROUNDS):
            log: list[str] = []
            with pytest.raises(KeyboardInterrupt):
                tc.run(_workers(6, log), contexts=contexts)
            started = {e.split()[1] for e in log if e.startswith("started ")}
            finished = {e.split()[1] for e in log if e.startswith("finally ") and e != "finally main"}
            assert started == finished
    assert not tinycoro_threads()


def _main_thread_watching() -> bool:
    """The main thread is in ``Scheduler._watch``, waiting for the run to end."""
    import sys

    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_code.co_name == "_watch":
            return True
        frame = frame.f_back
    return False


@pytest.mark.timeout(60)
def test_ctrl_c_stops_a_run_whose_only_context_is_blocked_by_its_task():
    """Ctrl-C while the one context's thread is held by a task (a blocking call, a long
    computation): the interrupt must still start the shutdown (stop accepting, cancel). It
    used to be acted on only at that context's next turn, which the task was waiting for: the
    run hung until the task gave up on its own."""
    from tinycoro.core.local import _local

    seen = []

    async def main():
        sched = _local.engine.scheduler
        wait_until(_main_thread_watching, what="tc.run's thread to watch the run")
        os.kill(os.getpid(), signal.SIGINT)
        # Blocks this (the only) context until the shutdown has begun: bounded, it fails the
        # task with AssertionError instead of hanging.
        wait_until(lambda: not sched.stats().accepting, what="the shutdown to stop accepting")
        seen.append("refused")
        await tc.sleep(3600)  # cancelled by the shutdown

    with pytest.raises(KeyboardInterrupt) as raised:
        tc.run(main(), contexts=1)
    assert seen == ["refused"], repr(raised.value.__context__)
    assert not tinycoro_threads()


@pytest.mark.timeout(30)
def test_a_spawn_during_the_interrupts_shutdown_starts_cancelled_and_nothing_is_reported(caplog):
    """Ctrl-C stops the scheduler accepting work while the main task still runs. A spawn by
    that task then is not refused with a RuntimeError at its call (one more error printed
    under the KeyboardInterrupt, about code the interrupt is unwinding, and logged as "never
    retrieved" whenever the garbage collector met the main task): the child is cancelled,
    as a task spawned into a trio nursery being cancelled is, and nothing is reported."""
    import gc

    from tinycoro.core.local import _local

    children = []

    async def main():
        sched = _local.engine.scheduler
        wait_until(_main_thread_watching, what="tc.run's thread to watch the run")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the run stops accepting, then cancels
        # This context's thread waits for the shutdown (bounded): the spawn below comes
        # after it for certain, as a spawn just after the interrupt may.
        wait_until(lambda: not sched.stats().accepting, what="the shutdown to stop accepting")
        children.append(tc.spawn(tc.sleep(3600)))
        await children[0]

    with pytest.raises(KeyboardInterrupt) as raised:
        tc.run(main(), contexts=1)
    assert raised.value.__context__ is None  # nothing failed but the interrupt's own unwinding
    del raised  # its traceback holds tc.run's frame, and with it the main task
    gc.collect()
    assert "never retrieved" not in caplog.text
    assert children[0].cancelled() and "spawned as its scheduler stopped" in str(
        children[0].exception()
    )


@pytest.mark.timeout(60)
def test_a_main_task_finished_by_a_crashed_context_is_retrieved_without_a_cycle(monkeypatch, caplog):
    """A runtime bug kills the main task's context: tc.run raises the crash, and the main task's
    failure (the crash, passed on to it) is taken care of there, not logged later as "never
    retrieved", and not linked back into the crash's own chain."""
    import gc

    crasher = engine_bug_trap(monkeypatch)
    with pytest.raises(RuntimeError, match="crashed") as raised:
        tc.run(crasher(), contexts=1)
    crash = raised.value.__cause__
    assert isinstance(crash, SystemError)
    seen, link = set(), crash  # the chain ends: no cycle through the main task's failure
    while link is not None:
        assert id(link) not in seen
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    del raised, crash, link
    gc.collect()
    assert "never retrieved" not in caplog.text
