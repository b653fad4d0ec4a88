"""Statistics snapshots: frozen, cheap to build, safe to hand to another thread (widgets)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class ContextStats:
    id: int
    queued: int  # tasks in the ready queue
    io_pending: int  # SQEs prepared but not yet handed to the kernel
    io_inflight: int  # operations the kernel holds, and sleeps' timers (the engine's heap: ``sleeps``)
    parked: int  # tasks waiting on a primitive or a join (the wait count)
    tasks_run: int  # tasks finished on this context
    busy: float  # fraction of wall time spent awake over the last interval, in [0, 1]
    stop_flag: int  # 1 = has work, 0 = reached its terminal state
    sleeping: bool
    ops: int = 0  # io_uring operations completed, and sleeps' timers started, cumulative (rates)
    # Sleeps are not I/O (docs/design.md, API contract): tasks in a tc.sleep now (their timers are among
    # io_inflight, their tasks not among parked), and timers started, cumulative (among ops).
    # Counted when the snapshot is taken / by tc.sleep itself, never by the engine's loop.
    sleeps: int = 0
    timers: int = 0
    # A stream's multishot recv (docs/io.md) takes its data in the ring's provided buffers,
    # shared by every stream of the context: multishots the kernel ended because they ran
    # out (ENOBUFS), and multishots armed again after one of theirs had ended (any reason:
    # ENOBUFS, back-pressure, a recv from another context), both cumulative. Many of either
    # per second say the pool (TINYCORO_MULTISHOT_BUFFERS) is too small for the load.
    multishot_enobufs: int = 0
    multishot_rearms: int = 0
    # Seconds the context's thread ran on a CPU, and waited for one (runnable, the machine's
    # cores taken), cumulative, as the kernel counts them. Beside ``busy`` they tell why an
    # awake context does not run: waiting for a core, for the GIL, or blocked in a call outside
    # Python (time.sleep, blocking I/O) -- the cluster dashboard's engine flag says which.
    cpu: float = 0.0
    cpu_wait: float = 0.0

    @property
    def in_io(self) -> int:
        """Tasks' I/O operations started and not completed, sleeps left out."""
        return max(0, self.io_inflight + self.io_pending - self.sleeps)

    @property
    def io_ops(self) -> int:
        """I/O operations completed, cumulative, sleeps' timers left out (for rates)."""
        return max(0, self.ops - self.timers)


@dataclass(frozen=True)
class SchedulerStats:
    stop_token: int  # number of contexts whose stop flag is 1
    accepting: bool
    running: bool
    contexts: tuple[ContextStats, ...]
    # Tasks that ended with an exception other than tc.Cancelled that nobody had retrieved when
    # they ended; cumulative, never decreases.
    failed: int = 0


@dataclass(frozen=True)
class TaskInfo:
    """One live task, as ``Scheduler.tasks()`` saw it (for ``%tinycoro tasks`` and widgets)."""

    id: int
    name: str
    context: int | None
    # "starting" (spawned; starts once the spawning step's turn is over: rule 18), "ready",
    # "running", "sleeping" (in tc.sleep), "io" (an io_uring operation) or "parked" (on a
    # primitive, a task group or a join)
    state: str
    # plain words (docs/design.md, API contract): "sleep 2 ms (1.3 ms left)", "recv from 127.0.0.1:5000",
    # "Mutex held by 'holder' (3 waiting)", "when_all: 12 of 20 left"; "" when ready or running
    waits_on: str
    age: float  # seconds since the task was created


@dataclass(frozen=True)
class FailureInfo:
    """A task that ended with an exception other than ``tc.Cancelled`` nobody was waiting for."""

    id: int
    name: str
    context: int | None
    error: str  # the exception's first line, e.g. "ValueError: boom"
    when: float  # time.time() when it ended


# -- one vocabulary ----------------------------------------------------------------------------
# The words every view of these numbers uses (``python -m tinycoro``, ``%tinycoro status``,
# ``%tinycoro tasks`` and the dashboard): each column's name, and what it counts in the user's
# words, printed as the text outputs' legend and shown as the dashboard's tooltips.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("context", "a thread with its own ready queue and io_uring ring; tasks stay on one for life"),
    ("has work", "yes while the context holds tasks or I/O (its stop flag); the scheduler may "
                 "stop once no context has work and no new work can come"),
    ("busy", "share of the last second the context spent running tasks rather than asleep"),
    ("ready", "tasks waiting for their turn to run"),
    ("in I/O", "file and socket operations started and not yet completed (sleeps not counted)"),
    ("sleeping", "tasks in tc.sleep"),
    ("parked", "tasks waiting on an Event, Mutex, Semaphore, ..., a task group or another task"),
    ("finished", "tasks that ended on this context, since it started"),
    ("I/O ops", "file and socket operations completed, since the start (sleeps not counted)"),
    ("thread", "awake while running tasks, asleep while waiting for I/O or a wake-up"),
)

