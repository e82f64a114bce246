"""The release comparison's timing (runtimes.interleaved) driven by deliberately noisy
calls — a sleep with random jitter — whose true ratio is known: a call compared with
itself reads 1.00 within the precision asked for, a slower one is beyond the limit, and
a ratio the budget cannot pin down on either side of the limit is inconclusive."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

import pytest

from deploy.runtimes.interleaved import Budget, Interval, Judgement, interval, judge, measure


def jittery(base_ms: float, jitter: float, seed: int) -> Callable[[], None]:
    """A call that sleeps base_ms, give or take `jitter` (a fraction), at random."""
    rng = random.Random(seed)

    def call() -> None:
        time.sleep(base_ms / 1000 * (1 + jitter * (2 * rng.random() - 1)))

    return call


# Calls of 5-8 ms in windows of 0.1 s: a loaded machine's late wake-ups (about 0.5 ms a
# sleep) then move a ratio by a few per cent, where with 1 ms calls they moved it by 20 %.
FAST = Budget(precision=0.05, min_rounds=8, max_rounds=300, max_s=30, window_s=0.1)


def test_a_noisy_call_compared_with_itself_reads_one_within_the_precision() -> None:
    found = measure(jittery(5.0, 0.5, 1), jittery(5.0, 0.5, 2), FAST)
    assert found.settled and 0.95 <= found.ratio <= 1.05, found
    assert found.high / found.low <= 1.05**2
    assert judge(found, 1.25) is Judgement.WITHIN


def test_a_slower_call_is_beyond_the_limit_with_its_interval() -> None:
    found = measure(jittery(5.0, 0.3, 3), jittery(8.0, 0.3, 4), FAST)
    assert 1.4 < found.ratio < 2.0 and found.low > 1.25, found  # 1.6 on a quiet machine
    assert judge(found, 1.25) is Judgement.BEYOND


def test_a_budget_too_small_for_the_noise_is_inconclusive_not_a_verdict() -> None:
    """Where the measured ratio lands depends on the machine (a loaded one stretches short
    sleeps unevenly: a CI run read 1.51 for a true 1.25), so the limits are placed around
    the interval found: inside it no verdict is given, beyond either end one is."""
    tight = Budget(precision=0.001, min_rounds=6, max_rounds=6, max_s=5, window_s=0.002)
    found = measure(jittery(1.0, 0.9, 5), jittery(1.25, 0.9, 6), tight)
    assert not found.settled and found.rounds == 6
    assert found.high / found.low > 1.001**2, found  # the budget ran out before the precision
    inside = math.sqrt(found.low * found.high)
    assert judge(found, inside) is Judgement.INCONCLUSIVE, found
    assert judge(found, found.low * 0.99) is Judgement.BEYOND
    assert judge(found, found.high) is Judgement.WITHIN


def test_the_interval_is_the_trimmed_means_tukey_mclaughlin_interval() -> None:
    """By hand for 0.00 .. 0.09: 2 of 10 cut from each end, the mean of 0.02 .. 0.07 is
    0.045; winsorized, the standard deviation is sqrt(0.00425 / 9) = 0.021731; t(5) =
    2.571; half-width 2.571 * 0.021731 / (0.6 * sqrt(10)) = 0.029446 (log scale)."""
    logs = [i / 100 for i in range(10)]
    random.Random(0).shuffle(logs)
    found = interval(logs, 0.05)
    want = (math.exp(0.045), math.exp(0.045 - 0.029446), math.exp(0.045 + 0.029446))
    assert (found.ratio, found.low, found.high) == pytest.approx(want, rel=1e-5)
    assert found.settled and not interval(logs, 0.02).settled  # half-width 2.99 %: within 5, not 2
    few = interval(logs[:4], 0.5)  # too few rounds for an interval at all: nothing decided on it
    assert not few.settled and judge(few, 1.25) is Judgement.INCONCLUSIVE
    stalled = [*logs, 5.0]  # one round caught a stall: the trimmed mean hardly moves
    assert interval(stalled, 0.05).ratio == pytest.approx(math.exp(0.05), rel=0.01)


def test_an_inverse_swaps_the_ends() -> None:
    assert Interval(2.0, 1.6, 2.5, 9, True).inverse() == Interval(0.5, 0.4, 0.625, 9, True)
