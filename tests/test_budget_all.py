"""Rule 16 for every public operation: one that completes without suspending spends the
engine's cooperative budget, and a cancel or timeout due is delivered at it.

The public API is walked (the names of ``tinycoro``, ``tinycoro.io``, ``tinycoro.net``,
``tinycoro.sync`` and the TLS stream they return, each class's methods included), and every
callable that returns something to await must be named below: in ``AT_ONCE`` (it can
complete without suspending, and a driver here makes it do so), in ``SUSPENDS`` (it always
suspends: a due interrupt is delivered where it does) or in ``EXEMPT`` (it may complete at
once and takes neither, for the reason docs/design.md rule 16 gives; this test checks that the
rule names it). A new operation that is in none of them fails here, before it can forget the
budget.

Each ``AT_ONCE`` operation is then checked, on 1, 2 and 4 contexts, by counts and never by
time: another task of its context that yields in a loop sees at most ``INLINE_BUDGET`` of
them between two of its steps; a 10 ms ticker beside a loop of them ticks before the loop
has made ``LIMIT`` of them; ``tc.timeout(0)`` around it raises ``TimeoutError``, every time,
and a cancel due is raised there.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import pathlib
import re
import socket
import time
from typing import Any, Awaitable, Callable

import pytest

import tinycoro as tc
from tinycoro.core.engine import INLINE_BUDGET
from tinycoro.tls import TlsStream

from helpers.budget import gaps, loop_beside_counter
from helpers.sync import run, spawn_here
from helpers.tls import tls_pair

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT = 200_000  # operations: bounds a loop that never lets its context's other tasks run

# -- the walk of the public API ------------------------------------------------------------------

NAMESPACES = {"tc": tc, "io": tc.io, "net": tc.net, "sync": tc.sync}
EXTRA_CLASSES = (TlsStream,)  # returned by connect(ssl=...) and a TLS listener's accept()
AWAIT_PROTOCOL = {"__await__", "__aenter__", "__aexit__", "__anext__"}
# Names whose whole namespace is exempt (docs/design.md rule 16 says why).
EXEMPT_NAMESPACES = {"lowlevel", "aio", "cluster"}


def _source(module: str) -> ast.Module:
    """The .py source of *module* (compiled modules are built from it and keep it beside)."""
    origin = pathlib.Path(importlib.util.find_spec(module).origin)
    return ast.parse(origin.with_name(module.rsplit(".", 1)[-1] + ".py").read_text())


def _def(module: str, qualname: str) -> ast.AST:
    node: Any = _source(module)
    for part in qualname.split("."):
        node = next(
            n for n in node.body
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part
        )
    return node


def _awaitable(module: str, qualname: str) -> bool:
    """Whether the function defined at *qualname* in *module* returns something to await."""
    node = _def(module, qualname)
    if isinstance(node, ast.AsyncFunctionDef) or qualname.rsplit(".", 1)[-1] in AWAIT_PROTOCOL:
        return True
    if isinstance(node, ast.FunctionDef) and node.returns is not None:
        ret = ast.unparse(node.returns)
        return bool(re.search(r"Awaitable|Acquisition|_Yield|\bPark\b|\bOp\b|Coroutine", ret))
    return False


def _members(cls: type) -> dict[str, tuple[str, str]]:
    """name -> (module, qualname of the defining function) of *cls*'s public methods."""
    out = {}
    for name in dir(cls):
        if name.startswith("_") and name not in AWAIT_PROTOCOL:
            continue
        for klass in cls.__mro__:
            if name in vars(klass):
                attr = vars(klass)[name]
                break
        else:  # pragma: no cover
            continue
        if not klass.__module__.startswith("tinycoro") or isinstance(attr, property):
            continue
        fn = getattr(attr, "__func__", attr)
        if not callable(fn):
            continue
        # A method a private base defines (a C base holding a class's per-call fields) is the
        # public class's to users: named after the nearest public class that inherits it.
        mro = cls.__mro__
        public = [k for k in mro[:mro.index(klass) + 1] if not k.__name__.startswith("_")]
        owner = public[-1] if public else klass
        out[f"{owner.__qualname__}.{name}"] = (klass.__module__, f"{klass.__qualname__}.{name}")
    return out


