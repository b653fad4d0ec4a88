"""A socket's operations, each the awaitable its call returns (rule 14): a stream's single
``recv`` and its ``sendall``, and a listener's ``accept``. Compiled from this source with
``ops.pxd`` beside it: their ``__await__`` runs once per I/O call.
Size: one compiled module, so that the ops share InlineOp's typed calls of the engine.

The multishot receive, an operation that completes many times, lives in
:mod:`tinycoro.net.multishot`.
"""

from __future__ import annotations

import errno
import os
import socket
import weakref
from typing import Any, Callable, Generator

# bound once: no module attribute lookup per operation
from .. import compiled, uring
from ..uring import prep_accept, prep_recv, prep_send
from ..buffers import MAX_RW
from ..closing import CLOSED_WHILE_WAITING, ResourceOp
from ..core import deques, iterslots, tokens
from ..core.errors import ClosedResourceError, oserror
from ..core.local import running_engine
from ..core.local import thread_state as _local
from ..core.traps import DONE, YIELD, Op, run_outside, thrown
from . import _nbsend

__all__ = [
    "AcceptOp", "BULK_RECV", "BulkRecvOp", "InlineOp", "MSG_NOSIGNAL", "RecvLimit", "RecvOp",
    "SendallOp",
    "already_receiving", "bulk_recv_available", "peer_of",
]

# Plain ints: the socket module's are IntFlag members, and ``int | IntFlag`` runs the enum's
# Python-level ``__ror__`` (~6,000 instructions under callgrind) on every send that combines them.
MSG_NOSIGNAL = int(getattr(socket, "MSG_NOSIGNAL", 0))
MSG_DONTWAIT = int(socket.MSG_DONTWAIT)
_DONTWAIT = MSG_DONTWAIT  # compiled, a C int (ops.pxd): the inline send's flags boxed no int
_EAGAIN = -errno.EAGAIN  # an inline accept's "nobody in the backlog"
deques.init()  # compiled, the deque type for InlineOp._alone's length read (deques.pxd)

#: A recv of at least this many bytes is a bulk read: where :func:`bulk_recv_available`, the
#: kernel copies into the very bytes object it returns (:class:`BulkRecvOp`). Below it, a copy
#: out of the stream's reused buffer costs less than a new allocation of *max_bytes* per call.
#: The multishot's bulk threshold (``multishot.QUEUE_LIMIT``) is the same size.
BULK_RECV = 256 * 1024

# A new bytes object that a recv fills in place (tinycoro._cfile.receiving); None where _cfile
# is not built or TINYCORO_PURE is set: there a bulk recv is RecvOp's, with its one copy more.
_cfile = compiled.load("_cfile")
_receiving: Any = _cfile.receiving if _cfile is not None and uring.COMPILED else None


def bulk_recv_available() -> bool:
    """Whether a recv of at least :data:`BULK_RECV` bytes goes straight into its result."""
    return _receiving is not None


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


class RecvLimit(Op):
    """The base of a stream's multishot recv call (:class:`tinycoro.net.multishot.RecvCall`):
    its limit, ``want``, which ``Stream.recv`` writes each time it hands its spare call out.
    Here, not beside the call's other fields, because the stream is compiled against this
    module's layout, which is compiled wherever the stream is; the multishot module may run
    interpreted beside a compiled stream (a partial build), and a stream compiled against its
    layout would fail to import there. Compiled, the write is a C store (ops.pxd), where by
    name it was a Python setattr (~150 instructions per recv, callgrind, CPython 3.11)."""

    __slots__ = ("want",)


