"""The triton_search stage's loop and records: configurations (points), what each
measured, the early stop, the score under the goal, and the outputs (CSV in
perf_analyzer's columns, the Pareto plot, the winner's config.pbtxt). Imports
tritonclient when searching."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.records import SchemaMismatch, expect_schema
from deploy.runtimes.record import BenchRow
from deploy.serving.repository import Model

# search_results.json's layout; bumped with the triton_search stage's version.
SCHEMA = 1


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
class Measured:
    point: Point
    rows: list[BenchRow] = field(default_factory=list)
    stopped: str = ""  # why the concurrency sweep ended early
    error: str = ""  # the configuration did not load
    score: float | None = None  # the goal's value of its best admissible row
    best: BenchRow | None = None


@dataclass
class Result:
    model: str
    current: Point
    measured: list[Measured]
    goal_text: str
    tail: str  # e.g. "p99"
    metric: str
    wall_s: float
    base_config: dict[str, Any]
    min_improvement: float

    @property
    def winner(self) -> Measured | None:
        """The best score; the current configuration stays unless beaten by more than
        `min_improvement` (a 3 % win on a 2-core machine is noise)."""
        scored = [(m.score, m) for m in self.measured if m.score is not None]
        if not scored:
            return None
        sign = 1.0 if self.metric == "throughput" else -1.0
        best_score, best = max(scored, key=lambda pair: sign * pair[0])
        base = self.current_measured()
        if base is None or base.score is None or best is base:
            return best
        gain = best_score / base.score if sign > 0 else base.score / best_score
        return best if gain > 1 + self.min_improvement else base

    def current_measured(self) -> Measured | None:
        return next((m for m in self.measured if m.point == self.current), None)

    def headline(self) -> str:
        win, base = self.winner, self.current_measured()
        if win is None or win.score is None:
            return f"{self.model}: no configuration meets {self.goal_text}"
        unit = "items/s" if self.metric == "throughput" else f"ms {self.tail}"
        kept = " (kept: nothing beat it by more than min_improvement)" if win.point == self.current else ""
        text = f"{self.model}: {win.point.label}: {win.score:.4g} {unit}{kept}"
        if base is not None and base.score and win.point != self.current:
            ratio = win.score / base.score if self.metric == "throughput" else base.score / (win.score or 1)
            text += f" ({ratio:.2f}x the current config's {base.score:.4g})"
        return text + f"; {len(self.measured)} configs in {self.wall_s:.0f} s"

    def summary(self) -> dict[str, object]:
        """The run summary's line: the pick, its score, how many configs, how long."""
        return {k: v for k, v in self.record().to_json().items() if k in SUMMARY}

    def record(self) -> SearchResults:
        win = self.winner
        points = [SearchedPoint(m.point, m.score, m.stopped, m.error, m.rows) for m in self.measured]
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

    def to_json(self) -> dict[str, object]:
        return asdict(self.point) | {
            "label": self.point.label,
            "score": self.score,
            "stopped": self.stopped,
            "error": self.error,
            "rows": [r.to_json() for r in self.rows],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SearchedPoint:
        point = _point_of(data)
        rows = [BenchRow.from_json(r) for r in data["rows"]]
        return cls(point, data["score"], data["stopped"], data["error"], rows)


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
        data = expect_schema(json.loads(path.read_text()), str(path), SCHEMA)
        try:
            selected = data["selected"]
            return cls(
                str(data["model"]),
                None if selected is None else _point_of(selected),  # type: ignore[arg-type]
                data["score"],  # type: ignore[arg-type]
                float(data["wall_s"]),  # type: ignore[arg-type]
                str(data["goal"]),
                _point_of(data["current"]),  # type: ignore[arg-type]
                [SearchedPoint.from_json(p) for p in data["points"]],  # type: ignore[attr-defined]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaMismatch(
                f"{path}: not a search results record ({type(exc).__name__}: {exc})"
            ) from exc


def _point_of(data: Mapping[str, Any]) -> Point:
    return Point(data["instances"], data["max_batch"], data["delay_us"], tuple(data["preferred"]))


def grid(space: Any, current: Point, limit: int) -> list[Point]:
    """The current configuration first, then the space in order, at most `limit`."""
    sizes = space.max_batch_sizes or (current.max_batch,)
    combos = product(space.instance_counts, sizes, space.max_queue_delays_us, space.preferred_batch_sizes)
    points = dict.fromkeys(_point(i, b, d, tuple(p)) for i, b, d, p in combos)
    return [current, *(p for p in points if p is not None and p != current)][:limit]


def _point(instances: int, max_batch: int, delay: int | None, preferred: tuple[int, ...]) -> Point | None:
    """None where the combination means nothing: preferred sizes without dynamic batching
    (they collapse to the plain point) or above the max batch size."""
    if delay is None:
        return Point(instances, max_batch, None)
    if any(size > max_batch for size in preferred):
        return None
    return Point(instances, max_batch, delay, preferred)


def search(ctx: Any, params: Any, tree: Path) -> Result:
    import tritonclient.grpc as grpcclient

    from deploy.serving.launch import serve_repository
    from deploy.serving.requests import opt_feeds

    scratch = ctx.workdir / "server"
    scratch.mkdir()
    started = time.monotonic()
    with serve_repository(params.server, tree, scratch, _chooser(params.model)) as served:
        (name,) = served.states
        if not served.states[name].ready:
            raise StageFailed(f"Triton could not load {name}: {served.states[name].reason}")
        conn = grpcclient.InferenceServerClient(served.server.grpc)
        try:
            base = conn.get_model_config(name, as_json=True)["config"]
            current = Point.of(base)
            feeds = opt_feeds(ctx.config, served.found[name].fmt, params.batch)
            points = grid(params.space, current, params.max_configs)
            measured = []
            for index, point in enumerate(points):
                ctx.progress(index, len(points), point.label)
                measured.append(_measure(conn, served.server.grpc, name, base, point, feeds, params, ctx.log))
            ctx.progress(len(points), len(points), "done")
        finally:
            conn.close()
    tail = f"p{params.goal.percentile:g}"
    return Result(
        model=name,
        current=current,
        measured=measured,
        goal_text=_goal_text(params.goal),
        tail=tail,
        metric=params.goal.metric,
        wall_s=time.monotonic() - started,
        base_config=base,
        min_improvement=params.min_improvement,
    )


def _chooser(model: str | None) -> Any:
    def choose(found: dict[str, Model], backends: Any) -> list[str]:
        from deploy.serving.repository import loadable
        from deploy.serving.service import Role

        if model is not None:
            if model not in found:
                raise StageFailed(
                    f"triton_search.model: '{model}' is not in the repository (it has {sorted(found)})"
                )
            return [model]
        names = [
            n
            for n in loadable(found, backends())
            if found[n].precision == "fp32" and found[n].role is Role.MODEL
        ]
        if not names:
            raise StageFailed(f"triton_search: the server can load none of {sorted(found)}")
        return names[:1]

    return choose


def _measure(
    conn: Any, url: str, name: str, base: dict, point: Point, feeds: list, params: Any, log: Any
) -> Measured:
    from tritonclient.utils import InferenceServerException

    from deploy.serving import perf

    found = Measured(point)
    try:
        conn.load_model(name, config=json.dumps(point.apply(base)))
    except InferenceServerException as exc:
        found.error = f"does not load: {exc.message()}"
        log.info("%s: %s", point.label, found.error)
        return found
    for level in params.space.concurrency:
        found.rows += perf.sweep(url, name, feeds, (level,), params.settings())
        found.stopped = _stop(found.rows, params)
        if found.stopped:
            break
    found.score, found.best = _score(found.rows, params.goal)
    log.info("%s: score %s (%s)", point.label, found.score, found.stopped or "every concurrency level")
    return found


def _stop(rows: list[BenchRow], params: Any) -> str:
    """perf_analyzer / Model Analyzer's early exit: past the latency budget, or the last
    level added too little throughput."""
    goal, last = params.goal, rows[-1]
    tail = last.percentiles_ms.get(f"p{goal.percentile:g}")
    if goal.max_latency_ms is not None and tail is not None and tail > goal.max_latency_ms:
        return f"concurrency {last.concurrency}: {goal.percentile:g}th percentile {tail:.3f} ms > budget"
    if len(rows) > 1 and last.items_per_s < (1 + params.min_gain) * rows[-2].items_per_s:
        return f"concurrency {last.concurrency}: throughput grew less than {100 * params.min_gain:g} %"
    return ""


def _score(rows: list[BenchRow], goal: Any) -> tuple[float | None, BenchRow | None]:
    key = f"p{goal.percentile:g}"
    fits = [
        r
        for r in rows
        if (goal.max_latency_ms is None or r.percentiles_ms[key] <= goal.max_latency_ms)
        and (goal.min_items_per_s is None or r.items_per_s >= goal.min_items_per_s)
    ]
    if not fits:
        return None, None
    if goal.metric == "throughput":
        best = max(fits, key=lambda r: r.items_per_s)
        return best.items_per_s, best
    best = min(fits, key=lambda r: r.percentiles_ms[key])
    return best.percentiles_ms[key], best


def _goal_text(goal: Any) -> str:
    parts = ["most items/s" if goal.metric == "throughput" else f"least p{goal.percentile:g} latency"]
    if goal.max_latency_ms is not None:
        parts.append(f"p{goal.percentile:g} <= {goal.max_latency_ms} ms")
    if goal.min_items_per_s is not None:
        parts.append(f">= {goal.min_items_per_s} items/s")
    return ", ".join(parts)


# -- outputs ----------------------------------------------------------------------------------------
def write_winner(result: Result, tree: Path) -> None:
    """The winner's config.pbtxt, as Triton completed it, replaces the model's own."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    win = result.winner
    if win is None:
        return
    proto = json_format.ParseDict(win.point.apply(result.base_config), model_config_pb2.ModelConfig())
    header = f"# Tuned by triton_search: {win.point.label} ({result.goal_text}: {win.score:.4g}).\n"
    (tree / result.model / "config.pbtxt").write_text(header + text_format.MessageToString(proto))


# perf_analyzer's -f CSV header (latencies in us), after Model Analyzer's config column.
CSV_COLUMNS = (
    "Model Config,Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency,Avg latency"
)


def csv(result: Result) -> str:
    """Client send / receive are not split out here (0); their share is in Network+Server
    Send/Recv, the client latency less the server's phases. A percentile the bench did
    not configure is empty."""
    lines = [CSV_COLUMNS]
    for m in result.measured:
        lines += [_csv_row(m.point, r) for r in m.rows]
    return "\n".join(lines) + "\n"


def _csv_row(point: Point, r: BenchRow) -> str:
    server = r.server
    phases = (
        [server.queue_us, server.compute_input_us, server.compute_infer_us, server.compute_output_us]
        if server
        else [0.0] * 4
    )
    overhead = server.client_overhead_us if server else 0.0
    tails = [r.median_ms] + [r.percentiles_ms.get(f"p{p}") for p in (90, 95, 99)]
    cells = [f'"{point.label}"', str(r.concurrency), f"{r.items_per_s:.2f}", "0", f"{overhead:.0f}"]
    cells += [f"{v:.0f}" for v in phases] + ["0"]
    cells += ["" if v is None else f"{1000 * v:.0f}" for v in tails] + [f"{1000 * r.mean_ms:.0f}"]
    return ",".join(cells)


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the (latency, throughput) points no other point beats on both."""
    return [
        i
        for i, (lat, thr) in enumerate(points)
        if not any(o_lat <= lat and o_thr >= thr and (o_lat, o_thr) != (lat, thr) for o_lat, o_thr in points)
    ]


def plot(result: Result, goal: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    every: list[tuple[float, float]] = []
    for m in result.measured:
        xs = [r.percentiles_ms[result.tail] for r in m.rows]
        ys = [r.items_per_s for r in m.rows]
        every += list(zip(xs, ys))
        ax.plot(xs, ys, marker="o", label=m.point.label, alpha=0.8)
    front = sorted(every[i] for i in pareto(every))
    if front:
        ax.plot(*zip(*front), color="black", linewidth=2, linestyle="--", label="Pareto front")
    if goal.max_latency_ms is not None:
        ax.axvline(goal.max_latency_ms, color="red", linestyle=":", label="latency budget")
    ax.set(
        xlabel=f"{result.tail} latency (ms)",
        ylabel="items / s",
        title=f"{result.model}: throughput vs latency",
    )
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def report(ctx: Any, result: Result) -> None:
    win = result.winner
    columns = [
        "configuration",
        "concurrency levels",
        "best items/s",
        f"its {result.tail} ms",
        "score",
        "stopped",
    ]
    rows = [
        [
            m.point.label
            + (" (current)" if m.point == result.current else "")
            + (" ← selected" if m is win else ""),
            ", ".join(str(r.concurrency) for r in m.rows) or "-",
            "" if m.best is None else f"{m.best.items_per_s:.1f}",
            "" if m.best is None else f"{m.best.percentiles_ms[result.tail]:.3f}",
            "" if m.score is None else f"{m.score:.4g}",
            m.error or m.stopped,
        ]
        for m in result.measured
    ]
    ctx.report_table(
        f"Triton config search for {result.model} ({result.goal_text}; {result.wall_s:.0f} s)",
        columns,
        rows,
        note=f"{sum(len(m.rows) for m in result.measured)} measured points; all in search.json / search.csv",
    )
