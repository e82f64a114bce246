"""smoke's check of a generate model (a decoder's `<model>_generate` or
`<model>_generate_stream`, serving/generate_model.py): greedy generation token for token
against eager PyTorch's (golden's generations record; a reduced precision, which its own
stage gated against FP32 on its generations, against the same file's loop run here in
process), over every protocol, then
`clients` clients at once each with its own prompt (no cross-talk), then a seeded sampled
request twice (reproducible). The streaming model is asked the way a streaming client
asks: gRPC's stream, HTTP's generate_stream."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from deploy.domain.artifacts import GENERATIONS
from deploy.domain.vocabulary import Precision, Protocol
from deploy.gates.generations import Generation, Generations
from deploy.pipeline.graph.contract import StageContext
from deploy.serving.generate_client import Asked, generate
from deploy.serving.generate_record import GenerateRecord, of_model
from deploy.serving.smoke_report import ModelResult, ModelStatus
from deploy.stages.smoke.params import SmokeParams

if TYPE_CHECKING:
    from deploy.serving.repository import Model
    from deploy.serving.tritonserver import Server

SAMPLED = {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 1234}


def check_generate(
    server: Server, name: str, model: Model, ctx: StageContext, params: SmokeParams
) -> ModelResult:
    record = of_model(model.directory)
    eager = Generations.read(ctx.input(GENERATIONS))
    if not eager.cases:
        return ModelResult.failed(model, "golden has no eager generations to compare with (rerun golden)")
    said: str = eager.how
    if record.precision != Precision.FP32:  # judged against FP32 by its stage's gate
        eager, said = in_process(model, record, eager), f"the same {record.precision} file's loop in process"
    problems: list[str] = []
    for protocol in params.protocols:
        url = server.http if protocol == Protocol.HTTP else server.grpc
        problems += [_differs(protocol, c, _ask(url, protocol, name, record, eager, c)) for c in eager.cases]
        problems += _concurrent(url, protocol, name, record, eager, params.clients)
        problems += _reproducible(url, protocol, name, record, eager)
        problems += _as_text(url, protocol, name, record, eager, model)
    problems = [p for p in problems if p]
    how = "streamed" if record.stream else "one response"
    text = "; text in, text out through its tokenizer" if record.tokenizer else ""
    reference = (
        f"greedy token-exact with {said} on {len(eager.cases)} prompts ({how}; "
        f"{', '.join(params.protocols)}), {params.clients} clients at once, seeded sampling reproducible{text}"
    )
    status = ModelStatus.FAILED if problems else ModelStatus.PASSED
    return ModelResult.of(model, status, reference=reference, problems=problems)


def in_process(model: Model, record: GenerateRecord, eager: Generations) -> Generations:
    """The loop served code runs (serving/decode_loop.py), here over the served file itself:
    a reduced precision's own greedy tokens on golden's prompts."""
    from deploy.serving.decode_loop import Sampling, generate
    from deploy.serving.generation_perf import file_step

    step, cache = file_step(model.directory, record)

    sampling = Sampling(max_new_tokens=eager.max_new_tokens, stop=tuple(eager.stop))
    cases = [
        Generation(prompt=c.prompt, tokens=generate(step, c.prompt, cache, sampling)) for c in eager.cases
    ]
    return eager.model_copy(update={"cases": cases})


def _as_text(
    url: str, protocol: str, name: str, record: GenerateRecord, eager: Generations, model: Model
) -> list[str]:
    """With a tokenizer: each golden prompt's decoding sent as text. Its answer's ids must be
    those of its encoding sent as ids (the path checked token for token above: eager's
    own tokens where the ids survive decode and encode), and its text their decoding."""
    if record.tokenizer is None:
        return []
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(max(model.directory.glob(f"*/{record.tokenizer}"))))
    settings = {"max_new_tokens": eager.max_new_tokens}
    found = []
    for case in eager.cases:
        sentence = tokenizer.decode(case.prompt)
        ids = tokenizer.encode(sentence).ids
        if not ids:  # nothing to send: a prompt the tokenizer decodes to nothing
            continue
        want = case.tokens if ids == case.prompt else _ask_ids(url, protocol, name, record, eager, ids)
        got = generate(url, protocol, name, Asked([], settings, eager.stop, text=sentence), record.stream)  # type: ignore[arg-type]
        if got.tokens != want or got.text != tokenizer.decode(want):
            found.append(
                f"{protocol}: text {sentence!r} answered {got.text!r} ({got.tokens[:4]}...), "
                f"expected {tokenizer.decode(want)!r}"
            )
    return found


def _ask_ids(
    url: str, protocol: str, name: str, record: GenerateRecord, eager: Generations, ids: list[int]
) -> list[int]:
    return _ask(url, protocol, name, record, eager, Generation(prompt=ids, tokens=[]))


def _ask(
    url: str, protocol: str, name: str, record: GenerateRecord, eager: Generations, case: Generation
) -> list[int]:
    asked = Asked(case.prompt, {"max_new_tokens": eager.max_new_tokens}, eager.stop)
    return generate(url, protocol, name, asked, record.stream).tokens  # type: ignore[arg-type]


def _differs(protocol: str, case: Generation, got: list[int]) -> str:
    if got == case.tokens:
        return ""
    at = next(
        (i for i, (a, b) in enumerate(zip(got, case.tokens)) if a != b), min(len(got), len(case.tokens))
    )
    return (
        f"{protocol}: prompt of {len(case.prompt)} tokens: token {at} differs from eager "
        f"(served {got[at : at + 4]}..., eager {case.tokens[at : at + 4]}...; {len(got)} vs {len(case.tokens)} tokens)"
    )


def _concurrent(
    url: str, protocol: str, name: str, record: GenerateRecord, eager: Generations, clients: int
) -> list[str]:
    """Every case `clients` times over, all in flight at once: each answer against its own prompt's."""
    cases = [eager.cases[i % len(eager.cases)] for i in range(max(clients, len(eager.cases)))]
    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = list(pool.map(lambda c: _ask(url, protocol, name, record, eager, c), cases))
    return [f"concurrent {_differs(protocol, c, got)}" for c, got in zip(cases, answers) if got != c.tokens]


def _reproducible(
    url: str, protocol: str, name: str, record: GenerateRecord, eager: Generations
) -> list[str]:
    prompt = eager.cases[-1].prompt
    asked = Asked(prompt, {"max_new_tokens": eager.max_new_tokens, **SAMPLED})
    first, again = (generate(url, protocol, name, asked, record.stream).tokens for _ in range(2))  # type: ignore[arg-type]
    return (
        []
        if first == again
        else [f"{protocol}: sampling with seed {SAMPLED['seed']} gave {first} then {again}"]
    )
