"""TLS streams over loopback (the certificate comes from conftest's ``tls_cert`` fixture)."""

from __future__ import annotations


async def tls_pair(server_ctx, client_ctx):
    """A TLS listener, a client connected to it, and the server's side of that connection."""
    import tinycoro as tc

    lst = await tc.net.listen(ssl=server_ctx)
    accepted = tc.spawn(lst.accept())
    client = await tc.net.connect("127.0.0.1", lst.port, ssl=client_ctx,
                                  server_hostname="localhost")
    return lst, client, await accepted
