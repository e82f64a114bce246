"""The machine under the bench stage: waiting for it to settle (`wait_quiet_s`, or
`deploy run --wait-quiet`), the one threads policy every runtime is timed with
(runtimes/contention.py), the one-thread check of each runtime's smallest batch, and
the words every verdict starts with when a row cannot carry one (contended, implausible:
runtimes/plausibility.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError, Contended
from deploy.pipeline.graph.contract import StageContext
from deploy.runtimes.contention import Fit

WAIT_ENV = "DEPLOY_WAIT_QUIET"  # seconds; set by `deploy run --wait-quiet`, not part of any key


def settle(ctx: StageContext, wait_s: float) -> None:
    """Waits up to `wait_s` (the param, or $DEPLOY_WAIT_QUIET when larger) for a quiet
    stretch; gives up (exit 8, Contended) naming the load."""
    from deploy.runtimes import contention

    wait = max(wait_s, _env_wait())
    if wait <= 0:
        return
    began = time.monotonic()

    def busy(now: Any) -> None:
        said = f"waiting for a quiet machine ({time.monotonic() - began:.0f} of {wait:g} s): {now.text()}"
        ctx.log.info(said)
        ctx.progress(0, what=said)

    found = contention.settle(contention.QUIET_S, wait, busy=busy)
    ctx.log.info(
        "waited %.0f s for a quiet machine: %s", time.monotonic() - began, found.text() if found else "?"
    )
    if found is not None and found.contended:
        raise Contended(
            f"{found.text()} for {time.monotonic() - began:.0f} s: bench gave up waiting for a quiet machine "
            "(wait_quiet_s); nothing was timed"
        )
    ctx.record("waited_quiet", found.text() if found else "not measured (no /proc)")


def _env_wait() -> float:
    """$DEPLOY_WAIT_QUIET in seconds; a value that is none is refused naming it (through the
    Python API it was a ValueError from float(), naming nothing)."""
    given = os.environ.get(WAIT_ENV, "").strip()
    try:
        seconds = float(given) if given else 0.0
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ConfigError(
            f"${WAIT_ENV}", [Issue(f"${WAIT_ENV}", f"{given!r} is not a number of seconds (0 or more)")]
        )
    return seconds


def fit(ctx: StageContext, asked: int | None) -> Fit:
    """The intra-op threads every in-process runtime gets, and why (recorded)."""
    from deploy.runtimes import contention

    found = contention.fitted(asked)
    ctx.record(
        "threads",
        {"used": found.threads, "asked": asked, "cores": contention.cores(), "cores_free": found.cores_free},
    )
    return found


def one_thread(make: Callable[[int], Any], smallest: bool, fit_: Fit) -> float | None:
    """The call's median with one intra-op thread, where it was timed with several, at the
    smallest batch (a short measurement: the plausibility check's)."""
    from deploy.runtimes import harness

    if not smallest or not fit_.threads or fit_.threads < 2:
        return None
    timed = make(1)
    timing = harness.measure(timed.call, harness.Settings(warmup_ms=50, duration_s=0.3, iterations=5))
    return float(sorted(timing.latencies_ms)[len(timing.latencies_ms) // 2])