class InlineOp(ResourceOp):
    """A socket operation that may complete without suspending (a send the socket takes at
    once, a recv that finds bytes queued). Each such completion spends one unit of the
    engine's cooperative budget (rule 16) through :meth:`_spend`, the one typed call of
    ``engine.inline_ok()`` for every such op."""

    __slots__ = ()

    def _spend(self, engine: Any) -> bool:
        """``engine.inline_ok()``: compiled, a C call (ops.pxd types *engine*; an annotation
        would not: the build compiles with annotation typing off)."""
        return engine.inline_ok()

    def _alone(self, engine: Any) -> bool:
        """Whether the op is the only thing its context has to do now: no other task ready,
        no SQE waiting for the turn's submit (then an inline completion delays nobody; see
        SendallOp and BulkRecvOp). Compiled, two reads of the engine's fields (ops.pxd
        types *engine*); the attribute lookups cost ~400 instructions per request on the
        echo. The ready queue's length, not its truth: compiled, a read of the deque's size
        (deques.pxd), where a truth test went through its type's slots."""
        return not deques.size(engine.ready) and not engine.unsubmitted


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
        self._fill_for(stream._ops, prep_recv, (stream._fd, buf, max_bytes, 0))
        self.view = memoryview(buf)
        self.token = stream._recv_token
        self.owner = weakref.ref(stream)  # weak: the stream holds this op (no cycle)

    def describe(self) -> str:
        return f"recv from {peer_of(self.owner)}"

    def __await__(self) -> Generator[Any, Any, bytes]:
        token = self.token
        pending = self.pending
        if not tokens.take(token):
            raise already_receiving(pending, self.owner)
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
                self._leave_pending()
            if res < 0:
                raise self._failure(res)
            # copied before the token goes back: the next recv reuses the buffer
            return bytes(self.view[:res])
        finally:
            tokens.give(token)


class BulkRecvOp(InlineOp):
    """A stream's ``recv(max_bytes)`` of a bulk size (:data:`BULK_RECV` or more): the kernel
    copies the bytes into a new bytes object of *max_bytes*, shrunk in place to what came and
    returned, as a blocking ``socket.recv`` does. :class:`RecvOp` copies out of the stream's
    reused buffer instead, a second pass over every byte: on a 1 MiB loopback transfer that
    copy was ~80 us per MiB, about a third of the receiver's CPU.

    **Inline first.** A bulk reader finds bytes queued on most calls: alone on its context and
    within the budget (as a sendall, :class:`InlineOp`), the recv first tries one non-blocking
    ``recv(2)`` into the result (``_nbsend.recv_into``), with no SQE, CQE or task switch; only
    an empty socket sends it to the ring. Never ``MSG_WAITALL``: it returns what is queued.

    The buffer is held by the op (its args) until the kernel's completion, and a cancel is
    raised only after that completion, so the kernel never writes into memory handed out or
    freed (the inline syscall is over at its return). One op per call."""

    __slots__ = ("token", "owner", "sock")

    def __init__(self, stream: Any, max_bytes: int) -> None:
        self._fill_for(stream._ops, prep_recv, (stream._fd, None, max_bytes, 0))
        self.token = stream._recv_token
        self.owner = weakref.ref(stream)
        self.sock = stream._sock

    def describe(self) -> str:
        return f"recv from {peer_of(self.owner)}"

    def __await__(self) -> Generator[Any, Any, bytes]:
        token = self.token
        if not tokens.take(token):
            raise already_receiving(self.pending, self.owner)
        try:
            return (yield from self.receive(_local.engine))
        finally:
            tokens.give(token)

    def attempt(self, engine: Any) -> Any:
        """The inline attempt alone, for a caller that holds the stream's receive token on
        *engine* (a context's, not None) and steps the recv itself (the multishot's
        ``RecvCall``): the bytes (``b""`` at EOF) when the socket had some, else None (not
        alone, out of budget, or nothing queued), and then :meth:`receive` with *tried* set
        does the ring's recv (into the buffer made here, if any).
        No generator for a recv that completes here, the common case of a bulk reader on
        a loaded machine: the generator, its StopIteration and the traceback entry the
        catching frame adds were ~5,000 instructions of every such recv (callgrind)."""
        fd, _, n, flags = self.args
        if not (self._alone(engine) and self._spend(engine)):
            return None
        buf = _receiving(n)
        got = self._recv_inline(buf)
        if got >= 0:
            return buf.take(got)
        self.args = (fd, buf, n, flags)  # empty: the ring's recv fills this one
        return None

    def receive(self, engine: Any, tried: bool = False) -> Generator[Any, Any, bytes]:
        """The recv, for a caller that holds the stream's receive token (its own await, or the
        multishot's bulk read) on *engine* (None: an asyncio task); with *tried*, after an
        :meth:`attempt` that found nothing: the ring's recv only."""
        if not tried and engine is not None:
            got = self.attempt(engine)
            if got is not None:
                return got
        fd, buf, n, flags = self.args
        if buf is None:  # no inline attempt made one (an asyncio task, not alone, no budget)
            buf = _receiving(n)
            self.args = (fd, buf, n, flags)
        try:
            res = yield from self._result_on(engine)
        finally:
            self.args = (fd, None, n, flags)
        return buf.take(res)

    def _recv_inline(self, buf: Any) -> int:
        """The inline attempt into *buf*: the bytes that came, 0 at EOF, negative for none
        queued; errors as :meth:`SendallOp._send_inline`'s (after a close on another context
        the descriptor may be another file's: ClosedResourceError, whatever came)."""
        pending = self.pending
        if pending.closed:
            raise pending._error()
        fd, _, n, flags = self.args
        try:
            got = _nbsend.recv_into(self.sock, fd, buf, n, flags | MSG_DONTWAIT)
        except OSError:
            if pending.closed:
                raise ClosedResourceError(CLOSED_WHILE_WAITING) from None
            raise
        if pending.closed:
            raise ClosedResourceError(CLOSED_WHILE_WAITING)
        return got


