"""Connected stream sockets (TCP, IPv4 and IPv6, and Unix-domain) and the constructors that
connect them. Compiled from this source (rule 14): ``recv`` and ``sendall`` run once per I/O
call. A stream can be used from tasks on any context: the kernel object is shared, and each
operation goes through the ring of the context that awaits it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import weakref
from typing import Any, Awaitable

from .. import uring
from ..buffers import MAX_OFFSET, MAX_RW, as_bytes_view, path_bytes
from ..closing import RECV_SLOT, SEND_SLOT, PendingOps, ResourceOp
from ..core import tokens
from ..core.checks import check_int
from ..core.local import thread_state as _local
from ..core.traps import Op, Ready, consume_budget
from ..uring import prep_connect, prep_shutdown, prep_splice
from . import _untrack, multishot
from .base import SocketBase
from .multishot import MultishotRecv, RecvCall
from .ops import (
    BULK_RECV, MSG_DONTWAIT, MSG_NOSIGNAL, BulkRecvOp, RecvOp, SendallOp, bulk_recv_available,
)
from .resolve import resolve_all

__all__ = ["Stream", "TcpStream", "UnixStream", "connect", "connect_unix", "unix_path"]

_RECV_BUFFER = 65536
_PIPE_SIZE = 1 << 20  # sendfile's pipe; the default 64 KiB costs 16x more splices per MiB
_UNIX_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1: the path and its NUL
_NONE = Ready(None)  # what sendall returns for nothing to send
_ZERO = Ready(0)
# MAX_RW as a C integer (stream.pxd): compared with a length, the module object boxed it
_MAX_RW = MAX_RW


class _StreamCore:
    """What a stream's per-call steps read: in a C struct where compiled, so that ``recv`` and
    ``sendall`` reach them as C fields (as attributes of the Python class, ~1,800 of a
    ping-pong round trip's instructions went to looking them up). Only fields that are
    written once, as the stream is made, live here (and the descriptor, a C int): on a
    free-threaded build a field rewritten while another thread reads it could be freed
    under that reader. :class:`Stream`, a Python class, derives from it, so a stream can
    still be subclassed and given attributes."""

    __slots__ = ()
    # the fields' types, for the checker (stream.pxd declares them for Cython)
    _sock: socket.SocketType
    _fd: int
    _ops: PendingOps
    _ms: MultishotRecv | None
    _recv_spare: list | None
    _send_spare: list
    _ref: weakref.ref
    _recv_token: list

    def recv(self, max_bytes: int = _RECV_BUFFER) -> Awaitable[bytes]:
        """At most *max_bytes* bytes as soon as any arrive; ``b""`` once the peer has closed.

        Returns the operation to await (no coroutine of its own: rule 14)."""
        if type(max_bytes) is not int or not 0 < max_bytes <= MAX_RW:
            check_int("max_bytes", max_bytes, min=1, max=MAX_RW)
        spare = self._recv_spare  # a list exactly where there is a multishot (__init__)
        if spare is not None:
            call = tokens.spare(spare)  # one step: atomic under the GIL, as the token is
            if call is None:  # awaited elsewhere now, or made and never awaited
                ms = self._ms
                assert ms is not None  # there is a spare list only beside a multishot
                return RecvCall(ms, max_bytes, spare)
            call.want = max_bytes
            return call
        return self._single_recv(max_bytes)  # type: ignore[attr-defined]  # Stream's

    def sendall(self, data: Any) -> Awaitable[None]:
        """Send all of *data*, however many operations that takes."""
        # Fast path for what recv() returns: the bytes object itself goes to the kernel
        # (no memoryview); a loopback send almost always takes everything at once. Its length
        # taken once, a C integer (stream.pxd): a truth test of the untyped object went
        # through its type's slots, and a second len() was a second call.
        if type(data) is bytes:
            n = len(data)
            if n <= _MAX_RW:
                if n == 0:
                    return _NONE
                spare = self._send_spare
                op = tokens.spare(spare)  # one step: atomic under the GIL, as recv's token is
                if op is None:  # another sendall holds it, or one was made and never awaited
                    op = SendallOp(self, None, spare, self._ref)
                else:
                    op.spare = spare  # while it is out: where it goes back (SendallOp._release)
                op.args = (self._fd, data, n, MSG_NOSIGNAL)
                return op
        view = as_bytes_view(data, "sendall")
        self._ops.check()
        if not view:
            return _NONE
        return SendallOp(self, view)


class Stream(_StreamCore, SocketBase):
    """A connected stream socket (TCP or Unix). ``recv`` returns ``b""`` at EOF."""

    # The single recv's buffer and op (__init__ says why each is made once, by the first single
    # recv): class defaults for a stream that receives through the multishot, which so has no
    # attribute dict at all. Compiled, the C base's allocation skips the inline attribute
    # values a plain instance gets: the first attribute set makes a dict (~300 bytes per
    # connection when __init__ set these two on every stream).
    _rbuf: bytearray | None = None
    _recv_op: RecvOp | None = None

    def __init__(self, sock: socket.SocketType) -> None:
        super().__init__(sock)
        # Its PendingOps can be in a cycle only through an op in its dict or a slot (the op's
        # `pending` refers back), and an op is there only while a frame awaits it or a ring
        # runs it, so that such a cycle is never garbage: the collector need not walk it (one
        # object fewer per open connection for every full collection).
        _untrack.untracked(self._ops)
        # Sends are first tried inline with MSG_DONTWAIT through this socket object (see
        # SendallOp). With a timeout (socket.setdefaulttimeout) Python's send would poll for
        # room first, and could block the context for that long; in blocking mode it makes
        # the one send(2), which MSG_DONTWAIT keeps from waiting. io_uring works either way.
        if sock.gettimeout() is not None:
            sock.settimeout(None)
        # One receive buffer per stream, reused by every single recv: allocating (and
        # zero-filling) 64 KiB per call cut echo throughput by 3.6x in the measurements in
        # docs/benchmarks-log.md. Made by the first single recv: a stream that receives through
        # the multishot (the ring's own buffers) never needs it, and zero-filling it cost
        # ~66k instructions per connection, a tenth of a short connection's whole cost.
        # (_rbuf: a class default, None, until then.)
        # Only one recv at a time may use that buffer. Tasks on different contexts call recv
        # from different threads, so "is anyone receiving? then I am" must be one atomic step
        # (a flag tested, then set, is not). The right to receive is a token (core/tokens, as
        # the Mutex's): ``tokens.take`` takes it (False when another task holds it),
        # ``tokens.give`` gives it back, each one atomic step with no exception raised. A
        # threading.Lock did the same for ~200 ns more per recv (acquire + release); a
        # one-element set was 216 bytes per connection, the token's list is 64. It holds only
        # None, so it can be in no cycle: compiled, the collector does not track it.
        self._recv_token = tokens.new()
        # The recv op is made once (with the buffer, by the first single recv) and reused
        # while max_bytes stays the same: building one cost ~0.5 us per recv here, about 5 %
        # of an echo request's Python time. Reusing it is safe: the holder of the token owns
        # it, and the previous recv's CQE has arrived, so nothing in the kernel or an engine
        # uses it now; the engine gives it a new ud and task and clears a cancel's mark when
        # it starts it, and lets go of the task when it completes. A cancel that close()
        # queued for the previous recv finds a new ud on the op, not in flight: once closed,
        # the op refuses before the ring. (_recv_op: a class default, None, until then.)
        # Where the multishot can run (tinycoro.net.multishot.AVAILABLE), recv goes through
        # one multishot recv when the ring has provided buffers (it falls back to _recv_op
        # where not). The ring of the context that makes the stream says whether it may take
        # one at all (TINYCORO_MULTISHOT, read once as the ring was made; a kernel that
        # refused one): where not, the stream receives with the single recv from the start.
        # Made outside any context (an asyncio task), it keeps the multishot, which each recv
        # still checks against the ring it runs on.
        # The stream's weak reference (the spare sendall's owner, the multishot's), without
        # a callback: it refers to nothing, so the collector need not walk it.
        self._ref = _untrack.untracked(weakref.ref(self))
        engine = _local.engine
        self._ms = (
            MultishotRecv(self)
            if multishot.AVAILABLE and (engine is None or engine.multishot_possible())
            else None
        )
        # Each recv() call on the multishot path is an awaitable of its own, holding that
        # call's max_bytes (the multishot is shared); one spare is reused (RecvCall says why).
        # (None on the single recv, which never takes it: one list fewer per stream.)
        self._recv_spare = [RecvCall(self._ms, 0, None)] if self._ms is not None else None
        if self._recv_spare is not None:
            self._recv_spare[0].spare = self._recv_spare
        # Likewise a spare sendall op, reused by one sendall at a time: the call that fills
        # it takes it off this list, its await puts it back (SendallOp says why a sendall
        # never awaited costs the stream nothing).
        # The op refers to its list only while it is out of it (taken by a sendall, until
        # its send is over), so the two are never a cycle: a stream dropped without close()
        # takes them with it at once. At rest the list holds an op that refers to nothing
        # that could lead back to it (its args are let go of before it goes back), so the
        # list can be in no cycle either: the collector need not walk it.
        # This op, and no other, sends through the PendingOps' fixed send slot, not its dict
        # (closing.py): the slot is one op's at a time, and this op is one sendall's at a
        # time (in the list, or taken off it by one call). A sendall that finds the list
        # empty makes an op of its own, which uses the dict (and may become the spare, when
        # this one was lost to a sendall never awaited: still correct, only slower).
        send = SendallOp(self, None, None, self._ref)
        send.slot = SEND_SLOT
        self._send_spare = _untrack.untracked([send])
        if self._ms is None:
            # Receiving with the single recv from the start: its two fields set now, with the
            # others. CPython shares a class's table of attribute names (the instances' inline
            # values) only for the names its first few dozen instances set: set first by a
            # later stream's first recv, they made that stream an attribute dict of its own.
            self._rbuf = None
            self._recv_op = None

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

    def _let_go(self) -> None:
        """Break the stream's reference cycles (the spare recv call and its list; the multishot and
        its parking ticket), so that its objects go with its last reference. Left to the
        cyclic collector, they lived until a full collection, which walks every live object:
        at 10,000 connections that came and went it was most of the server's CPU
        (docs/benchmarks-log.md). An op in flight now ends on the close and may put itself
        back on its list: that rare cycle is left to the collector."""
        if self._recv_spare is not None:
            # A copy: a recv on another context may take the spare call from the list (or put
            # it back) meanwhile, and without a GIL a compiled loop over the list itself read
            # past its end when it shrank between the loop's length check and its read.
            for call in list(self._recv_spare):
                call.spare = None
        if self._ms is not None:
            self._ms.let_go()

    def _single_recv(self, max_bytes: int) -> RecvOp | BulkRecvOp:
        """The stream's reused single recv, made again for a new *max_bytes* (also the
        multishot's fallback); for a bulk read, one of its own that receives straight into
        the bytes it returns, where it can (BulkRecvOp)."""
        if max_bytes >= BULK_RECV and bulk_recv_available():
            return BulkRecvOp(self, max_bytes)
        op = self._recv_op
        if op is None or op.args[2] != max_bytes:
            rbuf = self._rbuf
            if rbuf is None or max_bytes > len(rbuf):
                # the ops made for the old buffer keep it alive while they are in flight
                rbuf = self._rbuf = bytearray(max(max_bytes, _RECV_BUFFER))
            op = self._recv_op = RecvOp(self, rbuf, max_bytes)
            # through the PendingOps' fixed recv slot (closing.py): the receive token makes
            # the recv op one recv's at a time, and the old op (for another max_bytes) left
            # the slot before its recv gave the token back
            op.slot = RECV_SLOT
        return op

    def send(self, data: Any) -> Awaitable[int]:
        """Send some of *data*; the awaited result is how many bytes the kernel took. What the
        socket takes at once is sent without suspending (see SendallOp)."""
        return self._send_once(data, "send", MSG_NOSIGNAL)

    def send_nowait(self, data: Any) -> Awaitable[int]:
        """Send what the socket takes right now (MSG_DONTWAIT): BlockingIOError (EAGAIN) if it
        takes nothing. For a last best-effort message, e.g. TLS close_notify, that must never
        wait for the peer."""
        return self._send_once(data, "send_nowait", MSG_NOSIGNAL | MSG_DONTWAIT)

    def _send_once(self, data: Any, what: str, flags: int) -> Awaitable[int]:
        """One send of (at most MAX_RW bytes of) *data* with *flags*."""
        view = as_bytes_view(data, what)
        self._check_open()
        if not view:
            return _ZERO
        return SendallOp(self, view, None, self._ref, flags, True)

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
            await consume_budget()  # done at once (rule 16)
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
                n = await Op(prep_splice, ffd, offset + total, pw, -1, want, move)
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


async def connect(
    host: str, port: int, *, ssl: Any = None, server_hostname: str | None = None
) -> Any:
    """A stream connected to *host*:*port* (an io_uring connect). With *ssl* (an
    ``ssl.SSLContext``) the TLS handshake is done before it returns; the certificate is checked
    against *server_hostname* (default: *host*)."""
    if ssl is not None:
        from ..tls import check_context

        check_context(ssl)
        if server_hostname is not None and not isinstance(server_hostname, str):
            raise TypeError(f"server_hostname must be a str or None, got {server_hostname!r}")
    elif server_hostname is not None:
        raise ValueError("server_hostname is only meaningful with ssl=")
    # A name may resolve to several addresses (::1 and 127.0.0.1 for localhost, say): try
    # each in the resolver's order, as socket.create_connection does; raise the last error.
    candidates = await resolve_all(host, port)
    for i, (family, numeric) in enumerate(candidates):
        # the C socket type, as an accepted stream's (listener._adopt says why)
        sock = socket.SocketType(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            addr = uring.sockaddr_in(family, numeric, port)
            op = Op(prep_connect, sock.fileno(), addr)  # the op keeps `addr` alive
            op.what = f"{host}:{port}"
            await op
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
    from ..tls import handshake

    return await handshake(stream, ssl, server_side=False, server_hostname=server_hostname or host)


def unix_path(path: Any) -> bytes:
    """*path* as bytes for a Unix socket address; ValueError if it does not fit in one (107
    bytes and the terminating NUL in sun_path), for listen_unix and connect_unix alike."""
    raw = path_bytes(path)
    if len(raw) > _UNIX_PATH_MAX:
        raise ValueError(
            f"path {os.fsdecode(raw)!r} is too long for a Unix socket: {len(raw)} bytes, "
            f"at most {_UNIX_PATH_MAX} bytes"
        )
    return raw


async def connect_unix(path: Any) -> UnixStream:
    """A stream connected to the Unix-domain listener at *path* (an io_uring connect)."""
    raw = unix_path(path)
    sock = socket.SocketType(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        op = Op(prep_connect, sock.fileno(), uring.sockaddr_un(raw))
        op.what = os.fsdecode(raw)
        await op
    except BaseException:
        sock.close()
        raise
    return UnixStream(sock)
