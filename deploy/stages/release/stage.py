"""release: publishes the repository as built, model by model, as a new Triton version
beside what is deployed, once it has been compared with it.

A model whose files and config equal a deployed version's is unchanged: no new version.
Otherwise, where both are ONNX files ONNX Runtime runs here (the onnx and python
formats), the candidate and the deployed version answer the same golden inputs and are
timed side by side; the gate refuses a model whose outputs moved or that got slower, and
then nothing is published (exit 7) unless `accept_regression` gives a reason, which its
record keeps. Runs last: after smoke, bench and select have verified the candidate.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.artifacts import GENERATIONS, GOLDEN, REPOSITORY
from deploy.domain.issues import Issue
from deploy.domain.vocabulary import DataKind
from deploy.pipeline.errors import StageFailed, first_line
from deploy.pipeline.graph.contract import Artifact, Phase, StageContext, StageSpec
from deploy.pipeline.graph.hashing import digest_file, digest_json
from deploy.runtimes.interleaved import Interval, Judgement, judge
from deploy.serving.publishing import PublishPolicy, publishing
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import LABELS
from deploy.stages.release.params import ReleaseGate, ReleaseParams

if TYPE_CHECKING:
    from deploy.runtimes.interleaved import Budget
    from deploy.serving.releases import Comparison, ReleaseRecord
    from deploy.stages.release.compare import Feeds
    from deploy.stages.release.release_report import ModelRelease, ReleaseAction


def run(ctx: StageContext, params: ReleaseParams) -> None:
    from deploy.pipeline.store import locks

    # Held from the recovery to the last rename: another run's release, a rollback or a
    # publish of this repository waits, and none takes over a journal this one still writes.
    with locks.repository(ctx.config.repository, lambda holder: ctx.log.warning("waiting for %s", holder)):
        try:
            _release(ctx, params)
        except (OSError, StageFailed) as exc:  # refused half way: what becomes of it is said
            if (told := with_journal(exc, ctx.config.repository, ctx.config.name)) is None:
                raise  # nothing left behind, or an error of its own kind (a refusal's exit code)
            raise told from exc


def with_journal(exc: Exception, repository: Path, pipeline: str) -> StageFailed | None:
    """The failure, saying what becomes of the journal it left; None where it left none."""
    from deploy.serving.release_journal import path

    journal = path(repository, pipeline)
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)  # the disk's: exit 4
    if not journal.exists() or full or not (isinstance(exc, OSError) or type(exc) is StageFailed):
        return None
    said = first_line(exc) if isinstance(exc, StageFailed) else f"{type(exc).__name__}: {exc}"
    return StageFailed(
        f"{said}; the release's journal {journal.name} is left in the repository: the next `deploy releases`, "
        "`deploy run`, `deploy rollback` or `deploy serve` of this config reverts what it placed (or, past the "
        "switch, completes it)"
    )


def _release(ctx: StageContext, params: ReleaseParams) -> None:
    from deploy.gates import references
    from deploy.serving.foreign import refuse_foreign
    from deploy.serving.release_journal import recover
    from deploy.stages.release import output
    from deploy.stages.release.release_report import ReleaseAction

    recovered = recover(ctx.config.repository)  # a release killed half way: before anything else
    for line in recovered:
        ctx.log.warning(line)
    if recovered:
        ctx.record("recovered", recovered)
    refuse_foreign(ctx.config.repository, ctx.config.name)  # the gate compares with what was released
    golden = references.load(ctx.input(GOLDEN))
    cases = [golden[label].inputs for label in LABELS] + _held_out(ctx, params)
    tree, repository = ctx.input(REPOSITORY), ctx.config.repository
    measured: dict[tuple[str, str], Comparison] = {}  # the onnx and python formats serve one file
    decided = [_decide(ctx, params, tree / m, repository / m, cases, measured) for m in _models(tree)]
    # The reason is recorded only where it overrode something: a first release accepts nothing.
    if not any(m.problems for m in decided if m.action is ReleaseAction.RELEASED):
        params = params.model_copy(update={"accept_regression": None})
    output.finish(ctx, params, decided, tree, _base(ctx, params, _answers(golden)), recovered)


def _answers(golden: Mapping[Any, Any]) -> str:
    """The model's answers on the golden inputs, digested: what tells two checkpoints apart
    whatever form the weights came in (a file, a factory's download, a module's code)."""
    import hashlib

    found = hashlib.sha256()
    for label in LABELS:
        for name, value in sorted(golden[label].outputs.items()):
            found.update(name.encode() + value.tobytes())
    return found.hexdigest()


def _held_out(ctx: StageContext, params: ReleaseParams) -> list[dict[str, Any]]:
    """The held-out samples, in batches no larger than the model's largest (one sample a
    case for a model without batching)."""
    import numpy as np

    from deploy.datasources import datasource

    if params.holdout is None:
        return []
    samples = datasource.load(params.holdout, ctx.config)
    if ctx.config.batch_dim is None:
        return list(samples)
    size = max(1, int(ctx.config.inputs[0].shape("max")[0]))
    chunks = [samples[i : i + size] for i in range(0, len(samples), size)]
    return [{name: np.concatenate([s[name] for s in chunk]) for name in chunk[0]} for chunk in chunks]


def _inputs_said(ctx: StageContext, params: ReleaseParams) -> str:
    golden = f"golden min / opt / max ({'given' if ctx.config.model.golden_inputs else 'random'} inputs)"
    held = params.holdout
    if held is None:
        return golden
    what = f"random (seed {held.seed})" if held.kind == DataKind.RANDOM else f"{held.kind} from {held.path}"
    return f"{golden} + {held.count} held-out samples: {what}"


def _models(tree: Path) -> list[str]:
    return sorted(p.name for p in tree.iterdir() if p.is_dir())


def _decide(
    ctx: StageContext,
    params: ReleaseParams,
    candidate: Path,
    deployed: Path,
    cases: Sequence[Feeds],
    measured: dict[tuple[str, str], Comparison],
) -> ModelRelease:
    from deploy.serving import releases
    from deploy.stages.release.release_report import ModelRelease, ReleaseAction

    found = releases.versions(deployed)
    if not found:
        return ModelRelease(candidate.name, ReleaseAction.FIRST, 1)
    against = max(releases.served(deployed) or {found[-1]})
    files, config = releases.file_digests(candidate / "1"), digest_file(candidate / "config.pbtxt")
    same = releases.matching(deployed, files, config)
    if same is not None and same.version == against:  # what is served already: as released?
        restored = releases.restore(deployed / str(against), candidate / "1", files)
        if restored:
            ctx.log.warning(
                "restored %s v%d: %s had changed since it was released", deployed.name, against, restored
            )
        note = f"restored {', '.join(restored)}: changed since it was released" if restored else ""
        return ModelRelease(candidate.name, ReleaseAction.UNCHANGED, against, note=note)
    comparison, note = _compare(
        ctx, params, (candidate / "1", deployed / str(against)), against, cases, measured
    )
    problems, unsure = _problems(comparison, params.gate) if comparison is not None else ([], [])
    if same is not None and same.record is not None and same.record.rolled_back:
        problems.append(f"the same files as v{same.version}, rolled back {same.record.rolled_back}")
    action = _action(problems, unsure, params.accept_regression)
    held = action in (ReleaseAction.REFUSED, ReleaseAction.INCONCLUSIVE)
    version = None if held else releases.next_version(deployed)
    return ModelRelease(candidate.name, action, version, against, comparison, problems + unsure, note)


def _action(problems: list[str], unsure: list[str], accepted: str | None) -> ReleaseAction:
    """A refusal outranks an undecided speed; an accepted reason publishes either."""
    from deploy.stages.release.release_report import ReleaseAction

    if accepted is not None or not (problems or unsure):
        return ReleaseAction.RELEASED
    return ReleaseAction.REFUSED if problems else ReleaseAction.INCONCLUSIVE


def _compare(
    ctx: StageContext,
    params: ReleaseParams,
    dirs: tuple[Path, Path],
    against: int,
    cases: Sequence[Feeds],
    measured: dict[tuple[str, str], Comparison],
) -> tuple[Comparison | None, str]:
    """The candidate (dirs[0]) against the deployed version (dirs[1]); a pair of files
    already compared for another model of this release is not timed again."""
    from dataclasses import replace

    from deploy.stages.release import compare

    new_file, old_file = compare.comparable(dirs[0]), compare.comparable(dirs[1])
    if new_file is None or old_file is None:
        return None, "compared by its files only: no ONNX file in both versions"
    key = (digest_file(old_file), digest_file(new_file))
    if key not in measured:
        ctx.progress(0, what=f"{dirs[0].parent.name}: v{against} vs the candidate")
        inputs, outputs = _inputs_said(ctx, params), ctx.config.output_names()
        measured[key] = (
            _generations(ctx, old_file, new_file, against, params)
            if ctx.config.model.decoder is not None
            else compare.compare(old_file, new_file, cases, outputs, against, inputs, _budget(params))
        )
    return replace(measured[key], against=against), ""


def _generations(ctx: StageContext, old: Path, new: Path, against: int, params: ReleaseParams) -> Comparison:
    """A decoder's versions on golden's prompts, generation by generation."""
    from deploy.gates.generations import Generations
    from deploy.stages.release import compare

    eager = Generations.read(ctx.input(GENERATIONS))
    prompts = [case.prompt for case in eager.cases]
    steps = max(1, eager.max_new_tokens)
    said = f"golden's {len(prompts)} prompts, {steps} steps each"
    return compare.compare_decoder(old, new, prompts, steps, ctx.config, against, said, _budget(params))


def _budget(params: ReleaseParams) -> Budget:
    from deploy.runtimes.interleaved import Budget

    return Budget(params.precision, params.rounds, params.max_rounds, params.max_s)


def _problems(comparison: Comparison, gate: ReleaseGate) -> tuple[list[str], list[str]]:
    """(what the gate refuses, speed ratios whose interval straddles max_slowdown)."""
    found: list[str] = []
    for a in comparison.agreement:
        if not a.cosine >= gate.min_cosine:  # NaN (a non-finite output) fails
            found.append(f"{a.output}: cosine {a.cosine:.6f} to v{comparison.against} < {gate.min_cosine}")
        if a.scale is not None and not _within(a.scale, gate.max_scale_change):  # NaN, 0 and inf fail
            found.append(
                f"{a.output}: size {a.scale:.4g}x v{comparison.against}'s (norm of a sample, new / deployed), "
                f"beyond 1 ± {gate.max_scale_change}"
            )
        if a.top1 is not None and a.top1 < gate.min_top1:
            found.append(
                f"{a.output}: top-1 agreement {a.top1:.4f} with v{comparison.against} < {gate.min_top1}"
            )
    unsure: list[str] = []
    for what, found_ratio in _slowdowns(comparison):
        verdict = judge(found_ratio, gate.max_slowdown)
        said = f"{what} {found_ratio.text()} v{comparison.against}'s"
        if verdict is Judgement.BEYOND:
            found.append(f"{said} > {gate.max_slowdown}x")
        elif verdict is Judgement.INCONCLUSIVE:
            unsure.append(f"{said}: inconclusive against {gate.max_slowdown}x (the interval straddles it)")
    return found, unsure


def _within(scale: float, change: float) -> bool:
    return 1 / (1 + change) <= scale <= 1 + change


def _slowdowns(comparison: Comparison) -> list[tuple[str, Interval]]:
    """Latency and time per item, new / deployed, with their intervals (older records
    without one stand as exact)."""
    found = []
    first, then = (
        ("time to first token", "inter-token latency") if comparison.decoder else ("latency", "time per item")
    )
    if comparison.latency_ratio is not None:
        low, high = comparison.latency_ci or [comparison.latency_ratio] * 2
        found.append((first, Interval(comparison.latency_ratio, low, high, comparison.rounds, True)))
    if comparison.per_item_ratio is not None:
        low, high = comparison.per_item_ci or [comparison.per_item_ratio] * 2
        found.append((then, Interval(comparison.per_item_ratio, low, high, comparison.rounds, True)))
    return found


def _base(ctx: StageContext, params: ReleaseParams, answers: str) -> ReleaseRecord:
    """The fields every model's record of this release shares (model, version and files
    are filled in per model)."""
    from deploy.serving.releases import ReleaseRecord

    config = ctx.config
    return ReleaseRecord(
        config.name,
        "",
        0,
        {},
        datetime.now(UTC).isoformat(timespec="seconds"),
        config_sha256=digest_json(config.model_dump(mode="json")),
        checkpoint_sha256=digest_json({"source": _source_digest(config), "answers": answers}),
        inputs=_inputs_said(ctx, params),
        build_url=os.environ.get("BUILD_URL"),
        report=_report_link(config),
        accepted_regression=params.accept_regression,
    )


def _report_link(config: DeployConfig) -> str:
    """The run report: in a Jenkins build, where the build archives it (runs/<name>/**,
    relative to the workspace); else its path here."""
    report = (config.run_dir / config.name / "report.html").absolute()
    build, workspace = os.environ.get("BUILD_URL"), os.environ.get("WORKSPACE")
    if build and workspace and report.is_relative_to(Path(workspace).absolute()):
        return f"{build.rstrip('/')}/artifact/{report.relative_to(Path(workspace).absolute())}"
    return str(report)


def _source_digest(config: DeployConfig) -> str:
    """The model's weights or source file; else its factory and arguments."""
    model = config.model
    path = next((p for p in (model.checkpoint, model.torchscript, model.file) if p is not None), None)
    if path is not None:
        return digest_file(path)
    return digest_json(model.model_dump(mode="json", include={"factory", "kwargs", "seed"}))


def identity(params: ReleaseParams) -> Mapping[str, object]:
    from deploy.datasources.datasource import fingerprint

    return {"holdout_data": fingerprint(params.holdout)}


def observes(params: ReleaseParams, config: DeployConfig) -> Mapping[str, object]:
    """What is deployed now: each model dir's versions, release records, config and files (a
    rollback or another release changes it, and with it what this stage compares with)."""
    repository, state = config.repository, {}
    if repository.is_dir():
        for model in sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
            state[model.name] = _model_state(model)
    return {"deployed": digest_json(state)}


def _model_state(model: Path) -> list[object]:
    config = model / "config.pbtxt"
    records = sorted(
        str(p.relative_to(model)) + ":" + p.read_text() for p in model.glob("*/deploy-release.json")
    )
    versions = sorted(p.name for p in model.iterdir() if p.is_dir() and p.name.isdigit())
    # Each file's size and mtime, not its digest (cheap at every run): a file changed since
    # its release reruns the stage, which puts it back (restore).
    files = sorted(
        f"{p.relative_to(model)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
        for version in versions
        for p in (model / version).rglob("*")
        if p.is_file()
    )
    return [versions, records, config.read_text() if config.is_file() else None, files]


