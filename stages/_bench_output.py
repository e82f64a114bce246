"""What the bench stage makes of its rows: speed-ups against eager PyTorch, the Markdown
tables, the PNG plot, the run report's tables, the headline and the regression gate.

A row is one measured cell: a runtime at a batch size (and, for Triton, a concurrency);
in-process runtimes always have concurrency 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import StageFailed
from pipeline.stage import StageContext
from stages._bench import GPU_PHASES, SERVER_PHASES

Row = dict[str, Any]


class RegressionGate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # Keys: "runtime", "runtime@batch", or for Triton "triton:MODEL@batch/cN" (N: concurrency).
    # Latency is the highest configured percentile.
    max_latency_ms: dict[str, float] = Field(default_factory=dict)
    min_items_per_s: dict[str, float] = Field(default_factory=dict)
    min_speedup_vs_eager: dict[str, float] = Field(default_factory=dict)  # runtime -> x, at every batch


def speedups(rows: list[Row]) -> None:
    """Median latency of eager PyTorch over the row's, at the same batch; single-stream
    rows only (at concurrency > 1 latency includes queueing and is not comparable)."""
    eager = {r["batch"]: r["median_ms"] for r in rows if r["runtime"] == "eager"}
    for row in rows:
        if row["batch"] in eager and row["concurrency"] == 1:
            row["speedup_vs_eager"] = eager[row["batch"]] / row["median_ms"]


def tail(row: Row) -> str:
    """The highest configured percentile's key, e.g. 'p99'."""
    return max(row["percentiles_ms"], key=lambda k: float(k[1:]))


def cell_key(row: Row) -> str:
    key = f"{row['runtime']}@{row['batch']}"
    return key if row["concurrency"] == 1 else f"{key}/c{row['concurrency']}"


# -- tables -----------------------------------------------------------------------------------
def latency_table(rows: list[Row], percentiles: tuple[float, ...]) -> tuple[list[str], list[list[Any]]]:
    pcols = [f"p{p:g}" for p in percentiles]
    columns = ["runtime", "device", "batch", "concurrency", "median ms", *[f"{c} ms" for c in pcols], "items/s", "× eager", "stable"]
    body = [
        [r["runtime"], r["device"], r["batch"], r["concurrency"], _f(r["median_ms"], 3), *[_f(r["percentiles_ms"][c], 3) for c in pcols],
         _f(r["items_per_s"], 1), _f(r["speedup_vs_eager"], 2) if "speedup_vs_eager" in r else "", "yes" if r["stable"] else "no"]
        for r in rows
    ]
    return columns, body


def gpu_table(rows: list[Row]) -> tuple[list[str], list[list[Any]]]:
    columns = ["runtime", "batch", "host latency median ms", *[f"{name} median ms" for name in GPU_PHASES.values()]]
    body = [[r["runtime"], r["batch"], _f(r["median_ms"], 3), *[_f(r["gpu"][k]["median"], 3) for k in GPU_PHASES]] for r in rows if "gpu" in r]
    return columns, body


def server_table(rows: list[Row]) -> tuple[list[str], list[list[Any]]]:
    columns = ["model", "batch", "concurrency", "client mean ms", *[f"{k.removesuffix('_us').replace('_', ' ')} us" for k in SERVER_PHASES],
               "client + network us", "avg server batch"]
    body = [
        [r["runtime"].removeprefix("triton:"), r["batch"], r["concurrency"], _f(r["mean_ms"], 3),
         *[_f(r["server"][k], 0) for k in SERVER_PHASES], _f(r["server"]["client_overhead_us"], 0), _f(r["server"]["avg_server_batch"], 2)]
        for r in rows if "server" in r
    ]
    return columns, body


