"""On a free-threaded CPython (``--disable-gil``) tinycoro keeps the GIL off: importing every
public module and running every public operation leaves ``sys._is_gil_enabled()`` False with no
``PYTHON_GIL`` override, and ``python -m tinycoro`` says "free-threaded" in its first line.
Where an import does turn it on, tinycoro says so at import, naming the module.

The checks run in a fresh interpreter each (the GIL, once on, stays on for the process). They
skip on GIL builds, except the ones about what a GIL build prints and how the warning reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import types

import pytest

from tinycoro import compiled

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
needs_ft = pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython (3.13t)")

# Every public module: the runtime's, and the two layers above it where their extras are there.
RUNTIME_MODULES = [
    "tinycoro", "tinycoro.io", "tinycoro.net", "tinycoro.sync", "tinycoro.lowlevel",
    "tinycoro.aio", "tinycoro.channel", "tinycoro.combinators", "tinycoro.scopes", "tinycoro.tls",
    "tinycoro.testing", "tinycoro.uring", "tinycoro.compiled",
]


def _env() -> dict[str, str]:
    """This environment without a GIL override (TINYCORO_PURE passes: both runtimes are checked)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@needs_ft
@pytest.mark.timeout(150)
def test_importing_every_public_module_leaves_the_gil_off():
    # -W error::RuntimeWarning: CPython's "the GIL has been enabled to load module X" and
    # tinycoro's own warning fail the import, naming the module.
    _run(f"""
        import importlib, importlib.util, sys
        for name in {RUNTIME_MODULES!r}:
            importlib.import_module(name)
            assert not sys._is_gil_enabled(), name
        # the layers above the runtime, where their dependencies are installed
        for name, needs in [("tinycoro.kernel_ext", "ipykernel"), ("tinycoro.cluster", "ipyparallel")]:
            if importlib.util.find_spec(needs) is not None:
                importlib.import_module(name)
                assert not sys._is_gil_enabled(), name
    """, "-W", "error::RuntimeWarning")


# Every public operation, on two contexts: files and paths, TCP, Unix and UDP sockets, timers,
# each primitive shared across contexts, the combinators and scopes, and tinycoro inside asyncio.
WORKLOAD = """
    import asyncio, os, socket, sys, tempfile
    import tinycoro as tc

    async def files(root):
        path = os.path.join(root, "f")
        await tc.io.write_file(path, b"x" * 100_000)
        assert await tc.io.read_file(path) == b"x" * 100_000
        f = await tc.io.open(path, "rb")
        async with f:
            assert len(await f.read(10)) == 10
        assert (await tc.io.stat(path)).st_size == 100_000
        await tc.io.mkdir(os.path.join(root, "d"))
        await tc.io.rename(path, os.path.join(root, "d", "g"))
        await tc.io.unlink(os.path.join(root, "d", "g"))
        await tc.io.rmdir(os.path.join(root, "d"))

    async def echo_once(listener):
        async with await listener.accept() as conn:
            while data := await conn.recv():
                await conn.sendall(data)

    async def sockets(root):
        lst = await tc.net.listen("127.0.0.1", 0)
        server = tc.spawn(echo_once(lst))
        async with await tc.net.connect("127.0.0.1", lst.port) as conn:
            await conn.sendall(b"ping")
            assert await conn.recv() == b"ping"
        await server
        await lst.close()
        ulst = await tc.net.listen_unix(os.path.join(root, "sock"))
        server = tc.spawn(echo_once(ulst))
        async with await tc.net.connect_unix(os.path.join(root, "sock")) as conn:
            await conn.sendall(b"unix")
            assert await conn.recv() == b"unix"
        await server
        await ulst.close()
        a, b = await tc.net.udp(), await tc.net.udp()
        await a.sendto(b"dgram", ("127.0.0.1", b.port))
        assert (await b.recvfrom())[0] == b"dgram"
        await a.close()
        await b.close()

    async def primitives():
        mutex, event, sem, cond = tc.Mutex(), tc.Event(), tc.Semaphore(2), tc.Condition()
        chan, group, latch = tc.Channel(4), tc.WaitGroup(), tc.Latch(4)
        total = [0]

        async def worker(i):
            for _ in range(50):
                async with mutex:
                    total[0] += 1
                async with sem:
                    await tc.yield_now()
            await chan.send(i)
            latch.count_down()
            await event.wait()
            async with cond:
                cond.notify_all()
            group.done()

        group.add(4)
        tasks = [tc.spawn(worker(i)) for i in range(4)]
        got = sorted([await chan.recv() for _ in range(4)])
        await latch.wait()
        event.set()
        for t in tasks:
            await t
        await group.wait()
        assert total[0] == 200 and got == [0, 1, 2, 3]

    async def combinators():
        async def value(v):
            await tc.sleep(0.001)
            return v
        assert await tc.when_all(value(1), value(2)) == [1, 2]
        await tc.when_any(value(3), tc.sleep(10))
        async with tc.TaskGroup() as tg:
            tg.spawn(value(4))
        try:
            async with tc.timeout(0.01):
                await tc.sleep(10)
        except TimeoutError:
            pass
        else:
            raise AssertionError("tc.timeout did not time out")

    async def main():
        with tempfile.TemporaryDirectory() as root:
            await tc.when_all(files(root), sockets(root), primitives(), combinators())
        return tc.current_context()

    tc.run(main(), contexts=2)

    async def in_asyncio():  # tinycoro's awaitables on asyncio's loop (tinycoro.aio's host)
        return await tc.io.read_file("/proc/self/stat")
    assert asyncio.run(in_asyncio())
    assert not sys._is_gil_enabled(), "the GIL was turned on while tinycoro ran"
    print("ok")
"""


