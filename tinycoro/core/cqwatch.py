"""Whether a ring has nothing to reap, known without asking the ring.

An engine with any op in flight reaps at every turn, and with a receive armed on a quiet
connection that is every turn: asked through the ring's ``complete`` (a Python-level call with
four arguments parsed), an empty CQ cost ~400 instructions per turn. Compiled, ``idle(watch)``
is a C inline in ``cqwatch.pxd`` (a module cimports it under this name): two loads and a
compare on the CQ the compiled ring maps, plus the flags where the kernel says it holds
completions back (its CQ overflow, DEFER_TASKRUN's task work), which only a reap posts. So it
says idle exactly when ``complete`` would reap nothing and enter no kernel; *watch* is the
address that ``RingCore.cq_watch()`` hands out, 0 for none.

Interpreted there is no watch (the owner keeps 0 and never asks): this twin says "look".
"""

from __future__ import annotations


def idle(watch: int) -> bool:
    """Never known idle here: the caller reaps through the ring."""
    return False
