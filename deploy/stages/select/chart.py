"""The one chart the run report shows under its conclusion: every candidate's number for the
decision it rests on (the first objective with a winner), one bar each, the pick in
green, the ones the target never verified in grey. Horizontal bars, one row per
candidate: labels never share a line, however many candidates there are. Imports
matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploy.runtimes.selection_record import Verdict
from deploy.stages.select.selection import Decision, Standing

COLORS = {Verdict.SELECTED: "#1e8e3e", Verdict.UNVERIFIED: "#9aa0a6", Verdict.REJECTED: "#d93025"}
OTHER = "#4285f4"
ROW_IN = 0.42  # figure height per candidate, inches
LOG_SPAN = 10.0  # values this many times apart: a log axis (a 60x pick was a sliver on a linear one)


def chart(decisions: list[Decision], path: Path, image: str = "png") -> None:
    """`image`: png for the report; svg keeps the text as text (the browser test measures it)."""
    import matplotlib.pyplot as plt

    fig = figure(decisions)
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(path, format=image, dpi=100, bbox_inches="tight")  # the longest bar's text included
    plt.close(fig)


def figure(decisions: list[Decision]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = next((d for d in decisions if d.winner is not None), decisions[0])
    shown = [e for e in main.entries if e.value is not None]
    fig, ax = plt.subplots(figsize=(9, 1.4 + ROW_IN * max(len(shown), 1)))
    labels = [e.candidate.label for e in shown]
    values = [float(e.value or 0.0) for e in shown]
    ax.barh(range(len(shown)), values, color=[COLORS.get(e.verdict, OTHER) for e in shown])
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.invert_yaxis()  # the decision's order, top down
    for row, entry in enumerate(shown):
        ax.annotate(_text(entry, main), (values[row], row), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)  # fmt: skip
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) >= LOG_SPAN:  # a linear axis would hide the small bars
        ax.set_xscale("log")
        ax.set_xlim(min(positive) / 2, max(positive) * 8)
    else:
        ax.set_xlim(0, max(values, default=1.0) * 1.75)  # room for the longest bar's text
    ax.set_xlabel(f"{main.objective.metric} at {main.at()} ({main.unit()}, {main.basis.value})")
    ax.set_title(f"'{main.objective.name}': what the decision compared", fontsize=10)
    fig.tight_layout()
    return fig


def _text(entry: Standing, d: Decision) -> str:
    elsewhere = f", {entry.basis.value}" if entry.basis is not d.basis else ""
    return f"{entry.value:.3g}{elsewhere} — {entry.verdict.value}"
