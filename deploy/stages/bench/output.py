"""What the bench stage makes of its rows: speed-ups against eager PyTorch, the Markdown
tables, the PNG plot, the run report's tables, the headline and the regression gate.

A row is one measured cell: a runtime at a batch size (and, for Triton, a load: a number
of closed-loop streams, or an offered request rate); in-process runtimes always have one
stream. The tables' `load` column reads `1`, `c4` (4 streams) or `r50` (50 requests/s).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from deploy.pipeline.errors import Contended, StageFailed
from deploy.pipeline.graph.contract import Cell, StageContext
from deploy.runtimes.catalog import BASELINE
from deploy.runtimes.harness import GPU_PHASES, SERVER_PHASES, required_samples
from deploy.runtimes.record import BenchRow as Row

if TYPE_CHECKING:
    pass


class RegressionGate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # Keys: "runtime", "runtime@batch", or for Triton "triton:MODEL@batch/cN" (N: concurrency)
    # or "triton:MODEL@batch/rR" (R: offered requests/s).
    # Latency is the highest configured percentile. A cell with too few samples for it
    # (p99 needs 100) fails the gate with that reason: gating on what is really the maximum
    # of a few samples would pass or fail by chance.
    max_latency_ms: dict[str, float] = Field(
        default_factory=dict,
        description="Cell -> highest latency allowed at the highest percentile, ms. Cell keys: `runtime` (all its cells), "
        "`runtime@batch`, or `triton:MODEL@batch/cN` (N: concurrency) / `triton:MODEL@batch/rR` (R: requests/s); a cell with too few samples for the percentile fails.",
    )
    min_items_per_s: dict[str, float] = Field(
        default_factory=dict, description="Cell -> least throughput, items/s (keys as max_latency_ms)."
    )
    min_speedup_vs_eager: dict[str, float] = Field(
        default_factory=dict,
        description="Runtime -> least speed-up over eager PyTorch, at every batch (single-stream rows).",
    )


def speedups(rows: list[Row]) -> list[Row]:
    """Median latency of eager PyTorch over the row's, at the same batch; single-stream
    in-process rows only (at concurrency > 1 latency includes queueing, and a served row
    includes the server and the network: eager runs in process only, so neither compares).
    None where either side is contended or implausible: no speed-up rests on those."""
    eager = {r.batch: r for r in rows if r.runtime == BASELINE}
    return [
        replace(r, speedup_vs_eager=eager[r.batch].median_ms / r.median_ms)
        if r.batch in eager
        and r.concurrency == 1
        and r.server is None
        and r.flagged is None
        and eager[r.batch].flagged is None
        else r
        for r in rows
    ]


# -- tables -----------------------------------------------------------------------------------
def latency_table(rows: list[Row], percentiles: tuple[float, ...]) -> tuple[list[str], list[list[Cell]]]:
    """One line per cell; `n` is the sample count the statistics rest on, a percentile with
    fewer samples than it needs is marked `*` (see `footnote`)."""
    pcols = [f"p{p:g}" for p in percentiles]
    columns = [
        "runtime",
        "device",
        "batch",
        "load",
        "n",
        "median ms",
        *[f"{c} ms" for c in pcols],
        "items/s",
        "× eager",
        "stable",
        "machine",
        "plausible",
        "windows",
    ]
    body: list[list[Cell]] = [
        [
            r.label,
            r.device,
            r.batch,
            r.load,
            r.iterations,
            _f(r.median_ms, 3),
            *[_percentile_cell(r, c) for c in pcols],
            _f(r.items_per_s, 1),
            "" if r.speedup_vs_eager is None else _f(r.speedup_vs_eager, 2),
            "yes" if r.stable else "no",
            _machine(r),
            "yes" if not r.implausible else f"NO: {r.implausible.split(':')[0]}",
            r.windows_used,
        ]
        for r in rows
    ]
    return columns, body


def _machine(row: Row) -> str:
    """The machine during the row: quiet or CONTENDED, other processes' share, threads."""
    env = row.environment
    if env is None:
        return "not measured"
    threads = f", {env.threads} thr" if env.threads else ""
    return f"{'CONTENDED' if env.contended else 'quiet'} ({100 * env.others_share:.0f} % others{threads})"


