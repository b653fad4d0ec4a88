"""The task channel: submits and outcomes straight between the client and each engine's scheduler.

Why: a request through ipyparallel costs the engine ~1.5 ms of GIL time on its main and IOPub
threads (ipykernel's shell dispatch, busy/idle status, stream flushes, ipyparallel's apply),
2.4-3.3 ms of transport in and 1.3-1.7 ms out through the controller, and 1-2 ms of controller
and client CPU, on the cores the engines compute on; tinycoro's own share is ~0.2 ms. As Dask
does with its comms, each engine's tinycoro side listens on a TCP socket of its own, served by
the engine's scheduler with tinycoro's streams; the client sends each batch of submits there
and the engine sends the acks and outcomes back on the same connection. ipyparallel still
starts the engines, runs ``%px``, carries the probes, cancels and the tasks' output (IOPub),
and hands over each channel's address and secret once, at start/connect (over its
authenticated connection). An engine whose channel cannot be reached keeps the ipyparallel
path (said once, in a warning).

Frames: a 4-byte big-endian length, then that many bytes. The client's first frame is the
secret (a connection without it is closed: what arrives after it is unpickled, i.e. run);
each later one is a pickled ``(fns, items)`` batch (``engine.start_tasks``'s arguments). The
engine's frames are pickled lists of ``(ACK, tokens, replies)`` (each task's id or why it did
not start) and ``(OUTCOME, packed (token, outcome))`` entries, as many as were ready when its
writer last turned: the tasks of a round end in one turn and go home in one frame.

The outcome comes on the channel and the task's output on IOPub: what a task printed may
reach the client a little after its outcome (it still lands where the task was submitted).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import pickle
import secrets
import socket
import struct
import threading
from typing import Any, Callable

from ..core import Scheduler, Task, spawn
from ..net import Stream, TcpListener
from ..sync import Event
from .messages import error_outcome

log = logging.getLogger("tinycoro")

ACK = "ack"
OUTCOME = "outcome"
# The engine's last entry when its channel ends with the process living on (its scheduler
# stopped: ``%tinycoro restart``, or the client's own close): a killed engine cannot send it,
# so a close without it means the engine is lost.
BYE = "bye"
CONNECT_TIMEOUT = 5.0  # an address that does not answer in this time: the ipyparallel path
_HEADER = struct.Struct(">I")


def frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


# -- the engine's side ------------------------------------------------------------------------
class Outbox:
    """What one connection's writer sends next; put from any thread (the task's context
    thread for outcomes, the reader's for acks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple] = []
        self.ready = Event()

    def put(self, item: tuple) -> None:
        with self._lock:
            first = not self._items
            self._items.append(item)
        if first:
            self.ready.set()

    def take(self) -> list[tuple]:
        self.ready.clear()  # before taking: a put after the take sets it again
        with self._lock:
            items, self._items = self._items, []
        return items


StartBatch = Callable[[list, list, Callable[[tuple], None]], list]


class ChannelServer:
    """One client's channel to this engine: a listener on *host* (port chosen by the system)
    that accepts one connection and closes, then serves it, all in one task of *sched*; a
    connection that presents the secret has its batches started by *start*
    (``Agent.start_channel_batch``: the batch's fns and items and where its tasks' outcomes
    go). One per start/connect: no port stays open, and an idle engine has one receive in
    flight per connected client."""

    def __init__(self, sched: Scheduler, host: str, start: StartBatch) -> None:
        self.secret = secrets.token_hex(32)
        self._start = start
        self._own: set[int] = set()  # ids of its tasks, for listings to leave out
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, 0), family=family)
        try:
            self.host, self.port = sock.getsockname()[:2]
            listener = TcpListener.from_socket(sock)
        except BaseException:
            sock.close()
            raise
        self._task: Task = sched.submit(self._serve(listener),
                                        name="tinycoro.cluster task channel")
        self._own.add(self._task.id)

    def task_ids(self) -> set[int]:
        """The ids of the channel's own tasks (its server and its writer)."""
        return set(self._own)

    @property
    def serving(self) -> bool:
        return not self._task.done()

    def address(self) -> dict:
        return {"host": self.host, "port": self.port, "secret": self.secret}

    def close(self) -> None:
        """Stop accepting and end the connection (any thread; does not wait)."""
        self._task.cancel()

    async def _serve(self, listener: TcpListener) -> None:
        try:
            stream = await listener.accept()
        finally:
            await listener.close()
        await self._connection(stream)

    async def _connection(self, stream: Stream) -> None:
        async with stream:
            frames = _Frames(stream)
            hello = await frames.next()
            if hello is None or not hmac.compare_digest(hello, self.secret.encode()):
                return  # not our client: nothing it sent is unpickled
            out = Outbox()
            writer = spawn(_write(stream, out), name="tinycoro.cluster channel writer")
            self._own.add(writer.id)
            try:
                while (data := await frames.next()) is not None:
                    fns, items = pickle.loads(data)
                    try:
                        replies: Any = self._start(fns, items, out.put)
                    except Exception as e:  # noqa: BLE001 - the batch as a whole failed
                        replies = [error_outcome(e)] * len(items)
                    out.put((ACK, [token for token, _, _ in items], replies))
            finally:
                writer.cancel()
                with contextlib.suppress(OSError):  # best effort: never waits for the client
                    await stream.send_nowait(frame(pickle.dumps([(BYE,)])))


