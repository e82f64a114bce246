"""A model's load state as Triton's repository index reports it, typed: what serving,
smoke, bench, triton_search and `deploy serve` branch on."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class ModelState(str, Enum):
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"  # failed to load: `reason` says why
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    TIMEOUT = "TIMEOUT"  # ours: neither READY nor UNAVAILABLE by the startup deadline
    UNKNOWN = "UNKNOWN"  # not in the index, or a state this enum does not list


@dataclass(frozen=True)
class LoadState:
    state: ModelState
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.state is ModelState.READY

    @property
    def settled(self) -> bool:
        """Loading is over, either way."""
        return self.state in (ModelState.READY, ModelState.UNAVAILABLE)

    @classmethod
    def from_index(cls, entry: dict[str, Any]) -> LoadState:
        """One entry of POST /v2/repository/index ({name, version, state, reason})."""
        raw = str(entry.get("state", ""))
        state = ModelState(raw) if raw in ModelState.__members__ else ModelState.UNKNOWN
        return cls(state, str(entry.get("reason", "")))

    def __str__(self) -> str:
        return f"{self.state.value} {self.reason}".rstrip()


UNKNOWN = LoadState(ModelState.UNKNOWN)
