"""triton_search gives no verdict on a timing it cannot trust: a configuration whose rows
that met the goal were contended, implausible or unsettled is not compared, and a current
configuration measured so is kept, said, and its config.pbtxt left as it came. Rows of
made-up numbers (the rule, not a measurement); tests/stages/test_triton_search.py runs the
search on a real tritonserver."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from deploy.domain.vocabulary import Metric
from deploy.runtimes.contention import Environment
from deploy.runtimes.record import BenchRow
from deploy.stages.triton_search import search
from deploy.stages.triton_search.params import SearchGoal
from deploy.stages.triton_search.search_record import Point, PointResult, Result
from tests.helpers import bench_row

BUSY = Environment(
    cores=2, threads=1, cores_free=0.1, load1=7.0, others_share=0.9, steal_share=0.0, contended=True
)
GOAL = SearchGoal(metric=Metric.THROUGHPUT, percentile=99)
CURRENT, FASTER = Point(1, 16, 20000), Point(2, 16, None)


def served(median_ms: float, **changes: object) -> BenchRow:
    return dataclasses.replace(bench_row("triton:m_python", 4, median_ms), **changes)  # type: ignore[arg-type]


def measured(point: Point, row: BenchRow) -> PointResult:
    found = PointResult(point, [row])
    found.score, found.best = search._score(found.rows, GOAL)
    found.withheld = search._withheld(found.rows, GOAL) if found.best is None else ""
    return found


def result(*points: PointResult) -> Result:
    base = {
        "name": "m_python",
        "max_batch_size": 16,
        "dynamic_batching": {"max_queue_delay_microseconds": 20000},
    }
    return Result(
        "m_python", CURRENT, list(points), "most items/s", "p99", Metric.THROUGHPUT, 3.0, base, 0.05
    )


def test_a_clean_win_is_taken() -> None:
    win = result(measured(CURRENT, served(20.0)), measured(FASTER, served(5.0)))
    assert win.winner is not None and win.winner.point == FASTER
    assert "4.00x the current config's" in win.headline()


def test_a_contended_challenger_is_not_compared_however_fast() -> None:
    busy = measured(FASTER, served(1.0, environment=BUSY))
    assert busy.score is None and busy.withheld.startswith("CONTENDED: load 7.0 on 2 cores")
    kept = result(measured(CURRENT, served(20.0)), busy)
    assert kept.winner is not None and kept.winner.point == CURRENT
    assert "1 config(s) not compared (contended or unsettled: rerun quiet)" in kept.headline()


def test_a_current_config_timed_under_contention_is_kept_and_its_file_left_alone(tmp_path: Path) -> None:
    kept = result(measured(CURRENT, served(20.0, environment=BUSY)), measured(FASTER, served(5.0)))
    assert kept.winner is not None and kept.winner.point == CURRENT and kept.winner.withheld
    assert kept.headline().startswith(
        "m_python: the current config kept, no verdict: its timing was CONTENDED"
    )
    assert kept.record().selected == CURRENT and kept.record().score is None
    (tmp_path / "m_python").mkdir()
    config = tmp_path / "m_python" / "config.pbtxt"
    config.write_text("as it came\n")
    search.write_winner(kept, tmp_path)
    assert config.read_text() == "as it came\n"


def test_unsettled_and_implausible_rows_are_withheld_with_their_reason() -> None:
    assert measured(FASTER, served(5.0, stable=False)).withheld == "unsettled (its windows never agreed)"
    odd = measured(FASTER, served(5.0, implausible="batch 1 slower than batch 8"))
    assert odd.withheld == "implausible: batch 1 slower than batch 8"


def test_a_budget_broken_is_not_a_withheld_verdict() -> None:
    tight = SearchGoal(metric=Metric.THROUGHPUT, percentile=99, max_latency_ms=1.0)
    rows = [served(5.0, environment=BUSY)]
    assert search._score(rows, tight) == (None, None) and search._withheld(rows, tight) == ""
