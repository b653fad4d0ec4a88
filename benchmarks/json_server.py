"""A request/response server whose every request costs ~150 us of Python, for the free-threaded
workload (:mod:`benchmarks.w_freethreaded`): ``python -m benchmarks.json_server CONTEXTS``
prints ``READY <port>`` and serves until killed.

One task per connection, as :mod:`benchmarks.http_server`'s tinycoro responder: every request
(whatever ends in a blank line; the load generator sends a fixed one) is answered by the
handler's JSON response. The handler is what a small web service does: parse a ~4 KiB JSON
order document (64 line items), work over its items in Python (line totals, a normalised SKU,
deduplicated tags, the order total), and serialise the result. That was ~150 us of CPU on
Python 3.11 and on 3.13t on the machine of docs/benchmarks.md; the run's table shows the
server CPU per request it actually spent. The document is the same for every request, so every
response has the same length, which the load generator is told.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Coroutine

from .echo_server import serve_tinycoro
from .http_server import serve_requests

ITEMS = 64  # line items: a ~3.8 KiB compact document, ~150 us per request on Python 3.11


def document(items: int = ITEMS) -> bytes:
    """The order document every request handles, as it would arrive: compact JSON bytes."""
    return json.dumps(
        {
            "order": 918273,
            "customer": {"id": 4711, "name": "Ada Lovelace", "email": "ada@example.org"},
            "items": [
                {"sku": f"sku-{i:05d}", "qty": i % 7 + 1, "price": round(3.5 + i * 0.25, 2), "tags": ["a", "b"]}
                for i in range(items)
            ],
        },
        separators=(",", ":"),
    ).encode()


DOCUMENT = document()


def handle(text: bytes) -> bytes:
    """One request's work: the JSON round trip of *text* with a little Python over its items."""
    doc = json.loads(text)
    total = 0.0
    for item in doc["items"]:
        line = item["qty"] * item["price"]
        item["sku"] = item["sku"].upper()
        item["total"] = round(line, 2)
        item["tags"] = sorted(set(item["tags"]))
        total += line
    doc["total"] = round(total, 2)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


RESPONSE_BYTES = len(handle(DOCUMENT))


def respond(n: int) -> bytes:
    """The answer to *n* requests: each handles the document afresh."""
    return b"".join(handle(DOCUMENT) for _ in range(n))


def serve_connection(conn: Any) -> Coroutine[Any, Any, None]:
    return serve_requests(conn, respond)


def serve(contexts: int) -> None:
    serve_tinycoro(contexts, serve_connection)


if __name__ == "__main__":
    try:
        serve(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    except KeyboardInterrupt:
        pass