def check(params: ReleaseParams, config: DeployConfig) -> list[Issue]:
    if publishing(config).policy is not PublishPolicy.RELEASED:
        return [
            Issue(
                "stages.release",
                "publishes the repository as versions: set stages.triton_config.publish: released "
                "(otherwise triton_config publishes it before it was compared)",
            )
        ]
    return []


SPEC = StageSpec(
    phase=Phase.RELEASE,
    name="release",
    version=4,  # 4: the gate sees a change of size (max_scale_change); 3: a decoder compared by its generations (next-token agreement, TTFT, inter-token latency); 2: bench's numbers and select's target in the records
    params=ReleaseParams,
    inputs=(
        "repository",
        "golden",
        "generations",
        "smoke",
        "accuracy_int8",
        "accuracy_fp16",
        "results",
        "selection",
    ),
    outputs=(Artifact("release", filename="release.json"),),
    run=run,
    env=("onnxruntime", "numpy"),
    identity=identity,
    observes=observes,
    optional_inputs=frozenset({"smoke", "accuracy_int8", "accuracy_fp16", "results", "selection"}),
    if_configured=frozenset({"smoke", "accuracy_int8", "accuracy_fp16", "results", "selection"}),
    check=check,
    description="publishes each changed model as a new Triton version after comparing it with the deployed one "
    "(outputs and speed, side by side); a regression is refused unless accepted with a reason",
    timeout_s=1800,
)