class SendallOp(InlineOp):
    """A stream's ``sendall(data)`` (or, with ``once`` set, its ``send(data)``): the socket
    is offered the bytes at once, and the ring sends only what it did not take.

    **Inline first, unless there is a batch to join.** When no other task of the context is
    ready and no SQE waits for the turn's submit, the first attempt is a non-blocking
    ``send`` (``MSG_DONTWAIT``) made right here, as uvloop's ``transport.write`` and
    asyncio's streams do: a message the socket buffer takes whole (almost every small one)
    then costs one syscall and no suspension, no SQE, no CQE and no trip through the engine.
    Only the rest, when the buffer is full, goes through the ring and waits there. When
    other tasks are ready or SQEs are queued, the send joins the turn's batch instead: one
    ``io_uring_enter`` then carries every send of the turn, and the peers are woken once per
    batch rather than once per send. Measured on the 50-connection echo (docs/benchmarks-log.md,
    "Speed round 3"), sending inline always cost the server ~5 us more system time per
    request (a wake-up of the client per send) and a third of its throughput, while a lone
    connection's round trip took 20 % fewer instructions inline. Each inline completion spends one
    unit of the engine's cooperative budget (``Engine.inline_ok``, rule 16): at zero the
    sendall yields once to the engine first, so a task whose sends never block still lets
    the other tasks of its context run every ``INLINE_BUDGET`` sends, and a cancel (or an
    expired timeout) that waits for the task's next await is delivered there, before any
    byte is offered. In an asyncio task (no engine on the thread) every send is the ring's.

    **Cancellation.** A send done inline is one syscall: it cannot be cancelled halfway, and
    what it took is sent. A cancel that arrives meanwhile lands at the task's next await (or
    at the ring send of the rest, which behaves as before: the peer may have the part the
    kernel took by then, as with any cancelled send). Errors of the inline send keep their
    errno; a close on another context during it reads as ``ClosedResourceError``.

    The stream keeps a spare one for reuse, in a list of its own, taken by the call that fills
    it and put back by its await once the send is over (``spare``: that list, set only while
    the op is out of it, so that the list and the op are never a cycle). A sendall that
    is made and never awaited keeps its op, and nothing of the stream's: the next call
    builds a new one, which goes back to the list after its send. Concurrent sendalls each
    have their own.
    """

    __slots__ = ("spare", "owner", "sock", "once")

    def __init__(
        self, stream: Any, data: Any, spare: list | None = None, owner: Any = None,
        flags: int = MSG_NOSIGNAL, once: bool = False,
    ) -> None:
        n = min(len(data), MAX_RW) if data is not None else 0
        args = (stream._fd, data, n, flags) if data is not None else ()
        self._fill_for(stream._ops, prep_send, args)
        self.spare = spare
        self.owner = owner
        self.sock = stream._sock
        self.once = once

    def describe(self) -> str:
        args = self.args
        size = f"{args[2]} B" if args else "data"
        peer = peer_of(self.owner) if self.owner is not None else "a stream"
        return f"send {size} to {peer}"

    def __await__(self) -> Generator[Any, Any, Any]:
        # A sendall that the socket takes whole at once (the echo's every reply) completes
        # in this call and returns DONE, which ends the await at its first step: no generator
        # is made for it (its allocation, first resumption and teardown were ~10 % of a
        # ping-pong round trip's instructions). Everything else (a send(), the budget spent,
        # a batch to join, a partial send, no engine) runs the generator, which starts where
        # this left off.
        engine = running_engine()  # compiled, a C read (ops.pxd): no descriptor lookup
        if engine is not None and not self.once and self._has_data():
            if self._alone(engine) and self._spend(engine):
                # try/finally, not except: compiled, an except clause saves the thread's
                # handled exception as its try begins (a thread-state read: a call into
                # libpython's thread-local storage on 3.12 and later), on every send; a
                # finally pays only when it raised
                res = -1
                try:
                    res = self._send_inline()
                finally:
                    if res < 0:  # it raised (a send returns >= 0): let go of the data
                        self._release()
                if res > 0 and self._sent(res):
                    self._release()
                    return DONE
                return self._awaiting(engine, True)  # the ring sends the rest
            return self._join_batch(engine)  # not alone: the send joins the turn's batch
        return self._awaiting(engine, False)

    def _join_batch(self, engine: Any) -> Any:
        """The await of a send that joins the turn's batch: a :class:`RingSend` handed the
        op, entered on *engine*. Compiled, a C method whose RingSend is typed (ops.pxd): its
        two fields are C stores, where on the untyped object each was a set by name (a type
        lookup, ~185 instructions on 3.12, callgrind)."""
        # Its await is a reused RingSend, not a generator: with many connections a generator
        # per request lived until the batch's CQE, was promoted by the young collections of
        # the turn, and filled the oldest generation (docs/benchmarks-profiles.md, "The
        # connection-count axis"). Taken from the free list the module keeps, not kept by the
        # op: one per stream was one more object per open connection for every full
        # collection to walk, where only the sends of a turn's batch need one.
        waiting = tokens.spare(_ring_sends)  # one step: atomic under the GIL, or the list's lock
        if waiting is None:
            waiting = RingSend()
        entered = False  # a finally, not an except clause: _send_inline's comment says why
        try:
            self._enter_on(engine)
            entered = True
        finally:
            if not entered:  # closed already: let go of the data
                self._release()
        waiting.op = self
        waiting.state = _HANDED
        return waiting

    def _awaiting(self, engine: Any, tried: bool) -> Generator[Any, Any, Any]:
        """The send as a generator: the inline attempt unless *tried* already (the class doc),
        then the ring for what the socket did not take."""
        pending = self.pending
        try:
            if not tried:
                if not self.args:
                    raise RuntimeError("this sendall() was awaited already")
                inline = engine is not None and self._alone(engine)
                if inline and not self._spend(engine):
                    yield YIELD  # budget spent, or an interrupt is due: it is raised here
                    # a new step: inline only if it is still alone (and then it counts)
                    inline = self._alone(engine) and self._spend(engine)
                if inline:
                    res = self._send_inline()
                    if res > 0 and self._sent(res):  # else it took part: the ring sends the rest
                        return res if self.once else None
            engine = self._enter_on(engine)
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
                    if self._sent(res):  # else the kernel took part: send the rest
                        return res if self.once else None
            finally:
                self._leave_pending()
        finally:
            self._release()

    def _has_data(self) -> bool:
        """Whether the op holds data to send: its args, let go of once the send is over (a
        second await is refused). Compiled, a C read of the tuple's size (ops.pxd), where a
        truth test of the untyped field went through its type's slots."""
        args = self.args
        return bool(args)

    def _send_inline(self) -> int:
        """The inline attempt (class doc): one non-blocking send(2) of the args' data (on the
        descriptor itself where compiled: _nbsend); the bytes it took, 0 when the socket
        took none."""
        pending = self.pending
        if pending.closed:
            raise pending._error()
        fd, data, _, flags = self.args
        # No try: compiled, an except clause saves the thread's handled exception as its try
        # begins (a thread-state read: a call into libpython's thread-local storage on 3.12
        # and later) on every send; the send answers with a negative errno instead.
        res = _nbsend.send(self.sock, fd, data, flags | _DONTWAIT)
        if pending.closed:  # the descriptor may have gone with a close on another context
            raise ClosedResourceError(CLOSED_WHILE_WAITING)
        if res < 0:
            if res == _EAGAIN and not flags & _DONTWAIT:
                return 0  # the socket took none: the ring sends it
            raise oserror(res)  # send_nowait's "nothing now" too: BlockingIOError
        return res

    def _release(self) -> None:
        """The send is over: let go of the caller's data (a second await is refused) and go
        back to the stream's spare list for its next sendall, letting go of the list first:
        an op in the list never refers to it, so the two are never a cycle."""
        self.args = ()
        spare = self.spare
        if spare is not None:
            self.spare = None
            if not spare:
                spare.append(self)  # the stream's next sendall takes it (and sets `spare`)

    def _sent(self, res: int) -> bool:
        """*res* bytes of the args' data went out: True when the send is over (a ``send()``
        after one, a ``sendall()`` once all went); else the args now hold the rest."""
        if self.once:
            return True
        fd, data, n, flags = self.args
        if res == len(data):
            return True
        data = memoryview(data)[res:]
        self.args = (fd, data, min(len(data), MAX_RW), flags)
        return False


