"""Console output: plain and untruncated in a log (CI), a rich table on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from deploy.console.ui import ConsoleReporter, results_table
from deploy.pipeline.process.runner import StageResult, Status
from tests.helpers import run_cli

LONG = (
    "TensorRT is not installed (No module named 'tensorrt'); "
    + "a reason long enough to be cut in a table " * 2
)


def test_a_log_gets_one_plain_untruncated_line_per_stage(write_config):
    path = write_config({"stages": {"build": {"required": False}}})
    proc = run_cli("run", str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert not any(ch in proc.stdout for ch in "│┃━─╭"), proc.stdout  # no table drawing
    names = ["golden", "export", "simplify", "build", "trace", "stats", "validate", "triton_config"]
    results = [next(line for line in lines if line.split()[0] == name) for name in names]
    build = results[names.index("build")]
    assert build.split()[1] == "skipped" and "TensorRT is not installed" in build and "…" not in build
    assert len(build) > 100 and build.endswith("index is reachable")  # the whole reason, on one line
    assert lines[-2] == "8 stages: 7 ran, 1 skipped" and lines[-1].startswith("run ok")


def render(table_notes_full: bool) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, width=400, record=True)
    result = StageResult("build", Status.SKIPPED, message=LONG)
    console.print(results_table([result], ["build", "smoke"], full_notes=table_notes_full))
    return console.export_text()


def test_a_terminal_gets_a_table_with_notes_cut_unless_verbose():
    short, full = render(False), render(True)
    assert "┃" in short or "│" in short
    assert "…" in short and LONG.strip() not in short
    assert LONG.strip() in full
    assert "not run" in short  # a stage that never started still has its row


def test_the_reporter_is_plain_only_off_a_terminal():
    assert ConsoleReporter(Console(file=io.StringIO())).plain
    assert not ConsoleReporter(Console(file=io.StringIO(), force_terminal=True)).plain
