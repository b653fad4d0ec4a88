"""Feedback while the engines of ``tc.cluster.start`` come up (seconds on a quiet machine, up to
a minute on a loaded one): a bar in a notebook, a line per engine in a terminal.

In a notebook the bar is one display that is updated in place and ends as a plain line saying
how many engines came up and how long it took, so a saved notebook shows that line, never a
half-drawn bar from before the run.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


def _kernel_shell() -> Any:
    """The IPython shell if this process is a Jupyter kernel (it can show rich output)."""
    ipython = sys.modules.get("IPython")  # no import: if IPython is not loaded, no shell runs
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


class StartProgress:
    """Counts engines as they register; thread-safe (registrations arrive on the client's IO
    thread). ``enabled=False`` shows nothing."""

    def __init__(self, n: int, *, enabled: bool = True) -> None:
        self.n = n
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._up: list[int] = []
        self._all_up = threading.Event()
        self._enabled = enabled
        self._handle: Any = None
        if enabled and _kernel_shell() is not None:
            from IPython.display import display

            self._handle = display(self._bundle(), raw=True, display_id=True)

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self._t0:.1f} s"

    def _bundle(self, final: str | None = None) -> dict[str, str]:
        count = len(self._up)
        text = final or f"tinycoro cluster: {count} of {self.n} engines up ({self._elapsed()})"
        if final is not None:
            return {"text/plain": text}
        html = (f'<progress value="{count}" max="{self.n}" style="width: 12em"></progress> '
                f"<code>{text}</code>")
        return {"text/plain": text, "text/html": html}

    def engine_up(self, eid: int) -> None:
        """Engine *eid* registered (once per engine; repeats are ignored)."""
        with self._lock:
            if eid in self._up:
                return
            self._up.append(eid)
            count = len(self._up)
            if self._enabled:
                if self._handle is not None:
                    self._handle.update(self._bundle(), raw=True)
                else:
                    sys.stderr.write(f"tinycoro cluster: engine {eid} up "
                                     f"({count} of {self.n}, {self._elapsed()})\n")
                    sys.stderr.flush()
        if count >= self.n:
            self._all_up.set()

    def wait(self, timeout: float) -> bool:
        """True once every engine is up; False after *timeout* seconds."""
        return self._all_up.wait(timeout)

    def finish(self, what: str) -> None:
        """The final line (in a notebook it replaces the bar)."""
        if not self._enabled:
            return
        line = f"tinycoro cluster: {what} ({self._elapsed()})"
        if self._handle is not None:
            self._handle.update(self._bundle(line), raw=True)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
