"""What the client knows about one engine."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import SchedulerStats


@dataclass(frozen=True)
class EngineInfo:
    """One engine: its ipyparallel id (the key of ``Cluster.stats()``), host name and pid."""

    id: int
    host: str
    pid: int

    def __str__(self) -> str:
        return f"engine {self.id} ({self.host}:{self.pid})"


@dataclass(frozen=True)
class EngineLoad:
    """One engine's answer to a load probe: its scheduler's stats, the CPU seconds (user +
    system, all threads) its process has used so far (two answers give its CPU share), and
    whether its interpreter's GIL is enabled (False only on a free-threaded one with the GIL
    off, whose contexts run Python in parallel; an engine that does not say has one)."""

    stats: SchedulerStats
    cpu_seconds: float
    gil: bool = True
