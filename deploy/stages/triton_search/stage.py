"""triton_search: Model Analyzer's question, answered on a real tritonserver: which
instance count x max batch size x dynamic batching (queue delay) serves one model best,
under a latency budget (most throughput) or above a throughput floor (least latency)?

One server, the model reloaded per configuration through Triton's load API with a config
override (no restart); each configuration measured at rising concurrency the way the
bench stage measures Triton (perf_analyzer's windows until stable, server-side share from
the statistics API), stopping early once the budget is broken or throughput stops
growing. The search space is bounded (`max_configs`). The winning configuration's
config.pbtxt replaces the model's in the repository (this stage transforms `repository`,
so what is published and served downstream is the tuned one); every measured point goes to
search.json, search.csv (perf_analyzer's CSV columns) and search.png (throughput against
tail latency per configuration, the Pareto front marked)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from typing import Any

from deploy.domain.artifacts import BATCHING, REPOSITORY, SEARCH_CSV, SEARCH_PLOT, SEARCH_RESULTS
from deploy.gates.batch_independence import BatchIndependence
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import (
    Artifact,
    ArtifactKind,
    Phase,
    Publish,
    Section,
    StageContext,
    StageSpec,
)
from deploy.serving.publishing import when_all
from deploy.serving.server_spec import identity as server_identity
from deploy.stages.triton_search.params import SearchParams


def check(params: SearchParams, config: Any) -> list[Any]:
    from deploy.domain.issues import Issue

    where = "stages.triton_search"
    issues = []
    if f"p{params.goal.percentile:g}" not in {f"p{p:g}" for p in params.percentiles}:
        issues.append(
            Issue(f"{where}.goal.percentile", f"{params.goal.percentile:g} is not among {where}.percentiles")
        )
    if list(params.space.concurrency) != sorted(set(params.space.concurrency)):
        issues.append(Issue(f"{where}.space.concurrency", "must rise (the early stop relies on it)"))
    most = config.batch_range()[2] if config.batch_range() else None
    too_big = [b for b in params.space.max_batch_sizes or () if most is not None and b > most]
    if too_big:
        issues.append(
            Issue(f"{where}.space.max_batch_sizes", f"{too_big} exceed the shape spec's max batch {most}")
        )
    return issues


def run(ctx: StageContext, params: SearchParams) -> None:
    from deploy.stages.triton_search import output, search

    tree = ctx.output(REPOSITORY)
    shutil.copytree(ctx.input(REPOSITORY), tree, symlinks=True)
    result = search.search(ctx, _without_merging(ctx, params), tree)
    ctx.output(SEARCH_RESULTS).write_text(json.dumps(result.record().to_json(), indent=1))
    ctx.output(SEARCH_CSV).write_text(output.csv(result))
    output.plot(result, params.goal, ctx.output(SEARCH_PLOT))
    search.write_winner(result, tree)
    ctx.record("search", result.summary())
    ctx.headline(result.headline())
    output.report(ctx, result)
    if result.winner is None:
        raise StageFailed(
            f"triton_search: no configuration of {result.model} meets the goal: {result.goal_text}"
        )


def _without_merging(ctx: StageContext, params: SearchParams) -> SearchParams:
    """A model with an output that depends on its batch must never have requests merged:
    dynamic batching leaves the search space (golden's batching.json says which)."""
    record = BatchIndependence.read(ctx.input(BATCHING))
    if not record.dependent():
        return params
    ctx.log.warning("dynamic batching left out of the search: %s", record.text())
    ctx.record("dynamic_batching", f"not searched: {record.text()}")
    return params.model_copy(
        update={"space": params.space.model_copy(update={"max_queue_delays_us": (None,)})}
    )


def identity(params: SearchParams) -> Mapping[str, object]:
    from deploy.runtimes.devices import host_identity

    return host_identity() | server_identity(params.server)


SPEC = StageSpec(
    phase=Phase.MEASURE,
    name="triton_search",
    # 3: no dynamic batching for batch-dependent outputs (golden's batching.json)
    # 4: no verdict on contended, implausible or unsettled rows (search.json's `withheld`)
    version=4,
    params=SearchParams,
    inputs=("repository", "batching"),
    outputs=(
        Artifact("repository", ArtifactKind.TREE, publish=Publish.REPOSITORY),
        Artifact("search_results", filename="search.json"),
        Artifact("search_csv", filename="search.csv"),
        Artifact("search_plot", filename="search.png"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("tritonclient", "protobuf", "nvidia-pytriton", "numpy", "matplotlib"),
    identity=identity,
    check=check,
    publishes=when_all,
    description="Model Analyzer-style search: instance count x max batch x queue delay on a live tritonserver",
    timeout_s=7200,
)
