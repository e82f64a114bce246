"""The server's share of a request, from Triton's cumulative counters read at the kept
windows' edges: each phase per request in µs, the batch the dynamic batcher formed, and
what the client saw beyond the server. (A sweep on a real server is in
tests/serving/test_python_model.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from deploy.runtimes.record import BenchRow
from deploy.serving.perf import _server_share, saturated
from deploy.serving.requests import PHASES, Statistics
from tests.helpers import bench_row


def totals(requests: int, inferences: int, executions: int, phase_ns: tuple[int, ...]) -> dict[str, int]:
    return Statistics(dict(zip(PHASES, phase_ns)), requests, inferences, executions).as_totals()


def test_the_share_is_the_counters_difference_per_request() -> None:
    before = totals(10, 40, 10, (1_000_000, 2_000_000, 3_000_000, 4_000_000))
    # 100 more requests of 4 items, in 25 executions; each request queued 50 µs, ran 200 µs, ...
    after = totals(110, 440, 35, (6_000_000, 3_000_000, 23_000_000, 5_000_000))
    share = _server_share(before, after, client_mean_ms=0.5)
    assert (share.queue_us, share.compute_input_us, share.compute_infer_us, share.compute_output_us) == (
        50.0,
        10.0,
        200.0,
        10.0,
    )
    assert (share.requests, share.inferences, share.executions) == (100, 400, 25)
    assert share.avg_server_batch == 16.0
    assert share.client_overhead_us == pytest.approx(500.0 - 270.0)


def test_no_requests_in_the_windows_gives_zeros_not_a_division_error() -> None:
    same = totals(5, 5, 5, (10, 10, 10, 10))
    share = _server_share(same, same, client_mean_ms=1.0)
    assert (share.requests, share.avg_server_batch, share.queue_us) == (0, 0.0, 0.0)
    assert share.client_overhead_us == 1000.0


def _at(concurrency: int, qps: float, **changes: object) -> BenchRow:
    return replace(bench_row("triton:m", 1, 1000 / qps, concurrency=concurrency), qps=qps, **changes)


def test_a_sweep_is_saturated_when_a_level_adds_under_the_fraction() -> None:
    rising = [_at(1, 100.0), _at(2, 180.0)]
    assert not saturated(rising, 0.05)
    assert not saturated([*rising, _at(4, 190.0)], 0.05)  # 5.6 % above the best so far (180)
    assert saturated([*rising, _at(4, 185.0)], 0.05)  # 2.8 % above the best so far
    assert saturated([*rising, _at(4, 150.0)], 0.05)  # fell: queueing only
    assert not saturated([*rising, _at(4, 150.0)], 0.0)  # 0: every level


def test_an_unstable_or_contended_row_never_ends_a_sweep() -> None:
    from deploy.runtimes.contention import Environment

    busy = Environment(2, None, 0.5, 3.0, 0.6, 0.0, True)
    assert not saturated([_at(1, 100.0), _at(2, 100.0, stable=False)], 0.05)
    assert not saturated([_at(1, 100.0), _at(2, 100.0, environment=busy)], 0.05)
    assert not saturated([_at(1, 100.0, environment=busy), _at(2, 100.0)], 0.05)
