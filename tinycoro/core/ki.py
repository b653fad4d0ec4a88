"""KeyboardInterrupt and the runtime: where an interrupt may land, and how a signal wakes a sleeper.

Python's default SIGINT handler raises ``KeyboardInterrupt`` in whatever frame the main thread
happens to execute. In the middle of the runtime's own bookkeeping (a task half-way between two
queues, a completion reaped but not yet handed to its task) that leaves an engine or a scheduler
inconsistent for good. rule 12: the interrupt is raised only where *user* code runs, and
otherwise recorded and delivered at a safe point (the task's pending await, or the end of
``tc.run``). Three pieces, used by ``tc.run``/``Scheduler.loop`` and by the notebook cell runner:

* :func:`user_frames_to` decides, from the interrupted frame, whether raising there is
  as safe as in a plain Python program (the idea of trio's KI protection, decided by module
  between the interrupted frame and the task's own outermost frame, instead of by marking
  functions);
* :class:`SigintDeferred` (via :func:`defer_sigint`) replaces the default handler on the main
  thread while a scheduler runs there, records the interrupt and wakes the waiting thread;
* :class:`SignalWakeup` points ``signal.set_wakeup_fd`` at a socket that an engine keeps an
  io_uring receive pending on, so a signal wakes the engine's sleep point even when it arrives
  just before the blocking read, where no EINTR interrupts anything.

Integrations outside the core (the notebook cell runner) use these through
:mod:`tinycoro.lowlevel`, with :func:`protect_package` to mark their own frames as runtime code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import threading
from types import FrameType
from typing import Callable, Iterator

from .. import uring
from .traps import Op, perform_raw

__all__ = [
    "user_frames_to", "defer_sigint", "SigintDeferred", "SignalWakeup", "protect_package",
]

# asyncio's and the selector's modules are runtime code too: a notebook cell that calls into
# asyncio (scheduling a timer, turning its loop) is interrupted at its pending await instead.
_RUNTIME_PACKAGES = {"tinycoro", "asyncio", "selectors"}


def protect_package(name: str) -> None:
    """Treat every module of top-level package *name* as runtime code: an interrupt landing in
    its frames is deferred to a safe point (a runner or driver built outside tinycoro calls
    this for its own package; ``tinycoro`` itself, ``tinycoro.kernel_ext`` included, is)."""
    _RUNTIME_PACKAGES.add(name)


def _is_runtime(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__") or ""
    return name.partition(".")[0] in _RUNTIME_PACKAGES


def user_frames_to(frame: FrameType | None, outer: FrameType | None) -> bool:
    """True if a signal that interrupted *frame* may raise KeyboardInterrupt right there.

    *outer* is the outermost coroutine frame of the task running on this thread (None once it
    finished; the notebook cell runner passes the cell coroutine's own frame, inside its
    forwarding wrapper). Raising is safe only when *frame* and every frame out to *outer* are
    the task's code (or IPython's, or a library's it called): the exception then unwinds
    nothing but those frames and reaches the engine as an ordinary task failure. A runtime
    frame on the way (the engine's step that resumed the task, a trap, a primitive), or not
    reaching *outer* at all (the engine loop, its sleep point, the runner), means the interrupt
    must be deferred to a safe point.
    """
    if outer is None:
        return False
    while frame is not None:
        if _is_runtime(frame):
            return False
        if frame is outer:
            return True
        frame = frame.f_back
    return False


# -- plain scripts: tc.run / Scheduler.loop on the main thread ----------------------------------
class SigintDeferred:
    """Records SIGINTs on the main thread instead of raising them in runtime code.

    ``pending`` counts the interrupts received; ``set_waker(fn)`` names a lock-free callable the
    handler calls so the thread that waits for the scheduler wakes at once. An *inert* instance
    (installed=False) is handed out where no handler could be installed (not the main thread,
    or someone else's SIGINT handler is in place): there, interrupts behave as before.
    """

    def __init__(self, installed: bool) -> None:
        self.installed = installed
        self.pending = 0
        self._waker: Callable[[], None] | None = None

    def set_waker(self, waker: Callable[[], None] | None) -> None:
        self._waker = waker

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        # Runs on the main thread between two bytecodes of runtime code: it must not raise and
        # must not take a lock the interrupted code may hold. A counter and the waker (a deque
        # append plus an eventfd write) are safe.
        self.pending += 1
        waker = self._waker
        if waker is not None:
            try:
                waker()
            except Exception:  # noqa: BLE001 - a handler must not raise into runtime code
                pass


_deferred: SigintDeferred | None = None  # the installed one, if any (main thread only)


@contextlib.contextmanager
def defer_sigint() -> Iterator[SigintDeferred]:
    """For the duration of the block, SIGINT on the main thread is recorded, not raised.

    Installed only on the main thread and only over Python's default handler; nested uses
    (``tc.run`` around ``Scheduler.loop``) share the outer instance. When the outermost block
    exits normally with an interrupt recorded, it raises KeyboardInterrupt there, after the
    runtime has cleaned up: a Ctrl-C is never lost, it only waits for a safe point.
    """
    global _deferred
    if _deferred is not None and threading.current_thread() is threading.main_thread():
        yield _deferred
        return
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield SigintDeferred(installed=False)
        return
    guard = SigintDeferred(installed=True)
    signal.signal(signal.SIGINT, guard._handler)
    _deferred = guard
    try:
        yield guard
    finally:
        _deferred = None
        guard.set_waker(None)
        if signal.getsignal(signal.SIGINT) == guard._handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if guard.pending:
        raise KeyboardInterrupt


# -- waking an engine from a signal ----------------------------------------------------------
_SIGINT_BYTE = bytes([signal.SIGINT])


class SignalWakeup:
    """``signal.set_wakeup_fd`` for an engine's thread (the main thread; notebook cells).

    CPython's C-level handler writes the signal number to the wakeup fd the moment a signal
    arrives, on whatever thread takes it. The engine keeps an io_uring receive pending on the
    other end (:meth:`watch`, run as a task on that engine), so the completion writes the
    engine's eventfd: the sleep point returns at once and Python runs the handler. Without it a
    signal landing after the engine's last look at its queues but before ``read(2)`` starts
    causes no EINTR, and the handler would wait for whatever wakes the engine next.

    The previous wakeup fd (asyncio's, say) is restored on :meth:`close`; bytes of other
    signals are passed on to it meanwhile, so their handlers still run.
    """

    def __init__(self) -> None:
        self._rsock, self._wsock = socket.socketpair()
        self._rsock.setblocking(False)
        self._wsock.setblocking(False)
        try:
            self.previous = signal.set_wakeup_fd(self._wsock.fileno(), warn_on_full_buffer=False)
        except BaseException:
            self._rsock.close()
            self._wsock.close()
            raise

    async def watch(self) -> None:
        """Keep a receive in flight on the wakeup socket until cancelled; drain what arrives."""
        fd = self._rsock.fileno()
        buf = bytearray(64)
        while True:
            res = await perform_raw(Op(uring.prep_recv, fd, buf, len(buf), 0))
            if res > 0:
                self._forward(bytes(buf[:res]))
            elif res < 0 and -res not in (errno.EAGAIN, errno.EINTR):
                return  # the socket is gone; nothing left to watch

    def _forward(self, data: bytes) -> None:
        others = data.replace(_SIGINT_BYTE, b"")
        if others and self.previous >= 0:
            try:
                os.write(self.previous, others)
            except OSError:
                pass

    def close(self) -> None:
        """Put the previous wakeup fd back and close the socket pair (after :meth:`watch`)."""
        current = signal.set_wakeup_fd(self.previous)
        if current != self._wsock.fileno():
            signal.set_wakeup_fd(current)  # somebody replaced ours meanwhile: keep theirs
        self._rsock.close()
        self._wsock.close()