def public_operations() -> set[str]:
    """Every public callable that returns something to await, as "Class.method" or "ns.name"."""
    found: dict[str, tuple[str, str]] = {}
    classes = list(EXTRA_CLASSES)
    for ns, module in NAMESPACES.items():
        for name in module.__all__:
            if name in EXEMPT_NAMESPACES:
                continue
            obj = getattr(module, name)
            if inspect.isclass(obj):
                classes.append(obj)
            elif callable(obj) and getattr(obj, "__module__", "").startswith("tinycoro"):
                found[f"{ns}.{name}"] = (obj.__module__, obj.__qualname__)
    for cls in classes:
        found.update(_members(cls))
    return {name for name, (mod, qual) in found.items() if _awaitable(mod, qual)}


# -- what each operation is ------------------------------------------------------------------

# Always suspends: the engine delivers a due cancel or timeout where the task suspends (an op
# before it reaches the ring, a park before the task is parked, a yield at once).
SUSPENDS = {
    "tc.sleep": "an io_uring timeout; sleep(0) is yield_now",
    "tc.yield_now": "the yield itself",
    "tc.when_any": "its contestants are tasks of their own, which it waits for",
    "io.open": "an io_uring openat",
    "io.read_file": "open, then read: an openat first",
    "io.write_file": "open, then write: an openat first",
    "io.stat": "an io_uring statx",
    "io.rename": "an io_uring renameat",
    "io.unlink": "an io_uring unlinkat",
    "io.rmdir": "an io_uring unlinkat",
    "io.mkdir": "an io_uring mkdirat",
    "AsyncFile.fsync": "an io_uring fsync",
    "net.connect": "an io_uring connect",
    "net.connect_unix": "an io_uring connect",
    "Stream.shutdown_write": "an io_uring shutdown",
}

# May complete at once and is exempt from the budget; docs/design.md rule 16 names each.
EXEMPT = {
    "Mutex.__aexit__": "a release: never waits",
    "Semaphore.__aexit__": "a release: never waits",
    "Condition.__aexit__": "a release: never waits",
    "Latch.wait": "at zero: its documented choice",
    "WaitGroup.wait": "at zero: its documented choice",
    "timeout.__aenter__": "a scope's entry",
    "timeout.__aexit__": "a scope's exit",
    "TaskGroup.__aenter__": "a scope's entry",
    "TaskGroup.__aexit__": "a scope's exit",
    "AsyncFile.__aenter__": "returns the file",
    "SocketBase.__aenter__": "returns the socket",
    "TlsStream.__aenter__": "returns the stream",
    "AsyncFile.close": "close of a closed file: cleanup",
    "AsyncFile.__aexit__": "close of a closed file: cleanup",
    "SocketBase.close": "close of a closed socket: cleanup",
    "SocketBase.__aexit__": "close of a closed socket: cleanup",
    "TcpListener.close": "close of a closed socket: cleanup",
    "UnixListener.close": "close of a closed socket: cleanup",
    "TlsStream.close": "close of a closed stream: cleanup",
    "TlsStream.__aexit__": "close of a closed stream: cleanup",
}


# -- drivers: set up an operation that completes at once ----------------------------------------
# Each takes an AsyncExitStack (for what must be closed) and the test's request, and returns
# ``once()``, which makes the operation complete without suspending, again and again (LIMIT
# times at least; a composite refill is allowed where the supply runs out).

Once = Callable[[], Awaitable[Any]]


async def _join_done(stack, request) -> Once:
    async def noop():
        return 1

    t = tc.spawn(noop())
    await t
    return lambda: t


async def _channel_send(stack, request) -> Once:
    ch: tc.Channel[int] = tc.Channel(10**9)
    return lambda: ch.send(1)


async def _channel_recv(stack, request) -> Once:
    ch: tc.Channel[int] = tc.Channel(1024)

    async def once():
        if not ch.statistics().buffered:
            for i in range(1024):
                await ch.send(i)
        return await ch.recv()

    return once


async def _channel_anext(stack, request) -> Once:
    ch: tc.Channel[int] = tc.Channel(10**9)
    it = ch.__aiter__()

    async def once():
        await ch.send(1)
        return await it.__anext__()

    return once


async def _mutex_lock(stack, request) -> Once:
    m = tc.Mutex()

    async def once():
        await m.lock()
        m.unlock()

    return once


