"""Running coroutines on the peers: asyncio's default loop and uvloop, and what is installed."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any, Coroutine

import tinycoro as tc

ASYNCIO = "asyncio"
UVLOOP = "uvloop"


def missing(module: str) -> str | None:
    """None if *module* can be imported, else a skip reason naming the extra to install."""
    if importlib.util.find_spec(module) is None:
        return f"{module} not installed (pip install -e '.[bench]')"
    return None


def run_on(loop: str, coro: Coroutine[Any, Any, Any]) -> Any:
    """Run *coro* to completion on a fresh event loop of kind *loop* ("asyncio" or "uvloop")."""
    if loop == ASYNCIO:
        return asyncio.run(coro)
    if loop == UVLOOP:
        import uvloop

        return uvloop.run(coro)  # a uvloop.Loop from uvloop's own loop factory
    raise ValueError(loop)


def run_tc(coro: Coroutine[Any, Any, Any], contexts: int) -> Any:
    """Run *coro* on a fresh tinycoro Scheduler with *contexts* contexts."""
    return tc.run(coro, contexts=contexts)
