"""A problem at one place of a config, the unit every validation speaks in (the spec's
checks, each stage's `check`, the engine's ConfigError). Stdlib only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Issue:
    """One problem at one place in the config, e.g. `stages.export.opset`."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message