async def _write(stream: Stream, out: Outbox) -> None:
    while True:
        await out.ready.wait()
        items = out.take()
        if items:
            await stream.sendall(frame(pickle.dumps(items, pickle.HIGHEST_PROTOCOL)))


class _Frames:
    """Length-prefixed frames from a tinycoro stream; None at a clean end."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self._buf = bytearray()

    async def _fill(self, n: int) -> bool:
        while len(self._buf) < n:
            chunk = await self._stream.recv(max(65536, n - len(self._buf)))
            if not chunk:
                return False
            self._buf += chunk
        return True

    async def next(self) -> bytes | None:
        if not await self._fill(_HEADER.size):
            return None
        (n,) = _HEADER.unpack_from(self._buf)
        if not await self._fill(_HEADER.size + n):
            return None
        data = bytes(self._buf[_HEADER.size:_HEADER.size + n])
        del self._buf[:_HEADER.size + n]
        return data


# -- the client's side ------------------------------------------------------------------------
class ChannelClient:
    """The client's connection to one engine's channel: ``send`` from any thread (under a
    lock), and a reader thread that hands each entry that comes back to *on_entry* and calls
    *on_closed* once with why when the connection ends other than by :meth:`close`."""

    def __init__(self, eid: int, address: dict, on_entry: Callable[[tuple], None],
                 on_closed: Callable[[str], None]) -> None:
        self.eid = eid
        self.where = f"{address['host']}:{address['port']}"
        sock = socket.create_connection((address["host"], address["port"]),
                                        timeout=CONNECT_TIMEOUT)
        try:
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(frame(str(address["secret"]).encode()))
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._send_lock = threading.Lock()
        self._closing = False
        self.said_bye = False  # the engine ended the channel alive (BYE): not a lost engine
        self._on_entry = on_entry
        self._on_closed = on_closed
        self._thread = threading.Thread(target=self._read, name=f"tinycoro-channel-{eid}",
                                        daemon=True)
        self._thread.start()

    def send(self, payload: bytes) -> None:
        """One batch (OSError if the connection is gone)."""
        with self._send_lock:
            self._sock.sendall(frame(payload))

    def shutdown(self) -> None:
        """End the connection without closing the channel (any thread): the reader thread
        reads what came before the end (the engine's goodbye, if sent), then reports it
        (``on_closed``)."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """End the connection and wait for the reader thread (idempotent)."""
        self._closing = True
        self.shutdown()
        if self._thread is not threading.current_thread():
            self._thread.join(10.0)
        self._sock.close()

    def _recv_exactly(self, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = self._sock.recv(min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read(self) -> None:
        why = "the engine closed it"
        try:
            while True:
                head = self._recv_exactly(_HEADER.size)
                if head is None:
                    break
                (n,) = _HEADER.unpack(head)
                data = self._recv_exactly(n)
                if data is None:
                    break
                for entry in pickle.loads(data):
                    if entry[0] == BYE:
                        self.said_bye = True
                        why = "the engine's scheduler stopped"
                        continue
                    try:
                        self._on_entry(entry)
                    except Exception:  # noqa: BLE001 - the other entries still go home
                        log.error("tinycoro.cluster: a channel entry from engine %d failed",
                                  self.eid, exc_info=True)
        except OSError as e:
            why = f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - a frame that does not unpickle: the end
            log.error("tinycoro.cluster: engine %d's channel broke", self.eid, exc_info=True)
            why = f"{type(e).__name__}: {e}"
        if not self._closing:
            self._on_closed(why)
