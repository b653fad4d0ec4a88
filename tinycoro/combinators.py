"""Combinators: ``when_all``, ``when_any`` and ``TaskGroup``.

All of them are structured: they return or raise only after every task they started has
finished, so no child outlives the call (a child that ignores cancellation delays them).
``TaskGroup`` is a scope (:mod:`tinycoro.scopes`, where ``timeout`` is too): the first child
failure interrupts the waiting task's block, as a timeout does.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
from types import TracebackType
from typing import Any, Awaitable, Callable, Coroutine

from .core.errors import Cancelled
from .core.local import thread_state
from .core.runtime import spawn_watched
from .core.task import Task, describe
from .core.traps import consume_budget
from .scopes import IDLE, Scope, timeout  # timeout: also importable from here
from .sync._interrupts import keep_one
from .sync.event import Event

__all__ = ["TaskGroup", "timeout", "when_all", "when_any"]

log = logging.getLogger("tinycoro")


class TaskGroup(Scope):
    """``async with tc.TaskGroup() as g: g.spawn(coro)``: the block exits once every child has
    finished. The first child failure (an exception other than ``tc.Cancelled``) cancels the
    other children and the body (if it is still running) and is raised from the block; further
    failures are attached to it as notes. An exception in the body cancels every child too.
    A cancellation (or an enclosing timeout) of the task waiting in the block cancels the
    children, waits for them, and propagates. Children may spawn more children into the group
    until it has closed; spawning into a group that is cancelling starts the child cancelled.
    """

    __slots__ = (
        "_children", "_failures", "_cancelling", "_exiting", "_closed", "_all_done", "_label",
        "_total",
    )

    def __init__(self) -> None:
        super().__init__()
        self._children: set[Task] = set()
        self._failures: list[BaseException] = []
        self._cancelling = False
        self._exiting = False
        self._closed = False
        self._all_done = _AllDone(self)
        self._label = "TaskGroup"  # the user's word for it in TaskInfo.waits_on: when_all, ...
        self._total = 0  # children ever added, for "when_all: 12 of 20 left"

    async def __aenter__(self) -> "TaskGroup":
        self._enter()
        return self

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> Task:
        """Start *coro* as a child task (on the scheduler's next context); any thread."""
        return self._add(coro, None, name, True)

    def _adopt(self, task: Task, report: bool = True) -> Task:
        """Make an existing task a child: waited for and cancelled with the group. With
        *report* False its failure is left to whoever awaits it (``when_any``)."""
        return self._add(None, task, None, report)

    def _add(self, coro: Any, task: Task | None, name: str | None, report: bool) -> Task:
        with self._lock:
            if self._state is IDLE or self._closed:
                if coro is not None:
                    coro.close()
                state = "has not been entered" if self._state is IDLE else "has finished"
                raise RuntimeError(f"TaskGroup.spawn(): the group {state}")
            on_done = self._on_done if report else self._on_done_quietly
            adopted = task is not None
            if task is None:
                # Watched from birth: a child that fails at once is the group's to report,
                # never an unobserved failure. Its callback needs our lock, so it runs after.
                task = spawn_watched(coro, on_done, name=name)
            self._children.add(task)
            self._total += 1
            cancelling = self._cancelling
        if cancelling:
            task.cancel()
        if adopted:
            # Outside the lock: the callback runs at once if the task has already finished.
            task.add_done_callback(on_done)
        return task

    def _on_done_quietly(self, task: Task) -> None:
        self._on_done(task, report=False)

    def _on_done(self, task: Task, report: bool = True) -> None:
        failure: BaseException | None = None
        if report:
            exc = task.exception()  # marks it retrieved: it is raised or noted by the group
            if exc is not None and not isinstance(exc, Cancelled):
                failure = exc
        failed = failure is not None
        with self._lock:
            self._children.discard(task)
            to_cancel: tuple[Task, ...] = ()
            if failure is not None:
                self._failures.append(failure)
                if not self._cancelling:
                    self._cancelling = True
                    to_cancel = tuple(self._children)
            finished = self._exiting and not self._children
            if finished:
                self._closed = True
        for t in to_cancel:
            t.cancel()
        if failed:
            self._fire()  # interrupt the body, if it is still running
        if finished:
            self._all_done.set()

    def _cancel_children(self, keep: Task | None = None) -> None:
        with self._lock:
            self._cancelling = True
            children = tuple(self._children)
        for t in children:
            if t is not keep:
                t.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        ours = self._exit(exc)  # from now on a failing child no longer interrupts us
        if isinstance(exc, GeneratorExit):  # being closed at shutdown: must not await
            self._cancel_children()
            return False
        body_exc = None if ours else exc
        with self._lock:
            self._exiting = True
            wait = bool(self._children)
            if not wait:
                self._closed = True
        if body_exc is not None:
            self._cancel_children()
        pending: BaseException | None = None
        while wait:
            try:
                await self._all_done.wait()
                break
            except GeneratorExit:
                raise
            except BaseException as e:  # noqa: BLE001 - we are cancelled: children first
                pending = keep_one(pending, e)
                self._cancel_children()
        outside = pending if pending is not None else body_exc
        if outside is not None and isinstance(outside, Cancelled):
            raise _noted(outside, self._failures)  # cancellation or a timeout wins
        if self._failures:
            first = self._failures[0]
            extra = self._failures[1:] + ([body_exc] if body_exc is not None else [])
            raise _noted(first, extra)
        if outside is not None and outside is not exc:
            raise outside
        return False  # no child failed: a body exception propagates unchanged

    def _waits_on(self) -> str:
        """What the task waiting in the group's exit waits on, in plain words
        (``TaskInfo.waits_on``): "when_all: 12 of 20 left"."""
        left = len(self._children)
        if self._label == "TaskGroup":
            return f"TaskGroup: {left} of {self._total} children left"
        return f"{self._label}: {left} of {self._total} left"

    def __repr__(self) -> str:
        children = list(self._children)  # one C-level copy under the GIL: safe from any thread
        names = ", ".join(sorted(describe(t) for t in children)[:4])
        more = ", ..." if len(children) > 4 else ""
        # After the body, the group is still open while it waits for its children.
        if self._exiting and not self._closed:
            return f"<TaskGroup waiting for children [{names}{more}]>"
        return f"<TaskGroup {self._state} children=[{names}{more}]>"


class _AllDone(Event):
    """The event a TaskGroup's exit waits on; named after the group in deadlock reports."""

    __slots__ = ("_group",)

    def __init__(self, group: TaskGroup) -> None:
        super().__init__()
        self._group = group

    def _waits_on(self) -> str:
        return self._group._waits_on()

    def __repr__(self) -> str:
        return repr(self._group)


def _noted(exc: BaseException, others: list[BaseException]) -> BaseException:
    """Attach a note per other failure, so none is silently lost.

    PEP 678 keeps notes in ``__notes__``; Python 3.10 has no ``add_note`` (nor shows notes in
    tracebacks), so there the list is kept by hand for code that reads it.
    """
    for o in others:
        if o is not exc:
            note = f"tinycoro: another task of the group also failed: {o!r}"
            if sys.version_info >= (3, 11):
                exc.add_note(note)
            else:
                # 3.10 declares no __notes__ (PEP 678 came in 3.11): set it by name
                setattr(exc, "__notes__", [*getattr(exc, "__notes__", ()), note])
    return exc


def _prepare(aws: tuple[Awaitable[Any], ...]) -> list[Any]:
    """Each awaitable as a Task (to adopt) or a coroutine (to spawn). On a bad argument, or
    outside a task, close every coroutine (given or made) before raising, so that none is left
    "never awaited"."""
    items: list[Any] = []
    try:
        for aw in aws:
            if inspect.iscoroutine(aw) or isinstance(aw, Task):
                items.append(aw)
            elif inspect.isawaitable(aw):
                items.append(_await(aw))
            else:
                raise TypeError(f"expected a coroutine, a tc.Task or an awaitable, got {aw!r}")
        if items and thread_state.task is None:
            raise RuntimeError("when_all()/when_any() awaited outside a tinycoro task")
    except BaseException:
        _close(items + [a for a in aws if inspect.iscoroutine(a)])
        raise
    return items


async def _gate(items: list[Any]) -> None:
    """Rule 16's gate for when_all/when_any, which complete at once when every task given is
    done already: a cancel or timeout due is raised here, before anything starts, and then
    every coroutine given (or made) is closed, as on a bad argument."""
    try:
        await consume_budget()
    except BaseException:
        _close(items)
        raise


def _close(items: list[Any]) -> None:
    for c in items:
        if inspect.iscoroutine(c):
            c.close()


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw


def _start_each(g: TaskGroup, items: list[Any], wrap: Any = None) -> list[Task]:
    """Spawn the coroutines and adopt the tasks of *items* into *g* (through *wrap*, if given,
    which returns the coroutine to spawn for item i)."""
    tasks: list[Task] = []
    try:
        for i, item in enumerate(items):
            if wrap is not None:
                tasks.append(g.spawn(wrap(i, item)))
            elif isinstance(item, Task):
                tasks.append(g._adopt(item))
            else:
                tasks.append(g.spawn(item))
    except BaseException:
        _close(items[len(tasks) :])  # never started: the scheduler refused work (shutting down)
        raise
    return tasks


async def when_all(*aws: Awaitable[Any]) -> list[Any]:
    """Run every awaitable concurrently (each as its own task, round robin over the contexts);
    return their results in argument order. On the first failure, cancel the rest, wait for
    them, then raise it. Cancelling the caller cancels them all."""
    items = _prepare(aws)
    await _gate(items)
    if not items:
        return []
    async with TaskGroup() as g:
        g._label = "when_all"
        tasks = _start_each(g, items)
    return [t.result() for t in tasks]


class _Race:
    __slots__ = ("lock", "winner", "group")

    def __init__(self, group: TaskGroup) -> None:
        self.lock = threading.Lock()
        self.winner: tuple[int, Any] | None = None
        self.group = group

    def claim(self, index: int, value: Any) -> bool:
        with self.lock:
            if self.winner is not None:
                return False
            self.winner = (index, value)
        self.group._cancel_children(keep=thread_state.task)
        return True


async def _contestant(race: _Race, index: int, aw: Awaitable[Any]) -> None:
    try:
        value = await aw
    except Cancelled:
        raise
    except BaseException as e:  # noqa: BLE001 - re-raised if first, else reported
        if race.claim(index, None):
            raise
        log.error("when_any: a losing awaitable (#%d) failed after the winner", index, exc_info=e)
        return
    race.claim(index, value)


def _closer(coro: Any) -> Callable[[Task], None]:
    """A done callback closing *coro*, bound now (a lambda in a loop would see the last one)."""
    return lambda _task: coro.close()


async def when_any(*aws: Awaitable[Any]) -> tuple[int, Any]:
    """Run every awaitable concurrently; the first to finish wins: return ``(index, value)``,
    or raise its exception. The others are cancelled and waited for before returning."""
    items = _prepare(aws)
    if not items:
        raise ValueError("when_any() needs at least one awaitable")
    await _gate(items)
    async with TaskGroup() as g:
        g._label = "when_any"
        race = _Race(g)

        def contestant(i: int, item: Any) -> Coroutine[Any, Any, None]:
            if isinstance(item, Task):
                # A child of the group (cancelled and waited for with it) whose failure counts
                # only through its contestant: a loser failing late must not beat the winner.
                g._adopt(item, report=False)
            return _contestant(race, i, item)

        tasks = _start_each(g, items, contestant)
        for t, item in zip(tasks, items):
            if not isinstance(item, Task):
                # A contestant cancelled before its first step never awaited *item*: close it
                # (a no-op once it has run), or Python warns that it was never awaited.
                t.add_done_callback(_closer(item))
    if race.winner is None:
        raise Cancelled("every awaitable given to when_any() was cancelled")
    return race.winner
