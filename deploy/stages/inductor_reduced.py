"""inductor_fp16 and inductor_bf16, one definition with the precision as its parameter: the
model compiled by AOTInductor computing in that precision, for the device the inductor
stage compiles for, its I/O kept FP32; gated on accuracy against the FP32 ONNX and timed
beside the FP32 package (gates/inductor_precision.py). FP16 pays on a GPU (tensor cores);
a CPU computes it natively only with AVX512-FP16 or AMX-FP16. bf16 keeps FP32's range
(nothing to clip) with 8 bits of mantissa; a GPU computes it from sm 8.0 on, a CPU with
AVX512-BF16 or AMX. A stage per precision (SPECS): pipeline/graph/registry.py."""

from __future__ import annotations

from collections.abc import Callable

from deploy.datasources import held_out
from deploy.datasources.datasource import fingerprint
from deploy.datasources.held_out import ReducedPackageParams
from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Precision
from deploy.gates import inductor_precision
from deploy.gates.tolerance import gate_issues
from deploy.pipeline.graph.contract import (
    SOURCE_ARTIFACT,
    Artifact,
    ArtifactKind,
    Section,
    StageContext,
    StageSpec,
)
from deploy.runtimes.inductorrt import PACKAGE_FILE
from deploy.spec.config import DeployConfig

PRECISIONS = (Precision.FP16, Precision.BF16)


def _run(precision: Precision, name: str) -> Callable[[StageContext, ReducedPackageParams], None]:
    def run(ctx: StageContext, params: ReducedPackageParams) -> None:
        holdout, evidence = held_out.load(params, ctx.config, name)
        inductor_precision.run(ctx, precision, holdout, params.gate, evidence, params.emulated)

    return run


def _check(name: str) -> Callable[[ReducedPackageParams, DeployConfig], list[Issue]]:
    return lambda params, config: gate_issues(params.gate, config.outputs, f"stages.{name}")


def _host(precision: Precision) -> Callable[[ReducedPackageParams, DeployConfig], list[Issue]]:
    return lambda params, config: inductor_precision.host(precision, params.emulated, config)


def spec(precision: Precision) -> StageSpec:
    name = f"inductor_{precision}"
    return StageSpec(
        name=name,
        version=2,  # 2: speed vs FP32 timed in ABBA rounds (accuracy.json schema 3)
        params=ReducedPackageParams,
        inputs=(SOURCE_ARTIFACT, "golden", "onnx", "inductor"),
        outputs=(
            Artifact(name, ArtifactKind.TREE, entry=PACKAGE_FILE),
            Artifact(f"accuracy_{name}", filename="accuracy.json"),
        ),
        run=_run(precision, name),
        uses=frozenset({Section.MODEL, Section.SHAPES}),
        env=("torch", "safetensors", "numpy", "onnxruntime", "pillow", "tokenizers"),
        # Machine code for the host's CPU or GPU, as the FP32 package (whose record gives the device).
        identity=lambda p: {"holdout_data": fingerprint(p.holdout), **inductor_precision.target_identity()},
        check=_check(name),
        host=_host(precision),
        description=f"{precision} AOTInductor package (FP32 I/O) for the inductor stage's device, accuracy-gated "
        "against FP32",
        timeout_s=1800,
    )


SPECS = tuple(spec(p) for p in PRECISIONS)
