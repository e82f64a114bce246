"""Whether a bench row's numbers can be right, judged against the other rows of the same
runtime and against one stated model of time: a call at batch b takes `fixed + b x
per_item`, so a larger batch never takes less time than a smaller one. Every window of a
parked-thread measurement agrees with the others (116 ms at batch 1, each window alike),
so no stability rule sees it; the rows beside it do: batch 4 in 0.12 ms.

- A row whose latency exceeds a larger batch's (same runtime, same load) by more than
  MARGIN is implausible: no model computes fewer items slower.
- A row timed with several intra-op threads that is more than THREADS_MARGIN slower than
  the same call with one thread (the check `one_thread_ms`) is implausible: its threads
  were parked, not working.

An implausible row is shown, with the reason, and never compared: no speed-up, no
selection, no gate rests on it. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import groupby

from deploy.runtimes.record import BenchRow

MARGIN = 1.25  # noise a smaller batch may show over a larger one before it is impossible
THREADS_MARGIN = 2.0  # how much slower N threads may be than one before they were parked


def checked(rows: Sequence[BenchRow]) -> list[BenchRow]:
    """The rows, each implausible one marked with why (the first reason found)."""
    reasons = {id(r): why for r in rows if (why := _threads(r))}
    for _, group in groupby(sorted(rows, key=_series), key=_series):
        ordered = sorted(group, key=lambda r: r.batch)
        for small in ordered:
            bigger = [r for r in ordered if r.batch > small.batch and small.median_ms > MARGIN * r.median_ms]
            if bigger and id(small) not in reasons:
                big = bigger[0]
                reasons[id(small)] = (
                    f"batch {small.batch} took {small.median_ms:.4g} ms, more than batch {big.batch}'s "
                    f"{big.median_ms:.4g} ms: no model computes fewer items slower (a parked thread or "
                    "another process's work, not the runtime's)"
                )
    return [replace(r, implausible=reasons[id(r)]) if id(r) in reasons else r for r in rows]


def _series(row: BenchRow) -> tuple[str, str, str]:
    return (row.label, row.device, row.load)


def _threads(row: BenchRow) -> str | None:
    threads = row.environment.threads if row.environment is not None else None
    if row.one_thread_ms is None or not threads or threads < 2:
        return None
    if row.median_ms <= THREADS_MARGIN * row.one_thread_ms:
        return None
    return (
        f"with {threads} intra-op threads {row.median_ms:.4g} ms, with 1 thread {row.one_thread_ms:.4g} ms: the "
        "threads were parked by the scheduler (another process holds the cores), not working"
    )


def comparable(row: BenchRow) -> bool:
    """Whether a verdict may rest on the row: stable, not contended, not implausible."""
    return row.stable and row.flagged is None


def verdict_lead(rows: Sequence[BenchRow]) -> str:
    """What every verdict on these rows starts with: "CONTENDED: …; " and "IMPLAUSIBLE: …; "."""
    contended = [r for r in rows if r.contended and r.environment is not None]
    lead = ""
    if contended:
        worst = max(contended, key=lambda r: r.environment.others_share if r.environment else 0.0)
        env = worst.environment
        assert env is not None
        lead += (
            f"CONTENDED: load {env.load1:.1f} on {env.cores} cores during bench, other processes up to "
            f"{100 * env.others_share:.0f} % of the cores ({len(contended)} of {len(rows)} rows); "
        )
    implausible = [r for r in rows if r.implausible]
    if implausible:
        lead += (
            f"IMPLAUSIBLE: {', '.join(f'{r.label}@{r.batch}' for r in implausible)} (no verdict on them); "
        )
    return lead
