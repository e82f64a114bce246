"""Two versions of a model timed against each other until the ratio is known well enough
to decide on, or said to be inconclusive: never a verdict on noise.

Each round times old, new, new, old (ABBA: whatever a call leaves behind, ONNX Runtime's
spinning threads on the same cores, weighs on each side once) and yields one ratio
new / old. The estimate is the median round ratio, with a distribution-free 95 %
confidence interval (see `interval`). Rounds are added until the
interval's half-width is within `precision` of the ratio (at least `min_rounds`, at most
`max_rounds` or `max_s` seconds). A busy machine slows both sides of a round alike; what
it adds is spread between rounds, which the interval measures and more rounds shrink.

Stdlib only, like the harness.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class Budget:
    precision: float = 0.03  # the interval's half-width, as a fraction of the ratio
    min_rounds: int = 8
    max_rounds: int = 100
    max_s: float = 20.0
    window_s: float = 0.1  # each of a round's four timed windows


@dataclass(frozen=True)
class Interval:
    """new / old, with its 95 % confidence interval and how many rounds it rests on."""

    ratio: float
    low: float
    high: float
    rounds: int
    settled: bool  # the interval got within the precision asked for

    def text(self) -> str:
        return f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}] ({self.rounds} rounds)"

    def inverse(self) -> Interval:
        """old / new: a per-item time ratio from a throughput one, and back."""
        return Interval(1 / self.ratio, 1 / self.high, 1 / self.low, self.rounds, self.settled)


class Verdict(StrEnum):
    WITHIN = "within"  # the whole interval is at or below the limit
    BEYOND = "beyond"  # the whole interval is above it
    INCONCLUSIVE = "inconclusive"  # it straddles the limit: measured, not decided


def judge(found: Interval, limit: float) -> Verdict:
    if found.high <= limit:
        return Verdict.WITHIN
    if found.low > limit:
        return Verdict.BEYOND
    return Verdict.INCONCLUSIVE


def measure(old: Callable[[], Any], new: Callable[[], Any], budget: Budget) -> Interval:
    """Rounds of ABBA windows until the interval is within `budget.precision`."""
    old(), new()  # first calls (allocations, lazy init) stay out of the windows
    calls = max(1, int(budget.window_s / max(_per_call(old), _per_call(new))))
    logs: list[float] = []
    began = time.perf_counter()
    while True:
        a1, b1, b2, a2 = (_window(f, calls) for f in (old, new, new, old))
        logs.append(math.log((b1 + b2) / (a1 + a2)))
        found = interval(logs, budget.precision)
        spent = time.perf_counter() - began
        enough = len(logs) >= budget.min_rounds and found.settled
        if enough or len(logs) >= budget.max_rounds or spent >= budget.max_s:
            return found


def interval(logs: list[float], precision: float) -> Interval:
    """The median round ratio with its distribution-free 95 % interval: the order
    statistics at ranks n/2 -+ 1.96 sqrt(n)/2 (a binomial interval for the median). On a
    busy machine a round now and then catches a scheduler stall on one side; the median
    and its interval are not pulled by such rounds, where a mean and its t-interval are."""
    ordered = sorted(logs)
    n = len(ordered)
    middle = math.exp(statistics.median(ordered))
    if n < 6:  # too few rounds for a 95 % interval of the median
        return Interval(middle, math.exp(ordered[0]), math.exp(ordered[-1]), n, False)
    reach = 1.96 * math.sqrt(n) / 2
    low = ordered[max(0, math.floor(n / 2 - reach) - 1)]
    high = ordered[min(n - 1, math.ceil(n / 2 + reach))]
    settled = max(math.exp(high) / middle, middle / math.exp(low)) - 1 <= precision
    return Interval(middle, math.exp(low), math.exp(high), n, settled)


def _per_call(call: Callable[[], Any], least_s: float = 0.01) -> float:
    """Seconds a call takes, from as many calls as fill `least_s` (one call of a fast
    model is mostly timer and scheduler noise)."""
    calls = 1
    while True:
        took = _window(call, calls) * calls
        if took >= least_s:
            return took / calls
        calls *= 4


def _window(call: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls
