"""The memory order of the runtime's cross-thread flag handshakes on a build without the GIL.

Two handshakes are a store followed by a load on *each* side (docs/design.md, "Synchronisation,
with and without the GIL"): a context about to sleep sets ``sleeping`` and then looks at its
queues, a pusher appends and then reads ``sleeping`` (rule 4); an unlocking task puts a
mutex's token back and then reads ``_contended``, a waiter sets ``_contended`` and then looks
for the token. Under the GIL each step is atomic and the steps of all threads run in one
order, so one of the two sides always sees the other. Without it, each side needs a full
barrier between its store and its load, or both may read the old value (the store waits in
the CPU's store buffer while the load runs): a lost wake-up, a waiter stranded behind a free
mutex.

``FREE_THREADED`` says whether this is a free-threaded build (``Py_GIL_DISABLED``): then
``full()`` is that barrier. Compiled code cimports this module's .pxd under the same name,
where both are C macros: a sequentially consistent fence (C11 ``atomic_thread_fence``) on a
free-threaded build, and nothing at all under the GIL, so ``if fence.FREE_THREADED:
fence.full()`` compiles to no instruction there. Interpreted, ``full()`` takes and releases
one process-wide lock: both sides of a handshake take it, so one of them takes it first, and
what that one stored before is seen by the other after (a lock orders what a fence would).
"""

from __future__ import annotations

import sysconfig
import threading

#: True on a build without the GIL, whether or not the GIL was turned back on at run time (an
#: extension that does not declare itself free-threading safe does that): the handshakes pay
#: for their barrier on such a build either way.
FREE_THREADED: bool = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

_order = threading.Lock()


def full() -> None:
    """A full barrier between the caller's store before and its load after (module doc)."""
    _order.acquire()
    _order.release()
