"""Two versions of a model timed against each other until the ratio is known well enough
to decide on, or said to be inconclusive: never a verdict on noise.

Each round times old, new, new, old (ABBA: whatever a call leaves behind, ONNX Runtime's
spinning threads on the same cores, weighs on each side once) and yields one ratio
new / old. The estimate is the trimmed mean of the rounds' log ratios (a ratio and its
inverse equally far from 1), with its 95 % confidence interval (see `interval`). Rounds
are added until the
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
    max_rounds: int = 200
    max_s: float = 45.0
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


class Judgement(StrEnum):
    WITHIN = "within"  # the whole interval is at or below the limit
    BEYOND = "beyond"  # the whole interval is above it
    INCONCLUSIVE = "inconclusive"  # it straddles the limit: measured, not decided


def judge(found: Interval, limit: float) -> Judgement:
    if found.high <= limit:
        return Judgement.WITHIN
    if found.low > limit:
        return Judgement.BEYOND
    return Judgement.INCONCLUSIVE


@dataclass(frozen=True)
class Sides:
    """An interleaved measurement: the ratio, and each side's median seconds per call
    over its windows."""

    interval: Interval
    old_s: float
    new_s: float
    calls: int  # per side


def measure(old: Callable[[], Any], new: Callable[[], Any], budget: Budget) -> Interval:
    """Rounds of ABBA windows until the interval is within `budget.precision`."""
    return measure_sides(old, new, budget).interval


def measure_sides(old: Callable[[], Any], new: Callable[[], Any], budget: Budget) -> Sides:
    """`measure`, keeping each side's window times."""
    old(), new()  # first calls (allocations, lazy init) stay out of the windows
    calls = max(1, int(budget.window_s / max(_per_call(old), _per_call(new))))
    logs: list[float] = []
    olds: list[float] = []
    news: list[float] = []
    began = time.perf_counter()
    while True:
        a1, b1, b2, a2 = (_window(f, calls) for f in (old, new, new, old))
        olds += [a1, a2]
        news += [b1, b2]
        logs.append(math.log((b1 + b2) / (a1 + a2)))
        found = interval(logs, budget.precision)
        if _done(len(logs), found, time.perf_counter() - began, budget):
            return Sides(found, statistics.median(olds), statistics.median(news), calls * len(olds))


def _done(rounds: int, found: Interval, spent: float, budget: Budget) -> bool:
    if rounds >= budget.max_rounds:
        return True
    return rounds >= budget.min_rounds and (found.settled or spent >= budget.max_s)  # never below min_rounds


# Tukey's trimmed mean: a fifth of the rounds cut from each end. On a busy machine a round
# now and then catches a stall on one side; the trimmed mean is not pulled by such rounds,
# and on well-behaved ones it is nearly as efficient as the mean (the median is not: it
# needed about half again as many rounds for the same interval here).
TRIM = 0.2
# Two-sided 95 % Student-t quantiles by degrees of freedom (the largest listed at or below
# the one wanted: a slightly wider interval, never a narrower one); past 30, 1.96.
T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
T95 |= {10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def interval(logs: list[float], precision: float) -> Interval:
    """The 20 % trimmed mean of the log round ratios, with the Tukey-McLaughlin 95 %
    interval (the winsorized standard deviation, t with n - 2g - 1 degrees of freedom),
    back on the ratio scale."""
    ordered = sorted(logs)
    n = len(ordered)
    g = math.floor(TRIM * n)
    if n < 6:  # too few rounds for an interval worth the name: it decides nothing
        return Interval(math.exp(statistics.median(ordered)), 0.0, math.inf, n, False)
    kept = ordered[g : n - g]
    winsorized = [ordered[g]] * g + kept + [ordered[n - g - 1]] * g
    centre = statistics.fmean(kept)
    half = _t95(n - 2 * g - 1) * statistics.stdev(winsorized) / ((1 - 2 * TRIM) * math.sqrt(n))
    settled = math.exp(half) - 1 <= precision
    return Interval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n, settled)


def _t95(df: int) -> float:
    return 1.96 if df > 30 else T95[max(k for k in T95 if k <= df)]


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
