"""What `deploy run` prints when it ends, as data: one line per stage, the decision
tables stages asked for, and where the records are. deploy.console.ui makes it from a run's
results; a replayed no-op run (deploy.commands.replay) prints the same data without loading the
pipeline. Only rich here: this module is on the replay's path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

NOTE_CHARS = 90  # terminal table only; -v, plain output and the summary JSON have the full text


@dataclass(frozen=True)
class StageLine:
    """One stage as the console shows it."""

    name: str
    status: str  # e.g. "cached (partial)"
    style: str  # rich style of the status
    seconds: str  # "12.31s", "(ran 8.83s)" or ""
    outputs: str  # "onnx 102.2 MB, ..."
    note: str  # the message, the partial reason or the headline

    def plain(self) -> str:
        """Everything on one line: for logs that are read, not watched."""
        fields = [f"{self.name:<14}", f"{self.status:<16}", f"{self.seconds:>16}"]
        return "  ".join(
            fields + [self.outputs] * bool(self.outputs) + [f"| {self.note}"] * bool(self.note)
        ).rstrip()


@dataclass(frozen=True)
class Shown:
    """A table a stage asked to show in the console."""

    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Screen:
    finished: list[StageLine]  # the stages a run reached, in the order they finished
    table: list[StageLine]  # every stage of the graph, in graph order
    totals: list[str]  # plain output's closing lines (stages never started, the counts)
    shown: list[Shown] = field(default_factory=list)
    closing: str = ""  # "run ok   summary: ...   report: ...   repository: ..."

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Screen:
        return cls(
            [StageLine(**line) for line in data["finished"]],
            [StageLine(**line) for line in data["table"]],
            list(data["totals"]),
            [Shown(**s) for s in data["shown"]],
            str(data["closing"]),
        )

    def show(self, console: Console, full_notes: bool = False, with_stages: bool = False) -> None:
        """The end of a run. Plain output (a CI log) printed each stage's line as it
        finished; `with_stages` prints them here (a replay)."""
        if console.is_terminal:
            console.print(stage_table(self.table, full_notes))
        else:
            lines = [line.plain() for line in self.finished] if with_stages else []
            for text in (*lines, *self.totals):
                plain(console, text)
        for shown in self.shown:
            if console.is_terminal:
                console.print(rich_table(shown.title, shown.columns, shown.rows))
            else:
                for text in plain_table(shown.title, shown.columns, shown.rows):
                    plain(console, text)
        console.print(self.closing, markup=False, highlight=False, soft_wrap=not console.is_terminal)


def plain(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def stage_table(lines: Sequence[StageLine], full_notes: bool = False) -> Table:
    table = Table(title="deploy run", title_justify="left")
    for column in ("stage", "status", "time", "outputs", "notes"):
        table.add_column(column)
    for line in lines:
        note = line.note if full_notes or len(line.note) <= NOTE_CHARS else line.note[: NOTE_CHARS - 1] + "…"
        table.add_row(line.name, Text(line.status, style=line.style), line.seconds, line.outputs, Text(note))
    return table


def rich_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(c) for c in row))
    return table


def plain_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [title, " | ".join(columns), *(" | ".join(str(c) for c in row) for row in rows)]
