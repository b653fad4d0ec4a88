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
"""

from __future__ import annotations

import collections
import errno
import fcntl
import ipaddress
import logging
import os
import select
import socket
import threading
import weakref
from typing import Any, Awaitable, Callable, Generator

from . import uring
# bound once: no module attribute lookup per operation
from .uring import (
    prep_accept,
    prep_connect,
    prep_poll_add,
    prep_recv,
    prep_send,
    prep_sendto,
    prep_shutdown,
    prep_splice,
)
from .closing import CLOSED_WHILE_WAITING, PendingOps, ResourceOp, close_fd
from .core.checks import check_int
from .core.errors import ClosedResourceError
from .core.local import thread_state as _local
from .core.traps import Op, Park, Ready, foreign_waiter, perform, run_outside
from .io import MAX_OFFSET, MAX_RW, _as_bytes_view, _path_bytes
from .sync import Event

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

log = logging.getLogger("tinycoro")

_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
# Multishot recv where the ring can (the compiled ring, unless TINYCORO_MULTISHOT=0: see
# _MsRecvOp); the pure ring never can, and its streams, as those made while the variable says 0,
# keep the plain recv (_RecvOp).
_MULTISHOT = uring.COMPILED
_RECV_BUFFER = 65536
_PIPE_SIZE = 1 << 20  # sendfile's pipe; the default 64 KiB costs 16x more splices per MiB
_MAX_BACKLOG = 0x7FFFFFFF


# -- addresses -----------------------------------------------------------------------------------
def _family_for(host: str) -> int:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return 0  # a name: resolved by getaddrinfo


def _check_host_port(host: Any, port: Any) -> None:
    if not isinstance(host, str):
        raise TypeError(f"host must be a str, got {host!r}")
    check_int("port", port, min=0, max=65535)


async def _getaddrinfo(host: str, port: int, type: int) -> list:
    """``socket.getaddrinfo`` on a helper thread; the task waits on an Event, not its thread.

    The thread is a daemon that ends as soon as the resolver answers; a cancelled task simply
    stops waiting for it.
    """
    done = Event()

    def resolve() -> None:
        try:
            done.set((True, socket.getaddrinfo(host, port, type=type)))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting task
            done.set((False, exc))

    threading.Thread(target=resolve, name="tc-getaddrinfo", daemon=True).start()
    ok, value = await done.wait()
    if not ok:
        raise value
    return value


async def _resolve_all(
    host: Any, port: Any, type: int = socket.SOCK_STREAM, family: int = 0
) -> list[tuple[int, str]]:
    """Every (family, numeric host) for *host*, resolver order; names go through
    :func:`_getaddrinfo`, numeric addresses do not."""
    _check_host_port(host, port)
    numeric_family = _family_for(host)
    if numeric_family:
        return [(numeric_family, host)]
    infos = await _getaddrinfo(host, port, type)
    out = [(fam, addr[0]) for fam, _, _, _, addr in infos if not family or fam == family]
    if not out:
        raise OSError(f"{host!r} has no {socket.AddressFamily(family).name} address")
    return out


async def _resolve(
    host: Any, port: Any, type: int = socket.SOCK_STREAM, family: int = 0
) -> tuple[int, str]:
    """The first (family, numeric host) for *host*."""
    return (await _resolve_all(host, port, type, family))[0]


_UNIX_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1: the path and its NUL


def _closed_error(kind: str):
    return lambda: ClosedResourceError(f"operation on a closed {kind}")


# -- a stream's operations: each is the awaitable its call returns (rule 14) ----------
_NONE = Ready(None)  # what sendall returns for nothing to send
_ZERO = Ready(0)


def _peer_of(ref: Callable[[], Any]) -> str:
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


def _already_receiving(pending: Any, owner: Any) -> Exception:
    """The error for a recv on a stream another task is receiving on (the closed error first,
    if it is closed); the recv ops raise it when the stream's receive token is taken."""
    pending.check()
    stream = owner()
    kind = type(stream).__name__ if stream is not None else "stream"
    return RuntimeError(f"another task is already receiving on this {kind}")


