"""How the API's objects read: short `repr`s for a console, and HTML tables for a
notebook (`_repr_html_`: the stages with status, time and headline, then the decision).
Text only from the run summary: nothing here imports a heavy library or reads a file
besides what the summary names."""

from __future__ import annotations

import html
from collections import Counter

from deploy.pipeline.graph.contract import HEADLINE_KEY
from deploy.pipeline.report.results import RunSummary, StageSummary

# A headline longer than this is cut in a repr (the HTML shows it whole).
SHORT = 90


def pipeline_repr(name: str, path: str, stages: list[str]) -> str:
    return f"<Pipeline {name!r} ({path}): {len(stages)} stages: {' → '.join(stages)}>"


def result_repr(summary: RunSummary) -> str:
    counts = Counter(s.status.value for s in summary.stages)
    tally = ", ".join(f"{n} {status}" for status, n in counts.items())
    decision = decision_line(summary)
    tail = f"; {_cut(decision)}" if decision else ""
    return (
        f"<RunResult {summary.pipeline!r}: {summary.status.value} in {summary.wall_s:.2f} s ({tally}){tail}>"
    )


def decision_line(summary: RunSummary) -> str:
    """select's headline (what to deploy, for which target), where select ran."""
    select = next((s for s in summary.stages if s.stage == "select"), None)
    return str(select.metrics.get(HEADLINE_KEY, "")) if select is not None else ""


def result_html(summary: RunSummary) -> str:
    rows = "".join(_row(s) for s in summary.stages)
    decision = decision_line(summary)
    verdict = f"<p><b>Decision:</b> {html.escape(decision)}</p>" if decision else ""
    head = (
        f"<p><b>deploy run {html.escape(summary.pipeline)}</b>: {html.escape(summary.status.value)} "
        f"in {summary.wall_s:.2f} s</p>"
    )
    table = (
        "<table><thead><tr><th>stage</th><th>status</th><th>time</th><th>headline</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
    return head + verdict + table


def _row(stage: StageSummary) -> str:
    headline = str(stage.metrics.get(HEADLINE_KEY, "")) or stage.message
    cells = (stage.stage, stage.status.value, f"{stage.seconds:.2f} s", headline)
    return "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"


def _cut(text: str) -> str:
    return text if len(text) <= SHORT else text[: SHORT - 1] + "…"
