"""What every socket of :mod:`tinycoro.net` has: its descriptor, the operations pending on
it (which ``close()`` ends, rule 10), an io_uring close, and ``async with``."""

from __future__ import annotations

import socket
from functools import cache
from typing import Any, Callable

from ..closing import PendingOps, close_fd
from ..core.errors import ClosedResourceError

__all__ = ["SocketBase"]


@cache  # one per kind of socket, not a function and a cell per connection for the collector
def _closed_error(kind: str) -> Callable[[], ClosedResourceError]:
    return lambda: ClosedResourceError(f"operation on a closed {kind}")


class SocketBase:
    """Owns one socket: its descriptor, its pending operations, an io_uring close, and
    ``async with``."""

    def __init__(self, sock: socket.SocketType) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._ops = PendingOps(_closed_error(type(self).__name__))

    def fileno(self) -> int:
        return self._fd

    @property
    def closed(self) -> bool:
        return self._ops.closed

    def getsockname(self) -> Any:
        return self._sock.getsockname()

    def _check_open(self) -> None:
        self._ops.check()

    async def close(self) -> None:
        """Close the socket (an io_uring close). Closing twice is a no-op.

        Operations other tasks still await on it fail with ``tc.ClosedResourceError``; the
        descriptor is released even if this task is cancelled meanwhile.
        """
        if not self._ops.close():
            return
        self._fd = -1
        self._let_go()
        await close_fd(self._sock.detach())

    def _let_go(self) -> None:
        """Closing has begun (``closed`` is set): let go of what only open use needs."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
