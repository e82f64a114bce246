"""What the triton_search stage writes besides its record: the CSV in perf_analyzer's
columns, the Pareto plot (matplotlib) and the report's tables."""

from __future__ import annotations

from pathlib import Path

from deploy.pipeline.graph.contract import StageContext
from deploy.runtimes.record import BenchRow
from deploy.stages.triton_search.params import SearchGoal
from deploy.stages.triton_search.search_record import Point, Result

CSV_COLUMNS = (
    "Model Config,Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency,Avg latency"
)


def csv(result: Result) -> str:
    """Client send / receive are not split out here (0); their share is in Network+Server
    Send/Recv, the client latency less the server's phases. A percentile the bench did
    not configure is empty."""
    lines = [CSV_COLUMNS]
    for m in result.measured:
        lines += [_csv_row(m.point, r) for r in m.rows]
    return "\n".join(lines) + "\n"


def _csv_row(point: Point, r: BenchRow) -> str:
    server = r.server
    phases = (
        [server.queue_us, server.compute_input_us, server.compute_infer_us, server.compute_output_us]
        if server
        else [0.0] * 4
    )
    overhead = server.client_overhead_us if server else 0.0
    tails = [r.median_ms] + [r.percentiles_ms.get(f"p{p}") for p in (90, 95, 99)]
    cells = [f'"{point.label}"', str(r.concurrency), f"{r.items_per_s:.2f}", "0", f"{overhead:.0f}"]
    cells += [f"{v:.0f}" for v in phases] + ["0"]
    cells += ["" if v is None else f"{1000 * v:.0f}" for v in tails] + [f"{1000 * r.mean_ms:.0f}"]
    return ",".join(cells)


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the (latency, throughput) points no other point beats on both."""
    return [
        i
        for i, (lat, thr) in enumerate(points)
        if not any(o_lat <= lat and o_thr >= thr and (o_lat, o_thr) != (lat, thr) for o_lat, o_thr in points)
    ]


def plot(result: Result, goal: SearchGoal, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    every: list[tuple[float, float]] = []
    for m in result.measured:
        xs = [r.percentiles_ms[result.tail] for r in m.rows]
        ys = [r.items_per_s for r in m.rows]
        every += list(zip(xs, ys))
        ax.plot(xs, ys, marker="o", label=m.point.label, alpha=0.8)
    front = sorted(every[i] for i in pareto(every))
    if front:
        ax.plot(*zip(*front), color="black", linewidth=2, linestyle="--", label="Pareto front")
    if goal.max_latency_ms is not None:
        ax.axvline(goal.max_latency_ms, color="red", linestyle=":", label="latency budget")
    ax.set(
        xlabel=f"{result.tail} latency (ms)",
        ylabel="items / s",
        title=f"{result.model}: throughput vs latency",
    )
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def report(ctx: StageContext, result: Result) -> None:
    win = result.winner
    columns = [
        "configuration",
        "concurrency levels",
        "best items/s",
        f"its {result.tail} ms",
        "score",
        "stopped",
    ]
    rows = [
        [
            m.point.label
            + (" (current)" if m.point == result.current else "")
            + (" ← selected" if m is win else ""),
            ", ".join(str(r.concurrency) for r in m.rows) or "-",
            "" if m.best is None else f"{m.best.items_per_s:.1f}",
            "" if m.best is None else f"{m.best.percentiles_ms[result.tail]:.3f}",
            "" if m.score is None else f"{m.score:.4g}",
            m.error or (f"not compared: {m.withheld}" if m.withheld else m.stopped),
        ]
        for m in result.measured
    ]
    ctx.report_table(
        f"Triton config search for {result.model} ({result.goal_text}; {result.wall_s:.0f} s)",
        columns,
        rows,
        note=f"{sum(len(m.rows) for m in result.measured)} measured points; all in search.json / search.csv",
    )
