"""Feedback while the engines of ``tc.cluster.start`` come up (seconds on a quiet machine, up to
a minute on a loaded one): a bar in a notebook, a line per engine in a terminal.

In a notebook the bar is one display that is updated in place and ends as a plain line saying
how many engines came up and how long it took, so a saved notebook shows that line, never a
half-drawn bar from before the run. Until then the bar's clock moves at least once a second and
it says what is going on (the controller starting, the engine processes importing, with the CPU
time they have used so far, tinycoro being set up on them).
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from typing import Any, Callable


def _kernel_shell() -> Any:
    """The IPython shell if this process is a Jupyter kernel (it can show rich output)."""
    ipython = sys.modules.get("IPython")  # no import: if IPython is not loaded, no shell runs
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


TICK = 0.5  # seconds between redraws of the bar while nothing else happens


class StartProgress:
    """Counts engines as they register and says what the cluster is doing meanwhile
    (:meth:`doing`, :meth:`watch`); thread-safe (registrations arrive on the client's IO
    thread). In a notebook a thread redraws the bar every :data:`TICK` seconds, so the clock
    moves while the engines import (seconds before the first registers); in a terminal a line is
    written per engine and per change of what it is doing. ``enabled=False`` shows nothing.
    :meth:`finish` ends it (also after a failed start)."""

    def __init__(self, n: int, *, enabled: bool = True) -> None:
        self.n = n
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._up: list[int] = []
        self._all_up = threading.Event()
        self._enabled = enabled
        self._handle: Any = None
        self._doing = "starting"
        self._activity: Callable[[], str] | None = None
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None
        if enabled and _kernel_shell() is not None:
            from IPython.display import display

            self._handle = display(self._bundle(), raw=True, display_id=True)
            # In the caller's context: ipykernel routes the redraws by its parent header, to
            # the cell that is starting the cluster.
            ctx = contextvars.copy_context()
            self._ticker = threading.Thread(target=ctx.run, args=(self._tick,),
                                            name="tc-cluster-progress", daemon=True)
            self._ticker.start()

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self._t0:.1f} s"

    def _what(self) -> str:
        activity = self._activity
        if activity is None:
            return self._doing
        try:
            return f"{self._doing}: {activity()}"
        except Exception:  # noqa: BLE001 - only words: the bar goes on without them
            return self._doing

    def _line(self) -> str:
        return (f"tinycoro cluster: {len(self._up)} of {self.n} engines up ({self._elapsed()}); "
                f"{self._what()}")

    def _bundle(self, final: str | None = None) -> dict[str, str]:
        if final is not None:
            return {"text/plain": final}
        text = self._line()
        html = (f'<progress value="{len(self._up)}" max="{self.n}" style="width: 12em">'
                f"</progress> <code>{text}</code>")
        return {"text/plain": text, "text/html": html}

    def _redraw(self) -> None:
        with self._lock:
            if self._handle is not None and not self._done.is_set():
                self._handle.update(self._bundle(), raw=True)

    def _tick(self) -> None:
        while not self._done.wait(TICK):
            try:
                self._redraw()
            except Exception:  # noqa: BLE001 - a closed display must not end in a traceback
                return

    def doing(self, what: str, activity: Callable[[], str] | None = None) -> None:
        """What the cluster is doing now (``starting the controller``), and optionally a
        function that says how it goes (called at each redraw, on the ticker's thread)."""
        with self._lock:
            self._doing, self._activity = what, activity
            if self._enabled and self._handle is None:
                sys.stderr.write(f"tinycoro cluster: {what} ({self._elapsed()})\n")
                sys.stderr.flush()
        self._redraw()

    def engine_up(self, eid: int) -> None:
        """Engine *eid* registered (once per engine; repeats are ignored)."""
        with self._lock:
            if eid in self._up:
                return
            self._up.append(eid)
            count = len(self._up)
            if self._enabled and self._handle is None:
                sys.stderr.write(f"tinycoro cluster: engine {eid} up "
                                 f"({count} of {self.n}, {self._elapsed()})\n")
                sys.stderr.flush()
        self._redraw()
        if count >= self.n:
            self._all_up.set()

    def wait(self, timeout: float) -> bool:
        """True once every engine is up; False after *timeout* seconds."""
        return self._all_up.wait(timeout)

    def finish(self, what: str) -> None:
        """The final line (in a notebook it replaces the bar); stops the redraws. Once."""
        with self._lock:
            if self._done.is_set():
                return
            self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        if not self._enabled:
            return
        line = f"tinycoro cluster: {what} ({self._elapsed()})"
        if self._handle is not None:
            self._handle.update(self._bundle(line), raw=True)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
