"""bench's figure: latency and throughput per batch, per concurrency and per request rate,
one line per runtime, on a log scale where the values span more than a decade."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from deploy.runtimes.record import BenchRow as Row

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


# -- plot ---------------------------------------------------------------------------------------
# Values this many times apart get a log axis: on a linear one the small ones are slivers.
LOG_SPAN = 10.0


def plot(rows: list[Row], path: Path, image: str = "png") -> None:
    """`image`: png for the report; svg keeps the text as text (the browser test measures it)."""
    import matplotlib.pyplot as plt

    fig = figure(rows)
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(path, format=image, dpi=100, bbox_inches="tight")
    plt.close(fig)


def figure(rows: list[Row]) -> Figure:
    """Per batch (latency, throughput), per concurrency and per request rate where bench
    measured them. No text is placed on the data: legends sit below their axes, the tail
    latency is a line of its own, and an axis spanning LOG_SPAN or more is logarithmic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    served = [r for r in rows if r.server is not None and r.request_rate is None]
    paced = [r for r in rows if r.request_rate is not None]
    count = 2 + bool(served) + bool(paced)
    fig, axes = plt.subplots(1, count, figsize=(5 * count, 4.6))
    _per_batch(axes[0], axes[1], [r for r in rows if r.server is None])
    if served:
        _per_concurrency(axes[2], served)
    if paced:
        _per_rate(axes[-1], paced)
    fig.tight_layout()
    return fig


def _per_batch(lat: Axes, thr: Axes, rows: list[Row]) -> None:
    for runtime in dict.fromkeys(r.label for r in rows):
        mine = [r for r in rows if r.label == runtime]
        batches = [r.batch for r in mine]
        (line,) = lat.plot(batches, [r.median_ms for r in mine], marker="o", label=f"{runtime} median")
        top = mine[0].tail()
        lat.plot(
            batches,
            [r.percentiles_ms[top] for r in mine],
            linestyle="--",
            color=line.get_color(),
            alpha=0.6,
            label=f"{runtime} {top}",
        )
        thr.plot(batches, [r.items_per_s for r in mine], marker="o", color=line.get_color(), label=runtime)
    ticks = sorted({r.batch for r in rows})
    lat.set_xticks(ticks)
    thr.set_xticks(ticks)
    lat.set(xlabel="batch", ylabel="latency (ms)", title="latency per call")
    thr.set(xlabel="batch", ylabel="items / s", title="throughput (one stream; a hint: its own)")
    _scaled(lat, [v for r in rows for v in (r.median_ms, r.percentiles_ms[r.tail()])])
    _scaled(thr, [r.items_per_s for r in rows])
    _legend(lat)
    _legend(thr)


def _per_concurrency(ax: Axes, rows: list[Row]) -> None:
    """Throughput per concurrency, and each model's tail latency as a dashed line on the
    right-hand axis (numbers written beside the points ran into each other)."""
    tail = ax.twinx()
    for subject in dict.fromkeys(r.subject for r in rows):
        mine = [r for r in rows if r.subject == subject]
        name, top = mine[0].model, mine[0].tail()
        loads = [r.concurrency for r in mine]
        (line,) = ax.plot(loads, [r.items_per_s for r in mine], marker="o", label=f"{name} items/s")
        tail.plot(loads, [r.percentiles_ms[top] for r in mine], linestyle="--", marker="x",
                  color=line.get_color(), alpha=0.7, label=f"{name} {top} ms")  # fmt: skip
    ax.set_xticks(sorted({r.concurrency for r in rows}))
    ax.set(xlabel="concurrent requests", ylabel="items / s (solid)", title="Triton end to end (client side)")
    tail.set_ylabel("tail latency, ms (dashed)")
    _scaled(ax, [r.items_per_s for r in rows])
    _scaled(tail, [r.percentiles_ms[r.tail()] for r in rows])
    _legend(ax, tail)


def _per_rate(ax: Axes, rows: list[Row]) -> None:
    """The open-loop curve: the tail latency as the offered rate approaches capacity."""
    for subject in dict.fromkeys(r.subject for r in rows):
        mine = [r for r in rows if r.subject == subject]
        top = mine[0].tail()
        ax.plot(
            [r.request_rate or 0.0 for r in mine],  # paced rows all have one
            [r.percentiles_ms[top] for r in mine],
            marker="o",
            label=f"{mine[0].model} {top}",
        )
    ax.set(xlabel="offered requests / s (open loop)", ylabel="latency (ms)", title="Triton at a request rate")
    _scaled(ax, [r.percentiles_ms[r.tail()] for r in rows])
    _legend(ax)


def _legend(ax: Axes, twin: Axes | None = None) -> None:
    """Below the axes, never over the data; `twin`: a right-hand axis whose lines join it."""
    handles, labels = ax.get_legend_handles_labels()
    if twin is not None:
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(
        handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False
    )


def _scaled(ax: Axes, values: list[float]) -> None:
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) >= LOG_SPAN:
        ax.set_yscale("log")
