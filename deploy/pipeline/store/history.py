"""Run summaries and reports, kept per run.

    runs/<name>/history/<UTC time>/summary.json, report.html   one dir per run
    runs/<name>/latest -> history/<UTC time>                   the newest run
    runs/<name>/summary.json, report.html                      copies of the newest

A run that fails keeps the earlier runs' reports; only the newest KEEP are kept.
A rejected invocation (bad config or selection) never gets here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from deploy.pipeline.graph.hashing import atomic_write_text
from deploy.pipeline.report.results import RunSummary

REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.json"
HISTORY = "history"
LATEST = "latest"
KEEP = 20


def record(
    run_dir: Path, summary: RunSummary, images: dict[str, list[Path]], warn: Callable[[str], None]
) -> Path:
    """Writes this run's summary and report; returns the run's own directory."""
    folder = _new_run_dir(run_dir)
    text = json.dumps(summary.to_json(), indent=1)
    atomic_write_text(folder / SUMMARY_FILE, text)
    atomic_write_text(run_dir / SUMMARY_FILE, text)
    try:
        _write_report(folder, run_dir, summary, images)
    except Exception as exc:
        warn(f"run report not written: {type(exc).__name__}: {exc}")
    _point_latest(run_dir, folder)
    _prune(run_dir / HISTORY)
    return folder


def _write_report(folder: Path, run_dir: Path, summary: RunSummary, images: dict[str, list[Path]]) -> None:
    from deploy.pipeline.report import html

    page = html.render(summary, images)
    atomic_write_text(folder / REPORT_FILE, page)
    atomic_write_text(run_dir / REPORT_FILE, page)


def _new_run_dir(run_dir: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    folder = run_dir / HISTORY / stamp
    folder.mkdir(parents=True, exist_ok=False)
    return folder


def _point_latest(run_dir: Path, folder: Path) -> None:
    """Swapped atomically: a reader never sees the link missing."""
    tmp = run_dir / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder.relative_to(run_dir))
    os.replace(tmp, run_dir / LATEST)


def _prune(history: Path) -> None:
    runs = sorted(p for p in history.iterdir() if p.is_dir())
    for old in runs[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)


def runs(run_dir: Path) -> list[Path]:
    """This pipeline's kept runs, oldest first."""
    history = run_dir / HISTORY
    return sorted(p for p in history.iterdir() if p.is_dir()) if history.is_dir() else []
