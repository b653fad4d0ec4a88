"""Noticing that a local process died, at once: a thread blocked in ``poll`` on pidfds.

ipyparallel notices a dead engine by missed heartbeats (tens of seconds) or by its nanny's
notice to the controller; a pidfd becomes readable the moment the process exits, which lets
``EngineLost`` reach the waiting tasks within a second.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from typing import Callable

log = logging.getLogger("tinycoro")


class PidWatcher:
    """Calls ``on_exit(key)`` (on the watcher's thread) once when the process of *key* exits."""

    def __init__(self, pids: dict[int, int], on_exit: Callable[[int], None]) -> None:
        self._on_exit = on_exit
        self._fds: dict[int, int] = {}  # pidfd -> key
        for key, pid in pids.items():
            try:
                self._fds[os.pidfd_open(pid)] = key
            except ProcessLookupError:
                on_exit(key)  # already gone
            except OSError as e:  # e.g. no pidfd support: fall back on ipyparallel's notice
                log.warning("tinycoro.cluster: cannot watch pid %d: %s", pid, e)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="tc-cluster-pids", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        for fd in self._fds:
            poller.register(fd, select.POLLIN)
        try:
            while self._fds:
                for fd, _ in poller.poll():
                    if fd == self._wake_r:
                        return
                    poller.unregister(fd)
                    key = self._fds.pop(fd)
                    os.close(fd)
                    try:
                        self._on_exit(key)
                    except Exception:  # noqa: BLE001 - the watcher must outlive a bad callback
                        log.exception("tinycoro.cluster: engine exit handler failed")
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()

    def stop(self) -> None:
        """Stop watching and join the thread; idempotent."""
        if self._wake_w >= 0:
            os.write(self._wake_w, b"x")
            self._thread.join()
            os.close(self._wake_w)
            os.close(self._wake_r)
            self._wake_w = -1