# The RingSends not in use, for any context's sendall to take (SendallOp.__await__); at most
# _RING_SENDS_KEPT, as many as a few turns' batches of sends, so that a burst leaves no pile.
_ring_sends: list = []
_RING_SENDS_KEPT = 1024
# Where a RingSend's steps are (RingSend.state)
_IDLE = 0  # not awaited
_HANDED = 1  # its sendall's __await__ entered the op and returned it: not yet yielded
_WAITING = 2  # the op is yielded to the ring: the next step gets its result


class RingSend:
    """The await of a :class:`SendallOp` that joins the turn's batch (the ring sends it): the
    steps of :meth:`SendallOp._awaiting` from its ring loop on, as an iterator that the op
    keeps and reuses, so that a request allocates no generator (class doc of
    ``multishot.RecvCall``, which does the same for the recv). It yields the op until all of
    the data went out, then ends the await with None; a throw or close ends the send as the
    generator's ``finally`` does. Holds its op only while awaited (no cycle at rest), and
    goes back to the module's free list when its send is over."""

    __slots__ = ("op", "state")

    def __init__(self) -> None:
        self.op: Any = None
        self.state = _IDLE

    def __await__(self) -> Any:
        return self

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        # Compiled, the C slots that iterslots installs run instead (for ``await``).
        return iterslots.advance(self, None, _send_step, _send_result)

    def send(self, value: Any) -> Any:
        # Compiled, the C method that iterslots installs runs instead (3.12+ resumes the
        # await through it with the op's result).
        return iterslots.advance(self, value, _send_step, _send_result)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = thrown(typ, val, tb)
        self._end()
        raise exc

    def close(self) -> None:
        self._end()

    def _step(self, value: Any) -> Any:
        """The send's next step: the op to yield, or this RingSend once the send is over."""
        op = self.op
        try:
            if self.state == _HANDED:  # its first step (__await__ entered the op)
                self.state = _WAITING
            elif value < 0:
                raise op._failure(value)
            elif op._sent(value):  # else the kernel took part: send the rest
                self._end()
                return self
            if op.pending.closed:
                raise op.pending._error()
        except BaseException:
            self._end()
            raise
        return op

    def _end(self) -> None:
        """The send is over: out of the stream's pending set (if it went in), the op released
        (back to the stream's spare), this RingSend back to the op."""
        op = self.op
        if op is not None:  # no bare return: compiled, this returns a C int (ops.pxd)
            op._leave_pending()  # entered by the op's __await__ (_join_batch)
            self.state = _IDLE
            self.op = None
            op._release()
            # Its await takes nothing more from it (the step that ended returns it only to be
            # told apart from an op): another send may take it now.
            if len(_ring_sends) < _RING_SENDS_KEPT:
                _ring_sends.append(self)