async def _semaphore_acquire(stack, request) -> Once:
    s = tc.Semaphore(1)

    async def once():
        await s.acquire()
        s.release()

    return once


async def _event_wait(stack, request) -> Once:
    e = tc.Event()
    e.set(1)
    return e.wait


async def _condition_wait(stack, request) -> Once:
    cv = tc.Condition()

    async def once():
        # the first call takes the mutex for good (the warm-up, outside what is checked):
        # from then on each call is the wait alone
        if cv.mutex.statistics().owner is not tc.current_task():
            await cv.mutex.lock()
        return await cv.wait(lambda: True)

    return once


def _aenter(make: Callable[[], Any]) -> Callable[..., Awaitable[Once]]:
    """The set-up of ``async with`` a primitive that *make* returns, free every time."""

    async def setup(stack, request) -> Once:
        prim = make()

        async def once():
            async with prim:
                pass

        return once

    return setup


async def _when_all(stack, request) -> Once:
    async def noop():
        return 1

    t = tc.spawn(noop())
    await t
    return lambda: tc.when_all(t)


async def _udp_recvfrom(stack, request) -> Once:
    u = await tc.net.udp()
    stack.push_async_callback(u.close)
    plain = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stack.callback(plain.close)
    left = [0]

    async def once():
        if not left[0]:  # loopback queues a datagram before sendto returns
            for _ in range(64):
                plain.sendto(b"x", ("127.0.0.1", u.port))
            left[0] = 64
        left[0] -= 1
        return await u.recvfrom()

    return once


async def _udp_sendto_empty(stack, request) -> Once:
    u = await tc.net.udp()
    stack.push_async_callback(u.close)
    return lambda: u.sendto(b"", ("127.0.0.1", u.port))


async def _udp(stack, request) -> Once:
    # Closed in bulk, without an await: a close suspends, which would hide a missing charge.
    made: list = []
    stack.push_async_callback(_close_all, made)

    async def constructor():
        made.append(await tc.net.udp())
        if len(made) > 64:
            _close_now(made)

    return constructor


async def _listen(stack, request) -> Once:
    made: list = []
    stack.push_async_callback(_close_all, made)

    async def once():
        made.append(await tc.net.listen())
        if len(made) > 64:
            _close_now(made)

    return once


async def _listen_unix(stack, request) -> Once:
    tmp = request.getfixturevalue("tmp_path")
    made: list = []
    stack.push_async_callback(_close_all, made)
    n = [0]

    async def once():
        n[0] += 1
        made.append(await tc.net.listen_unix(tmp / f"s{n[0]}"))
        if len(made) > 64:
            _close_now(made)

    return once


def _close_now(made: list) -> None:
    """Close listeners and sockets without an await (plain close of their socket)."""
    for s in made:
        s._sock.close()
        s._ops.close()
    made.clear()


async def _close_all(made: list) -> None:
    for s in made:
        await s.close()


async def _tcp_pair(stack):
    lst = await tc.net.listen()
    client = await tc.net.connect("127.0.0.1", lst.port)
    conn = await lst.accept()
    await lst.close()
    stack.push_async_callback(client.close)
    stack.push_async_callback(conn.close)
    return client, conn


def _accept(unix: bool) -> Callable[..., Awaitable[Once]]:
    """A listener with a crowd in its backlog (plain client sockets, connected in batches as
    it runs out), each accept taking one at once; the accepted streams are closed without an
    await now and then, so that only the accepts are counted."""

    async def make(stack, request) -> Once:
        if unix:
            path = str(request.getfixturevalue("tmp_path") / "l")
            lst = await tc.net.listen_unix(path, backlog=256)
        else:
            lst = await tc.net.listen(backlog=256)
        stack.push_async_callback(lst.close)
        made: list = []
        clients: list[socket.socket] = []
        stack.callback(_close_now, made)
        stack.callback(lambda: [c.close() for c in clients])
        queued = [0]

        async def once():
            if not queued[0]:
                for c in clients:
                    c.close()
                clients.clear()
                for _ in range(128):  # the kernel queues each in the backlog: nothing waits
                    if unix:
                        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        c.connect(path)
                    else:
                        c = socket.create_connection(("127.0.0.1", lst.port))
                    clients.append(c)
                queued[0] = 128
            made.append(await lst.accept())
            queued[0] -= 1
            if len(made) > 64:
                _close_now(made)

        return once

    return make


