"""``Scheduler.tasks()`` lists every task that is alive for the whole of the snapshot, while
tasks move under it: started on another context (starting, then ready), yielding (ready),
sleeping (parked on a deadline), parked on an event and woken from another context, ending.

The snapshot takes no lock: it reads each context's ``live`` set, then the tasks starting
toward it, then its ready queue (core/readers.py). A task is in ``live`` from its admission
(before ``spawn`` returns) to its end, whichever queue it is in meanwhile, so the later reads
only say what it is doing; a reader that found tasks by walking the queues they move between
could miss one that moved past it. The snapshots here are taken from a thread of the test and
from a task (as a notebook's ``%tinycoro tasks`` or a test's own check does); a task counts as
alive for a snapshot if it was admitted before the snapshot began and not yet let go of
(allowed to end) when it ended. The window in which a move could slip past the reader is
widened on purpose: the outside snapshot waits, between its read of ``live`` and its read of
the ready queue, until the movers have made another move (``_pause_between_reads``).

Bounded by counts (rounds of moves, snapshots); the GIL is handed over every 10 us on a GIL
build, so that a switch can fall inside a move.
"""

from __future__ import annotations

import os
import threading

import pytest

import tinycoro as tc
from tinycoro.core import readers

pytestmark = pytest.mark.timeout(240)

SCALE = max(1, int(os.environ.get("TINYCORO_FT_ROUNDS", "1")))
SNAPSHOTS = 150 * SCALE  # taken from outside, and as many from a task, while the tasks move
MAX_ROUNDS = 5_000  # per mover, a bound: the movers stop once the snapshots are taken
KEPT = 2  # children a mover keeps alive at once, each parked on its own gate
PAUSE = 2.0  # seconds a paused snapshot waits for a move at most (movers make one per step)


