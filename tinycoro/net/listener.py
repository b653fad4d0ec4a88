"""Listening sockets (TCP, optionally TLS, and Unix-domain) and the constructors that make
them: ``await listener.accept()`` for each connection, an io_uring accept."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Awaitable

from ..core.checks import check_int
from ..core.traps import consume_budget
from .base import SocketBase
from .ops import AcceptOp
from .resolve import resolve
from .stream import Stream, TcpStream, UnixStream, unix_path

__all__ = ["Listener", "TcpListener", "UnixListener", "listen", "listen_unix"]

log = logging.getLogger("tinycoro")

_MAX_BACKLOG = 0x7FFFFFFF


class Listener(SocketBase):
    """A listening socket; ``await accept()`` for each connection."""

    _stream = Stream
    # Whether the last accept took a connection (AcceptOp): then more may be queued in the
    # backlog, and the next accept first tries to take one at once.
    _more_queued = False

    def __init__(self, sock: socket.SocketType) -> None:
        # Non-blocking, so that an accept first takes a connection already in the backlog
        # with one accept4(2) that never waits (AcceptOp says why); the ring's accept still
        # waits for the next one. Accepted sockets do not inherit the flag (Linux).
        sock.setblocking(False)
        super().__init__(sock)

    def _wrap(self, fd: int) -> socket.SocketType:
        return _adopt(self._sock, fd, 0)

    def accept(self) -> Awaitable[Stream]:
        """The next incoming connection (the operation to await)."""
        self._check_open()
        return AcceptOp(self)


class TcpListener(Listener):
    """A listening TCP socket; with ``ssl=``, ``accept`` returns TLS streams whose handshake
    is done (a client whose handshake fails is logged and dropped)."""

    _stream = TcpStream

    def __init__(self, sock: socket.socket, ssl_context: Any = None) -> None:
        super().__init__(sock)
        # Set on the listening socket, TCP_NODELAY is Linux's for every connection it accepts
        # (the accepted socket is a copy of the listener's): one system call per listener,
        # where a setsockopt per accepted connection was one more step of its set-up.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host, self.port = sock.getsockname()[:2]
        self.ssl = ssl_context
        self._handshakes: set[Stream] = set()  # connections whose TLS handshake accept() runs

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.host}:{self.port}"
        tls = " tls" if self.ssl is not None else ""
        return f"<tinycoro.net.TcpListener {state}{tls}>"

    @classmethod
    def from_socket(cls, sock: socket.socket, *, ssl: Any = None) -> "TcpListener":
        """Adopt *sock*, a bound, listening TCP socket (``SOCK_STREAM``, IPv4 or IPv6), e.g.
        one inherited from a supervisor or made with options ``listen`` does not set.

        The listener owns the socket from then on: its ``close()`` closes it, and it is put
        in non-blocking mode, as asyncio's ``create_server(sock=...)`` does (an accept first
        takes a connection already in the backlog with one non-blocking ``accept4``). The mode
        is a flag of the open file, not of the descriptor: a copy made by ``dup`` or ``fork``
        (a supervisor's, say) is non-blocking from then on too. A socket that is not a
        listening TCP socket is refused here, not at the first ``accept``.
        """
        if not isinstance(sock, socket.socket):
            raise TypeError(f"sock must be a socket.socket, got {sock!r}")
        if sock.fileno() < 0:
            raise ValueError("sock is closed")
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            raise ValueError(f"sock must be an AF_INET or AF_INET6 SOCK_STREAM socket, got {sock!r}")
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise ValueError(f"sock must be bound and listening (call bind() and listen()): {sock!r}")
        if ssl is not None:
            from ..tls import check_context

            check_context(ssl)
        return cls(sock, ssl)

    def _wrap(self, fd: int) -> socket.SocketType:
        return _adopt(self._sock, fd, socket.IPPROTO_TCP)  # TCP_NODELAY: see __init__

    def accept(self) -> Awaitable[Any]:
        """The next incoming connection (a TlsStream after its handshake, with ``ssl=``)."""
        self._check_open()
        if self.ssl is None:
            return AcceptOp(self)
        return self._accept_tls()

    async def _accept_tls(self) -> Any:
        from ..tls import handshake, handshake_failed

        while True:
            raw = await AcceptOp(self)
            peer = _peer(raw)  # for the log: a failed handshake closes raw
            # In the set before looking at `closed`; close() sets `closed` before it looks at
            # the set: so close() closes this connection, or this accept sees it closed.
            self._handshakes.add(raw)
            try:
                if not self.closed:
                    tls = await handshake(raw, self.ssl, server_side=True)  # closes raw on failure
            except handshake_failed as exc:
                if not self.closed:  # the client's doing, not close()'s
                    log.warning("tinycoro: TLS handshake with %s failed, dropped: %s", peer, exc)
                    continue
            finally:
                self._handshakes.discard(raw)
            if self.closed:  # closed before, during or right after the handshake
                await raw.close()
                self._check_open()
            return tls

    async def close(self) -> None:
        """Close the listener, and the connections whose TLS handshake an ``accept()`` is
        still running (a client that connected and never spoke), so that accept ends at once
        with ``tc.ClosedResourceError`` (rule 10)."""
        try:
            await super().close()
        finally:
            # `closed` is set by now, also if that close was interrupted (its first step)
            for raw in list(self._handshakes):
                await raw.close()


def _adopt(listening: socket.SocketType, fd: int, proto: int) -> socket.SocketType:
    """A socket object for *fd*, a connection accepted on *listening*, of protocol *proto*.
    Family, type and protocol given, Python asks the kernel only whether *fd* is a socket: a
    bare ``socket.socket(fileno=fd)`` made two more system calls per connection (getsockopt
    of ``SO_TYPE`` and ``SO_PROTOCOL``). The C socket type (``socket.SocketType``), not its
    Python subclass: a stream needs none of what the subclass adds (makefile, dup, enum-typed
    ``family``), and the subclass's instances are tracked by the cyclic collector, one more
    object per open connection for every full collection to walk."""
    return socket.SocketType(listening.family, socket.SOCK_STREAM, proto, fd)


def _peer(stream: Stream) -> Any:
    try:
        return stream.getpeername()
    except OSError:
        return "?"


class UnixListener(Listener):
    """A listening Unix-domain socket. ``close()`` removes its socket file (if it is still
    the one this listener created)."""

    _stream = UnixStream

    def __init__(self, sock: socket.socket, path: str) -> None:
        super().__init__(sock)
        self.path = path
        self._ino = os.stat(path).st_ino

    def __repr__(self) -> str:
        return f"<tinycoro.net.UnixListener {'closed' if self.closed else self.path!r}>"

    async def close(self) -> None:
        if self.closed:
            return
        try:
            if os.stat(self.path).st_ino == self._ino:
                os.unlink(self.path)
        except OSError:
            pass
        await super().close()


def _check_backlog(backlog: Any) -> int:
    return check_int("backlog", backlog, min=0, max=_MAX_BACKLOG)


async def listen(
    host: str = "127.0.0.1",
    port: int = 0,
    backlog: int = 128,
    *,
    ssl: Any = None,
    reuse_port: bool = False,
) -> TcpListener:
    """A listener bound to *host*:*port* (port 0 picks a free one: see ``listener.port``).
    With *ssl* (an ``ssl.SSLContext``), accepted streams speak TLS. With *reuse_port*
    (SO_REUSEPORT), several sockets, in this or other processes, may listen on one port, and
    the kernel spreads incoming connections over them (how ``tc.cluster.serve`` spreads
    connections over engines)."""
    backlog = _check_backlog(backlog)
    if not isinstance(reuse_port, bool):
        raise TypeError(f"reuse_port must be a bool, got {reuse_port!r}")
    if ssl is not None:
        from ..tls import check_context

        check_context(ssl)
    family, numeric = await resolve(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((numeric, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return TcpListener(sock, ssl)


async def listen_unix(path: Any, backlog: int = 128) -> UnixListener:
    """A Unix-domain stream listener on the socket file *path* (which must not exist)."""
    backlog = _check_backlog(backlog)
    name = os.fsdecode(unix_path(path))
    await consume_budget()  # plain system calls only: done at once (rule 16)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(name)
        sock.listen(backlog)
        return UnixListener(sock, name)
    except BaseException:
        sock.close()
        raise
