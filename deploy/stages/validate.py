"""validate: the parity gate. Judges the final ONNX (ONNX Runtime), the TorchScript module,
the FP32 IR (OpenVINO) and an engine on the golden inputs at every recorded shape against
the eager reference, at its own tolerance; any threshold exceeded fails the run.

A file its producer already ran on these very inputs (simplify, trace, openvino keep their
answers: gates/kept_answers.py) is judged on those answers, not run a second time, where the
record names the same runtime, file, golden inputs and library version; the summary says
which were (`answers_kept`) and why any other was run here (`answers_computed`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from deploy.domain.artifacts import EAGER, GOLDEN, ONNX_ANSWERS, OPENVINO_ANSWERS, REPORT, TORCHSCRIPT_ANSWERS
from deploy.domain.issues import Issue
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.graph.contract import Artifact, Phase, Section, StageContext, StageSpec
from deploy.runtimes.base import Device
from deploy.runtimes.catalog import CATALOG, PARITY, get, names, registered

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from deploy.gates.parity import ParityReport, Table
    from deploy.gates.references import Answers, Golden
    from deploy.runtimes.base import Feeds, Session
    from deploy.runtimes.timing import Timed
    from deploy.spec.config import DeployConfig


class ValidateParams(Tolerance):
    runtimes: tuple[str, ...] = Field(
        ("onnxruntime", "torchscript"),
        min_length=1,
        description=f"Runtimes compared with the eager reference on the golden inputs, of: {names(PARITY)} "
        "(openvino: the openvino stage's FP32 IR, computed in f32; tensorrt: the built engine; a CUDA one "
        "where this machine has a GPU, else skipped with the reason).",
    )

    @field_validator("runtimes")
    @classmethod
    def _checkable(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return registered(value, PARITY, "cannot be checked for parity")


def run(ctx: StageContext, params: ValidateParams) -> None:
    from deploy.gates import diagnosis, parity, references
    from deploy.gates.detection_parity import layout_of

    golden = references.load(ctx.input(GOLDEN))
    sessions = {r: _Lazy(r, ctx) for r in params.runtimes}
    skipped = {r: why for r in params.runtimes if (why := _cannot(r, ctx))}
    found = {r: _answers(r, ctx, golden, sessions[r]) for r in params.runtimes if r not in skipped}
    for runtime, (answers, _) in found.items():
        _typed(runtime, answers, golden)
    tables = {r: parity.compare(a, golden, params, layout_of(ctx.config)) for r, (a, _) in found.items()}
    kept = [r for r, (_, why) in found.items() if why is None]
    ctx.record("answers_kept", kept)
    ctx.record("answers_computed", {r: why for r, (_, why) in found.items() if why is not None})
    report = _report(tables, skipped, params).to_json()
    ctx.record("parity", report)
    said = [f"{r}: {parity.headline(t, params)}" for r, t in tables.items()] + [
        f"{r}: skipped" for r in skipped
    ]
    ctx.headline(
        "; ".join(said)
        + (f" (judged on the answers their producers kept: {', '.join(kept)})" if kept else "")
    )
    rows = [row for r, t in tables.items() for row in parity.report_rows(r, t)]
    note = "; ".join(f"{r}: {why}" for r, why in skipped.items())
    ctx.report_table("Parity vs the eager reference", parity.REPORT_COLUMNS, rows, note=note)
    ctx.output(REPORT).write_text(json.dumps(report, indent=1))
    for name, table in tables.items():
        diagnosis.judge(
            f"{name} vs eager",
            table,
            params,
            golden,
            ctx.input(EAGER),
            sessions[name].infer,
            "stages.validate (atol, rtol)",
        )


def _report(tables: dict[str, Table], skipped: dict[str, str], params: ValidateParams) -> ParityReport:
    from deploy.gates import parity

    thresholds = Tolerance(**params.model_dump(exclude={"runtimes"})).model_dump(mode="json")
    lines = {r: parity.RuntimeParity(t, not parity.failures(t, params)) for r, t in tables.items()}
    return parity.ParityReport(
        thresholds, lines | {r: parity.RuntimeParity(skipped=why) for r, why in skipped.items()}
    )


def _cannot(runtime: str, ctx: StageContext) -> str | None:
    """Why the runtime is not checked here: its artifact was not made, or this machine
    cannot run it (a CUDA one without a GPU)."""
    plugin = get(runtime)
    if plugin.artifact not in ctx.inputs:
        return plugin.absent or f"no {plugin.artifact}: its stage was skipped or is not configured"
    return plugin.reason_unavailable(plugin.on(Device.CPU))


def host(params: ValidateParams, config: DeployConfig) -> list[Issue]:
    """The runtimes this install cannot check: validate skips them, saying why."""
    del config
    return [
        Issue("stages.validate.runtimes", f"{runtime}: {reason}; validate skips it")
        for runtime in params.runtimes
        if (reason := get(runtime).reason_unavailable(get(runtime).on(Device.CPU)))
    ]


def _answers(runtime: str, ctx: StageContext, golden: Golden, lazy: _Lazy) -> tuple[Answers, str | None]:
    """The runtime's answers, and why it ran here (None: its file's producer kept them)."""
    from deploy.gates import references

    kept = _kept(runtime, ctx, golden)
    if isinstance(kept, str):
        return references.run(lazy.session(), golden), kept
    return kept, None


def _typed(runtime: str, answers: Answers, golden: Golden) -> None:
    """Each output of eager's type (a float of its width; an integer or bool of its kind):
    float16 for a float32 output passed parity, while a served model would answer another
    type than its config declares; int64 for it failed as "not float rounding"."""
    from deploy.pipeline.errors import StageFailed

    wrong = sorted(
        {
            f"{name} {got.dtype} (eager: {want.dtype})"
            for case, outputs in answers.items()
            for name, got in outputs.items()
            if (want := golden[case].outputs.get(name)) is not None and not _same_type(got.dtype, want.dtype)
        }
    )
    if wrong:
        raise StageFailed(f"runtime {runtime} answers {', '.join(wrong)}: not the type eager answers")


def _same_type(got: np.dtype, want: np.dtype) -> bool:
    if want.kind == "f":
        return got == want
    return (got.kind in "iu", got.kind == "b") == (want.kind in "iu", want.kind == "b")


def _kept(runtime: str, ctx: StageContext, golden: Golden) -> Answers | str:
    """The answers the file's producer kept, where they are what this stage would compute;
    else why it runs the runtime itself."""
    from deploy.gates import kept_answers

    artifact = get(runtime).artifact
    record = ctx.inputs.get(f"{artifact}{KEPT_SUFFIX}")
    return kept_answers.usable(record, runtime, ctx.input(artifact), ctx.input(GOLDEN), golden)


class _Lazy:
    """A runtime's session, made on first use: only where its answers were not kept, or
    where a failure's diagnosis runs it again."""

    def __init__(self, runtime: str, ctx: StageContext) -> None:
        self.runtime, self.ctx = runtime, ctx
        self.made: Session | None = None

    def session(self) -> Session:
        if self.made is None:
            hook = get(self.runtime).parity
            assert hook is not None, f"{self.runtime} has no parity hook"
            self.made = _PluginSession(self.runtime, _made(self.runtime, hook, self.ctx))
        return self.made

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        return self.session().infer(feeds)