async def _stream_send_empty(stack, request) -> Once:
    client, _ = await _tcp_pair(stack)
    return lambda: client.send(b"")


async def _stream_sendall_empty(stack, request) -> Once:
    client, _ = await _tcp_pair(stack)
    return lambda: client.sendall(b"")


async def _stream_send_nowait_empty(stack, request) -> Once:
    client, _ = await _tcp_pair(stack)
    return lambda: client.send_nowait(b"")


async def _stream_recv(stack, request) -> Once:
    client, conn = await _tcp_pair(stack)
    plain = socket.socket(fileno=conn.fileno())  # the peer's bytes, written synchronously
    left = [0]

    async def once():
        if not left[0]:
            plain.send(b"x" * 4096)
            left[0] = 4096
        left[0] -= 1
        return await client.recv(1)

    # detach, never close, the borrowed descriptor (conn's close owns it)
    stack.callback(plain.detach)
    return once


async def _stream_sendfile_nothing(stack, request) -> Once:
    client, _ = await _tcp_pair(stack)
    path = request.getfixturevalue("tmp_path") / "f"
    path.write_bytes(b"")
    f = await tc.io.open(path)
    stack.push_async_callback(f.close)
    return lambda: client.sendfile(f, 0, 0)


async def _file(stack, request, mode="rb", data=b"line\n" * 200_000) -> Any:
    path = request.getfixturevalue("tmp_path") / "f"
    path.write_bytes(data)
    f = await tc.io.open(path, mode)
    stack.push_async_callback(f.close)
    return f


async def _file_read(stack, request) -> Once:
    f = await _file(stack, request)
    return lambda: f.read(1)


async def _file_read_at(stack, request) -> Once:
    f = await _file(stack, request)
    return lambda: f.read_at(1, 0)


async def _file_readinto(stack, request) -> Once:
    f = await _file(stack, request)
    buf = bytearray(1)
    return lambda: f.readinto(buf)


async def _file_readinto_at(stack, request) -> Once:
    f = await _file(stack, request)
    buf = bytearray(1)
    return lambda: f.readinto_at(buf, 0)


async def _file_readline(stack, request) -> Once:
    f = await _file(stack, request)
    return f.readline


async def _file_anext(stack, request) -> Once:
    f = await _file(stack, request)
    return f.__anext__


async def _file_write_empty(stack, request) -> Once:
    f = await _file(stack, request, "r+b")
    return lambda: f.write(b"")


async def _file_write_at_empty(stack, request) -> Once:
    f = await _file(stack, request, "r+b")
    return lambda: f.write_at(b"", 0)


async def _tls(stack, request):
    server_ctx = request.getfixturevalue("server_ctx")
    client_ctx = request.getfixturevalue("client_ctx")
    lst, client, server = await tls_pair(server_ctx, client_ctx)
    await lst.close()
    stack.push_async_callback(client.close)
    stack.push_async_callback(server.close)
    return client, server


async def _tls_recv(stack, request) -> Once:
    client, server = await _tls(stack, request)
    left = [0]

    async def once():
        if not left[0]:
            await server.sendall(b"x" * 16384)
            left[0] = 16384
        left[0] -= 1
        return await client.recv(1)

    return once


async def _tls_do_handshake(stack, request) -> Once:
    client, _ = await _tls(stack, request)
    return client.do_handshake  # done already: nothing to wait for


async def _tls_send_empty(stack, request) -> Once:
    client, _ = await _tls(stack, request)
    return lambda: client.send(b"")


async def _tls_sendall_empty(stack, request) -> Once:
    client, _ = await _tls(stack, request)
    return lambda: client.sendall(b"")


async def _tls_sendfile_nothing(stack, request) -> Once:
    client, _ = await _tls(stack, request)
    f = await _file(stack, request)
    return lambda: client.sendfile(f, 0, 0)


