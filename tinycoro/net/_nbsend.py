"""The inline send of :class:`tinycoro.net.ops.SendallOp`, one non-blocking ``send(2)``, and
the inline receive of :class:`tinycoro.net.ops.BulkRecvOp`, one non-blocking ``recv(2)``.

Through the socket object, ``sock.send(data, flags)`` looks the method up on the socket's
Python class and parses its arguments with a format string: ~1,000 instructions of the echo's
every reply (callgrind, 3.11), around a syscall that the kernel runs in about as many. Compiled
code cimports ``_nbsend.pxd`` under this module's name (as ``core/fence``), where :func:`send`
is a C function calling ``send(2)`` on the descriptor directly, the GIL released around it as
the socket does, EINTR retried after a signal check, an error answered with its negative errno
and no exception (EAGAIN is a common answer; the caller raises the rest, errno kept: an
except clause around the call read the thread state on every send on 3.12+).
:func:`recv_into` is the same for a receive, except that EAGAIN, its common answer, is the
result ``NOTHING`` and other errors raise. :func:`accept` is the inline accept of :class:`tinycoro.net.ops.AcceptOp`, one
``accept4(2)`` on a non-blocking listener that answers with a negative errno rather than
raising (EAGAIN, "nobody in the backlog", is its common answer). This is the pure-Python twin.
"""

from __future__ import annotations

import errno
import socket
from typing import Any


def send(sock: socket.socket, fd: int, data: Any, flags: int) -> int:
    """``sock.send(data, flags)``; compiled, ``send(2)`` on *fd* (the socket's descriptor):
    the bytes the kernel took, or the negative errno (``-EAGAIN``: it took none)."""
    try:
        return sock.send(data, flags)
    except OSError as e:
        return -(e.errno or errno.EIO)


#: What :func:`recv_into` returns when nothing is queued (EAGAIN).
NOTHING = -2


def recv_into(sock: socket.socket, fd: int, buf: Any, n: int, flags: int) -> int:
    """``sock.recv_into(buf, n, flags)``, :data:`NOTHING` for EAGAIN; compiled, ``recv(2)``
    on *fd* into *buf*'s writable buffer: the bytes that came, 0 at EOF."""
    try:
        return sock.recv_into(buf, n, flags)
    except BlockingIOError:
        return NOTHING


def accept(sock: socket.socket, fd: int, flags: int) -> int:
    """One non-blocking accept on the listening socket *sock* (descriptor *fd*, which must be
    in non-blocking mode): the new connection's descriptor, or the negative errno (``-EAGAIN``
    when nobody waits in the backlog). Compiled, ``accept4(2)`` on *fd* with *flags*; here
    ``sock._accept()``, which always passes ``SOCK_CLOEXEC`` (what the listener asks for)."""
    try:
        new_fd, _ = sock._accept()  # type: ignore[attr-defined]
    except OSError as e:
        return -(e.errno or errno.EIO)
    return new_fd