def _made(runtime: str, hook: Callable[[StageContext], Session], ctx: StageContext) -> Session:
    """The plugin's session; a hook that raises, or answers no session, named as the
    runtime's (it read "NoneType cannot run the model ...: the export froze a shape")."""
    from deploy.pipeline.errors import DeployError, StageFailed

    try:
        made = hook(ctx)
    except DeployError:
        raise
    except Exception as exc:
        raise StageFailed(
            f"runtime {runtime}: its session could not be made: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(made, "infer", None)):
        raise StageFailed(
            f"runtime {runtime}'s parity hook returned {type(made).__name__}, not a session (infer(feeds) -> arrays)"
        )
    return made


class _PluginSession:
    """A plugin's session whose answers are held to the contract: a dict of arrays, each
    declared output of eager's dtype (float16 for a float32 output passed parity, while
    the served model would answer another type than its config declares)."""

    def __init__(self, runtime: str, session: Session) -> None:
        self.name, self.made = f"runtime {runtime}", session

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.made.outputs

    def timed(self, feeds: Feeds) -> Timed:
        return self.made.timed(feeds)

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        import numpy as np

        from deploy.pipeline.errors import StageFailed

        found = self.made.infer(feeds)
        if not isinstance(found, dict) or not all(isinstance(v, np.ndarray) for v in found.values()):
            kinds = sorted({type(v).__name__ for v in found.values()}) if isinstance(found, dict) else []
            said = f"a dict of {', '.join(kinds)}" if kinds else type(found).__name__
            raise StageFailed(
                f"{self.name} answered {said}; a session answers a dict of numpy arrays by output name"
            )
        return found


def inputs_for(params: ValidateParams) -> tuple[str, ...]:
    wanted = {get(r).artifact for r in params.runtimes} - set(ALWAYS)
    files = (*ALWAYS, *(a for a in ARTIFACTS if a in wanted))
    return (*files, *(k for k in KEPT if k.removesuffix(KEPT_SUFFIX) in files))


# What the checked runtimes load; the reference and the ONNX file (simplify's) always.
ARTIFACTS = tuple(dict.fromkeys(CATALOG[r].artifact for r in PARITY))
ALWAYS = ("onnx", "golden", "eager")
# The answers their producers kept on those files (gates/kept_answers.py).
KEPT_SUFFIX = "_answers"
KEPT = (ONNX_ANSWERS, TORCHSCRIPT_ANSWERS, OPENVINO_ANSWERS)

SPEC = StageSpec(
    phase=Phase.VERIFY,
    name="validate",
    version=6,  # 6: a file's producer's answers judged, not recomputed (gates/kept_answers.py); 5: every golden case, failures diagnosed (eager.json); 4: openvino among the runtimes; 3: parity.json a versioned record (gates/parity.py ParityReport)
    params=ValidateParams,
    inputs=(*ARTIFACTS, "golden", "eager", *KEPT),
    outputs=(Artifact("report", filename="parity.json"),),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnxruntime", "openvino", "torch", "numpy"),
    select_inputs=inputs_for,
    host=host,
    optional_inputs=frozenset({"engine"}),
    # the torch.export path has no trace stage; a config may have no openvino stage, or no
    # simplify (export's ONNX, whose answers are not kept)
    if_configured=frozenset({"torchscript", "openvino", *KEPT}),
    description="parity gate: ONNX Runtime, TorchScript and OpenVINO vs the eager reference",
    timeout_s=1800,
)