AT_ONCE: dict[str, Callable[..., Awaitable[Once]]] = {
    "Task.__await__": _join_done,
    "Listener.accept": _accept(unix=True),
    "TcpListener.accept": _accept(unix=False),
    "Channel.send": _channel_send,
    "Channel.recv": _channel_recv,
    "Channel.__anext__": _channel_anext,
    "Mutex.lock": _mutex_lock,
    "Mutex.__aenter__": _aenter(tc.Mutex),
    "Semaphore.acquire": _semaphore_acquire,
    "Semaphore.__aenter__": _aenter(lambda: tc.Semaphore(1)),
    "Event.wait": _event_wait,
    "Condition.wait": _condition_wait,
    "Condition.__aenter__": _aenter(tc.Condition),
    "tc.when_all": _when_all,
    "UdpSocket.recvfrom": _udp_recvfrom,
    "UdpSocket.sendto": _udp_sendto_empty,
    "net.udp": _udp,
    "net.listen": _listen,
    "net.listen_unix": _listen_unix,
    "Stream.send": _stream_send_empty,
    "Stream.sendall": _stream_sendall_empty,
    "Stream.send_nowait": _stream_send_nowait_empty,
    "Stream.recv": _stream_recv,
    "Stream.sendfile": _stream_sendfile_nothing,
    "AsyncFile.read": _file_read,
    "AsyncFile.read_at": _file_read_at,
    "AsyncFile.readinto": _file_readinto,
    "AsyncFile.readinto_at": _file_readinto_at,
    "AsyncFile.readline": _file_readline,
    "AsyncFile.__anext__": _file_anext,
    "AsyncFile.write": _file_write_empty,
    "AsyncFile.write_at": _file_write_at_empty,
    "TlsStream.recv": _tls_recv,
    "TlsStream.do_handshake": _tls_do_handshake,
    "TlsStream.send": _tls_send_empty,
    "TlsStream.sendall": _tls_sendall_empty,
    "TlsStream.sendfile": _tls_sendfile_nothing,
}


# -- the enumeration ---------------------------------------------------------------------------


def test_every_public_operation_is_classified():
    """Every public callable that returns something to await is in AT_ONCE, SUSPENDS or
    EXEMPT: a new one must say which, and the at-once ones get the checks below."""
    ops = public_operations()
    known = set(AT_ONCE) | set(SUSPENDS) | set(EXEMPT)
    assert not ops - known, f"public operations nobody classified: {sorted(ops - known)}"
    assert not known - ops, f"classified names that are no public operation: {sorted(known - ops)}"
    assert not set(AT_ONCE) & set(EXEMPT) and not set(AT_ONCE) & set(SUSPENDS)


def test_the_exempt_operations_are_the_ones_design_md_names():
    """docs/design.md rule 16 lists what is exempt and why: each name here is there."""
    text = (ROOT / "docs" / "design.md").read_text()
    rule = text[text.index("16. **A task that never has to wait"):text.index("17. **")]
    flat = " ".join(rule.split())
    names = list(EXEMPT)
    names += [f"tc.{ns}" for ns in sorted(EXEMPT_NAMESPACES)]
    missing = [n for n in names if f"`{n}`" not in flat]
    assert not missing, f"exempt but not named in design.md rule 16: {missing}"


# -- the checks of each at-once operation -----------------------------------------------------


def _drive(request, kind: str, contexts: int, body: Callable[[Once], Awaitable[Any]]) -> Any:
    async def main():
        async with contextlib.AsyncExitStack() as stack:
            once = await AT_ONCE[kind](stack, request)
            return await body(once)

    return run(main(), contexts)


@pytest.mark.parametrize("kind", sorted(AT_ONCE))
def test_a_loop_of_it_lets_the_other_tasks_of_its_context_run(request, contexts, kind):
    """Another task on the same context counts its steps: between two of them the loop made
    at most INLINE_BUDGET operations that completed at once, and maybe one more that
    suspended and was resumed at the step's start (a refill that waited, a recv woken with
    its bytes: not charged, it did suspend)."""

    async def body(once):
        return await loop_beside_counter(once, LIMIT, steps=40)

    done, seen = _drive(request, kind, contexts, body)
    assert done < LIMIT, f"{kind}: the other task never ran while the loop did {LIMIT}"
    assert max(gaps(seen)) <= INLINE_BUDGET + 1, (kind, gaps(seen))


TICKS = 3


