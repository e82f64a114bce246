"""Generation speed of a decoder, as users measure it: time to the first token (TTFT), the
gaps between tokens (inter-token latency, ITL: median and p99) and tokens/s over every
sequence in flight, at a number of sequences at once. The same timing for the generate
loop in process (serving/decode_loop.py over the step's file) and for a served
`<step>_generate_stream` model over a gRPC stream; each row says whether other processes
took the cores meanwhile (contended), and no decision rests on one that was. bench writes
these rows (generation.json); select and the benchmark script read them. numpy only at
import."""

from __future__ import annotations

import json
import queue
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from deploy.domain.vocabulary import Protocol
from deploy.spec.tensors import Frozen

if TYPE_CHECKING:
    from deploy.serving.decode_loop import CacheShape
    from deploy.serving.generate_record import GenerateRecord

GENERATION_VERSION = 1
# A prompt in, (its tokens, each token's arrival in seconds from the request's start) out.
Run = Callable[[list[int]], tuple[list[int], list[float]]]
Where = Literal["served", "in-process"]
Step = Callable[[dict[str, np.ndarray]], list[np.ndarray]]  # decode_loop's step: feeds -> logits, present


class GenerationRow(Frozen):
    subject: str  # the generate model, or the step file run in process (`<step> in process`)
    where: Where
    precision: str
    prompt: int  # tokens per prompt
    concurrency: int  # sequences in flight at once
    tokens: int  # generated, over all sequences
    ttft_ms_median: float
    ttft_ms_p99: float
    itl_ms_median: float | None  # None: one token per sequence, no gap
    itl_ms_p99: float | None
    tokens_per_s: float
    # Every sequence's tokens equal the reference's for its prompt (None: none given): a
    # speed of wrong answers is not a speed.
    token_exact: bool | None = None
    contended: bool | None  # None: this platform cannot tell
    machine: str

    def cell(self) -> str:
        return f"p{self.prompt} c{self.concurrency}"


class GenerationBench(Frozen):
    version: int = GENERATION_VERSION
    new_tokens: int = 0
    rows: list[GenerationRow] = Field(default_factory=list)

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1))

    @classmethod
    def read(cls, path: Path) -> GenerationBench:
        return cls.model_validate(json.loads(path.read_text()))


def timed(
    subject: str,
    where: Where,
    precision: str,
    one: Run,
    prompts: list[list[int]],
    expected: list[list[int]] | None = None,
) -> GenerationRow:
    """All `prompts` in flight at once, one sequence each; `expected`: each one's tokens."""
    from deploy.runtimes import contention

    start_use = contention.usage()
    wall = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(one, prompts))
    wall = time.perf_counter() - wall
    env = contention.between(start_use, contention.usage(), None, 0.0)
    first = [times[0] for _, times in answers if times]
    gaps = [b - a for _, times in answers for a, b in zip(times, times[1:])]
    return GenerationRow(
        subject=subject, where=where, precision=precision, prompt=len(prompts[0]),
        concurrency=len(prompts), tokens=sum(len(t) for t, _ in answers),
        ttft_ms_median=_ms(statistics.median(first)), ttft_ms_p99=_ms(float(np.percentile(first, 99))),
        itl_ms_median=_ms(statistics.median(gaps)) if gaps else None,
        itl_ms_p99=_ms(float(np.percentile(gaps, 99))) if gaps else None,
        tokens_per_s=sum(len(t) for t, _ in answers) / wall,
        token_exact=None if expected is None else [t for t, _ in answers] == expected,
        contended=bool(env.contended) if env else None, machine=env.text() if env else "unknown",
    )  # fmt: skip


def _ms(seconds: float) -> float:
    return 1e3 * seconds


def file_step(directory: Path, record: GenerateRecord) -> tuple[Step, CacheShape]:
    """A generate model's own step file, run here as the served loop runs it: the step
    function decode_loop calls, and its cache's shape. One sequence at a time per step
    (an OpenVINO session holds one infer request): make one per sequence in flight."""
    from deploy.runtimes.files import runtime_for
    from deploy.serving.decode_loop import CacheShape
    from deploy.serving.generate_record import present_names, step_file

    present = present_names(record)
    session = runtime_for(step_file(directory, record), ["logits", *present], record.precision)

    def step(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = session.infer(feeds)
        return [out["logits"], *(out[n] for n in present)]

    return step, CacheShape(record.layers, record.heads, record.head_dim, record.dtype, record.past)


def in_process(steps: list[Step], cache: CacheShape, new: int) -> Run:
    """The generate loop, greedy, no stop (`new` tokens), each sequence on a step of its
    own from `steps` (as many as sequences in flight; loaded before any timing)."""
    from deploy.serving.decode_loop import Sampling, generate

    free: queue.SimpleQueue[Step] = queue.SimpleQueue()
    for step in steps:
        free.put(step)

    def one(prompt: list[int]) -> tuple[list[int], list[float]]:
        times: list[float] = []
        step = free.get_nowait()  # more sequences than steps: a caller's error, said at once
        start = time.perf_counter()
        try:
            tokens = generate(
                step, prompt, cache, Sampling(new), lambda _: times.append(time.perf_counter() - start)
            )
        finally:
            free.put(step)
        return tokens, times

    return one


def served(url: str, model: str, new: int) -> Run:
    """A `<step>_generate_stream` model over a gRPC stream: each token as it arrives."""
    from deploy.serving.generate_client import Asked, generate

    def one(prompt: list[int]) -> tuple[list[int], list[float]]:
        got = generate(url, Protocol.GRPC, model, Asked(prompt, {"max_new_tokens": new}), True)
        times = [got.first_s]
        for gap in got.gaps_s:
            times.append(times[-1] + gap)
        return got.tokens, times

    return one


def table(rows: list[GenerationRow]) -> tuple[list[str], list[list[str]]]:
    """The report's columns and rows."""
    columns = ["subject", "where", "prompt", "concurrency", "TTFT ms median / p99", "ITL ms median / p99",
               "tokens/s", "token-exact", "machine"]  # fmt: skip
    return columns, [_cells(r) for r in rows]


def _cells(r: GenerationRow) -> list[str]:
    itl = "-" if r.itl_ms_median is None else f"{r.itl_ms_median:.2f} / {r.itl_ms_p99:.2f}"
    ttft = f"{r.ttft_ms_median:.1f} / {r.ttft_ms_p99:.1f}"
    machine = ("CONTENDED: " if r.contended else "") + r.machine
    return [
        r.subject,
        r.where,
        str(r.prompt),
        str(r.concurrency),
        ttft,
        itl,
        f"{r.tokens_per_s:.0f}",
        {True: "yes", False: "NO", None: "-"}[r.token_exact],
        machine,
    ]
