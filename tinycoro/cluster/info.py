"""What the client knows about one engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineInfo:
    """One engine: its ipyparallel id (the key of ``Cluster.stats()``), host name and pid."""

    id: int
    host: str
    pid: int

    def __str__(self) -> str:
        return f"engine {self.id} ({self.host}:{self.pid})"
