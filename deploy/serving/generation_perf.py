"""Generation speed of a decoder, as users measure it: time to the first token (TTFT), the
gaps between tokens (inter-token latency, ITL: median and p99) and tokens/s over every
sequence in flight, at a number of sequences at once. The same timing for the generate
loop in process (serving/decode_loop.py over the step's file) and for a served
`<step>_generate_stream` model over a gRPC stream; each row says whether other processes
took the cores meanwhile (contended), and no decision rests on one that was. bench writes
these rows (generation.json); select and the benchmark script read them. numpy only where
rows are timed: select and `deploy validate` import the records."""

from __future__ import annotations

import json
import queue
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from deploy.spec.tensors import Frozen

if TYPE_CHECKING:
    import numpy as np

    from deploy.serving.decode_loop import CacheShape
    from deploy.serving.generate_record import GenerateRecord

GENERATION_VERSION = 1
STABLE_SPREAD = 0.15  # rounds further apart (relative MAD) than this: a row no decision rests on
MIN_ROUNDS = 3  # fewer rounds cannot tell a stable row from a lucky one
# A prompt in, (its tokens, each token's arrival in seconds from the request's start) out.
Run = Callable[[list[int]], tuple[list[int], list[float]]]
Where = Literal["served", "in-process"]
Step = Callable[[dict[str, "np.ndarray"]], list["np.ndarray"]]  # decode_loop's step: feeds -> logits, present


class GenerationRow(Frozen):
    subject: str  # the generate model, or the step file run in process (`<step> in process`)
    where: Where
    format: str  # the step's serving format (python, python_openvino)
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
    rounds: int = 1  # the cell run this many times over, one after another (pooled)
    # Over rounds, of tokens/s and of the median TTFT, the larger relative median absolute
    # deviation; None: fewer than MIN_ROUNDS rounds.
    spread: float | None = None
    contended: bool | None  # None: this platform cannot tell
    machine: str

    @property
    def stable(self) -> bool:
        """Its rounds agree: a number a decision may rest on (with a quiet machine)."""
        return self.spread is not None and self.spread <= STABLE_SPREAD

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
    fmt: str,
    precision: str,
    one: Run,
    prompts: list[list[int]],
    expected: list[list[int]] | None = None,
    rounds: int = 1,
) -> GenerationRow:
    """All `prompts` in flight at once, one sequence each, `rounds` times over (pooled);
    `expected`: each one's tokens."""
    import numpy as np

    from deploy.runtimes import contention

    start_use = contention.usage()
    done = [_round(one, prompts) for _ in range(rounds)]
    env = contention.between(start_use, contention.usage(), None, 0.0)
    answers = [a for r in done for a in r.answers]
    first = [times[0] for _, times in answers if times]
    gaps = [b - a for _, times in answers for a, b in zip(times, times[1:])]
    tokens = sum(len(t) for t, _ in answers)
    return GenerationRow(
        subject=subject, where=where, format=fmt, precision=precision, prompt=len(prompts[0]),
        concurrency=len(prompts), tokens=tokens,
        ttft_ms_median=_ms(statistics.median(first)), ttft_ms_p99=_ms(float(np.percentile(first, 99))),
        itl_ms_median=_ms(statistics.median(gaps)) if gaps else None,
        itl_ms_p99=_ms(float(np.percentile(gaps, 99))) if gaps else None,
        tokens_per_s=tokens / sum(r.wall for r in done), rounds=rounds, spread=_spread(done),
        token_exact=None if expected is None else all([t for t, _ in r.answers] == expected for r in done),
        contended=bool(env.contended) if env else None, machine=env.text() if env else "unknown",
    )  # fmt: skip


@dataclass(frozen=True)
class _Round:
    answers: list[tuple[list[int], list[float]]]
    wall: float

    def rate(self) -> float:
        return sum(len(t) for t, _ in self.answers) / self.wall

    def first(self) -> float:
        return statistics.median(times[0] for _, times in self.answers if times)


def _round(one: Run, prompts: list[list[int]]) -> _Round:
    wall = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(one, prompts))
    return _Round(answers, time.perf_counter() - wall)


def _spread(done: list[_Round]) -> float | None:
    """How far the rounds disagree: the larger, over tokens/s and the median TTFT, of the
    median absolute deviation relative to the median (one odd round moves it little);
    None: fewer than MIN_ROUNDS rounds, too few to tell."""
    if len(done) < MIN_ROUNDS:
        return None
    return max(_relative_mad([r.rate() for r in done]), _relative_mad([r.first() for r in done]))


def _relative_mad(values: list[float]) -> float:
    middle = statistics.median(values)
    return statistics.median(abs(v - middle) for v in values) / middle if middle > 0 else float("inf")


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


def file_steps(directory: Path, record: GenerateRecord, slots: int) -> tuple[list[Step], CacheShape]:
    """`slots` steps for as many sequences in flight, shared as the served model shares
    them: one ONNX Runtime session for all (its run is thread-safe), an OpenVINO model
    per sequence (a session holds one infer request)."""
    step, cache = file_step(directory, record)
    if record.model_file.endswith(".onnx"):
        return [step] * slots, cache
    return [step] + [file_step(directory, record)[0] for _ in range(slots - 1)], cache


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


NO_STOP = (-1,)


class ServedStreams:
    """A `<step>_generate_stream` model over gRPC streams, each token as it arrives: one
    open stream per sequence in flight (`slots`), each warmed by a request before any
    timing, so no timed request pays a connect. A Run; close() when done."""

    def __init__(self, url: str, model: str, new: int, slots: int, warm: list[int]) -> None:
        from deploy.serving.generate_client import Asked, Stream

        self.model, self.new = model, new
        self.streams = [Stream(url) for _ in range(slots)]
        self.free: queue.SimpleQueue[Stream] = queue.SimpleQueue()
        for stream in self.streams:
            stream.generate(model, Asked(warm, {"max_new_tokens": 1}))
            self.free.put(stream)

    def __call__(self, prompt: list[int]) -> tuple[list[int], list[float]]:
        from deploy.serving.generate_client import Asked

        stream = self.free.get_nowait()  # more sequences than slots: a caller's error, said at once
        try:
            # Stop at -1, an id no token has: timed at exactly `new` tokens, not the model's eos.
            got = stream.generate(self.model, Asked(prompt, {"max_new_tokens": self.new}, NO_STOP))
        finally:
            self.free.put(stream)
        times = [got.first_s]
        for gap in got.gaps_s:
            times.append(times[-1] + gap)
        return got.tokens, times

    def close(self) -> None:
        for stream in self.streams:
            stream.close()


def table(rows: list[GenerationRow]) -> tuple[list[str], list[list[str]]]:
    """The report's columns and rows."""
    columns = ["subject", "where", "prompt", "concurrency", "TTFT ms median / p99", "ITL ms median / p99",
               "tokens/s", "token-exact", "rounds", "machine"]  # fmt: skip
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
        _stability(r),
        machine,
    ]


def _stability(r: GenerationRow) -> str:
    if r.spread is None:
        return f"{r.rounds} round(s): unknown"
    return f"{'stable' if r.stable else 'UNSTABLE'} ({r.rounds} rounds, spread {100 * r.spread:.0f} %)"
