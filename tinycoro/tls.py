"""TLS over a tinycoro stream: an ``ssl.SSLObject`` between two ``ssl.MemoryBIO`` s.

OpenSSL never touches the socket. Ciphertext the SSLObject produces is taken from the outgoing
BIO and sent with the stream's io_uring send; ciphertext received with the stream's io_uring
recv is fed to the incoming BIO. ``SSLWantReadError`` means "feed me more bytes", so every TLS
call is retried after a receive (the same loop trio's SSLStream and asyncio's sslproto run).
"""

from __future__ import annotations

import ssl
import threading
from typing import Any, Callable

from .core.checks import check_int
from .io import MAX_RW, _as_bytes_view
from .sync import Mutex

__all__ = ["TlsStream", "check_context", "handshake_failed"]

_RECV = 65536
# What a failed handshake raises: certificate and protocol errors, and the peer going away.
handshake_failed = (ssl.SSLError, ssl.CertificateError, OSError)


def check_context(ctx: Any) -> None:
    if not isinstance(ctx, ssl.SSLContext):
        raise TypeError(f"ssl must be an ssl.SSLContext or None, got {ctx!r}")


class TlsStream:
    """A TLS connection over a :class:`~tinycoro.net.Stream`; same methods as the stream.

    A peer that closes without a TLS close_notify reads as EOF (``b""``), like the ``ssl``
    module's ``suppress_ragged_eofs`` default. ``close()`` sends close_notify (best effort) and
    closes the socket.
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
        # The SSLObject is not thread-safe and tasks of any context may use this stream: every
        # call into it holds this short lock (never across an await).
        self._lock = threading.Lock()
        # Ciphertext must reach the socket in the order the SSLObject produced it: whoever
        # takes bytes out of the outgoing BIO sends them before anyone else takes more.
        self._send_mutex = Mutex()

    def __repr__(self) -> str:
        return f"<tinycoro.tls.TlsStream over {self._raw!r}>"

    @property
    def ssl_object(self) -> ssl.SSLObject:
        return self._obj

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def fileno(self) -> int:
        return self._raw.fileno()

    def getpeername(self) -> Any:
        return self._raw.getpeername()

    def getsockname(self) -> Any:
        return self._raw.getsockname()

    async def _flush(self) -> None:
        async with self._send_mutex:
            with self._lock:
                data = self._out.read()
            if data:
                await self._raw.sendall(data)

    async def _retry(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)`` on the SSLObject until it stops asking for more input."""
        while True:
            try:
                with self._lock:
                    result = fn(*args)
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self._raw.recv(_RECV)
                with self._lock:
                    if data:
                        self._in.write(data)
                    else:
                        self._in.write_eof()
                continue
            await self._flush()
            return result

    async def do_handshake(self) -> None:
        await self._retry(self._obj.do_handshake)

    async def recv(self, max_bytes: int = _RECV) -> bytes:
        """At most *max_bytes* decrypted bytes; ``b""`` at EOF (close_notify or not)."""
        check_int("max_bytes", max_bytes, min=1, max=MAX_RW)
        try:
            return await self._retry(self._obj.read, max_bytes)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""

    async def send(self, data: Any) -> int:
        view = _as_bytes_view(data, "send")
        if not view:
            return 0
        return await self._retry(self._obj.write, view)

    async def sendall(self, data: Any) -> None:
        view = _as_bytes_view(data, "sendall")
        while view:
            n = await self._retry(self._obj.write, view[:_RECV * 4])
            view = view[n:]

    async def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        """Like :meth:`Stream.sendfile`, but the bytes must pass through the TLS encryption:
        the file is read in chunks (with ``read_at`` of a tc.io file) and sent encrypted."""
        offset = check_int("offset", offset, min=0)
        if count is not None:
            count = check_int("count", count, min=0)
        if not hasattr(file, "read_at"):
            raise TypeError(f"TlsStream.sendfile() takes a tc.io file, got {file!r}")
        total = 0
        while count is None or total < count:
            want = 1 << 18 if count is None else min(1 << 18, count - total)
            chunk = await file.read_at(want, offset + total)
            if not chunk:
                break
            await self.sendall(chunk)
            total += len(chunk)
        return total

    async def close(self) -> None:
        """Send close_notify (best effort) and close the socket; closing twice is a no-op."""
        if self._raw.closed:
            return
        try:
            with self._lock:
                try:
                    self._obj.unwrap()
                except ssl.SSLError:
                    pass  # SSLWantReadError: the peer's close_notify is not awaited
            await self._flush()
        except (OSError, ssl.SSLError):
            pass
        finally:
            await self._raw.close()

    async def __aenter__(self) -> "TlsStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
