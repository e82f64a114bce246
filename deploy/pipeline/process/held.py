"""A signal's effect held while a block runs and applied once, when the outermost block
ends: `stopping.deferred()` (a stop raised only once a stage's child is known) and
`lifeline.whole()` (a stage's child ended only once a release's switch is done) are two
holds of this kind. Stdlib only: the CLI's handlers are installed before anything loads."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class HeldSignal(Generic[T]):
    def __init__(self, apply: Callable[[T], object]) -> None:
        self._apply = apply
        self.depth = 0  # blocks under way
        self.pending: T | None = None  # what arrived meanwhile (the last of them)

    def hold(self, value: T) -> bool:
        """Inside a block: `value` is kept for its end (True); outside: False, apply it now."""
        if self.depth:
            self.pending = value
        return bool(self.depth)

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth and self.pending is not None:
                value, self.pending = self.pending, None
                self._apply(value)
