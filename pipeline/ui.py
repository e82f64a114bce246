"""Console output: live per-stage progress while running, then one summary table."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.plan import Action, PlanRow
from pipeline.report import human_size
from pipeline.runner import StageResult, Status
from pipeline.store import Output

STYLE = {
    Status.RAN: "green",
    Status.CACHED: "cyan",
    Status.SKIPPED: "yellow",
    Status.FAILED: "bold red",
    Status.NOT_RUN: "dim",
}


class ConsoleReporter:
    """Implements the runner's Reporter with a rich live display."""

    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.progress: Any = None  # created when a stage first runs: a cached run needs none
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> ConsoleReporter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.progress is not None:
            self.progress.stop()

    def _live(self) -> Any:
        if self.progress is None:
            from rich.progress import (
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
            self.progress = Progress(*columns, console=self.console)
            self.progress.start()
        return self.progress

    def started(self, name: str, reasons: list[str]) -> None:
        why = reasons[0] if reasons else ""
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        self.tasks[name] = self._live().add_task(f"[bold]{name}[/] running — {why}{more}", total=None)

    def finished(self, result: StageResult) -> None:
        task = self.tasks.get(result.name)
        if task is None:
            return  # cached or skipped without running: the table says so
        text = f"[bold]{result.name}[/] [{STYLE[result.status]}]{result.status.value}[/]"
        if result.message:
            text += f" — {result.message.splitlines()[0]}"
        self.progress.update(task, description=text, total=1, completed=1)
        self.progress.stop_task(task)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}")


def results_table(results: list[StageResult], names: list[str]) -> Table:
    table = Table(title="deploy run", title_justify="left")
    for column in ("stage", "status", "time", "outputs", "notes"):
        table.add_column(column)
    seen = {r.name: r for r in results}
    for name in names:
        result = seen.get(name, StageResult(name, Status.NOT_RUN))
        table.add_row(
            name,
            f"[{STYLE[result.status]}]{result.status.value}[/]",
            f"{result.duration_s:.2f}s" if result.status in (Status.RAN, Status.FAILED) else "",
            _outputs(result.outputs),
            _notes(result),
        )
    return table


def _outputs(outputs: dict[str, Output]) -> str:
    return ", ".join(f"{n} {human_size(o.size)}" for n, o in outputs.items())


NOTE_CHARS = 90  # the summary JSON has the full text; long cells make rendering slow


def _notes(result: StageResult) -> str:
    if result.message:
        text = result.message.splitlines()[0]
    else:
        headline = result.metrics.get("headline")
        text = str(headline) if headline else "; ".join(result.reasons[:2])
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 1] + "…"


def plan_table(rows: list[PlanRow]) -> Table:
    style = {Action.CACHED: "cyan", Action.RUN: "green", Action.PENDING: "yellow"}
    table = Table(title="deploy plan", title_justify="left")
    for column in ("stage", "action", "key", "why"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.name,
            f"[{style[row.action]}]{_action_text(row.action)}[/]",
            (row.key or "")[:12],
            "\n".join(row.reasons),
        )
    return table


def _action_text(action: Action) -> str:
    return {
        Action.CACHED: "cached",
        Action.RUN: "will run",
        Action.PENDING: "runs if upstream output changes",
    }[action]