def _percentile_cell(row: Row, key: str) -> str:
    return _f(row.percentiles_ms[key], 3) + ("" if row.supported(key) else "*")


def footnote(rows: list[Row]) -> str:
    """What `*` means, naming only the percentiles that carry it."""
    marked = dict.fromkeys(k for r in rows for k in r.percentiles_ms if not r.supported(k))
    if not marked:
        return ""
    needs = ", ".join(f"{k} needs {required_samples(float(k[1:]))}" for k in marked)
    return (
        f"* fewer samples than the percentile needs (n >= 1 / (1 - p): {needs}): "
        "the value is at or near the sample maximum, not a supported percentile."
    )


def gpu_table(rows: list[Row]) -> tuple[list[str], list[list[Cell]]]:
    columns = [
        "runtime",
        "batch",
        "host latency median ms",
        *[f"{name} median ms" for name in GPU_PHASES.values()],
    ]
    body: list[list[Cell]] = [
        [r.runtime, r.batch, _f(r.median_ms, 3), *[_f(r.gpu[k]["median"], 3) for k in GPU_PHASES]]
        for r in rows
        if r.gpu is not None
    ]
    return columns, body


def server_table(rows: list[Row]) -> tuple[list[str], list[list[Cell]]]:
    columns = [
        "model",
        "batch",
        "load",
        "client mean ms",
        *[f"{k.removesuffix('_us').replace('_', ' ')} us" for k in SERVER_PHASES],
        "client + network us",
        "avg server batch",
        "late sends",
        "server threads",
    ]
    body: list[list[Cell]] = [
        [
            r.model,
            r.batch,
            r.load,
            _f(r.mean_ms, 3),
            *[_f(getattr(r.server, k), 0) for k in SERVER_PHASES],
            overhead(r.server.client_overhead_us),
            _f(r.server.avg_server_batch, 2),
            "" if r.late_share is None else f"{100 * r.late_share:.0f} %",
            r.served_threads or "",
        ]
        for r in rows
        if r.server is not None
    ]
    return columns, body


# The server's phases are summed per request from its counters, the client's mean from
# its own clock: a request in flight when the window opened is counted whole by one and
# not the other, so where the true overhead is tens of microseconds the difference can
# come out slightly below zero. Shown as what it is, not as a negative time.
SERVER_NOTE = (
    "client + network us = the client's mean latency less the server's phases, per request; "
    "'below resolution' where the server's count of the window's edge requests makes the difference negative "
    "(a negative time is not a measurement)"
)


def overhead(us: float) -> str:
    return f"{us:.0f}" if us >= 0 else "below resolution"


