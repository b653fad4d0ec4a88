"""Cell code shared by the in-process notebook tests (test_kernel_runner) and the real-kernel
ones (test_kernel_protocol)."""

# A tinycoro coroutine, and a tinycoro echo server task that the cell's asyncio streams client
# connects to (``server`` echoes upper-cased until the client closes; ``box`` holds its port).
TWO_CELL = "async def two():\n    await tc.sleep(0.001)\n    return 2\n"
ECHO_SERVER_CELL = (
    "import asyncio\n"
    "async def echo(port_box):\n"
    "    lst = await tc.net.listen('127.0.0.1', 0)\n"
    "    port_box.set(lst.port)\n"
    "    conn = await lst.accept()\n"
    "    while data := await conn.recv():\n"
    "        await conn.sendall(data.upper())\n"
    "    await conn.close(); await lst.close()\n"
    "box = tc.Event()\n"
    "server = tc.spawn(echo(box))\n"
    "reader, writer = await asyncio.open_connection('127.0.0.1', await box.wait())\n"
)


# A Mutex that 'holder' keeps until ``gate`` is set, and a contender coroutine for it.
HELD_MUTEX_CELL = (
    "m, gate = tc.Mutex(), tc.Event()\n"
    "async def holder():\n"
    "    async with m:\n"
    "        await gate.wait()\n"
    "async def contender():\n"
    "    async with m:\n"
    "        pass\n"
)

# A cell that prints 'started', sleeps 30 s and prints 'finally ran' when interrupted.
LONG_SLEEP_CELL = (
    "try:\n"
    "    print('started', flush=True)\n"
    "    await tc.sleep(30)\n"
    "finally:\n"
    "    print('finally ran')\n"
)
