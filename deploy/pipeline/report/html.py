"""The run report: one self-contained HTML file beside the run summary.

It knows no stage: it shows every stage's status, time, artifacts and headline, then
the tables each stage put in its metrics (StageContext.report_table) and, inline as
base64, each .png artifact it produced. Stdlib only, so a cached run can afford it.

Why rendering lives in the engine and not the app: the runner writes the report in the
same step as the summary, also when a stage crashed, hung or the run was interrupted
(`pipeline/store/history.py`), and a run driven without the CLI (the Python API, a Jenkins
agent calling `Runner.run`) must get it too. It reads only the engine's own records
(`RunSummary`, `ReportTable`), never a stage.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from deploy.pipeline.graph.contract import CONCLUSION_FACTS_KEY, HEADLINE_KEY, Conclusion, report_tables
from deploy.pipeline.report.results import PublishNote, PublishState, RunSummary, StageSummary, Status
from deploy.pipeline.store.provenance import Provenance

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#1d1d1f;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}table{border-collapse:collapse;margin:6px 0 4px;font-size:13px}
th,td{border:1px solid #d0d0d0;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f2f2f4}
td.num{text-align:right;font-variant-numeric:tabular-nums}.meta{color:#555}.note{color:#666;font-size:12px}
.ran{color:#137333}.cached{color:#0b57d0}.skipped{color:#b06000}.failed{color:#c5221f;font-weight:bold}
.not.run{color:#888}img{max-width:100%;border:1px solid #eee;margin:8px 0}
pre.failure{background:#fdf1f0;border:1px solid #f0c0bc;padding:8px 12px;white-space:pre-wrap;font-size:13px}
.conclusion{background:#f3f7ff;border:1px solid #c6d7f7;border-radius:6px;padding:10px 16px;margin:12px 0}
.decision{font-size:17px;font-weight:600;margin:4px 0}.facts th{background:none;border:none;padding:2px 12px 2px 0}
.facts td{border:none;padding:2px 0}img.chart{max-width:900px;display:block}
"""


def render(summary: RunSummary, images: dict[str, list[Path]]) -> str:
    """`summary`: the run summary; `images`: stage -> its .png artifacts, in the store.
    The conclusion first (what to deploy, where, and why), then its chart, then the details."""
    status = summary.status.value
    found = _conclusion(summary.stages)
    chart = images.get(found.chart_stage, [])[:1] if found else []
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>deploy: {_e(summary.pipeline)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>deploy run: {_e(summary.pipeline)} — <span class='{_e(status)}'>{_e(status)}</span></h1>",
        *_failures(summary.failed()),
        *_publishing(summary.publishing),
        *(_conclusion_box(found) if found else []),
        *[f"<img class='chart' alt='{_e(p.name)}' src='data:image/png;base64,{_png(p)}'>" for p in chart],
        f"<p class='meta'>{_e(when(summary))} · config {_e(summary.config)} · cache {_e(summary.cache)}</p>",
        *_provenance(summary.provenance),
        "<h2>Stages</h2>",
        _stage_table(summary.stages),
    ]
    for stage in summary.stages:
        shown = chart if stage.stage == (found.chart_stage if found else "") else []
        parts += _stage_section(stage, [p for p in images.get(stage.stage, []) if p not in shown])
    parts.append("</body></html>")
    return "\n".join(parts)


def when(summary: RunSummary) -> str:
    """When the results were made: this run's time, or, when every stage came from the
    cache, the runs that made them (a cached rerun took milliseconds; that is not news)."""
    made = [s for s in summary.stages if s.status is Status.CACHED and s.created]
    if made and not any(s.status in (Status.RAN, Status.FAILED) for s in summary.stages):
        first, last = min(s.created or "" for s in made), max(s.created or "" for s in made)
        span = first if first == last else f"{first} – {last}"
        took = sum(s.seconds for s in made)
        return f"every stage from the cache: made {span} in {took:.0f} s of stage time; checked {summary.finished} ({summary.wall_s:.2f} s)"
    return f"finished {summary.finished} in {summary.wall_s:.2f} s"


def _conclusion(stages: list[StageSummary]) -> Conclusion | None:
    """The first stage's conclusion, with the facts later stages add to it (release: the
    comparison with what is deployed)."""
    found = next((v for s in stages if (v := Conclusion.of(s.metrics)) is not None), None)
    added = [fact for s in stages for fact in _facts(s.metrics.get(CONCLUSION_FACTS_KEY))]
    return replace(found, facts=[*found.facts, *added]) if found is not None and added else found


