"""TLS over a tinycoro stream: an ``ssl.SSLObject`` between two ``ssl.MemoryBIO`` s.

OpenSSL never touches the socket. Ciphertext the SSLObject produces is taken from the outgoing
BIO and sent with the stream's io_uring send; ciphertext received with the stream's io_uring
recv is fed to the incoming BIO. ``SSLWantReadError`` means "feed me more bytes", so every TLS
call is retried after a receive (the same loop trio's SSLStream and asyncio's sslproto run).

Full duplex
-----------
A ``sendall`` blocks while the peer's receive window is full, and the peer drains it only as
fast as its own sends progress, which needs us to read. So receiving must never wait for the
send path. Each shared thing has its own guard:

* ``_lock``, a ``threading.Lock`` never held across an await: the SSLObject and both BIOs
  (tasks of any context use the stream, and the ``ssl`` module lets go of the GIL inside
  OpenSSL calls).
* ``_wire``, a Mutex: the right to move ciphertext from the outgoing BIO to the socket. Its
  holder sends everything the BIO holds, chunk by chunk, until it is empty; since only the
  holder takes from the BIO, the bytes reach the socket in the order the SSLObject made them.
* ``_writer``, a Mutex: one ``write`` at a time, across its retries (a write that wants to
  read first must be retried with the same bytes), and one ``sendall`` after another.
* ``_reader``, a Mutex, and ``_received``: one socket recv at a time. A task that wanted input
  while another received gets to retry its call with the other's bytes instead of receiving.

A sender takes ``_writer``, then ``_wire``, encrypts and drains. A receiver never waits for
``_wire``: the output its own call produced (a handshake message, a TLS 1.3 post-handshake
message, a renegotiation) goes out with ``try_lock``: if the wire is free the receiver drains it
itself, and otherwise it leaves the bytes to the holder. A holder that found the BIO empty looks
once more after letting go of the wire (and takes it again if bytes are there): a receiver's
``try_lock`` can only fail before that release, so its bytes, added before its ``try_lock``,
are in the BIO by the time the holder looks again. Nothing is ever left behind.

A send cut off midway
---------------------
Once ciphertext has left the BIO it must reach the socket whole: a send interrupted there (a
cancel, a timeout, an error) may have put half a TLS record on the wire, after which the peer
can decode nothing. The stream then refuses every later send with ``BrokenPipeError`` (trio's
SSLStream does the same with its BrokenResourceError); receiving still works, and ``close``
skips close_notify. A cut that lands before a chunk is encrypted (while waiting for a lock, or
between two ``write`` s of a ``sendall``) leaves the stream whole: the peer got a prefix of the
data, as on plain TCP.
"""

from __future__ import annotations

import errno
import ssl
import threading
from typing import Any, Callable

from .core import tokens
from .core.checks import check_int
from .core.errors import ClosedResourceError
from .core.traps import checkpoint_if_cancelled, consume_budget
from .buffers import MAX_RW, as_bytes_view
from .sync import Mutex

__all__ = ["TlsStream", "check_context", "handshake", "handshake_failed"]

_RECV = 65536
# Plaintext encrypted per write: bounds the ciphertext held in memory at once.
_CHUNK = 1 << 18
# What a failed handshake raises: certificate and protocol errors, and the peer going away.
handshake_failed = (ssl.SSLError, ssl.CertificateError, OSError)


def check_context(ctx: Any) -> None:
    if not isinstance(ctx, ssl.SSLContext):
        raise TypeError(f"ssl must be an ssl.SSLContext or None, got {ctx!r}")


async def handshake(
    raw: Any, context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None = None
) -> "TlsStream":
    """A TlsStream over the stream *raw* once its handshake is done; if the handshake fails or
    is interrupted, *raw* is closed and the error raised."""
    tls = TlsStream(raw, context, server_side=server_side, server_hostname=server_hostname)
    try:
        await tls.do_handshake()
    except BaseException:
        await raw.close()
        raise
    return tls


