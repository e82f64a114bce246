"""Progress crosses from a stage's own process to the runner's reporter, throttled at
the source; in a CI log (no terminal) it is one plain line per stage now and then."""

from __future__ import annotations

import io

from rich.console import Console

from deploy.console.ui import ConsoleReporter
from deploy.pipeline.process.progress import Progress, Throttled
from tests.helpers import Recorder, run


def test_a_stage_in_its_own_process_reports_progress_to_the_runner(write_config) -> None:
    bench = {
        "warmup_ms": 10,
        "duration_s": 0.05,
        "iterations": 5,
        "batches": [1],
        "runtimes": ["eager", "onnxruntime"],
    }
    path = write_config(replace={"stages": {"export": {}, "bench": bench}})
    recorder = Recorder()
    run(path, recorder=recorder)
    events = [e for e in recorder.progress_events if e.stage == "bench"]
    assert events and events[-1] == Progress("bench", 2, 2, "done")
    assert all(e.total == 2 and 0 <= e.done <= 2 for e in events)


def test_the_throttle_drops_a_tight_loop_but_never_the_last_step() -> None:
    seen: list[Progress] = []
    step = Throttled("s", seen.append)
    for done in range(1000):
        step(done, 1000, "x")
    step(1000, 1000, "end")
    assert len(seen) < 10 and seen[0].done == 0 and seen[-1] == Progress("s", 1000, 1000, "end")


def test_a_ci_log_gets_a_plain_line_per_stage_not_one_per_event() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(Console(file=out, force_terminal=False, width=200))
    for done in range(5):
        reporter.progress(Progress("bench", done, 5, f"cell {done}"))
    reporter.progress(Progress("bench", 5, 5, "done"))
    lines = out.getvalue().splitlines()
    assert lines == ["bench: 0/5 done, now cell 0", "bench: 5/5 done, now done"]


def test_uploads_to_the_remote_cache_report_progress(write_config, tmp_path) -> None:
    remote = tmp_path / "shared"
    path = write_config(replace={"stages": {"export": {}}, "cache": {"remote": remote.as_uri()}})
    recorder = Recorder()
    run(path, recorder=recorder)
    events = [e for e in recorder.progress_events if e.stage == "remote cache"]
    assert events and events[-1].what == "uploaded" and events[-1].done == events[-1].total > 0
