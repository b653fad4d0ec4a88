"""tinycoro awaitables on ipykernel's own asyncio loop (no ``%load_ext tinycoro``): a plain
kernel's cells ``await`` asyncio and tinycoro together; the loop's hosted ring serves them."""

from __future__ import annotations

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def kernel(kernel_dirs):
    km = KernelManager(kernel_name="plain", kernel_spec_manager=KernelSpecManager(kernel_dirs=kernel_dirs))
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=30)
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run(kc, code: str) -> str:
    out: list[str] = []
    errors: list[str] = []

    def hook(m):
        if m["msg_type"] == "stream":
            out.append(m["content"]["text"])
        elif m["msg_type"] == "error":
            errors.append(f"{m['content']['ename']}: {m['content']['evalue']}")

    reply = kc.execute_interactive(code, timeout=60, output_hook=hook)
    assert reply["content"]["status"] == "ok", errors
    return "".join(out)


def test_cells_await_asyncio_and_tinycoro_together(kernel, tmp_path):
    path = tmp_path / "cell.bin"
    _run(kernel, "import asyncio, os, tinycoro as tc")
    out = _run(
        kernel,
        f"await tc.io.write_file({str(path)!r}, b'from a cell')\n"
        "await asyncio.sleep(0.01)\n"
        "await tc.sleep(0.01)\n"
        "r = await asyncio.gather(tc.sleep(0.01), asyncio.sleep(0.01, result=1))\n"
        f"print(await tc.io.read_file({str(path)!r}), r)\n",
    )
    assert out.strip() == "b'from a cell' [None, 1]"
    # an asyncio streams client against a tinycoro server task on a Scheduler, in one cell
    out = _run(
        kernel,
        "async def server(port_box):\n"
        "    lst = await tc.net.listen('127.0.0.1', 0)\n"
        "    port_box.set(lst.port)\n"
        "    conn = await lst.accept()\n"
        "    await conn.sendall((await conn.recv()).upper())\n"
        "    await conn.close(); await lst.close()\n"
        "s = tc.Scheduler(2).start()\n"
        "box = tc.Event()\n"
        "t = s.submit(server(box))\n"
        "reader, writer = await asyncio.open_connection('127.0.0.1', await box.wait())\n"
        "writer.write(b'hello'); await writer.drain()\n"
        "print(await reader.read(5)); writer.close(); await t; s.stop()\n",
    )
    assert out.strip() == "b'HELLO'"
    # later cells reuse the loop's ring (one per loop, not one per cell)
    _run(kernel, "from tinycoro.aio import host\nefd = host.host_for(asyncio.get_running_loop()).ring.efd")
    out = _run(
        kernel,
        "for _ in range(5): await tc.sleep(0.001)\n"
        "print(host.host_for(asyncio.get_running_loop()).ring.efd == efd)",
    )
    assert out.strip() == "True"