def _facts(value: object) -> list[tuple[str, str]]:
    pairs = value if isinstance(value, list) else []
    return [(str(p[0]), str(p[1])) for p in pairs if isinstance(p, list | tuple) and len(p) == 2]


def _conclusion_box(found: Conclusion) -> list[str]:
    facts = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in found.facts)
    return [
        "<section id='conclusion' class='conclusion'>",
        f"<p class='decision'>{_e(found.decision)}</p>",
        f"<p class='meta'>target (what verified it): {_e(found.target)}</p>",
        f"<table class='facts'>{facts}</table>",
        "</section>",
    ]


def _publishing(notes: Sequence[PublishNote]) -> list[str]:
    """What reached the repository, verified or not, and what was withheld: first, since a
    server polling it serves what this says."""
    css = {PublishState.VERIFIED: "ran", PublishState.UNVERIFIED: "skipped", PublishState.WITHHELD: "failed"}
    return [f"<p id='publishing' class='{css[n.state]}'>{_e(n.text())}</p>" for n in notes]


def _provenance(found: Provenance | None) -> list[str]:
    if found is None:
        return []
    libraries = ", ".join(f"{n} {v}" for n, v in found.libraries.items() if v)
    return [
        f"<p class='meta'>host {_e(found.host)} · {_e(found.cpu)} · {_e(found.cores)} cores · "
        f"Python {_e(found.python)} · commit {_e(found.commit or 'not in a git repository')}</p>",
        f"<p class='meta'>{_e(libraries)}</p>",
    ]


def _failures(failed: list[StageSummary]) -> list[str]:
    """A failure's whole text, readable, before anything else."""
    parts = []
    for stage in failed:
        log = f"<p class='meta'>log: {_e(stage.log)}</p>" if stage.log else ""
        parts += [
            f"<h2 class='failed'>{_e(stage.stage)} failed</h2>",
            f"<pre class='failure'>{_e(stage.message)}</pre>",
            log,
        ]
    return parts


def _stage_table(stages: list[StageSummary]) -> str:
    rows = [
        [
            s.stage,
            _status(s.status.value, s.partial),
            _time(s),
            (s.key or "")[:12],
            ", ".join(f"{n} ({human_size(o.bytes)})" for n, o in s.outputs.items()),
            s.partial or s.message.split("\n")[0] or str(s.metrics.get(HEADLINE_KEY, "")),
        ]
        for s in stages
    ]
    return _table(["stage", "status", "time", "key", "artifacts", "notes"], rows, raw_columns={1})


def _time(stage: StageSummary) -> str:
    """This run's time, or for a cached stage what it took when it ran (and when)."""
    if stage.status in (Status.RAN, Status.FAILED, Status.INTERRUPTED):
        return f"{stage.seconds:.2f} s"
    if stage.status is Status.CACHED:
        made = f", made {stage.created}" if stage.created else ""
        return f"0 s (ran {stage.seconds:.2f} s{made})"
    return ""


def _stage_section(stage: StageSummary, pngs: list[Path]) -> list[str]:
    tables = report_tables(stage.metrics)
    if not tables and not pngs:
        return []
    parts = [f"<h2 id='{_e(stage.stage)}'>{_e(stage.stage)}</h2>"]
    for table in tables:
        parts.append(f"<h3>{_e(table.title)}</h3>")
        parts.append(_table(table.columns, table.rows))
        if table.note:
            parts.append(f"<p class='note'>{_e(table.note)}</p>")
    parts += [f"<img alt='{_e(p.name)}' src='data:image/png;base64,{_png(p)}'>" for p in pngs]
    return parts


def _table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    raw_columns: frozenset[int] | set[int] = frozenset(),
) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(_cell(v, i in raw_columns) for i, v in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: object, raw: bool) -> str:
    if raw:
        return f"<td>{value}</td>"
    numeric = isinstance(value, (int, float)) or _looks_numeric(str(value))
    return f"<td class='num'>{_e(value)}</td>" if numeric else f"<td>{_e(value)}</td>"


def _looks_numeric(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _status(status: str, partial: str | None = None) -> str:
    shown = f"<span class='{_e(status)}'>{_e(status)}</span>"
    return shown + " <span class='skipped'>· partial</span>" if partial else shown


def _png(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def human_size(n: float) -> str:
    """Bytes in whole numbers; KB, MB and GB (decimal) with one decimal."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("KB", "MB"):
        n /= 1000
        if n < 1000:
            return f"{n:.1f} {unit}"
    return f"{n / 1000:.1f} GB"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
