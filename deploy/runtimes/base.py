"""The interface every runtime has: load (path, device, threads) in the constructor,
then `infer(feeds) -> outputs` for parity checks and `timed(feeds)` for benchmarks
(a zero-argument call over fixed inputs; on a GPU with the H2D / compute / D2H split)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from deploy.runtimes.timing import Timed


class Device(str, Enum):
    CPU = "cpu"
    CUDA = "cuda"


Feeds = Mapping[str, "np.ndarray"]


def chosen_outputs(have: Sequence[str], wanted: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """The outputs a runtime answers: those asked for (each one the model must have), else all."""
    missing = sorted(set(wanted or ()) - set(have))
    if missing:
        from deploy.pipeline.errors import StageFailed

        raise StageFailed(f"the {what} model has no output(s) {missing} (it has {list(have)})")
    return tuple(wanted or have)


class Session(Protocol):
    @property
    def outputs(self) -> tuple[str, ...]: ...

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]: ...

    def timed(self, feeds: Feeds) -> Timed: ...