@needs_ft
@pytest.mark.timeout(150)
def test_running_every_public_operation_leaves_the_gil_off():
    assert _run(WORKLOAD, "-W", "error::RuntimeWarning").stdout.split() == ["ok"]


DEMO = ["-n", "2", "--files", "2", "--file-kib", "4", "--clients", "2", "--rounds", "2",
        "--timers", "2"]


@needs_ft
@pytest.mark.timeout(150)
def test_the_demo_says_free_threaded_and_leaves_the_gil_off():
    code = f"""
        import runpy, sys
        sys.argv = ["tinycoro", *{DEMO!r}]
        try:
            runpy.run_module("tinycoro", run_name="__main__")
        except SystemExit as e:
            assert not e.code, e.code
        print("GIL enabled:", sys._is_gil_enabled())
    """
    lines = _run(code, "-W", "error::RuntimeWarning").stdout.splitlines()
    assert "free-threaded, GIL off" in lines[0], lines[0]
    assert lines[-1] == "GIL enabled: False"


@pytest.mark.skipif(FREE_THREADED, reason="what a GIL build prints")
@pytest.mark.timeout(150)
def test_a_gil_build_demo_says_nothing_of_free_threading():
    out = subprocess.run([sys.executable, "-m", "tinycoro", *DEMO], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "free-threaded" not in out.stdout.splitlines()[0]
    assert compiled.gil_state() == ""


def test_an_import_that_turned_the_gil_on_is_named_with_its_fix(monkeypatch):
    # What a free-threaded user sees when the liburing binding was built without declaring that
    # it runs without the GIL: one warning, naming the binding's modules and the rebuild command.
    binding = types.ModuleType("liburing.common")
    binding.__file__ = "/x/liburing/common" + compiled.importlib.machinery.EXTENSION_SUFFIXES[0]
    monkeypatch.setitem(sys.modules, "liburing.common", binding)
    monkeypatch.setattr(compiled, "FREE_THREADED", True)
    monkeypatch.setattr(compiled, "_gil_at_start", False)
    monkeypatch.setattr(compiled, "_modules_at_start", frozenset())
    monkeypatch.setattr(compiled, "gil_enabled", lambda: True)
    monkeypatch.setattr(compiled, "_warned_gil", [])
    with pytest.warns(RuntimeWarning) as record:
        compiled.note_gil()
        compiled.note_gil()  # once per process
    assert len(record) == 1
    message = str(record[0].message)
    assert "turned the GIL on" in message and "liburing.common" in message
    assert compiled.BINDING_FIX in message
    assert compiled.gil_state() == "free-threaded, GIL on"


def test_no_warning_where_the_gil_was_on_before_tinycoro(monkeypatch, recwarn):
    # Another module (or PYTHON_GIL=1) turned it on first: not tinycoro's to report.
    monkeypatch.setattr(compiled, "FREE_THREADED", True)
    monkeypatch.setattr(compiled, "_gil_at_start", True)
    monkeypatch.setattr(compiled, "gil_enabled", lambda: True)
    monkeypatch.setattr(compiled, "_warned_gil", [])
    compiled.note_gil()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
