"""Exceptions of the cluster layer."""

from __future__ import annotations


class EngineLost(RuntimeError):
    """The engine a remote task ran on died (or left the cluster) before the task ended.

    Noticed within about a second: the pid of a local engine is watched, and the controller's
    unregistration notice covers engines on other hosts.
    """


class NestedCluster(RuntimeError):
    """``start()`` was called inside an engine, or in a process an engine of a started cluster
    runs: an engine starting a cluster starts engines of its own, which may do the same.
    Raised before anything is spawned; the message says what to do instead.
    """


class RemoteTraceback(Exception):
    """The traceback of an exception raised on an engine, as text.

    A remote exception is re-raised here as itself (unpickled), with this as its ``__cause__``,
    so the local traceback shows where it happened over there. *text* is the remote traceback
    (frames of functions shipped from here name their cell or file and show their source line);
    *head* says what failed where (``remote_bad failed on engine 1 (host:pid)``), the first line
    of ``str()``.
    """

    def __init__(self, text: str, head: str = "") -> None:
        super().__init__(text, head)
        self.text = text
        self.head = head

    def __str__(self) -> str:
        body = self.text.rstrip("\n")
        return f"{self.head}:\n{body}" if self.head else body


class UnsupportedVersion(RuntimeError):
    """The installed ipyparallel or ipykernel is outside the range ``tc.cluster`` supports.

    The cluster uses parts of both that are not public API; they are checked when a cluster is
    started or connected (and on each engine at set-up), so this comes at once, naming the
    range, rather than an ``AttributeError`` in the middle of a run.
    """
