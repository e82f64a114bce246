"""bench for a decoder (config `model.decoder`): each generate model's speed as users ask
for it (serving/generation_perf.py: TTFT, ITL median and p99, tokens/s) at every
`generation.concurrency` and `generation.prompts` length, both served (its
`<step>_generate_stream` model over a gRPC stream on a real tritonserver) and in process
(the same loop over the same file here), so the python backend's share is a number.
Prompts are random ids from input_ids' value range (speed does not depend on which ids);
no stop tokens, so every sequence makes `new_tokens` tokens."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from deploy.domain.artifacts import GENERATION_SPEED, REPOSITORY
from deploy.pipeline.errors import StageFailed
from deploy.serving.generate_record import STREAM_SUFFIX
from deploy.serving.service import Role

if TYPE_CHECKING:
    from deploy.pipeline.graph.contract import StageContext
    from deploy.serving.generation_perf import GenerationRow, Run, Where
    from deploy.serving.repository import Model
    from deploy.stages.bench.params import BenchParams, GenerationParams

PROMPT_SEED = 2024
SETTLE_S = 1.0


def measure(ctx: StageContext, params: BenchParams) -> list[GenerationRow]:
    """Every generate model's rows, served and in process; [] without a repository."""
    if ctx.config.model.decoder is None:
        return []
    if REPOSITORY not in ctx.inputs:
        ctx.record("generation", "not timed: add triton to bench.runtimes (the generate models are served)")
        return []
    from deploy.serving.launch import serve_repository

    scratch = ctx.workdir / "generate-server"
    scratch.mkdir()
    rows: list[GenerationRow] = []
    with serve_repository(
        params.triton.server, ctx.input(REPOSITORY), scratch, _streaming, idle_at_end=True
    ) as served:
        for name, state in served.states.items():
            if not state.ready:
                raise StageFailed(
                    f"Triton could not load {name}: {state.reason}\n{served.server.log_tail(15)}"
                )
            rows += _model_rows(ctx, params.generation, served.server.grpc, name, served.found[name])
    return rows


def _streaming(found: dict[str, Model], _backends: object) -> list[str]:
    return [n for n, m in found.items() if m.role is Role.GENERATE and n.endswith(STREAM_SUFFIX)]


def _model_rows(
    ctx: StageContext, settings: GenerationParams, url: str, name: str, model: Model
) -> list[GenerationRow]:
    from deploy.serving import generation_perf
    from deploy.serving.generate_record import of_model

    record = of_model(model.directory)
    slots = max(settings.concurrency)
    steps, cache = generation_perf.file_steps(model.directory, record, slots)
    new = min(settings.new_tokens, record.max_new_tokens)
    local = generation_perf.in_process(steps, cache, new)
    cells = [
        _prompts(ctx, n, c, new, record.max_context) for n in settings.prompts for c in settings.concurrency
    ]
    # The loop in process, one sequence at a time, is every row's reference.
    expected = [[local(p)[0] for p in prompts] for prompts in cells]
    # ONNX Runtime's threads spin on after those runs and would take the cores from the
    # server's first timed requests (15 ms on a 2.8 ms TTFT, measured): let them park.
    time.sleep(SETTLE_S)
    served = generation_perf.ServedStreams(url, name, new, slots, cells[0][0])
    runs: list[tuple[str, generation_perf.Where, Run]] = [
        (name, "served", served),
        (f"{record.step_model} in process", "in-process", local),
    ]
    try:
        return [
            _row(ctx, settings, (subject, where, model.fmt, record.precision), one, prompts, tokens)
            for subject, where, one in runs
            for prompts, tokens in zip(cells, expected)
        ]
    finally:
        served.close()


def _row(
    ctx: StageContext,
    settings: GenerationParams,
    what: tuple[str, Where, str, str],
    one: Run,
    prompts: list[list[int]],
    tokens: list[list[int]],
) -> GenerationRow:
    from deploy.serving.generation_perf import timed

    row = timed(*what, one, prompts, tokens, settings.rounds)
    ctx.log.info("generate %s %s: %s", row.subject, row.cell(), row.model_dump_json())
    return row


def _prompts(ctx: StageContext, length: int, count: int, new: int, context: int) -> list[list[int]]:
    """`count` prompts of `length` ids (cut to what input_ids and the context allow)."""
    ids = ctx.config.inputs[0]
    low, high = ids.value_range or (0, 1)
    fits = max(1, min(length, ids.max[1], context - new))
    import numpy as np  # here: validate and a cached run import this module, and need none of it

    rng = np.random.default_rng(PROMPT_SEED + length)
    return [[int(t) for t in rng.integers(int(low), int(high) + 1, size=fits)] for _ in range(count)]


def report(ctx: StageContext, rows: list[GenerationRow], new_tokens: int) -> None:
    """generation.json (always written: empty for a model that generates nothing), the
    record and the report's table."""
    from deploy.serving.generation_perf import GenerationBench, table

    GenerationBench(new_tokens=new_tokens, rows=rows).write(ctx.output(GENERATION_SPEED))
    if rows:
        ctx.record("generation", [r.model_dump(mode="json") for r in rows])
        columns, cells = table(rows)
        ctx.report_table("Generation: time to first token, inter-token latency, tokens/s", columns, cells)


def headline(rows: list[GenerationRow]) -> str:
    """The served c1 rows of the shortest prompt: what one user waits for."""
    first = [r for r in rows if r.where == "served" and r.concurrency == min(x.concurrency for x in rows)]
    shortest = [r for r in first if r.prompt == min(x.prompt for x in first)]
    said = [
        f"{r.subject} {r.cell()}: TTFT {r.ttft_ms_median:.1f} ms, {r.tokens_per_s:.0f} tok/s"
        for r in shortest
    ]
    return ("; " + "; ".join(said)) if said else ""


def refuse_wrong(rows: list[GenerationRow]) -> None:
    """A generate model whose tokens under load differ from its own loop's is broken,
    whatever its speed: the stage fails naming it (its rows are written first)."""
    wrong = sorted({f"{r.subject} ({r.cell()})" for r in rows if r.token_exact is False})
    if wrong:
        raise StageFailed(
            "generated tokens differ from the same file's loop in process, one sequence at a time: "
            + ", ".join(wrong)
        )
