"""Signals and the sleep point: EINTR is a wake-up, never a crash.

``os.eventfd_read`` (unlike ``os.read``) does not retry after EINTR; a signal handler that
returns normally used to make it raise InterruptedError out of the engine's loop.
"""

from __future__ import annotations

import os
import signal
import threading

import tinycoro as tc
from conftest import in_eventfd_read, tinycoro_threads, wait_until
from tinycoro.core.engine import Engine
from tinycoro.core.task import Task


def test_engine_sleep_survives_a_signal_on_its_thread():
    # The main thread drives a (guest) engine; SIGINT arrives while it is blocked in read(2)
    # of the eventfd; the handler returns; the sleep goes on and the timer completes.
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
