"""Per-thread runtime state: which engine this thread drives and which task it is running."""

from __future__ import annotations

import threading


class _Local(threading.local):
    engine = None  # the Engine this thread runs, or None outside tinycoro
    task = None  # the Task being stepped right now


_local = _Local()