def _f(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def markdown(rows: list[Row], percentiles: tuple[float, ...]) -> str:
    parts = [_markdown(*latency_table(rows, percentiles))]
    if footnote(rows):
        parts.append("\\" + footnote(rows) + "\n")  # escaped: a line starting with * is a list item
    for title, (columns, body) in (
        ("GPU phases", gpu_table(rows)),
        ("Triton server-side, per request", server_table(rows)),
    ):
        if body:
            parts.append(f"**{title}**\n\n" + _markdown(columns, body))
    return "\n".join(parts)


def _markdown(columns: list[str], body: list[list[Cell]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def report(
    ctx: StageContext, rows: list[Row], skipped: dict[str, str], percentiles: tuple[float, ...]
) -> None:
    notes = [*(f"{k} skipped: {v}" for k, v in skipped.items()), footnote(rows)]
    note = "; ".join(n for n in notes if n)
    ctx.report_table("Latency and throughput", *latency_table(rows, percentiles), note=note)
    for title, (columns, body), table_note in (
        ("GPU phases (CUDA events)", gpu_table(rows), ""),
        ("Triton: server-side time per request", server_table(rows), SERVER_NOTE),
    ):
        if body:
            ctx.report_table(title, columns, body, note=table_note)


def headline(rows: list[Row], skipped: dict[str, str]) -> str:
    best: dict[str, Row] = {}
    for r in rows:
        best.setdefault(r.subject, r)
    parts = [f"{k} b{v.batch} {v.median_ms:.2f} ms{_marks(v)}" for k, v in best.items()]
    return ", ".join(parts + [f"{k}: skipped" for k in skipped])


def _marks(row: Row) -> str:
    """What a headline figure carries: unstable, contended, implausible."""
    said = [] if row.stable else ["unstable"]
    said += ["contended"] if row.contended else []
    said += ["implausible"] if row.implausible else []
    return f" ({', '.join(said)})" if said else ""


# -- gate ---------------------------------------------------------------------------------------
def gate(rows: list[Row], limits: RegressionGate) -> None:
    """Fails the stage with every broken limit. A gated cell of a flagged row (contended,
    implausible) is no verdict, met or broken: a busy machine does not only slow a call
    down (bench fits fewer threads then, and a small model can run faster on one; a limit
    met that way failed on the quiet machine). The stage then stops as Contended (exit 8),
    naming the cells, unless a plausible, quiet row broke a limit (a regression, exit 1)."""
    eager = {r.batch: r for r in rows if r.runtime == BASELINE}
    bad, unjudged = _unmatched(rows, limits), []
    for r in rows:
        flag = _flag(r, eager.get(r.batch), limits)
        if flag and _gated(r, limits):
            unjudged.append(f"{r.cell_key} ({flag})")
        elif not flag:
            bad += _cell_problems(r, limits)
    if bad:
        raise StageFailed("benchmark regression gate failed: " + "; ".join(bad))
    if unjudged:
        raise Contended(
            f"the regression gate could not judge {'; '.join(unjudged)}: no verdict on such a timing; "
            "rerun on a quiet machine (`deploy run --wait-quiet SECONDS`)"
        )


def _gated(r: Row, limits: RegressionGate) -> bool:
    """Whether any limit of the gate reads this row."""
    keys = (r.cell_key, r.subject)
    return any(k in limits.max_latency_ms or k in limits.min_items_per_s for k in keys) or (
        r.runtime in limits.min_speedup_vs_eager and r.concurrency == 1
    )


def _flag(r: Row, eager: Row | None, limits: RegressionGate) -> str | None:
    """Why the row's gate cells carry no verdict: its own flag, or eager's where its
    speed-up is gated."""
    if r.flagged:
        return r.flagged
    gated = limits.min_speedup_vs_eager.get(r.runtime) is not None
    return eager.flagged if gated and eager is not None and eager.flagged else None


def _unmatched(rows: list[Row], limits: RegressionGate) -> list[str]:
    """A gate key that names no measured cell is a typo, not a pass."""
    known = {r.cell_key for r in rows} | {r.subject for r in rows}
    keys = [*limits.max_latency_ms, *limits.min_items_per_s, *limits.min_speedup_vs_eager]
    return [
        f"gate key '{k}' matches no measured cell (cells: {', '.join(sorted(known))})"
        for k in dict.fromkeys(keys)
        if k not in known
    ]


def _cell_problems(r: Row, limits: RegressionGate) -> list[str]:
    key = r.cell_key
    problems = _latency_problems(r, key, limits.max_latency_ms.get(key, limits.max_latency_ms.get(r.subject)))
    floor = limits.min_items_per_s.get(key, limits.min_items_per_s.get(r.subject))
    if floor is not None and r.items_per_s < floor:
        problems.append(f"{key}: {r.items_per_s:.1f} items/s < {floor}")
    need = limits.min_speedup_vs_eager.get(r.runtime)
    if need is not None and r.concurrency == 1:
        if r.speedup_vs_eager is None:
            problems.append(
                f"{key}: no eager row at batch {r.batch} to compare with (add eager to runtimes / batches)"
            )
        elif r.speedup_vs_eager < need:
            problems.append(f"{key}: {r.speedup_vs_eager:.2f}x eager < {need}x")
    return problems


def _latency_problems(r: Row, key: str, limit: float | None) -> list[str]:
    """The highest configured percentile against its limit, refused when too few samples
    support it (the gate's documented choice: no silent gating on a near-maximum)."""
    name = r.tail()
    if limit is None:
        return []
    if not r.supported(name):
        return [
            f"{key}: {name} is not supported by {r.iterations} samples (needs >= {required_samples(float(name[1:]))}); "
            "raise iterations / duration_s or gate on a lower percentile"
        ]
    value = r.percentiles_ms[name]
    return [f"{key}: {name} {value:.3f} ms > {limit} ms"] if value > limit else []