def _send_step(ring_send: Any, value: Any) -> Any:
    """A :class:`RingSend`'s next step (compiled, a C function its C slots run)."""
    w = ring_send
    return w._step(value)


def _send_result(ring_send: Any) -> Any:
    """What the await of a finished :class:`RingSend` returns: a sendall's None."""
    return None


iterslots.install(RingSend, _send_step, _send_result, _send_step)


class AcceptOp(InlineOp):
    """A listener's accept: the connected stream.

    **Inline first.** A connection already in the listener's backlog is accepted right here,
    with one non-blocking ``accept4(2)`` (``_nbsend.accept``; the listener's socket is
    non-blocking for it), as uvloop's accept loop does: no SQE, no CQE and no turn of the
    context per connection, which is what a server that a crowd connects to at once spends
    its set-up on. Only after a connection came (``listener._more_queued``): the first accept,
    and the one after the backlog ran dry, go to the ring at once, so that connections that
    come one at a time cost no failed ``accept4`` each, and a server's first accept waits as it
    always did (a one-connection ping-pong's tasks then fall into the same rhythm as before:
    accepted a turn earlier, both sides' sends went through the ring for good, ~29.5k
    instructions per round trip against ~18.5k; docs/benchmarks-profiles.md). Each such accept
    spends one unit of the engine's cooperative budget (rule 16, :class:`InlineOp`): with it spent, the accept yields once first, so an acceptor with a
    crowd in its backlog still lets the other tasks of its context run. With nobody in the
    backlog the accept is the ring's, which waits for the next connection. In an asyncio task (no engine on the thread)
    every accept is the ring's."""

    __slots__ = ("listener",)

    def __init__(self, listener: Any) -> None:
        self._fill_for(listener._ops, prep_accept, (listener._fd, None, socket.SOCK_CLOEXEC), True)
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
        engine = _local.engine
        listener = self.listener
        if engine is not None and listener._more_queued:
            if not self._spend(engine):
                yield YIELD  # budget spent, or an interrupt is due: it is raised here
                self._spend(engine)  # a new step: this accept counts in its budget
            fd = self._accept_inline()
            if fd != _EAGAIN:
                if fd < 0:
                    raise self._failure(fd)
                return listener._stream(listener._wrap(fd))
            listener._more_queued = False  # the backlog ran dry: the ring waits for the next
        engine = self._enter_on(engine)
        try:
            if engine is not None:
                fd = yield self
            else:
                fd = yield from run_outside(self)
        finally:
            self._leave_pending()
        if fd < 0:
            raise self._failure(fd)
        listener._more_queued = True  # one came: a crowd may be queued behind it
        return listener._stream(listener._wrap(fd))

    def _accept_inline(self) -> int:
        """The inline attempt (class doc): the new descriptor, or the negative errno
        (``-EAGAIN``: nobody in the backlog). After a close on another context the listener's
        descriptor may be another file's by the time the accept runs: ClosedResourceError,
        and a connection it took is closed again."""
        pending = self.pending
        if pending.closed:
            raise pending._error()
        fd = _nbsend.accept(self.listener._sock, self.args[0], self.args[2])
        if pending.closed:
            if fd >= 0:
                os.close(fd)
            raise ClosedResourceError(CLOSED_WHILE_WAITING)
        return fd