@pytest.mark.parametrize("kind", sorted(AT_ONCE))
def test_a_10ms_ticker_beside_a_loop_of_it_is_not_starved(request, contexts, kind):
    """A ticker sleeping 10 ms at a time on the same context gets its turn within a budget's
    worth of operations once its deadline has passed. Counts, not time: the loop's task
    first holds the context (a blocking ``time.sleep``) until the ticker's deadline is
    behind it, then counts the operations it makes before the ticker has ticked; a fast
    operation would otherwise finish a loop bounded by counts before 10 ms have passed."""

    async def body(once):
        ticks = [0]
        worst = 0

        async def ticker():
            while ticks[0] < TICKS:
                await tc.sleep(0.01)
                ticks[0] += 1

        t = spawn_here(ticker())
        await tc.yield_now()  # the ticker starts and parks on its first deadline
        while ticks[0] < TICKS:
            seen = ticks[0]
            time.sleep(0.011)  # the ticker's deadline passes while this task holds the context
            ops = 0
            while ticks[0] == seen and ops < LIMIT:
                await once()
                ops += 1
            worst = max(worst, ops)
            if ops == LIMIT:
                break
        t.cancel()
        with contextlib.suppress(tc.Cancelled):
            await t
        return ticks[0], worst

    ticks, worst = _drive(request, kind, contexts, body)
    assert ticks == TICKS, f"{kind}: {LIMIT} operations ran and the 10 ms ticker ticked {ticks} times"
    assert worst <= 2 * (INLINE_BUDGET + 1), f"{kind}: {worst} operations before a due ticker ran"


@pytest.mark.parametrize("kind", sorted(AT_ONCE))
def test_timeout_0_expires_at_it_every_time(request, kind):
    """``tc.timeout(0)`` expires at the first await, every time: the operation, which would
    complete at once, raises TimeoutError instead, also with the budget full (first
    operation of a step) and twice in a row."""

    async def body(once):
        await once()  # a warm-up, outside what is checked (a driver may set up on first use)
        raised = 0
        for _ in range(3):
            await tc.yield_now()  # a fresh step: the budget is full
            try:
                async with tc.timeout(0):
                    await once()
            except TimeoutError:
                raised += 1
        await once()  # and without a timeout, it completes
        return raised

    assert _drive(request, kind, 1, body) == 3


@pytest.mark.parametrize("kind", sorted(AT_ONCE))
def test_a_cancel_due_is_raised_at_it(request, kind):
    """A cancel requested while the task runs is raised at its next operation, even one that
    would complete at once."""

    async def body(once):
        await once()  # the warm-up
        tc.current_task().cancel()
        try:
            await once()
        except tc.Cancelled:
            return "cancelled"
        return "completed"

    assert _drive(request, kind, 1, body) == "cancelled"


def test_timeout_0_around_a_channel_send_leaves_the_channel_as_it_was():
    """The timeout lands before the operation starts: nothing was sent or taken."""

    async def main():
        ch: tc.Channel[int] = tc.Channel(4)
        await ch.send(1)
        with pytest.raises(TimeoutError):
            async with tc.timeout(0):
                await ch.send(2)
        with pytest.raises(TimeoutError):
            async with tc.timeout(0):
                await ch.recv()
        return ch.statistics().buffered, await ch.recv()

    assert run(main(), 1) == (1, 1)


def test_a_timeout_fires_in_a_loop_of_channel_operations():
    """The issue's loop: send/recv on Channel(16) inside tc.timeout(0.05) never fired; now it
    fires (bounded by counts: the loop gives up after LIMIT rounds)."""

    async def main():
        ch: tc.Channel[int] = tc.Channel(16)
        n = 0
        try:
            async with tc.timeout(0.05):
                while n < LIMIT * 10:
                    await ch.send(n)
                    await ch.recv()
                    n += 1
        except TimeoutError:
            return "fired", n
        return "never fired", n

    assert run(main(), 1)[0] == "fired"


def test_a_udp_drain_is_interrupted_by_a_timeout_that_is_due():
    """recvfrom of datagrams already queued: a timeout due lands at the next one."""

    async def main():
        u = await tc.net.udp()
        plain = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for _ in range(100):
                plain.sendto(b"x", ("127.0.0.1", u.port))
            got = 0
            with pytest.raises(TimeoutError):
                async with tc.timeout(0):
                    while got < 100:
                        await u.recvfrom()
                        got += 1
            return got
        finally:
            plain.close()
            await u.close()

    assert run(main(), 1) == 0

