"""Where the output of a remote task goes once the task itself has ended.

A remote task's output and outcome come home under a parent header named by the task's token
(:func:`new_token`). A task it spawned on the engine copies its context (rule 9), so it goes on
printing under the same token after the task's outcome came home and the client forgot the
token; so does anything printed after ``stop()`` of a connected cluster. Handed to ipyparallel,
such a message would be kept in ``Client.metadata`` (a ``defaultdict`` keyed by msg_id): never
shown, never freed. So a token's message never goes there: it is written home, in the context
the task was submitted from (in a notebook, the submitting cell), for the :data:`KEPT` most
recently ended tasks; beyond those, where the client is, under a line that says it is such
output. Nothing of the output itself is held.

The table is one per process (not per cluster): a stopped handle's tokens stay routable by
whatever reads the client's IOPub stream next.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import uuid
from collections import OrderedDict
from typing import Any

from .output import display_output, write_output

__all__ = ["KEPT", "TOKEN_PREFIX", "is_token", "new_token", "remember", "route"]

TOKEN_PREFIX = "tinycoro-task-"
KEPT = 4096  # ended tasks whose home (the context they were submitted from) is remembered

_lock = threading.Lock()
_homes: OrderedDict[str, contextvars.Context] = OrderedDict()


def new_token() -> str:
    """A task's token: the msg_id its output and outcome come home under."""
    return TOKEN_PREFIX + uuid.uuid4().hex


def is_token(msg_id: Any) -> bool:
    """Whether *msg_id* names a task of ours (not one of ipyparallel's own requests)."""
    return isinstance(msg_id, str) and msg_id.startswith(TOKEN_PREFIX)


def remember(token: str, context: contextvars.Context) -> None:
    """Task *token* ended: what still comes under it goes to *context*."""
    with _lock:
        _homes[token] = context
        _homes.move_to_end(token)
        while len(_homes) > KEPT:
            _homes.popitem(last=False)


def route(token: str, kind: str, content: dict) -> None:
    """A message under *token*, whose task has ended: its output is shown at home; anything
    else (a late outcome, a status) is dropped. Never raises (the client's IO thread)."""
    if kind not in ("stream", "display_data", "update_display_data"):
        return
    with _lock:
        home = _homes.get(token)
    try:
        if home is None:  # ended too long ago: say whose it is, where we are
            _show_here(kind, content)
        elif kind == "stream":
            home.copy().run(write_output, content["name"], content["text"])
        else:
            home.copy().run(display_output, content, kind == "update_display_data")
    except Exception:  # noqa: BLE001 - a closed stream must not break the IO thread
        pass


def _show_here(kind: str, content: dict) -> None:
    text = (content.get("text") if kind == "stream"
            else (content.get("data") or {}).get("text/plain", ""))
    if not text:
        return
    sys.stderr.write("tinycoro: output of a remote task that ended long ago (its submitter is no "
                     f"longer known; shown here):\n{text.rstrip(chr(10))}\n")
