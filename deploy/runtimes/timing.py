"""A timed call: what the benchmark harness measures, for any runtime."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timed:
    call: Callable[[], Any]
    phases: list[tuple[float, float, float]] | None = (
        None  # per call: H2D, compute, D2H (ms); GPU runtimes only
    )