class TlsStream:
    """A TLS connection over a :class:`~tinycoro.net.Stream`; same methods as the stream.

    Sending and receiving are independent (full duplex). A peer that closes without a TLS
    close_notify reads as EOF (``b""``), like the ``ssl`` module's ``suppress_ragged_eofs``
    default. After a send was cut off midway, sends raise ``BrokenPipeError`` (module doc).
    """

    def __init__(
        self, raw: Any, context: ssl.SSLContext, *, server_side: bool,
        server_hostname: str | None = None,
    ) -> None:
        self._raw = raw
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )
        self._lock = threading.Lock()  # the SSLObject, the BIOs, _received, _closed
        self._wire = Mutex()
        self._writer = Mutex()
        self._reader = Mutex()
        self._received = 0  # socket recvs fed to the incoming BIO so far
        self._recv_token = tokens.new()  # one recv() at a time, as on net.Stream (see there)
        self._closed = False
        self._broken: str | None = None  # why sends are refused

    def __repr__(self) -> str:
        return f"<tinycoro.tls.TlsStream over {self._raw!r}>"

    @property
    def ssl_object(self) -> ssl.SSLObject:
        return self._obj

    @property
    def closed(self) -> bool:
        return self._closed or self._raw.closed

    def fileno(self) -> int:
        return self._raw.fileno()

    def getpeername(self) -> Any:
        return self._raw.getpeername()

    def getsockname(self) -> Any:
        return self._raw.getsockname()

    # -- the three steps every operation is made of ----------------------------------------
    def _check_open(self) -> None:
        if self._closed or self._raw.closed:
            raise ClosedResourceError("operation on a closed TlsStream")

    def _check_send(self) -> None:
        self._check_open()
        if self._broken is not None:
            raise BrokenPipeError(errno.EPIPE, f"this TlsStream cannot send any more: "
                                  f"{self._broken}")

    def _call(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, bool, bool, int]:
        """``fn(*args)`` on the SSLObject: (result, wants input, left output in the BIO, the
        recv count it saw). The count is read with the call, under the lock: a receive that
        lands after it is one the caller has not tried yet."""
        with self._lock:
            if self._closed:  # close() has shut the SSLObject down: not an SSL error
                raise ClosedResourceError("operation on a closed TlsStream")
            try:
                result, want = fn(*args), False
            except ssl.SSLWantReadError:
                result, want = None, True
            return result, want, self._out.pending > 0, self._received

    async def _drain(self) -> None:
        """Holding ``_wire``: send all the outgoing BIO holds, let go, and look once more."""
        wire = self._wire
        while True:
            try:
                while True:
                    with self._lock:
                        data = self._out.read()
                    if not data:
                        break
                    try:
                        await self._raw.sendall(data)
                    except BaseException as exc:
                        self._broken = (
                            "an earlier send was cut off partway through a TLS record "
                            f"({type(exc).__name__}), so the peer could decode nothing after "
                            "it; close the stream"
                        )
                        raise
            finally:
                wire.unlock()
            with self._lock:
                pending = self._out.pending
            if not pending or not wire.try_lock():
                return  # empty, or a new holder drains it

    async def _push(self) -> None:
        """Get output a receive or a handshake step produced onto the wire without waiting for
        a sender: drain it if the wire is free, else its holder does."""
        if self._broken is None and self._wire.try_lock():
            await self._drain()

    async def _receive_more(self, seen: int) -> None:
        """One socket recv into the incoming BIO, unless another task's recv landed since the
        caller's call saw count *seen*: then the caller retries with those bytes first."""
        async with self._reader:
            if seen != self._received:
                return
            data = await self._raw.recv(_RECV)
            with self._lock:
                if data:
                    self._in.write(data)
                else:
                    self._in.write_eof()
                self._received += 1

    async def _until_done(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The receive side's loop: call ``fn`` until it stops asking for input. Bytes decrypted
        already (or a handshake that is done) are the answer without suspending: rule 16's
        gate first, so a task reading them a byte at a time lets its context's other tasks
        run, and a cancel or timeout due lands here, before the SSLObject is touched."""
        await consume_budget()
        while True:
            result, want, pending, seen = self._call(fn, *args)
            if pending:
                await self._push()
            if not want:
                return result
            await self._receive_more(seen)

    async def _write(self, chunk: memoryview) -> int:
        """Encrypt *chunk* and put it on the wire; the caller holds ``_writer``."""
        while True:
            # A cancel or an expired timeout on its way to this task is taken here, before the
            # chunk is encrypted, where it leaves the stream whole, rather than at the send of
            # ciphertext that could then never be sent.
            await checkpoint_if_cancelled()
            await self._wire.lock()
            try:
                self._check_send()
                n, want, _, seen = self._call(self._obj.write, chunk)
            except BaseException:
                self._wire.unlock()
                raise
            await self._drain()
            if not want:
                return n
            try:  # a renegotiation: the peer's answer first, then the same write again
                await self._receive_more(seen)
            except BaseException as exc:
                self._broken = f"a send waiting for the peer's handshake was interrupted ({exc!r})"
                raise

    # -- the stream's API ----------------------------------------------------------------------
    async def do_handshake(self) -> None:
        await self._until_done(self._obj.do_handshake)

    async def recv(self, max_bytes: int = _RECV) -> bytes:
        """At most *max_bytes* decrypted bytes; ``b""`` at EOF (close_notify or not)."""
        check_int("max_bytes", max_bytes, min=1, max=MAX_RW)
        token = self._recv_token
        if not tokens.take(token):
            self._check_open()
            raise RuntimeError("another task is already receiving on this TlsStream")
        try:
            return await self._until_done(self._obj.read, max_bytes)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""
        finally:
            tokens.give(token)

    async def send(self, data: Any) -> int:
        """Send some of *data* (up to 256 KiB); returns how many bytes were sent."""
        view = as_bytes_view(data, "send")
        self._check_send()
        if not view:
            await consume_budget()  # nothing to send: done at once (rule 16)
            return 0
        async with self._writer:
            return await self._write(view[:_CHUNK])

    async def sendall(self, data: Any) -> None:
        """Send all of *data*; concurrent sendalls go one after the other, whole."""
        view = as_bytes_view(data, "sendall")
        self._check_send()
        if not view:
            await consume_budget()  # nothing to send: done at once (rule 16)
            return
        async with self._writer:
            while view:
                n = await self._write(view[:_CHUNK])
                view = view[n:]

    async def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        """Like :meth:`Stream.sendfile`, but the bytes must pass through the TLS encryption:
        the file is read in chunks (with ``read_at`` of a tc.io file) and sent encrypted."""
        offset = check_int("offset", offset, min=0)
        if count is not None:
            count = check_int("count", count, min=0)
        if not hasattr(file, "read_at"):
            raise TypeError(f"TlsStream.sendfile() takes a tc.io file, got {file!r}")
        self._check_send()
        await consume_budget()  # count=0 is done at once (rule 16); the reads are charged too
        total = 0
        while count is None or total < count:
            want = _CHUNK if count is None else min(_CHUNK, count - total)
            chunk = await file.read_at(want, offset + total)
            if not chunk:
                break
            await self.sendall(chunk)
            total += len(chunk)
        return total

    async def close(self) -> None:
        """Close the socket, sending close_notify first if that cannot wait: only when no
        send is in progress, the stream is not broken and the socket takes it at once.
        Operations other tasks await on the stream fail with ``tc.ClosedResourceError``.
        Closing twice is a no-op."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._broken is None and self._wire.try_lock():
                try:
                    with self._lock:
                        try:
                            self._obj.unwrap()
                        except ssl.SSLError:
                            pass  # SSLWantReadError: the peer's close_notify is not awaited
                        data = self._out.read()
                    if data:
                        await self._raw.send_nowait(data)
                finally:
                    self._wire.unlock()
        except OSError:
            pass  # EAGAIN (the socket's buffer is full), a reset: close_notify is best effort
        finally:
            await self._raw.close()

    async def __aenter__(self) -> "TlsStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