class _RecvOp(ResourceOp):
    """A stream's ``recv(max_bytes)``: awaiting it receives into the stream's buffer and
    returns a copy, ``b""`` at EOF.

    A stream keeps one, for its last *max_bytes*, and hands the same op to every recv: only
    one recv at a time may use the buffer, and the token (see ``Stream.__init__``) says who;
    the op is taken in ``__await__``, so an op that is never awaited holds nothing. The
    close-tracking of :class:`ResourceOp` is written out here, in this one frame.
    """

    __slots__ = ("view", "token", "owner")

    def __init__(self, stream: "Stream", buf: bytearray, max_bytes: int) -> None:
        ResourceOp.__init__(self, stream._ops, prep_recv, stream._fd, buf, max_bytes, 0)
        self.view = memoryview(buf)
        self.token = stream._recv_token
        self.owner = weakref.ref(stream)  # weak: the stream holds this op (no cycle)

    def describe(self) -> str:
        return f"recv from {_peer_of(self.owner)}"

    def __await__(self) -> Generator[Any, Any, bytes]:
        token = self.token
        pending = self.pending
        try:
            token.pop()
        except KeyError:
            raise _already_receiving(pending, self.owner) from None
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


# Bytes a stream may hold received and not yet read before its multishot recv is stopped: past
# it, the data waits in the socket's own buffer and TCP's window holds the sender back, as with
# a single recv that nobody issues. The recv that empties the queue arms it again.
_MS_QUEUE_LIMIT = 256 * 1024
_ENOBUFS = -errno.ENOBUFS
_ECANCELED = -errno.ECANCELED
_EINVAL = -errno.EINVAL


def _stop_multishot(engine: Any, op: "_MsRecvOp") -> None:
    engine.cancel_op(op)  # on the engine's thread (call_soon): it owns the ring (rule 2)


