"""The triton_search stage's loop: the grid of configurations, each served and measured,
the early stop, the score under the goal, and the winner's config.pbtxt. Imports
tritonclient when searching."""

from __future__ import annotations

import json
import time
from itertools import product
from pathlib import Path
from typing import Any

from deploy.domain.vocabulary import Metric, Precision
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import StageContext
from deploy.runtimes.record import BenchRow
from deploy.serving.repository import Model
from deploy.stages.triton_search.params import SearchGoal, SearchParams
from deploy.stages.triton_search.search_record import Point, PointResult, Result


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


def search(ctx: StageContext, params: SearchParams, tree: Path) -> Result:
    import tritonclient.grpc as grpcclient

    from deploy.serving.launch import serve_repository
    from deploy.serving.requests import opt_feeds

    scratch = ctx.workdir / "server"
    scratch.mkdir()
    started = time.monotonic()
    with serve_repository(params.server, tree, scratch, _chooser(params.model), idle_at_end=True) as served:
        (name,) = served.states
        if not served.states[name].ready:
            raise StageFailed(f"Triton could not load {name}: {served.states[name].reason}")
        conn = grpcclient.InferenceServerClient(served.server.grpc)
        try:
            base = conn.get_model_config(name, as_json=True)["config"]
            current = Point.of(base)
            feeds = opt_feeds(ctx.config, served.found[name], params.batch)
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
        goal_text=goal_text(params.goal),
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
            if found[n].precision == Precision.FP32 and found[n].role is Role.MODEL
        ]
        if not names:
            raise StageFailed(f"triton_search: the server can load none of {sorted(found)}")
        return names[:1]

    return choose


def _measure(
    conn: Any, url: str, name: str, base: dict, point: Point, feeds: list, params: SearchParams, log: Any
) -> PointResult:
    from tritonclient.utils import InferenceServerException

    from deploy.serving import perf

    found = PointResult(point)
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
    found.withheld = _withheld(found.rows, params.goal) if found.best is None else ""
    log.info("%s: score %s (%s)", point.label, found.score, found.stopped or "every concurrency level")
    return found


def _stop(rows: list[BenchRow], params: SearchParams) -> str:
    """perf_analyzer / Model Analyzer's early exit: past the latency budget, or the last
    level added too little throughput."""
    goal, last = params.goal, rows[-1]
    tail = last.percentiles_ms.get(f"p{goal.percentile:g}")
    if goal.max_latency_ms is not None and tail is not None and tail > goal.max_latency_ms:
        return f"concurrency {last.concurrency}: {goal.percentile:g}th percentile {tail:.3f} ms > budget"
    if len(rows) > 1 and last.items_per_s < (1 + params.min_gain) * rows[-2].items_per_s:
        return f"concurrency {last.concurrency}: throughput grew less than {100 * params.min_gain:g} %"
    return ""


def _fits(rows: list[BenchRow], goal: SearchGoal) -> list[BenchRow]:
    key = f"p{goal.percentile:g}"
    return [
        r
        for r in rows
        if (goal.max_latency_ms is None or r.percentiles_ms[key] <= goal.max_latency_ms)
        and (goal.min_items_per_s is None or r.items_per_s >= goal.min_items_per_s)
    ]


def _clean(row: BenchRow) -> bool:
    """A row a verdict may rest on: settled, neither contended nor implausible."""
    return row.stable and row.flagged is None


def _withheld(rows: list[BenchRow], goal: SearchGoal) -> str:
    """Why rows that met the goal gave no score: the first one's flag, else unsettled."""
    fits = _fits(rows, goal)
    flags = [r.flagged for r in fits if r.flagged is not None]
    return flags[0] if flags else "unsettled (its windows never agreed)" if fits else ""


def _score(rows: list[BenchRow], goal: SearchGoal) -> tuple[float | None, BenchRow | None]:
    key = f"p{goal.percentile:g}"
    fits = [r for r in _fits(rows, goal) if _clean(r)]
    if not fits:
        return None, None
    if goal.metric == Metric.THROUGHPUT:
        best = max(fits, key=lambda r: r.items_per_s)
        return best.items_per_s, best
    best = min(fits, key=lambda r: r.percentiles_ms[key])
    return best.percentiles_ms[key], best


def goal_text(goal: SearchGoal) -> str:
    parts = ["most items/s" if goal.metric == Metric.THROUGHPUT else f"least p{goal.percentile:g} latency"]
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
    if win is None or win.withheld:  # a withheld verdict leaves the config as it came
        return
    proto = json_format.ParseDict(win.point.apply(result.base_config), model_config_pb2.ModelConfig())
    header = f"# Tuned by triton_search: {win.point.label} ({result.goal_text}: {win.score:.4g}).\n"
    (tree / result.model / "config.pbtxt").write_text(header + text_format.MessageToString(proto))


# perf_analyzer's -f CSV header (latencies in us), after Model Analyzer's config column.
