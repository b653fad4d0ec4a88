"""Sockets through the current context's io_uring ring: TCP (IPv4 and IPv6, optionally TLS),
Unix-domain streams, and UDP.

Sockets are created and bound with plain system calls (they never block); accepting,
connecting, receiving, sending, splicing and closing are io_uring operations. A stream can be
used from tasks on any context: the kernel object is shared, each operation goes through the
ring of the context that awaits it. Closing a socket fails every operation other tasks still
await on it with ``tc.ClosedResourceError`` (see :mod:`tinycoro.closing`).

Host names are resolved by ``getaddrinfo`` on a short-lived helper thread whose result wakes the
task through a ``tc.Event``, so a slow DNS answer never blocks the context's thread; numeric
addresses skip it.

One module per thing: :mod:`~tinycoro.net.stream` (streams, ``connect``),
:mod:`~tinycoro.net.listener` (listeners, ``listen``), :mod:`~tinycoro.net.udp`,
:mod:`~tinycoro.net.resolve` (names), :mod:`~tinycoro.net.ops` (the operation awaitables) and
:mod:`~tinycoro.net.multishot` (the receive that completes many times).
"""

from __future__ import annotations

from .listener import Listener, TcpListener, UnixListener, listen, listen_unix
from .stream import Stream, TcpStream, UnixStream, connect, connect_unix
from .udp import UdpSocket, udp

__all__ = [
    "Listener",
    "Stream",
    "TcpListener",
    "TcpStream",
    "UdpSocket",
    "UnixListener",
    "UnixStream",
    "connect",
    "connect_unix",
    "listen",
    "listen_unix",
    "udp",
]