class _MsRecvOp(ResourceOp):
    """A stream's ``recv`` through one multishot recv (docs/io.md, "Multishot recv").

    Armed by the first recv on a context whose ring has a provided-buffer ring, the kernel's
    multishot recv stays in flight and posts a CQE for each chunk that arrives, with the data
    in one of the ring's buffers. The ring copies it out, gives the buffer back to the kernel
    and calls this op (``__call__``) on the engine's thread: the chunk goes on the stream's
    queue and a recv waiting for it is woken. A recv that finds the queue non-empty returns
    without suspending and without an SQE; one that finds it empty parks (no SQE either).

    The multishot ends with its last CQE (no ``IORING_CQE_F_MORE``): at EOF (queued as
    ``b""``), on an error (queued, raised by the recv that reaches it), when the ring ran out
    of buffers (ENOBUFS, not an error: the next recv that empties the queue arms it again),
    when the queue holds more than ``_MS_QUEUE_LIMIT`` bytes (stopped by an async cancel, for
    back-pressure), when a recv comes from another context (stopped there, armed again here)
    and when the stream closes (``close()`` cancels it like any pending operation: it is in
    the stream's PendingOps while armed). Where no ring can (the pure ring, an asyncio task,
    ``TINYCORO_MULTISHOT=0``, an old kernel) the recv is the single one of :class:`_RecvOp`.
    """

    __slots__ = ("queue", "queued", "armed", "stopping", "engine", "waiter", "ticket", "want",
                 "token", "owner", "waited")

    def __init__(self, stream: "Stream") -> None:
        ResourceOp.__init__(self, stream._ops, uring.prep_recv_multishot, stream._fd, self)
        self.queue: collections.deque[Any] = collections.deque()
        self.queued = 0  # bytes in the queue
        self.armed = False  # the multishot is in the kernel (on self.engine's ring)
        self.stopping = False  # a cancel of it is on its way
        self.engine: Any = None
        self.waiter: Any = None  # the task parked for the next chunk
        self.ticket = Park(self._abort, self)
        self.want = _RECV_BUFFER
        self.token = stream._recv_token
        self.owner = weakref.ref(stream)

    def describe(self) -> str:
        return f"recv from {_peer_of(self.owner)}"

    def __repr__(self) -> str:
        return f"<recv (multishot) from {_peer_of(self.owner)}>"

    def _abort(self) -> bool:
        """The parked recv was cancelled: off the waiter slot, unless a wake is on its way.
        (Two attribute steps in compiled code: atomic under the GIL.)"""
        if self.waiter is None:
            return False
        self.waiter = None
        return True

    def __call__(self, res: int, data: Any, more: bool) -> None:
        """One CQE of the multishot (the ring calls this on the engine's thread, from its
        completion loop: it must not raise)."""
        if data is not None:
            self.queue.append(data)
            self.queued += len(data)
            if more and self.queued > _MS_QUEUE_LIMIT and not self.stopping:
                self.stopping = True
                self.engine.call_soon(_stop_multishot, self.engine, self)
        elif res == 0:
            self.queue.append(b"")  # EOF
        elif res == _EINVAL and not self.queue and not self.queued:
            # The kernel has the buffer ring (5.19) but not the multishot recv (6.0): this
            # ring receives with single recvs from now on; the waiting recv takes that path.
            self.engine.ring.multishot_refused()
        elif res < 0 and res != _ENOBUFS and res != _ECANCELED:
            self.queue.append(res)  # an error, raised when a recv reaches it
        if not more:
            self.armed = False
            self.stopping = False
            self.engine = None
            self.pending._ops.pop(self, None)
        waiter = self.waiter
        if waiter is not None and (self.queue or not more):
            self.waiter = None
            waiter.wake(None)

    def _take(self) -> bytes:
        """The next chunk (at most ``want`` bytes of it), or the error queued in its place."""
        queue = self.queue
        item = queue[0]
        if type(item) is int:
            queue.popleft()
            raise self._failure(item)
        n = len(item)
        want = self.want
        if n <= want:
            queue.popleft()
            self.queued -= n
            return item
        queue[0] = item[want:]
        self.queued -= want
        return item[:want]

    def __await__(self) -> Generator[Any, Any, bytes]:
        token = self.token
        pending = self.pending
        try:
            token.pop()
        except KeyError:
            raise _already_receiving(pending, self.owner) from None
        self.waited = False
        try:
            while True:
                if pending.closed:
                    if self.waited:
                        raise ClosedResourceError(CLOSED_WHILE_WAITING)
                    raise pending._error()
                if self.queue:
                    return self._take()
                engine = _local.engine
                stop = None
                if self.armed:
                    if engine is not self.engine and not self.stopping:
                        # armed on another context's ring: stopped there (its chunks so
                        # far come first), then armed on this one
                        self.stopping = True
                        stop = self.engine
                elif engine is None or not engine.ring.multishot_ready():
                    return (yield from self._single(engine))
                else:
                    self._arm(engine)
                self.waited = True
                # The waiter is set before the stop above reaches the other context, and the
                # state is looked at again after it is set: a last CQE handled on another
                # context in between either finds the waiter (and its wake is on its way: park
                # to take it) or left the state changed (take the waiter back and loop).
                self.waiter = _local.task if engine is not None else foreign_waiter()
                if stop is not None:
                    stop.call_soon(_stop_multishot, stop, self)
                if (self.queue or not self.armed) and self.waiter is not None:
                    self.waiter = None
                    continue
                try:
                    if engine is not None:
                        yield self.ticket
                    else:
                        yield from run_outside(self.ticket)
                finally:
                    self.waiter = None
        finally:
            token.add(0)

    def _arm(self, engine: Any) -> None:
        """Queue the multishot on *engine*'s ring; in the stream's PendingOps until its last
        CQE, so that close() cancels it."""
        self._enter()  # ClosedResourceError if closed meanwhile (then nothing was queued)
        error = engine._enter(self, None)  # no task: the ring hands its CQEs to __call__
        if error is not None:
            del self.pending._ops[self]
            raise error
        self.engine = engine
        self.armed = True

    def _single(self, engine: Any) -> Generator[Any, Any, bytes]:
        """One recv into the stream's buffer, as :class:`_RecvOp` does (the fallback)."""
        stream = self.owner()
        if stream is None:  # pragma: no cover - the awaiting task holds the stream
            raise ClosedResourceError(CLOSED_WHILE_WAITING)
        op = stream._single_recv(self.want)
        pending = self.pending
        op._enter()
        try:
            if engine is not None:
                res = yield op
            else:
                res = yield from run_outside(op)
        finally:
            del pending._ops[op]
        if res < 0:
            raise op._failure(res)
        return bytes(op.view[:res])


class _SendallOp(ResourceOp):
    """A stream's ``sendall(data)``: one send, and more only if the kernel took part of it.

    A small message the socket takes at once costs one SQE and one resumption. The stream
    keeps one for reuse (``token`` set: the caller took the stream's send token, which this op
    gives back when it is over); concurrent sendalls build their own.
    """

    __slots__ = ("token", "owner")

    def __init__(
        self, stream: "Stream", data: Any, token: set[int] | None = None, owner: Any = None
    ) -> None:
        n = min(len(data), MAX_RW) if data is not None else 0
        args = (stream._fd, data, n, _MSG_NOSIGNAL) if data is not None else ()
        ResourceOp.__init__(self, stream._ops, prep_send, *args)
        self.token = token
        self.owner = owner

    def describe(self) -> str:
        args = self.args
        size = f"{args[2]} B" if args else "data"
        peer = _peer_of(self.owner) if self.owner is not None else "a stream"
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
            token = self.token
            if token is not None:
                token.add(0)