class Alive:
    """The ids of the tasks admitted (``spawn``/``submit`` returned) and not yet let go of;
    a task is taken out before it is allowed to end, so one in the set has not ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[int] = set()
        self.tasks: dict[int, tc.Task] = {}  # every task admitted, by id: to name a lost one
        self.moves = 0  # steps the movers made, for the paused snapshot to wait on
        self.moved = threading.Condition(self._lock)
        self.movers_left = 0  # movers still making their rounds
        self.done = threading.Event()  # every mover has made its rounds
        self.enough = threading.Event()  # the snapshots are taken: the movers may stop

    def admit(self, task: tc.Task) -> None:
        with self._lock:
            self._ids.add(task.id)
            self.tasks[task.id] = task

    def let_go(self, task: tc.Task) -> None:
        with self._lock:
            self._ids.discard(task.id)

    def copy(self) -> set[int]:
        with self._lock:
            return set(self._ids)

    def move(self) -> None:
        with self._lock:
            self.moves += 1
            self.moved.notify_all()

    def rounds_made(self) -> None:
        with self._lock:
            self.movers_left -= 1
            if self.movers_left == 0:
                self.done.set()
            self.moves += 1  # a paused snapshot need not wait for moves that will not come
            self.moved.notify_all()


def _missing(scheduler: tc.Scheduler, alive: Alive) -> tuple[set[str], int]:
    """One snapshot: the tasks alive throughout it that it left out, and how many it listed."""
    before = alive.copy()
    listed = {info.id for info in scheduler.tasks()}
    after = alive.copy()
    lost = (before & after) - listed
    # named with their state: a task that ended would be the test's mistake, not the listing's
    return {repr(alive.tasks[i]) for i in lost}, len(listed)


async def _child(gate: tc.Event) -> None:
    await tc.yield_now()  # ready again, behind the turn's other tasks
    await tc.sleep(0)  # parked on a deadline of its context's heap
    await gate.wait()  # parked until its mover, on another context, lets it go


async def _mover(alive: Alive, end: tc.Event) -> None:
    """Rounds of: spawn a child (mostly toward another context: starting, then ready), yield,
    sleep; let go of the oldest child (woken from this context, wherever it lives)."""
    kept: list[tuple[tc.Task, tc.Event]] = []
    for _ in range(MAX_ROUNDS):
        if alive.enough.is_set():
            break
        gate = tc.Event()
        child = tc.spawn(_child(gate))
        alive.admit(child)
        kept.append((child, gate))
        alive.move()
        await tc.yield_now()
        alive.move()
        await tc.sleep(0)
        alive.move()
        if len(kept) > KEPT:
            old, old_gate = kept.pop(0)
            alive.let_go(old)  # before it may end: never counted alive once it can have ended
            old_gate.set()
            await old
    for old, old_gate in kept:
        alive.let_go(old)
        old_gate.set()
        await old
    alive.rounds_made()
    await end.wait()


async def _snapshots_inside(scheduler: tc.Scheduler, alive: Alive, taken: threading.Event,
                            end: tc.Event) -> list:
    """Snapshots from a task, a move of the others between each two; then it waits for the
    end with the others."""
    missed = []
    for _ in range(SNAPSHOTS):
        if alive.done.is_set():  # the movers stopped early (MAX_ROUNDS)
            break
        lost, _n = _missing(scheduler, alive)
        if lost:
            missed.append(sorted(lost))
        await tc.yield_now()
    taken.set()
    await end.wait()
    return missed


@pytest.fixture
def paused_reads(monkeypatch):
    """Make the outside snapshot wait, between its read of a context's ``live`` (and starting)
    set and its read of that context's ready queue, until the movers have moved again: the
    window in which a task moving from one queue to another could slip past a reader that
    walked the queues. Only the thread that asks pauses (a snapshot from a task, on a context,
    would hold that context up)."""
    state = {"alive": None, "thread": None}
    real = readers._ids

    def ids(tasks):
        alive = state["alive"]
        if alive is not None and threading.get_ident() == state["thread"]:
            with alive.moved:
                seen = alive.moves
                alive.moved.wait_for(lambda: alive.moves != seen, PAUSE)
        return real(tasks)

    monkeypatch.setattr(readers, "_ids", ids)
    return state


def test_a_snapshot_lists_every_task_alive_throughout_it(contexts, paused_reads, tiny_switch_interval):
    alive = Alive()
    movers_n = max(4, 2 * contexts)
    alive.movers_left = movers_n
    sched = tc.Scheduler(contexts).start()
    try:
        end = tc.Event()
        movers = []
        for _ in range(movers_n):
            m = sched.submit(_mover(alive, end))
            alive.admit(m)
            movers.append(m)
        inside_taken = threading.Event()
        inside = sched.submit(_snapshots_inside(sched, alive, inside_taken, end))
        alive.admit(inside)
        paused_reads["alive"], paused_reads["thread"] = alive, threading.get_ident()
        missed, listed, taken = [], 0, 0
        for _ in range(SNAPSHOTS):
            if alive.done.is_set():
                break
            lost, n = _missing(sched, alive)
            taken += 1
            listed = max(listed, n)
            if lost:
                missed.append(sorted(lost))
        paused_reads["alive"] = None
        assert inside_taken.wait(120), "the snapshots from a task never ended"
        alive.enough.set()
        assert alive.done.wait(120), "the movers never stopped"
        for t in [*movers, inside]:
            alive.let_go(t)
        end.set()

        async def join_all() -> list:
            for m in movers:
                await m
            return await inside

        missed_inside = sched.run_sync(join_all(), timeout=120)
        # the movers, the inside snapshotter and some of the children at least
        assert taken > 0 and listed > movers_n + 1, (taken, listed)
        assert not missed, f"{len(missed)} of {taken} outside snapshots left out live tasks: {missed[:5]}"
        assert not missed_inside, f"snapshots from a task left out live tasks: {missed_inside[:5]}"
    finally:
        sched.stop()
