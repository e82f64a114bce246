"""The triton_search stage's parameters (its YAML section), apart from its run so that its helpers can
import them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, NonNegativeInt, PositiveInt

from deploy.domain.vocabulary import Metric
from deploy.runtimes.measure import MeasureSettings
from deploy.serving.server_spec import ServerSpec
from deploy.spec.tensors import Frozen


class SearchSpace(Frozen):
    instance_counts: tuple[PositiveInt, ...] = Field(
        (1, 2), min_length=1, description="Model instances (instance_group count) to try."
    )
    max_batch_sizes: tuple[PositiveInt, ...] | None = Field(
        None, min_length=1, description="max_batch_size values to try; null: the repository's own."
    )
    max_queue_delays_us: tuple[NonNegativeInt | None, ...] = Field(
        (None, 100, 1000),
        min_length=1,
        description="Dynamic batching queue delays to try, us; null: no dynamic batching.",
    )
    preferred_batch_sizes: tuple[tuple[PositiveInt, ...], ...] = Field(
        ((),),
        min_length=1,
        description="Dynamic batching preferred_batch_size lists to try with each queue delay ([]: none); a list "
        "with a size above the point's max_batch_size is skipped.",
    )
    concurrency: tuple[PositiveInt, ...] = Field(
        (1, 2, 4, 8),
        min_length=1,
        description="Closed-loop clients, in rising order; each configuration stops early at the first level that "
        "breaks the latency budget or adds less than min_gain throughput.",
    )


class SearchGoal(Frozen):
    metric: Metric = Field(
        Metric.THROUGHPUT,
        description="throughput: most items/s within max_latency_ms; latency: least tail latency "
        "with at least min_items_per_s.",
    )
    max_latency_ms: float | None = Field(None, gt=0, description="Latency budget at `percentile`, ms.")
    min_items_per_s: float | None = Field(
        None, gt=0, description="Throughput floor, items/s (metric latency)."
    )
    percentile: Annotated[float, Field(gt=0, le=100)] = Field(
        99, description="The tail percentile budgets and the plot use (must be among percentiles)."
    )


class SearchParams(MeasureSettings):
    model: str | None = Field(
        None, description="The repository's model to tune; null: the first fp32 model the server can load."
    )
    space: SearchSpace = Field(SearchSpace(), description="What is tried.")
    goal: SearchGoal = Field(SearchGoal(), description="What counts as best.")
    max_configs: PositiveInt = Field(
        12, description="At most this many configurations are measured (the current one first)."
    )
    min_gain: float = Field(
        0.05,
        ge=0,
        description="Early stop: a concurrency level adding less than this fraction of throughput ends "
        "that configuration's sweep.",
    )
    min_improvement: float = Field(
        0.10,
        ge=0,
        description="Another configuration replaces the current one only when it beats it by more than this "
        "fraction (differences inside the measurement's own spread decide nothing).",
    )
    batch: PositiveInt = Field(1, description="Items per request (perf_analyzer's -b).")
    server: ServerSpec = Field(
        ServerSpec(), description="Which tritonserver to start or reach (as smoke.server)."
    )