class _AcceptOp(ResourceOp):
    """A listener's accept: the connected stream."""

    __slots__ = ("listener",)

    def __init__(self, listener: "Listener") -> None:
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

    def __await__(self) -> Generator[Any, Any, "Stream"]:
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


# -- one socket --------------------------------------------------------------------------------
class _Socket:
    """Owns one socket: its descriptor, its pending operations, an io_uring close, and
    ``async with``."""

    def __init__(self, sock: socket.socket) -> None:
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
        await close_fd(self._sock.detach())

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Stream(_Socket):
    """A connected stream socket (TCP or Unix). ``recv`` returns ``b""`` at EOF."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        # One receive buffer per stream, reused by every recv: allocating (and zero-filling)
        # 64 KiB per call cut echo throughput by 3.6x in the measurements in docs/benchmarks.md.
        self._rbuf = bytearray(_RECV_BUFFER)
        # Only one recv at a time may use that buffer. Tasks on different contexts call recv
        # from different threads, so "is anyone receiving? then I am" must be one atomic step
        # (a flag tested, then set, is not). The right to receive is a token, the one element
        # of this set (the idiom of sync/mutex.py): ``pop()`` takes it (KeyError when another
        # task holds it), ``add(0)`` gives it back. Each is a single C call on a one-element
        # set, atomic under the GIL, so of two threads that pop at once exactly one gets it.
        # A threading.Lock did the same for ~200 ns more per recv (acquire + release).
        self._recv_token = {0}
        # The recv op is made once and reused while max_bytes stays the same: building one
        # cost ~0.5 us per recv here, about 5 % of an echo request's Python time. Reusing it
        # is safe: the holder of the token owns it, and the previous recv's CQE has arrived,
        # so nothing in the kernel or an engine uses it now; the engine gives it a new ud and
        # task and clears a cancel's mark when it starts it, and lets go of the task when it
        # completes. A cancel that close() queued for the previous recv finds a new ud on the
        # op, not in flight: once closed, the op refuses before the ring.
        self._recv_op = _RecvOp(self, self._rbuf, _RECV_BUFFER)
        # With the compiled ring, recv goes through one multishot recv where the ring has
        # provided buffers (_MsRecvOp; it falls back to _recv_op where not).
        self._ms = _MsRecvOp(self) if _MULTISHOT and uring.multishot_wanted() else None
        # Likewise one sendall op, for one sendall at a time (sends may overlap: the others
        # build their own); the token says who holds it, as _recv_token does for recv.
        self._send_token = {0}
        self._send_op = _SendallOp(self, None, self._send_token, weakref.ref(self))

    def __repr__(self) -> str:
        if self.closed:
            return f"<tinycoro.net.{type(self).__name__} closed>"
        try:
            peer = self._sock.getpeername()
        except OSError:
            peer = "?"
        return f"<tinycoro.net.{type(self).__name__} fd={self._fd} peer={peer}>"

    def getpeername(self) -> Any:
        return self._sock.getpeername()

    def recv(self, max_bytes: int = _RECV_BUFFER) -> Awaitable[bytes]:
        """At most *max_bytes* bytes as soon as any arrive; ``b""`` once the peer has closed.

        Returns the operation to await (no coroutine of its own: rule 14)."""
        if type(max_bytes) is not int or not 0 < max_bytes <= MAX_RW:
            check_int("max_bytes", max_bytes, min=1, max=MAX_RW)
        ms = self._ms
        if ms is not None:
            ms.want = max_bytes
            return ms
        return self._single_recv(max_bytes)

    def _single_recv(self, max_bytes: int) -> "_RecvOp":
        """The stream's reused single recv, made again for a new *max_bytes* (also the
        multishot's fallback)."""
        op = self._recv_op
        if op.args[2] != max_bytes:
            rbuf = self._rbuf
            if max_bytes > len(rbuf):
                # the ops made for the old buffer keep it alive while they are in flight
                rbuf = self._rbuf = bytearray(max_bytes)
            op = self._recv_op = _RecvOp(self, rbuf, max_bytes)
        return op

    def send(self, data: Any) -> Awaitable[int]:
        """Send some of *data*; the awaited result is how many bytes the kernel took."""
        return self._send_once(data, "send", _MSG_NOSIGNAL)

    def send_nowait(self, data: Any) -> Awaitable[int]:
        """Send what the socket takes right now (MSG_DONTWAIT): BlockingIOError (EAGAIN) if it
        takes nothing. For a last best-effort message, e.g. TLS close_notify, that must never
        wait for the peer."""
        return self._send_once(data, "send_nowait", _MSG_NOSIGNAL | socket.MSG_DONTWAIT)

    def _send_once(self, data: Any, what: str, flags: int) -> Awaitable[int]:
        """One io_uring send of (at most MAX_RW bytes of) *data* with *flags*."""
        view = _as_bytes_view(data, what)
        self._check_open()
        if not view:
            return _ZERO
        n = min(len(view), MAX_RW)
        return ResourceOp(self._ops, prep_send, self._fd, view, n, flags)

    def sendall(self, data: Any) -> Awaitable[None]:
        """Send all of *data*, however many operations that takes."""
        if type(data) is bytes and len(data) <= MAX_RW:
            # Fast path for what recv() returns: the bytes object itself goes to the kernel
            # (no memoryview); a loopback send almost always takes everything at once.
            if not data:
                return _NONE
            token = self._send_token
            try:
                token.pop()
            except KeyError:  # another sendall on this stream holds the reusable op
                return _SendallOp(self, data)
            # The stream's reusable op, as recv's (see there); its await gives the token back
            # and lets go of the caller's bytes as soon as the send is over.
            op = self._send_op
            op.args = (self._fd, data, len(data), _MSG_NOSIGNAL)
            return op
        view = _as_bytes_view(data, "sendall")
        self._check_open()
        if not view:
            return _NONE
        return _SendallOp(self, view)

    async def shutdown_write(self) -> None:
        """Half-close: the peer's recv returns b"" while we can still receive."""
        self._check_open()
        await ResourceOp(self._ops, prep_shutdown, self._fd, socket.SHUT_WR)

    async def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        """Send *count* bytes of *file* from *offset* (to EOF if None) without copying them
        through Python: io_uring splices file -> pipe -> socket. Returns the bytes sent; the
        file's own position is left alone. *file* is a tc.io file or anything with fileno()."""
        offset = check_int("offset", offset, min=0, max=MAX_OFFSET)
        if count is not None:
            count = check_int("count", count, min=0, max=MAX_OFFSET)
        try:
            ffd = file.fileno()
        except AttributeError:
            raise TypeError(f"sendfile() takes a file with fileno(), got {file!r}") from None
        self._check_open()
        if count == 0:
            return 0
        pr, pw = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                size = fcntl.fcntl(pw, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
            except OSError:  # above /proc/sys/fs/pipe-max-size: keep the default
                size = fcntl.fcntl(pw, fcntl.F_GETPIPE_SZ)
            total = 0
            move = uring.SPLICE_F_MOVE
            while count is None or total < count:
                want = size if count is None else min(size, count - total)
                n = await perform(Op(prep_splice, ffd, offset + total, pw, -1, want, move))
                if n == 0:
                    break  # EOF
                moved = 0
                while moved < n:
                    moved += await ResourceOp(
                        self._ops, prep_splice, pr, -1, self._fd, -1, n - moved, move
                    )
                total += n
            return total
        finally:
            os.close(pr)
            os.close(pw)


class TcpStream(Stream):
    """A connected TCP socket."""


class UnixStream(Stream):
    """A connected Unix-domain stream socket."""


class Listener(_Socket):
    """A listening socket; ``await accept()`` for each connection."""

    _stream = Stream

    def _accept_raw(self) -> Awaitable[Stream]:
        return _AcceptOp(self)

    def _wrap(self, fd: int) -> socket.socket:
        return socket.socket(fileno=fd)

    def accept(self) -> Awaitable[Stream]:
        """The next incoming connection (the operation to await)."""
        self._check_open()
        return _AcceptOp(self)


class TcpListener(Listener):
    """A listening TCP socket; with ``ssl=``, ``accept`` returns TLS streams whose handshake
    is done (a client whose handshake fails is logged and dropped)."""

    _stream = TcpStream

    def __init__(self, sock: socket.socket, ssl_context: Any = None) -> None:
        super().__init__(sock)
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

        The listener owns the socket from then on: its ``close()`` closes it. A socket that
        is not a listening TCP socket is refused here, not at the first ``accept``.
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
            from .tls import check_context

            check_context(ssl)
        return cls(sock, ssl)

    def _wrap(self, fd: int) -> socket.socket:
        sock = socket.socket(fileno=fd)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def accept(self) -> Awaitable[Any]:
        """The next incoming connection (a TlsStream after its handshake, with ``ssl=``)."""
        self._check_open()
        if self.ssl is None:
            return _AcceptOp(self)
        return self._accept_tls()

    async def _accept_tls(self) -> Any:
        from .tls import handshake, handshake_failed

        while True:
            raw = await self._accept_raw()
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


# -- UDP ----------------------------------------------------------------------------------------
class UdpSocket(_Socket):
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
        view = _as_bytes_view(data, "sendto")
        if not isinstance(address, tuple) or len(address) < 2:
            raise TypeError(f"address must be a (host, port) tuple, got {address!r}")
        host, port = address[0], address[1]
        family, numeric = await _resolve(host, port, socket.SOCK_DGRAM, self.family)
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
        while True:
            self._check_open()
            try:
                data, addr = self._sock.recvfrom(max_bytes, socket.MSG_DONTWAIT)
            except BlockingIOError:
                await ResourceOp(self._ops, prep_poll_add, self._fd, select.POLLIN)
                continue
            return data, addr[:2]


# -- constructors -------------------------------------------------------------------------------
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
        from .tls import check_context

        check_context(ssl)
    family, numeric = await _resolve(host, port)
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


async def connect(
    host: str, port: int, *, ssl: Any = None, server_hostname: str | None = None
) -> Any:
    """A stream connected to *host*:*port* (an io_uring connect). With *ssl* (an
    ``ssl.SSLContext``) the TLS handshake is done before it returns; the certificate is checked
    against *server_hostname* (default: *host*)."""
    if ssl is not None:
        from .tls import check_context

        check_context(ssl)
        if server_hostname is not None and not isinstance(server_hostname, str):
            raise TypeError(f"server_hostname must be a str or None, got {server_hostname!r}")
    elif server_hostname is not None:
        raise ValueError("server_hostname is only meaningful with ssl=")
    # A name may resolve to several addresses (::1 and 127.0.0.1 for localhost, say): try
    # each in the resolver's order, as socket.create_connection does; raise the last error.
    candidates = await _resolve_all(host, port)
    for i, (family, numeric) in enumerate(candidates):
        sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            addr = uring.sockaddr_in(family, numeric, port)
            op = Op(prep_connect, sock.fileno(), addr)  # the op keeps `addr` alive
            op.what = f"{host}:{port}"
            await perform(op)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            break
        except OSError:
            sock.close()
            if i == len(candidates) - 1:
                raise
        except BaseException:
            sock.close()
            raise
    stream = TcpStream(sock)
    if ssl is None:
        return stream
    from .tls import handshake

    return await handshake(stream, ssl, server_side=False, server_hostname=server_hostname or host)


def _unix_path(path: Any) -> bytes:
    """*path* as bytes for a Unix socket address; ValueError if it does not fit in one (107
    bytes and the terminating NUL in sun_path), for listen_unix and connect_unix alike."""
    raw = _path_bytes(path)
    if len(raw) > _UNIX_PATH_MAX:
        raise ValueError(
            f"path {os.fsdecode(raw)!r} is too long for a Unix socket: {len(raw)} bytes, "
            f"at most {_UNIX_PATH_MAX} bytes"
        )
    return raw


async def listen_unix(path: Any, backlog: int = 128) -> UnixListener:
    """A Unix-domain stream listener on the socket file *path* (which must not exist)."""
    backlog = _check_backlog(backlog)
    name = os.fsdecode(_unix_path(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(name)
        sock.listen(backlog)
        return UnixListener(sock, name)
    except BaseException:
        sock.close()
        raise


async def connect_unix(path: Any) -> UnixStream:
    """A stream connected to the Unix-domain listener at *path* (an io_uring connect)."""
    raw = _unix_path(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        op = Op(prep_connect, sock.fileno(), uring.sockaddr_un(raw))
        op.what = os.fsdecode(raw)
        await perform(op)
    except BaseException:
        sock.close()
        raise
    return UnixStream(sock)


async def udp(host: str = "127.0.0.1", port: int = 0) -> UdpSocket:
    """A UDP socket bound to *host*:*port* (port 0 picks a free one: see ``u.port``)."""
    family, numeric = await _resolve(host, port, socket.SOCK_DGRAM)
    sock = socket.socket(family, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind((numeric, port))
    except BaseException:
        sock.close()
        raise
    return UdpSocket(sock)
