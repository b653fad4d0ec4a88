"""The magics' plain-text output: the status and task tables, their legends, and how a whole
output reaches the notebook.

Two things a notebook does to text that a terminal does not, and that shape this module:

* JupyterLab wraps an output line that is wider than the notebook column wherever the column
  ends, in the middle of a word ("socke/t operation", "has wo/rk"). At 1400 px with the file
  browser open, the column holds about 110 characters of the output font; legends and prose
  are therefore wrapped here, at word boundaries, to :data:`WIDTH`, one legend item a line.
* Each ``write`` to the cell's stream can be followed by another thread's (a background task's
  ``print`` goes to the same cell, rule 9), and ``print`` writes its text and its newline
  separately, so a table printed line by line, or even one ``print``, can be split by a
  background line ("... since the task was spawnedtick 0"). :func:`emit` writes a whole
  output, its newline included, in one call.

The status table and the legend and wrapping helpers are :mod:`tinycoro.core.stats`'s, the
same words ``python -m tinycoro`` prints. Shared by ``%tinycoro`` (:mod:`tinycoro.kernel_ext.magics`) and ``%tinycoro cluster``
(:mod:`tinycoro.kernel_ext.cluster_magics`), so neither imports the other for it.
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

import tinycoro as tc
from tinycoro.core.stats import STATE_WORDS, STATES, TEXT_WIDTH, legend, text_table, wrap
from tinycoro.core.waits import age
from tinycoro.core.waits import summary as wait_summary

__all__ = ["WIDTH", "emit", "format_tasks"]

# Characters a line of text output may hold: below the ~120 that fit the notebook column of
# JupyterLab at 1400 px with the file browser open, with room for a narrower window.
WIDTH = TEXT_WIDTH


def emit(text: str) -> None:
    """Write one whole output to the cell (``sys.stdout``) in a single call, with its
    trailing newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def format_tasks(tasks: Sequence[tc.TaskInfo], failures: Sequence[tc.FailureInfo]) -> str:
    """Live tasks (oldest first, a summary line per kind of wait, a legend), then recent
    failures, as plain text (what ``%tinycoro tasks`` prints)."""
    n = len(tasks)
    head = f"tinycoro: {n} live task{'s' if n != 1 else ''}"
    lines = wrap(f"{head}: {wait_summary(tasks)}" if tasks else head, indent="  ")
    if tasks:
        rows: list[tuple[str, ...]] = [("id", "name", "context", "state", "age", "waits on")]
        for t in sorted(tasks, key=lambda t: t.id):
            ctx = "cell" if t.context is None else str(t.context)
            state = STATE_WORDS.get(t.state, t.state)
            rows.append((str(t.id), t.name, ctx, state, age(t.age), t.waits_on))
        lines += text_table(rows, left=frozenset({1, 3, 5}))
        lines += legend([("state", "; ".join(f"{k}: {v}" for k, v in STATES)),
                         ("age", "time since the task was spawned")])
    if failures:
        lines.append(f"recent failures nobody awaited ({len(failures)}):")
        rows = [("id", "name", "context", "when", "error")]
        for f in failures:
            ctx = "cell" if f.context is None else str(f.context)
            when = time.strftime("%H:%M:%S", time.localtime(f.when))
            rows.append((str(f.id), f.name, ctx, when, f.error))
        lines += text_table(rows, left=frozenset({1, 4}))
    return "\n".join(lines)
