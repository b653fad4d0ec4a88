"""Scheduler: dispatch, foreign submits, the stop protocol, deadlocks, long-lived mode, leaks."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

import pytest

import tinycoro as tc
from helpers.runtime import engine_bug_trap, open_fds, opened_since, tinycoro_threads, wait_until


def test_relay_of_10000_tasks_across_contexts(contexts):
    # Each task submits the next one (round robin: onto the next context) and ends. loop() may
    # return only after the last hop: the token must not reach 0 while a hop is in transit.
    n = 10_000
    sched = tc.Scheduler(contexts)
    hops = []

    async def hop(i):
        hops.append((i, tc.current_context()))
        if i < n:
            tc.spawn(hop(i + 1))

    sched.submit(hop(0))
    sched.loop()
    assert len(hops) == n + 1
    assert sorted(i for i, _ in hops) == list(range(n + 1))
    assert {c for _, c in hops} == set(range(contexts))
    assert sched.stats().stop_token == 0


def test_submits_from_100_foreign_threads_before_and_during_loop(contexts):
    sched = tc.Scheduler(contexts)
    results = []
    lock = threading.Lock()

    async def job(i):
        await tc.yield_now()
        with lock:
            results.append(i)

    def submitter(i):
        sched.submit(job(i))

    before = [threading.Thread(target=submitter, args=(i,)) for i in range(50)]
    for t in before:
        t.start()
    for t in before:
        t.join()

    # The "during" threads submit while a keeper task holds the run open; the keeper ends once
    # all of them have submitted, so every submit happens while loop() runs.
    submitted = threading.Semaphore(0)
    started = threading.Event()

    async def keeper():
        started.set()
        for _ in range(50):
            while not submitted.acquire(blocking=False):
                await tc.sleep(0.001)

    def during(i):
        started.wait()
        sched.submit(job(i))
        submitted.release()

    sched.submit(keeper())
    threads = [threading.Thread(target=during, args=(50 + i,)) for i in range(50)]
    for t in threads:
        t.start()
    sched.loop()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(100))


def test_stop_token_before_during_and_after(contexts):
    sched = tc.Scheduler(contexts)
    assert sched.stats().stop_token == 0
    assert sched.stats().accepting and not sched.stats().running
    seen = []

    async def work():
        st = sched.stats()
        seen.append((st.stop_token, st.running, st.contexts[tc.current_context()].stop_flag))
        await tc.sleep(0.01)

    n = min(contexts, 2)
    for _ in range(n):  # round robin: one task on each of the first n contexts
        sched.submit(work())
    before = sched.stats()
    assert before.stop_token == n
    assert [c.stop_flag for c in before.contexts] == [1] * n + [0] * (contexts - n)
    sched.loop()
    assert len(seen) == n
    for token, running, flag in seen:
        assert 1 <= token <= n and running and flag == 1
    after = sched.stats()
    assert after.stop_token == 0 and not after.accepting and not after.running
    assert all(c.stop_flag == 0 for c in after.contexts)


def test_loop_with_no_work_returns_and_refuses_later_submits():
    sched = tc.Scheduler(2)
    sched.loop()

    async def late():
        pass

    with pytest.raises(RuntimeError, match="no longer accepts work"):
        sched.submit(late())
    with pytest.raises(RuntimeError, match="fresh Scheduler"):
        sched.loop()


def test_submit_after_loop_finished_is_refused(contexts):
    sched = tc.Scheduler(contexts)

    async def work():
        await tc.sleep(0.001)

    sched.submit(work())
    sched.loop()

    async def late():
        pass

    with pytest.raises(RuntimeError, match="no longer accepts work"):
        sched.submit(late())


def test_deadlock_error_names_parked_tasks(contexts):
    # main joins a child that joins main: both are parked and nothing can ever wake them.
    async def child(parent):
        await parent

    async def main():
        await tc.spawn(child(tc.current_task()), name="the-child")

    with pytest.raises(tc.DeadlockError) as info:
        tc.run(main(), contexts=contexts, deadlock_timeout=1)
    msg = str(info.value)
    assert "the-child" in msg and "main" in msg
    assert len(info.value.parked) == 2
    assert not tinycoro_threads()


def test_deadlock_without_timeout_logs_a_warning(monkeypatch, caplog):
    from tinycoro.core import scheduler as sched_mod

    monkeypatch.setattr(sched_mod, "WARN_EVERY", 0.2)
    sched = tc.Scheduler(1)
    release = threading.Event()
    warned = threading.Event()

    class Catch(logging.Handler):
        def emit(self, record):
            if "deadlock" in record.getMessage():
                warned.set()
                release.set()

    handler = Catch()
    logging.getLogger("tinycoro").addHandler(handler)
    try:

        async def parked_joiner():
            # joins a task that is itself parked on a join of... us: only the watchdog sees it
            await tc.spawn(partner(tc.current_task()))

        async def partner(p):
            await p

        task = sched.submit(parked_joiner())
        runner = threading.Thread(target=sched.loop)
        runner.start()
        assert release.wait(10), "no deadlock warning was logged"
        task.cancel()  # a thread outside the scheduler can still end it
        runner.join(10)
        assert not runner.is_alive()
        assert warned.is_set()
    finally:
        logging.getLogger("tinycoro").removeHandler(handler)


def test_least_loaded_dispatch_spreads_work():
    sched = tc.Scheduler(2, dispatch="least_loaded")
    where = []

    async def job():
        where.append(tc.current_context())
        await tc.sleep(0.05)

    for _ in range(10):
        sched.submit(job())
    sched.loop()
    assert sorted(where).count(0) == 5 and sorted(where).count(1) == 5


def test_long_lived_mode_run_sync_and_stop():
    with tc.Scheduler(2) as sched:
        assert sched.stats().running

        async def add(a, b):
            await tc.sleep(0.001)
            return a + b

        assert sched.run_sync(add(2, 3)) == 5
        # idle contexts sleep instead of stopping
        wait_until(lambda: all(c.sleeping for c in sched.stats().contexts), what="idle contexts")
        assert sched.run_sync(add(1, 1)) == 2

        async def boom():
            raise ValueError("bad")

        with pytest.raises(ValueError, match="bad"):
            sched.run_sync(boom())

        async def forever():
            await tc.sleep(60)

        with pytest.raises(TimeoutError):
            sched.run_sync(forever(), timeout=0.05)
    assert not sched.stats().running
    assert not tinycoro_threads()


def test_stop_cancels_what_is_left_and_runs_finally_blocks():
    sched = tc.Scheduler(2).start()
    entered = threading.Event()
    cleaned = []

    async def long_job(i):
        try:
            entered.set()
            await tc.sleep(60)
        finally:
            cleaned.append(i)

    tasks = [sched.submit(long_job(i)) for i in range(6)]
    assert entered.wait(5)
    wait_until(lambda: sum(c.io_inflight for c in sched.stats().contexts) == 6, what="6 timers")
    sched.stop()
    assert sorted(cleaned) == list(range(6))
    assert all(t.cancelled() for t in tasks)
    assert not tinycoro_threads()


def test_run_sync_from_a_context_is_refused():
    with tc.Scheduler(1) as sched:

        async def inner():
            return 1

        async def outer():
            coro = inner()
            with pytest.raises(RuntimeError, match="would block"):
                sched.run_sync(coro)
            return "ok"

        assert sched.run_sync(outer()) == "ok"


def test_context_sleep_releases_the_gil():
    # A context blocked in its sleep point must not hold the GIL: this thread keeps running
    # Python code (and would hang here, failing by timeout, if it did not).
    with tc.Scheduler(1) as sched:

        async def nap():
            await tc.sleep(30)

        task = sched.submit(nap())
        wait_until(lambda: sched.stats().contexts[0].sleeping, what="context asleep")
        total = 0
        for i in range(2_000_000):
            total += i
        assert sched.stats().contexts[0].sleeping and not task.done()
        task.cancel()
    assert total == 1999999000000


def test_no_fd_or_thread_left_behind(contexts, tmp_path):
    fds_before = open_fds()
    threads_before = set(threading.enumerate())

    async def main():
        await tc.io.write_file(tmp_path / "f", b"data")
        assert await tc.io.read_file(tmp_path / "f") == b"data"
        lst = await tc.net.listen()

        async def serve():
            conn = await lst.accept()
            await conn.sendall(await conn.recv())
            await conn.close()

        server = tc.spawn(serve())
        conn = await tc.net.connect("127.0.0.1", lst.port)
        await conn.sendall(b"ping")
        assert await conn.recv() == b"ping"
        await conn.close()
        await server
        await lst.close()

    tc.run(main(), contexts=contexts)
    with tc.Scheduler(contexts) as sched:
        sched.run_sync(main())
    assert not opened_since(fds_before)
    assert set(threading.enumerate()) == threads_before


def test_stats_shape(contexts):
    sched = tc.Scheduler(contexts)
    st = sched.stats()
    assert len(st.contexts) == contexts
    assert [c.id for c in st.contexts] == list(range(contexts))
    for c in st.contexts:
        assert 0.0 <= c.busy <= 1.0
        assert c.queued == c.io_inflight == c.parked == c.tasks_run == 0
    sched.loop()


def test_stats_count_tasks_and_busy():
    with tc.Scheduler(1) as sched:

        async def spin(until):
            while time.monotonic() < until:  # CPU work, no await: the context stays awake
                pass

        sched.stats()  # opens a sampling interval (busy is measured over >= 0.1 s)
        end = time.monotonic() + 0.15
        for _ in range(5):
            sched.run_sync(spin(end))
        st = sched.stats()
        assert st.contexts[0].tasks_run == 5
        assert 0.0 < st.contexts[0].busy <= 1.0


def test_unused_scheduler_releases_its_rings():
    import gc

    before = open_fds()
    sched = tc.Scheduler(4)
    assert len(open_fds() - before) == 8  # a ring fd and an eventfd per context
    del sched
    gc.collect()
    assert not opened_since(before)


def test_io_uring_unavailable_says_how_to_enable_it(monkeypatch):
    # io_uring cannot be switched off here without disturbing the whole machine
    # (kernel.io_uring_disabled is global), so the kernel's refusal is simulated at the
    # binding's boundary: the message the user sees is what this test checks.
    from tinycoro import uring

    def refuse(entries, ring, flags, cq_entries):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(uring, "_queue_init", refuse)
    with pytest.raises(tc.IoUringUnavailable, match="io_uring_disabled") as info:
        tc.Scheduler(1)
    assert "seccomp" in str(info.value)


def test_a_crashed_context_releases_every_waiter(monkeypatch):
    # A runtime bug that kills a context must not leave run_sync callers or joiners hanging:
    # the dying context finishes its own leftover tasks with the crash as their error.
    crasher = engine_bug_trap(monkeypatch)
    sched = tc.Scheduler(1).start()
    try:
        victim = sched.submit(tc.sleep(60))
        wait_until(lambda: sched.stats().contexts[0].io_inflight == 1, what="victim's timer")
        released = threading.Event()
        victim.add_done_callback(lambda _t: released.set())

        sched.submit(crasher())
        assert released.wait(10)
        assert isinstance(victim.exception(), RuntimeError)
        assert "crashed" in str(victim.exception())
        with pytest.raises(RuntimeError, match="no longer accepts work"):
            sched.run_sync(tc.sleep(0))
    finally:
        sched.stop()
    assert not tinycoro_threads()


def test_unobserved_failure_is_logged_when_it_ends_with_its_traceback(caplog):
    # Reported when the task ends (no garbage collection needed), once: the Task's __del__
    # does not report it a second time.
    import gc

    async def fail():
        raise ValueError("nobody looked")

    async def main():
        t = tc.spawn(fail())  # never joined
        while not t.done():
            await tc.yield_now()
        return t

    with caplog.at_level(logging.ERROR, logger="tinycoro"):
        t = tc.run(main(), contexts=1)
        reported = caplog.text
        del t
        gc.collect()
        records = [r for r in caplog.records if r.name == "tinycoro"]
    assert "failed and nothing awaits it" in reported
    assert "nobody looked" in reported and "test_scheduler.py" in reported  # the traceback
    assert len(records) == 1


def test_a_failure_counted_in_stats_is_already_in_failures(contexts):
    # Whoever sees stats().failed count a failure finds it in failures() (a dashboard, or
    # %tinycoro tasks after a wait on the count): the count is published last. The failure's
    # message is made in between, by the exception's __str__: here one that waits, holding
    # the context inside that window while this thread reads both.
    formatting = threading.Event()
    go_on = threading.Event()

    class Slow(Exception):
        def __str__(self) -> str:
            formatting.set()
            go_on.wait(30)
            return "slow to say"

    async def fail():
        raise Slow()

    async def spawner():
        return tc.spawn(fail())  # never joined: a failure nothing awaits

    with tc.Scheduler(contexts) as s:
        s.failure_hook = lambda task, exc: None  # nothing logged: the test reads the listing
        s.run_sync(spawner(), timeout=30)
        try:
            assert formatting.wait(30)
            counted, listed = s.stats().failed, len(s.failures())
        finally:
            go_on.set()
        assert counted == listed, f"stats().failed said {counted} while failures() held {listed}"
        wait_until(lambda: s.stats().failed == 1, what="the failure to be counted")
        [info] = s.failures()
    assert info.name.endswith(".fail") and info.error.endswith("Slow: slow to say"), info


def test_deadlock_after_main_failed_shows_mains_failure_as_its_cause():
    # Two children join each other (a cycle that outlives main), then main fails: loop() can
    # only report the deadlock, but tc.run chains main's failure to it as the cause.
    async def failing_main():
        tasks = {}
        both_spawned = tc.Event()

        async def join_other(me, other):
            await both_spawned.wait()
            await tasks[other]

        tasks["a"] = tc.spawn(join_other("a", "b"))
        tasks["b"] = tc.spawn(join_other("b", "a"))
        both_spawned.set()
        raise KeyError("the real cause")

    with pytest.raises(tc.DeadlockError) as info:
        tc.run(failing_main(), contexts=2, deadlock_timeout=0.5)
    assert isinstance(info.value.__cause__, KeyError)
    assert len(info.value.parked) == 2


def test_the_default_is_one_context_and_an_explicit_count_is_kept(monkeypatch):
    """``contexts=None`` (the default of ``tc.run`` and ``Scheduler``) is one context under the
    GIL, whatever the machine's core count: there a second context adds no CPU to I/O-bound
    work and costs CPU per request (docs/design.md rule 15, docs/benchmarks-log.md, "Contexts:
    what a second one costs"). It used to be ``os.cpu_count()``, the slower choice on echo.
    With the GIL off it is one per CPU (the next test)."""
    monkeypatch.delenv("TINYCORO_CONTEXTS", raising=False)
    one = 1 if _gil_on() else os.process_cpu_count()  # type: ignore[attr-defined]
    for arg, expected in (((), one), ((None,), one), ((3,), 3)):
        sched = tc.Scheduler(*arg)
        try:
            assert sched.contexts == expected, arg
        finally:
            sched.loop()  # no work: returns at once and closes its rings

    seen: set[int | None] = set()

    async def where():
        seen.add(tc.current_context())

    async def main():
        for t in [tc.spawn(where()) for _ in range(8)]:
            await t

    tc.run(main(), contexts=1)
    assert seen == {0}
    seen.clear()
    tc.run(main(), contexts=2)  # dispatched round robin over the two
    assert seen == {0, 1}


def _gil_on() -> bool:
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


@pytest.mark.skipif(_gil_on(), reason="the GIL is on: contexts=None is one context")
def test_the_default_without_the_gil_is_one_context_per_cpu(monkeypatch):
    """With the GIL off, contexts run Python in parallel: ``contexts=None`` is one per CPU this
    process may run on (``os.process_cpu_count()``: the affinity mask, PYTHON_CPU_COUNT),
    asked at each call."""
    monkeypatch.delenv("TINYCORO_CONTEXTS", raising=False)
    monkeypatch.setattr(os, "process_cpu_count", lambda: 3)
    sched = tc.Scheduler()
    try:
        assert sched.contexts == 3
    finally:
        sched.loop()


def test_tinycoro_contexts_in_the_environment_is_what_none_means(monkeypatch):
    """``TINYCORO_CONTEXTS`` is what ``contexts=None`` means in the process (the notebook's
    default scheduler and cluster engines read the same variable), read at each call; an
    explicit count wins; a bad value fails at the call, naming the variable."""
    monkeypatch.setenv("TINYCORO_CONTEXTS", " 3 ")
    for arg, expected in (((), 3), ((None,), 3), ((2,), 2)):
        sched = tc.Scheduler(*arg)
        try:
            assert sched.contexts == expected, arg
        finally:
            sched.loop()

    async def where() -> int | None:
        return tc.current_context()

    async def main() -> set[int | None]:
        return {await t for t in [tc.spawn(where()) for _ in range(6)]}

    assert tc.run(main()) == {0, 1, 2}
    for bad in ("0", "-1", "many", "2.5"):
        monkeypatch.setenv("TINYCORO_CONTEXTS", bad)
        with pytest.raises(ValueError, match=f"TINYCORO_CONTEXTS must be a positive int, got {bad!r}"):
            tc.Scheduler()
        with pytest.raises(ValueError, match="TINYCORO_CONTEXTS"):
            tc.run(where())


@pytest.mark.timeout(60)
def test_a_spawn_from_a_guest_engine_while_a_stop_unwinds_is_refused():
    """While a stop cancels the scheduler's own tasks, a spawn by one of them is cancelled (its
    spawner is being unwound). A notebook cell's task runs on a guest engine, which the stop
    does not unwind: its spawn is refused with the error that says why, as after the stop."""
    from tinycoro import lowlevel as ll

    sched = tc.Scheduler(1).start()
    release = threading.Event()

    async def stubborn():
        try:
            await tc.sleep(3600)
        except tc.Cancelled:
            release.wait(30)  # holds its context: the stop stays in its cancelling phase
            raise

    sched.submit(stubborn())
    wait_until(lambda: sched.stats().contexts[0].io_inflight == 1, what="the sleep in flight")
    stopper = threading.Thread(target=sched.stop, kwargs={"timeout": 30})
    stopper.start()
    guest = ll.guest_engine(sched, 16)
    try:
        wait_until(lambda: not sched.stats().accepting, what="the stop to begin")

        async def cell():
            with pytest.raises(RuntimeError, match="no longer accepts work"):
                tc.spawn(tc.sleep(0))

        task = ll.Task(cell(), guest)
        ll.start_guest(guest, task)
        ll.run_guest(guest, task)
        task.result()
    finally:
        release.set()
        stopper.join(30)
        guest.close()
    assert not stopper.is_alive() and not tinycoro_threads()


def test_a_context_is_awake_to_its_peers_only_while_its_thread_runs_it(contexts):
    """Peers read a context's ``sleep_since`` (0: awake) to decide whether a submit releases
    the GIL for it (``Engine._peer_awake``). A context whose thread has not started yet, or
    whose run has ended, cannot take the GIL: counted awake, a busy context released it at
    every submit for nobody, and the thread starting the other contexts waited behind those
    releases (a release resets the waiter's switch-interval clock) for tens of milliseconds."""
    from tinycoro import lowlevel

    sched = tc.Scheduler(contexts)
    engines = sched.peers(None)  # the scheduler's seam to its contexts: every one of them
    assert len(engines) == contexts
    before = [e.sleep_since for e in engines]
    seen = []

    async def main():
        seen.append(lowlevel.current_engine().sleep_since)

    sched.submit(main())
    sched.loop()  # run, so that a failure below leaves no thread or ring behind
    assert all(t > 0.0 for t in before), "not started, yet awake to its peers"
    assert seen == [0.0], "a context running a task must read as awake"
    assert all(e.sleep_since > 0.0 for e in engines), "ended, yet awake to its peers"


def _threads_in(kernel_function: str) -> int:
    """How many of this process's threads (io_uring's kernel workers among them) are blocked
    in *kernel_function* (their wchan)."""
    n = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            n += (task / "wchan").read_text() == kernel_function
        except OSError:  # the thread ended
            pass
    return n


def test_a_context_that_waited_out_io_at_its_stop_reads_asleep_to_its_peers(contexts, tmp_path):
    """A stop with operations still in the kernel cancels them and waits for their completions
    in the engine's sleep point (rule 8), and every wake there marks the context awake. That
    wait comes after the run has ended, so the context must read as asleep once it is over,
    as one that ended with nothing in flight does: else a peer on a later run of the same
    scheduler releases the GIL at every submit for a thread that is not there."""
    sched = tc.Scheduler(contexts)
    engines = sched.peers(None)
    sched.start()

    async def opener(i):
        # Opening a FIFO to write blocks in a kernel worker until a reader comes; cancelled,
        # its completion comes later than the cancel's submit, so the stop has to wait for it
        path = tmp_path / f"fifo{i}"
        os.mkfifo(path)
        await tc.io.open(path, "wb")

    for i in range(contexts):
        sched.submit(opener(i))
    # Blocked in the worker, not queued for it: a cancel finds queued work and ends it at once
    wait_until(lambda: _threads_in("wait_for_partner") == contexts, what="every open blocked")
    sched.stop(timeout=0)
    assert not tinycoro_threads()
    awake = [i for i, e in enumerate(engines) if e.sleep_since == 0.0]
    assert awake == [], f"contexts {awake} waited out their I/O at the stop, yet read as awake"
