"""The triton_search stage's records: a configuration (Point), what it measured, the
search's result, and search_results.json (SearchResults, versioned), which select and
the report read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from deploy.domain.vocabulary import Metric
from deploy.pipeline.graph.records import expect_schema, typed
from deploy.runtimes.record import BenchRow

# search_results.json's layout; bumped with the triton_search stage's version.
# 2: each point's `withheld` (why no verdict rests on its rows).
SCHEMA = 2


@dataclass(frozen=True)
class Point:
    """One configuration: instance count, max batch size, queue delay (None: no dynamic
    batching) and the batch sizes the dynamic batcher prefers (Triton's preferred_batch_size)."""

    instances: int
    max_batch: int
    delay_us: int | None
    preferred: tuple[int, ...] = ()

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Point:
        groups = config.get("instance_group") or [{"count": 1}]
        batching = config.get("dynamic_batching")
        delay = int(batching.get("max_queue_delay_microseconds", 0)) if batching is not None else None
        preferred = tuple(int(b) for b in (batching or {}).get("preferred_batch_size", []))
        max_batch = int(config.get("max_batch_size", 0))
        # Triton completes an unset preferred_batch_size to [max_batch_size]: the same point.
        preferred = () if preferred == (max_batch,) else preferred
        return cls(int(groups[0].get("count", 1)), max_batch, delay, preferred)

    @property
    def label(self) -> str:
        batching = "no dynamic batching" if self.delay_us is None else f"queue delay {self.delay_us} us"
        prefers = f", preferred {list(self.preferred)}" if self.preferred else ""
        return f"{self.instances} instance(s), max batch {self.max_batch}, {batching}{prefers}"

    def apply(self, config: dict[str, Any]) -> dict[str, Any]:
        """`config` (Triton's JSON) with this point's settings."""
        changed = json.loads(json.dumps(config))
        groups = changed.get("instance_group") or [{"kind": "KIND_CPU"}]
        changed["instance_group"] = [{**groups[0], "count": self.instances}]
        changed["max_batch_size"] = self.max_batch
        changed.pop("dynamic_batching", None)
        if self.delay_us is not None:
            changed["dynamic_batching"] = {"max_queue_delay_microseconds": self.delay_us}
            if self.preferred:
                changed["dynamic_batching"]["preferred_batch_size"] = list(self.preferred)
        return changed


@dataclass
class PointResult:
    point: Point
    rows: list[BenchRow] = field(default_factory=list)
    stopped: str = ""  # why the concurrency sweep ended early
    error: str = ""  # the configuration did not load
    score: float | None = None  # the goal's value of its best admissible row
    best: BenchRow | None = None
    # Why no verdict rests on it: its rows that met the goal were all contended,
    # implausible or unsettled ("" when one may).
    withheld: str = ""


@dataclass
class Result:
    model: str
    current: Point
    measured: list[PointResult]
    goal_text: str
    tail: str  # e.g. "p99"
    metric: str
    wall_s: float
    base_config: dict[str, Any]
    min_improvement: float

    @property
    def winner(self) -> PointResult | None:
        """The best score; the current configuration stays unless beaten by more than
        `min_improvement` (a 3 % win on a 2-core machine is noise), and stays when its own
        timing was withheld: nothing is compared with a reference not measured clean."""
        base = self.current_measured()
        if base is not None and base.withheld:
            return base
        scored = [(m.score, m) for m in self.measured if m.score is not None]
        if not scored:
            return None
        sign = 1.0 if self.metric == Metric.THROUGHPUT else -1.0
        best_score, best = max(scored, key=lambda pair: sign * pair[0])
        if base is None or base.score is None or best is base:
            return best
        gain = best_score / base.score if sign > 0 else base.score / best_score
        return best if gain > 1 + self.min_improvement else base

    def current_measured(self) -> PointResult | None:
        return next((m for m in self.measured if m.point == self.current), None)

    def headline(self) -> str:
        win, base = self.winner, self.current_measured()
        if win is not None and win.withheld:
            return (
                f"{self.model}: the current config kept, no verdict: its timing was {win.withheld}; "
                f"rerun on a quiet machine; {len(self.measured)} configs in {self.wall_s:.0f} s"
            )
        if win is None or win.score is None:
            return f"{self.model}: no configuration meets {self.goal_text}"
        unit = "items/s" if self.metric == Metric.THROUGHPUT else f"ms {self.tail}"
        kept = " (kept: nothing beat it by more than min_improvement)" if win.point == self.current else ""
        text = f"{self.model}: {win.point.label}: {win.score:.4g} {unit}{kept}"
        if base is not None and base.score and win.point != self.current:
            ratio = (
                win.score / base.score if self.metric == Metric.THROUGHPUT else base.score / (win.score or 1)
            )
            text += f" ({ratio:.2f}x the current config's {base.score:.4g})"
        left_out = sum(1 for m in self.measured if m.withheld)
        if left_out:
            text += f"; {left_out} config(s) not compared (contended or unsettled: rerun quiet)"
        return text + f"; {len(self.measured)} configs in {self.wall_s:.0f} s"

    def summary(self) -> dict[str, object]:
        """The run summary's line: the pick, its score, how many configs, how long."""
        return {k: v for k, v in self.record().to_json().items() if k in SUMMARY}

    def record(self) -> SearchResults:
        win = self.winner
        points = [
            SearchedPoint(m.point, m.score, m.stopped, m.error, m.rows, m.withheld) for m in self.measured
        ]
        return SearchResults(
            self.model,
            None if win is None else win.point,
            None if win is None else win.score,
            self.wall_s,
            self.goal_text,
            self.current,
            points,
        )


SUMMARY = ("model", "selected", "score", "configs", "wall_s")


@dataclass(frozen=True)
class SearchedPoint:
    point: Point
    score: float | None
    stopped: str
    error: str
    rows: list[BenchRow]
    withheld: str

    def to_json(self) -> dict[str, object]:
        return asdict(self.point) | {
            "label": self.point.label,
            "score": self.score,
            "stopped": self.stopped,
            "error": self.error,
            "withheld": self.withheld,
            "rows": [r.to_json() for r in self.rows],
        }

    @classmethod
    def from_json(cls, data: _SearchedJson) -> SearchedPoint:
        return cls(
            _point_of(data), data["score"], data["stopped"], data["error"], data["rows"], data["withheld"]
        )


@dataclass(frozen=True)
class SearchResults:
    """search_results.json: the goal, the current configuration, every point measured
    (its rows, score, why its sweep stopped or why it did not load) and the pick."""

    model: str
    selected: Point | None
    score: float | None
    wall_s: float
    goal: str
    current: Point
    points: list[SearchedPoint]

    def to_json(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "selected": None if self.selected is None else asdict(self.selected),
            "score": self.score,
            "configs": len(self.points),
            "wall_s": self.wall_s,
            "goal": self.goal,
            "current": asdict(self.current),
            "points": [p.to_json() for p in self.points],
        }

    @classmethod
    def read(cls, path: Path) -> SearchResults:
        what = f"{path}: not a search results record"
        data: _SearchJson = typed(
            _SearchJson, expect_schema(json.loads(path.read_text()), str(path), SCHEMA), what
        )
        selected = data["selected"]
        return cls(
            data["model"],
            None if selected is None else _point_of(selected),
            data["score"],
            data["wall_s"],
            data["goal"],
            _point_of(data["current"]),
            [SearchedPoint.from_json(p) for p in data["points"]],
        )


class _PointJson(TypedDict):
    instances: int
    max_batch: int
    delay_us: int | None
    preferred: list[int]


class _SearchedJson(_PointJson):
    score: float | None
    stopped: str
    error: str
    withheld: str
    rows: list[BenchRow]


class _SearchJson(TypedDict):
    """search_results.json's layout, checked field by field as it is read."""

    model: str
    selected: _PointJson | None
    score: float | None
    wall_s: float
    goal: str
    current: _PointJson
    points: list[_SearchedJson]


def _point_of(data: _PointJson) -> Point:
    return Point(data["instances"], data["max_batch"], data["delay_us"], tuple(data["preferred"]))