STATES: tuple[tuple[str, str], ...] = (
    ("running", "running now"),
    ("ready", "waiting for its turn"),
    ("starting", "spawned; starts once the step that spawned it is over"),
    ("sleeping", "in tc.sleep"),
    ("I/O", "waiting for a file or socket operation"),
    ("parked", "waiting on a primitive, a task group or another task"),
)

STATE_WORDS = {"io": "I/O"}  # TaskInfo.state -> the word shown


# Characters a line of the text outputs may hold (``python -m tinycoro``, the magics): a
# terminal of 100 columns, and the notebook column of JupyterLab at 1400 px with the file
# browser open, which holds about 120 (JupyterLab breaks a longer line mid-word).
TEXT_WIDTH = 96
_LEGEND = "legend: "


def counted(n: int, noun: str) -> str:
    """``1 engine``, ``2 engines``: a count with its noun (a plural in -s), for every line that
    says how many."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def wrap(text: str, width: int = TEXT_WIDTH, indent: str = "", first: str = "") -> list[str]:
    """*text* as lines of at most *width* characters, broken only between words (a word
    longer than a line stands alone on one); *first* starts the first line, *indent* the
    others."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def legend(items: Iterable[tuple[str, str]], width: int = TEXT_WIDTH) -> list[str]:
    """A text table's legend: ``name = meaning``, one item a line, each wrapped at words (its
    continuation lines indented under its name) below the first line's ``legend:``."""
    pad = " " * len(_LEGEND)
    lines: list[str] = []
    for i, (name, what) in enumerate(items):
        lines += wrap(f"{name} = {what}", width, indent=pad + "  ",
                      first=_LEGEND if i == 0 else pad)
    return lines


def text_table(rows: Sequence[Sequence[str]], left: frozenset[int] = frozenset()) -> list[str]:
    """Rows of cells as aligned text lines: numbers right-aligned, the *left* columns (text)
    left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))
        ).rstrip()
        for r in rows
    ]


def headline(stats: SchedulerStats, dispatch: str = "") -> str:
    """One line: the scheduler's state in the common words."""
    state = "running" if stats.running else "stopped"
    accepting = "accepting work" if stats.accepting else "not accepting work"
    how = f" ({dispatch})" if dispatch else ""
    n = len(stats.contexts)
    return (
        f"tinycoro scheduler: {counted(n, 'context')}{how}, {state}, {accepting}, "
        f"{stats.stop_token} of {n} contexts with work, {stats.failed} failed with nobody awaiting"
    )


# The row of a notebook's cells (``format_stats(cells=...)``): their own context, which
# runs on the main thread between and during cells, not one of the scheduler's.
CELLS = ("cells", "the notebook's own context, on the main thread: what a cell awaits itself "
         "(its sleeps, its file and socket I/O) runs there; tc.spawn sends tasks to the others")


def format_stats(stats: SchedulerStats, dispatch: str = "", legend_too: bool = True,
                 cells: ContextStats | None = None) -> str:
    """The headline, a per-context table in the common words, and (by default) its legend;
    with *cells*, a last row for a notebook's cells' own context (busy and has-work mean
    nothing for a thread the notebook lends it: ``-``)."""
    rows: list[Sequence[str]] = [tuple(name for name, _ in COLUMNS)]
    for c in stats.contexts:
        thread = ("asleep" if c.sleeping else "awake") if stats.running else "stopped"
        rows.append((
            str(c.id), "yes" if c.stop_flag else "no", f"{c.busy:.0%}", str(c.queued),
            str(c.in_io), str(c.sleeps), str(c.parked), str(c.tasks_run), str(c.io_ops), thread,
        ))
    if cells is not None:
        c = cells
        rows.append(("cells", "-", "-", str(c.queued), str(c.in_io), str(c.sleeps),
                     str(c.parked), str(c.tasks_run), str(c.io_ops), "main"))
    lines = [*wrap(headline(stats, dispatch), indent="  "),
             *text_table(rows, left=frozenset({0, 9}) if cells is not None else frozenset({9}))]
    if legend_too:
        lines += legend(COLUMNS[1:] + ((CELLS,) if cells is not None else ()))
    return "\n".join(lines)
