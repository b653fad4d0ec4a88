"""Runtime helpers every test may use: the context counts, descriptors and threads to compare
before and after, waiting on a runtime state from a plain thread, the GIL switch interval, a
coroutine run as a notebook cell runs, and the one way to assert that a task ended cancelled."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys
import threading
from typing import Any

CONTEXT_COUNTS = (1, 2, 4)


@contextlib.contextmanager
def switch_interval(seconds: float):
    """Hand the GIL between threads every *seconds* instead of every 5 ms, so that the sides
    of a cross-context race interleave at many more points."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def run_as_cell(coro: Any, scheduler: Any = None) -> Any:
    """Run *coro* as a notebook cell runs: a task on a guest engine of *scheduler* (the one
    ``tc.spawn`` then uses), driven on this thread until it ends. The task, done."""
    import tinycoro.lowlevel as ll

    engine = ll.guest_engine(scheduler, 16)
    try:
        task = ll.Task(coro, engine, name="cell")
        ll.start_guest(engine, task)
        ll.run_guest(engine, task)
        return task
    finally:
        engine.close()


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


# Under ThreadSanitizer (tools/tsan_suites.sh) its runtime opens its report file (log_path) at
# the first report, inside whichever test raced: that descriptor is the sanitizer's, not a leak.
_TSAN_LOG = re.search(r"log_path=(\S+)", os.environ.get("TSAN_OPTIONS", ""))
TSAN_LOG_TARGET = re.compile(re.escape(_TSAN_LOG.group(1)) + r"\.\d+$") if _TSAN_LOG else None


def opened_since(before: set[int]) -> set[int]:
    """The descriptors open now that were not in *before* (an :func:`open_fds` taken earlier):
    what the code under test left behind.

    Not ``open_fds() == before``: that also fails when something else in the process closes a
    descriptor meanwhile (a library's background thread, a collected file object), which is no
    leak; and then listdir's own descriptor, which takes the lowest free number, moves too.
    """
    new = open_fds() - before
    if TSAN_LOG_TARGET is not None:
        targets = fd_targets()
        new = {fd for fd in new if not TSAN_LOG_TARGET.search(targets.get(fd, ""))}
    return new


def tinycoro_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tinycoro-")]


def wait_until(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    """Block the calling (non-context) thread until *predicate()* holds.

    Used to wait for a runtime *state* (a context asleep in its eventfd, a task parked), which
    has no event of its own; fails loudly instead of hanging.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        # The clock is read before the state, not after: on a loaded machine this thread can
        # be descheduled between the two reads, and a state that came in time (during that
        # stall) must not fail the wait because the one reading taken was from before it.
        late = time.monotonic() > deadline
        if predicate():
            return
        if late:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.0005)


def fd_targets() -> dict[int, str]:
    """Every open descriptor of this process and what it refers to."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (including listdir's own descriptor)
            pass
    return out


_SYS_READ = {"x86_64": 0, "aarch64": 63, "riscv64": 63, "s390x": 3, "ppc64le": 3}.get(
    platform.machine()
)
# The bounded sleep (a deadline pending: Engine._block_until) waits in select(2) or pselect6(2),
# whose first argument is the eventfd + 1, or in poll(2) / ppoll(2) on the eventfd alone.
_SYS_SELECT, _SYS_POLL = {
    "x86_64": ((23, 270), (7, 271)),
    "aarch64": ((72,), (73,)),
    "riscv64": ((72,), (73,)),
}.get(platform.machine(), ((), ()))


def in_eventfd_read(engine, thread: threading.Thread | None = None) -> bool:
    """*thread* (default: the main thread) is blocked on *engine*'s eventfd right now (its
    read(2), or the wait bounded by a deadline), so a signal interrupts that system call
    (EINTR) instead of landing just before it, where it would not interrupt anything."""
    if not engine.sleeping:
        return False
    if _SYS_READ is None:  # unknown syscall numbering: the sleeping flag is the best we have
        return True
    tid = (thread or threading.main_thread()).native_id
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return True
    if len(fields) < 2 or not fields[0].isdigit():  # "running", or no system call
        return False
    nr, first = int(fields[0]), int(fields[1], 16)
    efd = engine.ring.efd
    return (nr == _SYS_READ and first == efd) or (nr in _SYS_SELECT and first == efd + 1) or (
        nr in _SYS_POLL
    )


async def cancel_and_wait(task: Any) -> BaseException:
    """Cancel *task*, wait for it to end, and assert that it ended with ``tc.Cancelled`` (not
    a result, not another error); return that exception. From inside a tinycoro task."""
    import tinycoro as tc

    task.cancel()
    try:
        value = await task
    except tc.Cancelled as e:
        return e
    raise AssertionError(f"{task!r} was cancelled but returned {value!r}")


def engine_bug_trap(monkeypatch) -> Any:
    """A coroutine function whose await crashes the context that runs it, as a runtime bug
    would: the engine's bad-yield path asks ``asyncio_in_task`` for its error, patched here to
    raise (a compiled engine's class cannot be patched; its module-level helper can)."""
    import types

    from tinycoro.core import engine

    def broken(name, what):
        raise SystemError("simulated engine bug")

    monkeypatch.setattr(engine, "asyncio_in_task", broken)

    @types.coroutine
    def bad_trap():
        yield  # a bare yield: the engine asks asyncio_in_task for the error it raises

    async def crasher():
        await bad_trap()

    return crasher
