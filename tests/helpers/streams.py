"""Connected streams over loopback, for tests of what happens on a connection."""

from __future__ import annotations

import tinycoro as tc


async def tcp_pair() -> tuple[tc.net.TcpStream, tc.net.TcpStream]:
    """A connected (client, server) pair of TcpStreams; the listener is closed already."""
    lst = await tc.net.listen()
    client = await tc.net.connect("127.0.0.1", lst.port)
    conn = await lst.accept()
    await lst.close()
    return client, conn
