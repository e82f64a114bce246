"""Console output: live per-stage progress while running, then one summary table."""

from __future__ import annotations

import time
from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from deploy.console.screen import Screen, Shown, StageLine, stage_table
from deploy.pipeline.graph.contract import HEADLINE_KEY, Cell, report_tables
from deploy.pipeline.graph.plan import Action, PlanRow
from deploy.pipeline.process.progress import Progress as StageProgress
from deploy.pipeline.report.html import human_size
from deploy.pipeline.report.results import StageResult, Status
from deploy.pipeline.store.objects import Output

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# In a CI log (no terminal): one progress line per stage at most this often.
PLAIN_EVERY_S = 10.0

STYLE = {
    Status.RAN: "green",
    Status.CACHED: "cyan",
    Status.SKIPPED: "yellow",
    Status.FAILED: "bold red",
    Status.INTERRUPTED: "bold yellow",
    Status.NOT_RUN: "dim",
}


class ConsoleReporter:
    """Implements the runner's Reporter. On a terminal: a rich live display, then a table.
    Elsewhere (a CI log): one plain, untruncated line per stage as it finishes."""

    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.plain = not console.is_terminal
        self.live: Progress | None = None  # created when a stage first runs: a cached run needs none
        self.tasks: dict[str, TaskID] = {}
        self.printed: dict[str, float] = {}  # stage -> when its last plain progress line went out
        self.warned = False  # a run that warned is never replayed (deploy.commands.replay)

    def __enter__(self) -> ConsoleReporter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.stop()

    def _live(self) -> Progress:
        if self.live is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            columns = (
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self.live = Progress(*columns, console=self.console)
            self.live.start()
        return self.live

    def started(self, name: str, reasons: list[str]) -> None:
        if self.plain:
            self._line(f"{name}: running ({'; '.join(reasons)})")
            return
        why = escape(reasons[0]) if reasons else ""
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        self.tasks[name] = self._live().add_task(f"[bold]{name}[/] running — {why}{more}", total=None)

    def finished(self, result: StageResult) -> None:
        if self.plain:
            self._line(plain_line(result))
            return
        task = self.tasks.get(result.name)
        if task is None or self.live is None:
            return  # cached or skipped without running: the table says so
        text = f"[bold]{result.name}[/] [{STYLE[result.status]}]{status_text(result)}[/]"
        if result.message:
            text += f" — {escape(result.message.splitlines()[0])}"
        self.live.update(task, description=text, total=1, completed=1)
        self.live.stop_task(task)

    def warn(self, message: str) -> None:
        self.warned = True
        if self.plain:
            self._line(f"warning: {message}")
        else:
            self.console.print(Text.assemble(("warning: ", "yellow"), message))

    def note(self, message: str) -> None:
        self._line(message) if self.plain else self.console.print(Text(message, style="dim"))

    def progress(self, event: StageProgress) -> None:
        """A bar on a terminal; in a CI log one line per stage every PLAIN_EVERY_S."""
        if self.plain:
            self._plain_progress(event)
            return
        task = self.tasks.get(event.stage)
        if task is None:
            task = self.tasks[event.stage] = self._live().add_task(f"[bold]{event.stage}[/]", total=None)
        what = f" — {escape(event.what)}" if event.what else ""
        live = self._live()
        if event.running_s is not None:  # a heartbeat: the bar keeps what it showed
            live.update(task, description=f"[bold]{event.stage}[/]{what}")
            return
        live.update(
            task, description=f"[bold]{event.stage}[/]{what}", total=event.total, completed=event.done
        )

    def _plain_progress(self, event: StageProgress) -> None:
        now = time.monotonic()
        if now - self.printed.get(event.stage, 0.0) < PLAIN_EVERY_S and event.done != event.total:
            return
        self.printed[event.stage] = now
        if event.running_s is not None:
            self._line(f"{event.stage}: still running ({event.running_s:.0f} s)")
            return
        of = f"{event.done}/{event.total}" if event.total else f"{event.done}"
        self._line(f"{event.stage}: {of} done{f', now {event.what}' if event.what else ''}")

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def status_text(result: StageResult) -> str:
    status = "cached (remote)" if result.remote else result.status.value
    return f"{status} (partial)" if result.partial else status


def stage_line(result: StageResult) -> StageLine:
    style = "yellow" if result.partial else STYLE[result.status]
    return StageLine(
        result.name, status_text(result), style, _seconds(result), _outputs(result.outputs), _note(result)
    )


def plain_line(result: StageResult) -> str:
    return stage_line(result).plain()


def make_screen(results: list[StageResult], names: list[str], closing: str) -> Screen:
    """What the console shows at the end of a run (deploy.console.screen renders it)."""
    seen = {r.name: r for r in results}
    every = [seen.get(n, StageResult(n, Status.NOT_RUN)) for n in names]
    shown = [
        Shown(title, columns, [[str(c) for c in row] for row in rows])
        for title, columns, rows in console_tables(results)
    ]
    return Screen(
        [stage_line(r) for r in results],
        [stage_line(r) for r in every],
        summary_lines(results, names),
        shown,
        closing,
    )


def summary_lines(results: list[StageResult], names: list[str]) -> list[str]:
    """Plain output's closing lines: stages that never started, then one total."""
    seen = {r.name for r in results}
    lines = [plain_line(StageResult(n, Status.NOT_RUN)) for n in names if n not in seen]
    counts = Counter(r.status.value for r in results)
    partial = sum(1 for r in results if r.partial)
    told = ", ".join(f"{n} {s}" for s, n in counts.items()) + (f", {partial} partial" if partial else "")
    return lines + [f"{len(names)} stages: {told or 'none run'}"]


def results_table(results: list[StageResult], names: list[str], full_notes: bool = False) -> Table:
    return stage_table(make_screen(results, names, "").table, full_notes)


def console_tables(results: list[StageResult]) -> list[tuple[str, list[str], list[list[Cell]]]]:
    """The report tables stages asked to show in the console: (title, columns, rows)."""
    return [
        (f"{r.name}: {t.title}", t.columns, t.rows)
        for r in results
        for t in report_tables(r.metrics)
        if t.console
    ]


def _seconds(result: StageResult) -> str:
    if result.status in (Status.RAN, Status.FAILED, Status.INTERRUPTED):
        return f"{result.duration_s:.2f}s"
    if result.status is Status.CACHED:
        return f"(ran {result.duration_s:.2f}s)"  # what the cache saved this run
    return ""


def _outputs(outputs: dict[str, Output]) -> str:
    return ", ".join(f"{n} {human_size(o.size)}" for n, o in outputs.items())


def _note(result: StageResult) -> str:
    if result.partial:
        return result.partial
    if result.message:
        return result.message.splitlines()[0]
    headline = result.metrics.get(HEADLINE_KEY)
    return str(headline) if headline else "; ".join(result.reasons[:2])


def plan_table(rows: list[PlanRow]) -> Table:
    style = {
        Action.CACHED: "cyan",
        Action.REMOTE: "cyan",
        Action.RUN: "green",
        Action.PENDING: "yellow",
        Action.SKIP: "yellow",
    }
    table = Table(title="deploy plan", title_justify="left")
    for column in ("stage", "action", "key", "why"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.name,
            Text(row.action.text, style=style[row.action]),
            (row.key or "")[:12],
            Text("\n".join(row.reasons)),
        )
    return table


def plan_lines(rows: list[PlanRow]) -> list[str]:
    return [
        f"{r.name:<14}  {r.action.text:<32}  {(r.key or '')[:12]:<12}  {'; '.join(r.reasons)}".rstrip()
        for r in rows
    ]
