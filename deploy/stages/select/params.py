"""The select stage's parameters (its YAML section), apart from its run so that its helpers can
import them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from deploy.domain.vocabulary import GenerationMetric, Metric


class Objective(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

    name: str = Field(..., min_length=1, description="What the objective is called in the report.")
    metric: Metric | GenerationMetric = Field(
        ...,
        description="latency: lowest median ms per call; throughput: most items/s. For a decoder's generate models "
        "(bench.generation): ttft, lowest median time to first token; tokens_per_s, most tokens/s.",
    )
    batch: PositiveInt | None = Field(
        None,
        description="Batch size compared; null: latency at the smallest measured batch, throughput at the largest.",
    )
    max_latency_ms: float | None = Field(
        None,
        gt=0,
        description="Constraint: latency at `percentile` at most this, ms (too few samples for it: rejected).",
    )
    percentile: float | None = Field(
        None,
        gt=0,
        le=100,
        description="For max_latency_ms; null: the bench's highest configured percentile (e.g. 99).",
    )
    min_cosine: float | None = Field(
        None,
        ge=-1,
        le=1,
        description="Constraint: reduced precision at least this cosine to FP32 on held-out data.",
    )
    prompt: PositiveInt | None = Field(
        None,
        description="ttft / tokens_per_s: the prompt length compared (of bench.generation.prompts); null: the shortest.",
    )
    concurrency: PositiveInt | None = Field(
        None,
        description="ttft / tokens_per_s: sequences in flight compared (of bench.generation.concurrency); null: the "
        "fewest for ttft, the most for tokens_per_s.",
    )

    @model_validator(mode="after")
    def _keys_of_its_metric(self) -> Objective:
        generation = isinstance(self.metric, GenerationMetric)
        wrong = (
            [k for k in ("batch", "max_latency_ms", "percentile") if getattr(self, k) is not None]
            if generation
            else [k for k in ("prompt", "concurrency") if getattr(self, k) is not None]
        )
        if wrong:
            raise ValueError(f"metric {self.metric} does not take {', '.join(wrong)}")
        return self


class SelectParams(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

    objectives: tuple[Objective, ...] = Field(
        (
            Objective(name="latency", metric=Metric.LATENCY),
            Objective(name="throughput", metric=Metric.THROUGHPUT),
        ),
        min_length=1,
        description="What to choose for: each picks its best candidate that meets its constraints.",
    )

    min_gain: float = Field(
        0.10,
        ge=0,
        description="A reduced-precision candidate wins only when it beats the best FP32 one by more than this "
        "fraction (a gain inside the measurement's spread does not pay for the accuracy it costs).",
    )

    @model_validator(mode="after")
    def _unique(self) -> SelectParams:
        names = [o.name for o in self.objectives]
        if len(set(names)) < len(names):
            raise ValueError(f"objective names must differ: {names}")
        return self
