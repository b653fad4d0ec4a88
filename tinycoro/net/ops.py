"""A socket's operations, each the awaitable its call returns (rule 14): a stream's single
``recv`` and its ``sendall``, and a listener's ``accept``. Compiled from this source with
``ops.pxd`` beside it: their ``__await__`` runs once per I/O call.

The multishot receive, an operation that completes many times, lives in
:mod:`tinycoro.net.multishot`.
"""

from __future__ import annotations

import socket
import weakref
from typing import Any, Callable, Generator

# bound once: no module attribute lookup per operation
from ..uring import prep_accept, prep_recv, prep_send
from ..buffers import MAX_RW
from ..closing import ResourceOp
from ..core.traps import run_outside

__all__ = ["AcceptOp", "MSG_NOSIGNAL", "RecvOp", "SendallOp", "already_receiving", "peer_of"]

MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


def peer_of(ref: Callable[[], Any]) -> str:
    """The peer of the stream behind the weak reference *ref*, for describe()."""
    stream = ref()
    if stream is None or stream.closed:
        return "a closed stream"
    try:
        peer = stream.getpeername()
    except OSError:
        return "?"
    if isinstance(peer, tuple):
        return f"{peer[0]}:{peer[1]}"
    return str(peer) or "an unnamed socket"


def already_receiving(pending: Any, owner: Any) -> Exception:
    """The error for a recv on a stream another task is receiving on (the closed error first,
    if it is closed); the recv ops raise it when the stream's receive token is taken."""
    pending.check()
    stream = owner()
    kind = type(stream).__name__ if stream is not None else "stream"
    return RuntimeError(f"another task is already receiving on this {kind}")


class RecvOp(ResourceOp):
    """A stream's ``recv(max_bytes)``: awaiting it receives into the stream's buffer and
    returns a copy, ``b""`` at EOF.

    A stream keeps one, for its last *max_bytes*, and hands the same op to every recv: only
    one recv at a time may use the buffer, and the token (see ``Stream.__init__``) says who;
    the op is taken in ``__await__``, so an op that is never awaited holds nothing. The
    close-tracking of :class:`ResourceOp` is written out here, in this one frame.
    """

    __slots__ = ("view", "token", "owner")

    def __init__(self, stream: Any, buf: bytearray, max_bytes: int) -> None:
        ResourceOp.__init__(self, stream._ops, prep_recv, stream._fd, buf, max_bytes, 0)
        self.view = memoryview(buf)
        self.token = stream._recv_token
        self.owner = weakref.ref(stream)  # weak: the stream holds this op (no cycle)

    def describe(self) -> str:
        return f"recv from {peer_of(self.owner)}"

    def __await__(self) -> Generator[Any, Any, bytes]:
        token = self.token
        pending = self.pending
        try:
            token.pop()
        except KeyError:
            raise already_receiving(pending, self.owner) from None
        try:
            engine = self._enter()
            try:
                # If this await is cancelled, Cancelled is raised only after the kernel posted
                # the recv's completion, so the buffer (and the op) are free again by then.
                if engine is not None:
                    res = yield self
                else:
                    res = yield from run_outside(self)
            finally:
                del pending._ops[self]
            if res < 0:
                raise self._failure(res)
            # copied before the token goes back: the next recv reuses the buffer
            return bytes(self.view[:res])
        finally:
            token.add(0)


class SendallOp(ResourceOp):
    """A stream's ``sendall(data)``: one send, and more only if the kernel took part of it.

    A small message the socket takes at once costs one SQE and one resumption. The stream
    keeps a spare one for reuse (``spare``: the stream's list of them), taken by the call
    that fills it and put back by its await once the send is over. A sendall that is made
    and never awaited keeps its op, and nothing of the stream's: the next call builds a new
    one, which goes back to the list after its send. Concurrent sendalls each have their own.
    """

    __slots__ = ("spare", "owner")

    def __init__(
        self, stream: Any, data: Any, spare: list | None = None, owner: Any = None
    ) -> None:
        n = min(len(data), MAX_RW) if data is not None else 0
        args = (stream._fd, data, n, MSG_NOSIGNAL) if data is not None else ()
        ResourceOp.__init__(self, stream._ops, prep_send, *args)
        self.spare = spare
        self.owner = owner

    def describe(self) -> str:
        args = self.args
        size = f"{args[2]} B" if args else "data"
        peer = peer_of(self.owner) if self.owner is not None else "a stream"
        return f"send {size} to {peer}"

    def __await__(self) -> Generator[Any, Any, None]:
        pending = self.pending
        try:
            if not self.args:
                raise RuntimeError("this sendall() was awaited already")
            engine = self._enter()
            try:
                while True:
                    if pending.closed:
                        raise pending._error()
                    if engine is not None:
                        res = yield self
                    else:
                        res = yield from run_outside(self)
                    if res < 0:
                        raise self._failure(res)
                    fd, data, n, flags = self.args
                    if res == len(data):
                        return
                    data = memoryview(data)[res:]  # the kernel took part: send the rest
                    self.args = (fd, data, min(len(data), MAX_RW), flags)
            finally:
                del pending._ops[self]
        finally:
            self.args = ()  # lets go of the caller's data; a second await is refused
            spare = self.spare
            if spare is not None and not spare:
                spare.append(self)  # the stream's next sendall takes it


class AcceptOp(ResourceOp):
    """A listener's accept: the connected stream."""

    __slots__ = ("listener",)

    def __init__(self, listener: Any) -> None:
        ResourceOp.__init__(
            self, listener._ops, prep_accept, listener._fd, None, socket.SOCK_CLOEXEC,
            returns_fd=True,
        )
        self.listener = listener

    def describe(self) -> str:
        try:
            name = self.listener.getsockname()
        except OSError:
            name = "?"
        where = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        return f"accept on {where}"

    def __await__(self) -> Generator[Any, Any, Any]:
        # ResourceOp.__await__'s steps, written out: delegating with `yield from` would cost a
        # second generator frame per accept where the op runs interpreted (rule 14: one
        # awaitable, one frame per operation; tests/test_net_ops.py counts them).
        engine = self._enter()
        try:
            if engine is not None:
                fd = yield self
            else:
                fd = yield from run_outside(self)
        finally:
            del self.pending._ops[self]
        if fd < 0:
            raise self._failure(fd)
        listener = self.listener
        return listener._stream(listener._wrap(fd))
