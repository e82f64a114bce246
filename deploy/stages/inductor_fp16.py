"""inductor_fp16: the model compiled by AOTInductor computing in FP16, for the device the
inductor stage compiles for, its I/O kept FP32; gated on accuracy against the FP32 ONNX
and timed beside the FP32 package (gates/inductor_precision.py, shared with
inductor_bf16). FP16 pays on a GPU (tensor cores); a CPU computes it natively only with AVX512-FP16 or AMX-FP16."""

from __future__ import annotations

from deploy.datasources import held_out
from deploy.datasources.datasource import fingerprint
from deploy.datasources.held_out import ReducedPackageParams
from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Precision
from deploy.gates import inductor_precision
from deploy.gates.tolerance import gate_issues
from deploy.pipeline.contract import SOURCE_ARTIFACT, Artifact, ArtifactKind, Section, StageContext, StageSpec
from deploy.runtimes.inductorrt import PACKAGE_FILE
from deploy.spec.config import DeployConfig

PRECISION = Precision.FP16


def run(ctx: StageContext, params: ReducedPackageParams) -> None:
    holdout, evidence = held_out.load(params, ctx.config, SPEC.name)
    inductor_precision.run(ctx, PRECISION, holdout, params.gate, evidence, params.emulated)


def check(params: ReducedPackageParams, config: DeployConfig) -> list[Issue]:
    return gate_issues(params.gate, config.outputs, f"stages.{SPEC.name}")


def host(params: ReducedPackageParams, config: DeployConfig) -> list[Issue]:
    return inductor_precision.host(PRECISION, params.emulated, config)


SPEC = StageSpec(
    name="inductor_fp16",
    version=1,
    params=ReducedPackageParams,
    inputs=(SOURCE_ARTIFACT, "golden", "onnx", "inductor"),
    outputs=(
        Artifact("inductor_fp16", ArtifactKind.TREE, entry=PACKAGE_FILE),
        Artifact("accuracy_inductor_fp16", filename="accuracy.json"),
    ),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "numpy", "onnxruntime", "pillow", "tokenizers"),
    # Machine code for the host's CPU or GPU, as the FP32 package (whose record gives the device).
    identity=lambda p: {"holdout_data": fingerprint(p.holdout), **inductor_precision.target_identity()},
    check=check,
    host=host,
    description="FP16 AOTInductor package (FP32 I/O) for the inductor stage's device, accuracy-gated against FP32",
    timeout_s=1800,
)
