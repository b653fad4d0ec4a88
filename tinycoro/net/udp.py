"""UDP sockets: ``sendto`` and ``recvfrom`` datagrams, and the constructor ``udp``."""

from __future__ import annotations

import select
import socket
from typing import Any

from .. import uring
from ..buffers import MAX_RW, as_bytes_view
from ..closing import ResourceOp
from ..core.checks import check_int
from ..core.traps import consume_budget
from ..uring import prep_poll_add, prep_sendto
from .base import SocketBase
from .resolve import resolve

__all__ = ["UdpSocket", "udp"]


class UdpSocket(SocketBase):
    """A UDP socket bound to a local address: ``sendto`` and ``recvfrom`` datagrams.

    ``sendto`` is an io_uring sendto. The binding cannot express recvmsg (its msghdr has no
    iovec), so ``recvfrom`` waits for readability with an io_uring poll and then takes the
    datagram with a non-blocking ``recvfrom(2)`` (MSG_DONTWAIT), which never blocks the context.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.family = sock.family
        self.host, self.port = sock.getsockname()[:2]

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.host}:{self.port}"
        return f"<tinycoro.net.UdpSocket {state}>"

    async def sendto(self, data: Any, address: tuple[str, int]) -> int:
        """Send one datagram to *address* ``(host, port)``; returns its size."""
        view = as_bytes_view(data, "sendto")
        if not isinstance(address, tuple) or len(address) < 2:
            raise TypeError(f"address must be a (host, port) tuple, got {address!r}")
        host, port = address[0], address[1]
        family, numeric = await resolve(host, port, socket.SOCK_DGRAM, self.family)
        if family != self.family:
            raise ValueError(f"address {address!r} is not of this socket's family "
                             f"({socket.AddressFamily(self.family).name})")
        self._check_open()
        addr = uring.sockaddr_in(family, numeric, port)
        if not view:
            return self._sock.sendto(b"", (numeric, port))  # the binding refuses empty buffers
        op = ResourceOp(self._ops, prep_sendto, self._fd, view, len(view), addr, 0)  # keeps addr
        op.what = f"{host}:{port}"
        return await op

    async def recvfrom(self, max_bytes: int = 65536) -> tuple[bytes, tuple[str, int]]:
        """The next datagram (truncated to *max_bytes*) and its sender's ``(host, port)``."""
        check_int("max_bytes", max_bytes, min=1, max=MAX_RW)
        # A datagram already queued is taken without suspending: rule 16's gate first, so a
        # task draining a full socket lets its context's other tasks run, and a cancel or
        # timeout due lands here, before a datagram is taken.
        await consume_budget()
        while True:
            self._check_open()
            try:
                data, addr = self._sock.recvfrom(max_bytes, socket.MSG_DONTWAIT)
            except BlockingIOError:
                await ResourceOp(self._ops, prep_poll_add, self._fd, select.POLLIN)
                continue
            return data, addr[:2]


async def udp(host: str = "127.0.0.1", port: int = 0) -> UdpSocket:
    """A UDP socket bound to *host*:*port* (port 0 picks a free one: see ``u.port``)."""
    family, numeric = await resolve(host, port, socket.SOCK_DGRAM)
    sock = socket.socket(family, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind((numeric, port))
    except BaseException:
        sock.close()
        raise
    return UdpSocket(sock)
