"""Running the pipeline in-process (torch imported once per test session)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.graph import select
from pipeline.project import load_project
from pipeline.runner import Runner, Selection, StageResult
from pipeline.store import Store


class Recorder:
    """A Reporter that keeps the warnings (e.g. about damaged cache entries)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def started(self, name: str, reasons: list[str]) -> None:
        pass

    def finished(self, result: StageResult) -> None:
        pass

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def run(
    path: Path,
    only: Sequence[str] = (),
    force: Sequence[str] = (),
    start: str | None = None,
    stop: str | None = None,
    recorder: Recorder | None = None,
) -> dict[str, StageResult]:
    project = load_project(path)
    names = select(project.graph, list(only), start, stop)
    runner = Runner(project, Store(project.cache_dir), recorder or Recorder(), Selection(frozenset(names), frozenset(force)))
    return {r.name: r for r in runner.run()}


def statuses(results: dict[str, StageResult]) -> dict[str, str]:
    return {name: r.status.value for name, r in results.items()}


class WindowedLatency:
    """A call whose latency (time.sleep) follows a schedule of one delay per measurement
    window, the last repeating, for testing the benchmark's stability rule.

    Single stream: pass `per_window` (calls per window, i.e. ceil(iterations / K) with
    duration 0) and `warmup` (calls before the first window: 1 with warmup_ms 0).
    Streams: pass the instance's `edge` as the measurement's snapshot, which it takes twice
    per window edge (just before and just after the edge's time); the schedule moves on at
    every edge (the first one ends the warm-up)."""

    def __init__(self, delays_ms: Sequence[float], per_window: int = 0, warmup: int = 1) -> None:
        self.delays_ms, self.per_window, self.warmup = list(delays_ms), per_window, warmup
        self.calls, self.edges = 0, 0

    def window(self) -> int:
        if self.per_window:
            return max(0, self.calls - self.warmup) // self.per_window
        return max(0, (self.edges - 1) // 2)

    def __call__(self) -> None:
        import time  # appended helper: the module's imports stay as they were

        delay = self.delays_ms[min(self.window(), len(self.delays_ms) - 1)]
        self.calls += 1
        time.sleep(delay / 1000)

    def edge(self) -> int:
        self.edges += 1
        return self.edges