def _f(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def markdown(rows: list[Row], percentiles: tuple[float, ...]) -> str:
    parts = [_markdown(*latency_table(rows, percentiles))]
    for title, (columns, body) in (("GPU phases", gpu_table(rows)), ("Triton server-side, per request", server_table(rows))):
        if body:
            parts.append(f"**{title}**\n\n" + _markdown(columns, body))
    return "\n".join(parts)


def _markdown(columns: list[str], body: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def report(ctx: StageContext, rows: list[Row], skipped: dict[str, str], percentiles: tuple[float, ...]) -> None:
    note = "; ".join(f"{k} skipped: {v}" for k, v in skipped.items())
    ctx.report_table("Latency and throughput", *latency_table(rows, percentiles), note=note)
    for title, (columns, body) in (("GPU phases (CUDA events)", gpu_table(rows)), ("Triton: server-side time per request", server_table(rows))):
        if body:
            ctx.report_table(title, columns, body)


def headline(rows: list[Row], skipped: dict[str, str]) -> str:
    best: dict[str, Row] = {}
    for r in rows:
        best.setdefault(r["runtime"], r)
    parts = [f"{k} b{v['batch']} {v['median_ms']:.2f} ms" for k, v in best.items()]
    return ", ".join(parts + [f"{k}: skipped" for k in skipped])


# -- plot ---------------------------------------------------------------------------------------
def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    served = [r for r in rows if "server" in r]
    fig, axes = plt.subplots(1, 3 if served else 2, figsize=(15 if served else 10, 4))
    _per_batch(axes[0], axes[1], [r for r in rows if "server" not in r])
    if served:
        _per_concurrency(axes[2], served)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def _per_batch(lat: Any, thr: Any, rows: list[Row]) -> None:
    for runtime in dict.fromkeys(r["runtime"] for r in rows):
        mine = [r for r in rows if r["runtime"] == runtime]
        batches = [r["batch"] for r in mine]
        (line,) = lat.plot(batches, [r["median_ms"] for r in mine], marker="o", label=f"{runtime} median")
        top = tail(mine[0])
        lat.plot(batches, [r["percentiles_ms"][top] for r in mine], linestyle="--", color=line.get_color(), alpha=0.6, label=f"{runtime} {top}")
        thr.plot(batches, [r["items_per_s"] for r in mine], marker="o", color=line.get_color(), label=runtime)
    ticks = sorted({r["batch"] for r in rows})
    lat.set_xticks(ticks)
    thr.set_xticks(ticks)
    lat.set(xlabel="batch", ylabel="latency (ms)", title="latency per call")
    thr.set(xlabel="batch", ylabel="items / s", title="throughput (one stream)")
    lat.legend(fontsize=7)
    thr.legend(fontsize=7)


def _per_concurrency(ax: Any, rows: list[Row]) -> None:
    for runtime in dict.fromkeys(r["runtime"] for r in rows):
        mine = [r for r in rows if r["runtime"] == runtime]
        ax.plot([r["concurrency"] for r in mine], [r["items_per_s"] for r in mine], marker="o", label=runtime.removeprefix("triton:"))
        for r in mine:
            ax.annotate(f"{tail(r)} {r['percentiles_ms'][tail(r)]:.3g} ms", (r["concurrency"], r["items_per_s"]), fontsize=6)
    ax.set_xticks(sorted({r["concurrency"] for r in rows}))
    ax.set(xlabel="concurrent requests", ylabel="items / s", title="Triton end to end (client side)")
    ax.legend(fontsize=7)


# -- gate ---------------------------------------------------------------------------------------
def gate(rows: list[Row], limits: RegressionGate) -> None:
    bad = [problem for r in rows for problem in _cell_problems(r, limits)]
    bad += _unmatched(rows, limits)
    if bad:
        raise StageFailed("benchmark regression gate failed: " + "; ".join(bad))


def _unmatched(rows: list[Row], limits: RegressionGate) -> list[str]:
    """A gate key that names no measured cell is a typo, not a pass."""
    known = {cell_key(r) for r in rows} | {r["runtime"] for r in rows}
    keys = [*limits.max_latency_ms, *limits.min_items_per_s, *limits.min_speedup_vs_eager]
    return [f"gate key '{k}' matches no measured cell (cells: {', '.join(sorted(known))})" for k in dict.fromkeys(keys) if k not in known]


def _cell_problems(r: Row, limits: RegressionGate) -> list[str]:
    key, problems, name = cell_key(r), [], tail(r)
    limit = limits.max_latency_ms.get(key, limits.max_latency_ms.get(r["runtime"]))
    if limit is not None and r["percentiles_ms"][name] > limit:
        problems.append(f"{key}: {name} {r['percentiles_ms'][name]:.3f} ms > {limit} ms")
    floor = limits.min_items_per_s.get(key, limits.min_items_per_s.get(r["runtime"]))
    if floor is not None and r["items_per_s"] < floor:
        problems.append(f"{key}: {r['items_per_s']:.1f} items/s < {floor}")
    need = limits.min_speedup_vs_eager.get(r["runtime"])
    if need is not None and r["concurrency"] == 1:
        if "speedup_vs_eager" not in r:
            problems.append(f"{key}: no eager row at batch {r['batch']} to compare with (add eager to runtimes / batches)")
        elif r["speedup_vs_eager"] < need:
            problems.append(f"{key}: {r['speedup_vs_eager']:.2f}x eager < {need}x")
    return problems
