"""The bench stage's parameters (its YAML section), apart from its run so that its helpers can
import them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from deploy.runtimes.catalog import BASELINE, CATALOG, names, registered
from deploy.runtimes.measure import MeasureSettings
from deploy.runtimes.pacing import Distribution
from deploy.serving.server_spec import ServerSpec
from deploy.spec.tensors import Frozen
from deploy.stages.bench.output import RegressionGate


class TritonBench(Frozen):
    """The `triton` runtime: a server of the same kinds as the smoke stage's."""

    server: ServerSpec = Field(
        ServerSpec(), description="Which tritonserver to start or reach (as smoke.server)."
    )
    models: tuple[str, ...] | None = Field(
        None, description="Triton models to measure; null: every model of this pipeline the server can load."
    )
    concurrency: tuple[PositiveInt, ...] = Field(
        (1, 2, 4),
        min_length=1,
        description="Closed-loop gRPC clients, one sweep point each (perf_analyzer's --concurrency-range).",
    )
    batch: int = Field(1, ge=1, description="Items per request (perf_analyzer's -b).")
    saturation: float = Field(
        0.05,
        ge=0,
        description="Stop a model's concurrency sweep at the first level whose throughput is not this fraction above "
        "the best before it (the server is saturated: more clients only queue), where every row so far is stable "
        "and quiet; the levels left out are listed in the log. 0, or a regression gate naming a served cell: "
        "every level.",
    )
    request_rate: tuple[PositiveFloat, ...] = Field(
        (),
        description="Open-loop sweep, after the concurrency one: requests/s sent on a schedule whatever the "
        "answers, one point each (perf_analyzer's --request-rate-range); empty: none.",
    )
    request_distribution: Distribution = Field(
        Distribution.CONSTANT,
        description="Gaps between scheduled requests: constant (1/rate) or poisson (exponential, seeded).",
    )
    max_outstanding: PositiveInt = Field(
        64, description="Open loop: requests in flight at most; a send held back by it counts as late."
    )


class GenerationParams(Frozen):
    """A decoder's generate models (config model.decoder), timed served and in process."""

    concurrency: tuple[PositiveInt, ...] = Field(
        (1, 4, 16), min_length=1, description="Sequences in flight at once, one row each."
    )
    prompts: tuple[PositiveInt, ...] = Field(
        (16, 256),
        min_length=1,
        description="Prompt lengths in tokens, one row each (cut to input_ids' max and the context left for new_tokens).",
    )
    new_tokens: PositiveInt = Field(
        32,
        description="Tokens generated per sequence (no stop tokens; at most the decoder's max_new_tokens).",
    )
    rounds: PositiveInt = Field(
        5,
        description="Each cell run this many times over, pooled. A row whose rounds disagree (tokens/s or median "
        "TTFT: median absolute deviation over 15 % of the median) is unstable, and select decides nothing on it; "
        "under 3 rounds its stability is unknown, and select decides nothing on it either.",
    )


class BenchParams(MeasureSettings):
    runtimes: tuple[str, ...] = Field(
        (BASELINE, "torchscript", "onnxruntime"),
        min_length=1,
        description=f"What to time, of: {names()} (runtimes/catalog.py); a runtime whose artifact's stage was "
        "skipped (e.g. tensorrt without an engine), or that cannot run here (a CUDA one without a GPU), is "
        f"reported skipped. {BASELINE} is the baseline of the speed-ups.",
    )

    @field_validator("runtimes")
    @classmethod
    def _registered(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return registered(value, tuple(CATALOG), "not among the runtimes")

    batches: tuple[PositiveInt, ...] | None = Field(
        None,
        min_length=1,
        description="Batch sizes of the in-process runtimes; null: the shape spec's min / opt / max batch.",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="Intra-op threads for every in-process runtime (PyTorch, ONNX Runtime, OpenVINO); null: the cores "
        "free when bench starts (never more than the cores), one policy for all so no row pays an oversubscription "
        "the others do not. The threads used and the free cores are recorded.",
    )
    wait_quiet_s: float = Field(
        0.0,
        ge=0,
        description="Before timing, wait up to this long for a 5 s stretch in which other processes use under 25 % "
        "of the cores; still busy then: the stage fails saying so (exit 8) instead of timing a contended machine. "
        "`deploy run --wait-quiet SECONDS` sets it for a run. 0: time at once (rows then say whether contended).",
    )
    openvino_throughput: bool = Field(
        True,
        description="Also time each OpenVINO runtime under its THROUGHPUT hint: as many closed-loop streams as "
        "requests the plugin asks to keep in flight, its streams and threads reported (rows marked "
        "`throughput hint`, load cN).",
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu",
        description="Where eager / TorchScript / ONNX Runtime run; on cuda the PyTorch rows split H2D / compute / D2H "
        "(ONNX Runtime needs onnxruntime-gpu).",
    )
    triton: TritonBench = Field(
        TritonBench(), description="Settings of the `triton` runtime (end to end through a server)."
    )
    generation: GenerationParams = Field(
        GenerationParams(),
        description="A decoder's generate models: TTFT, inter-token latency and tokens/s, served (needs triton in "
        "runtimes) and in process.",
    )
    gate: RegressionGate = Field(
        RegressionGate(), description="Optional regression gate: fails the stage with the numbers."
    )
