"""asyncio, side by side (docs/design.md, API contract).

* tinycoro inside asyncio: every tinycoro awaitable works inside a running asyncio loop on a
  thread without a tinycoro engine (:mod:`.host`: a ring hosted by that loop).
* asyncio inside tinycoro: ``await tc.aio(awaitable)`` in a tinycoro task (:mod:`.bridge`: the
  scheduler's companion loop).
"""

from . import host
from .bridge import aio

host.install()

__all__ = ["aio"]
