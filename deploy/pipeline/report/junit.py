"""`deploy run --junit FILE`: one JUnit testcase per pipeline stage, for CI servers.

ran or cached -> passed (the status and key in system-out, which starts with "PARTIAL:
..." when the stage passed only in part, e.g. smoke with models skipped); skipped -> skipped with the
reason; failed -> failure with the message and the tail of the stage's log; stages that
never started (after a failure, or past --to) -> skipped, saying why. (The CLI reports a
config that does not load as one failed stage named `config`.) Stdlib only.

Why it stays in the engine: it is a pure rendering of the engine's own record
(`RunSummary`, nothing of any stage, no typer or rich), and the record it needs exists
exactly when the runner guarantees it: `Runner.run` sets `Runner.summary` in its
finally-path, also when a stage failed, crashed, timed out or the run was interrupted.
The CLI (`deploy/commands/runs.py`) calls `write_xml` with it for `--junit`, and with the
pseudo-stage summary of an invocation rejected before running; a pipeline driven
without the CLI (the Python API, a CI script calling `Runner.run`) writes the same file
from the same record without importing the app.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from deploy.pipeline.graph.contract import HEADLINE_KEY
from deploy.pipeline.report.results import RunSummary, StageSummary, Status

LOG_TAIL_LINES = 60
# Characters XML 1.0 forbids; stage logs catch native libraries' terminal colour codes.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def write_xml(path: Path, summary: RunSummary) -> Path:
    """Returns where it was written: `path`, or the temp dir when `path`'s disk is full."""
    from deploy.pipeline.graph.hashing import write_with_room

    suite = ET.Element("testsuite", name=f"deploy.{summary.pipeline}")
    if summary.finished:
        suite.set("timestamp", summary.finished)
    cases = [_case(summary.pipeline, stage) for stage in summary.stages]
    suite.extend(cases)
    _count(suite, cases, summary.wall_s)
    ET.indent(suite)
    return write_with_room(path, ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n")


def _case(pipeline: str, stage: StageSummary) -> ET.Element:
    status, message = stage.status, _xml(stage.message)
    # A cached stage costs this run nothing.
    spent = stage.seconds if status in (Status.RAN, Status.FAILED, Status.INTERRUPTED) else 0.0
    case = ET.Element("testcase", classname=f"deploy.{pipeline}", name=stage.stage, time=f"{spent:.3f}")
    if status is Status.FAILED:
        failure = ET.SubElement(case, "failure", message=message.splitlines()[0] if message else "failed")
        logged = (
            f"\n\nlog: {stage.log}\n{_xml(_tail(stage.log))}" if stage.log else ""
        )  # none: a config error
        failure.text = f"{message}{logged}"
    elif status is Status.INTERRUPTED:
        ET.SubElement(case, "error", message=message or "interrupted").text = f"log: {stage.log or 'none'}"
    elif status is Status.SKIPPED:
        ET.SubElement(case, "skipped", message=message or "skipped")
    elif status is Status.NOT_RUN:
        ET.SubElement(
            case,
            "skipped",
            message="not run: an earlier stage failed, or it lies outside the selected stages",
        )
    else:
        out = ET.SubElement(case, "system-out")
        partial = f"PARTIAL: {stage.partial}\n" if stage.partial else ""
        headline = stage.metrics.get(HEADLINE_KEY, "")
        out.text = _xml(partial + f"{status.value}; key {stage.key}; {headline}".rstrip("; "))
    return case


def _count(suite: ET.Element, cases: list[ET.Element], wall_s: float) -> None:
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("time", f"{wall_s:.3f}")


def _tail(log: str | None) -> str:
    if not log:
        return ""
    try:
        return "\n".join(Path(log).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError:
        return "(log not readable)"


def _xml(text: str) -> str:
    return NOT_XML.sub("\ufffd", text)
