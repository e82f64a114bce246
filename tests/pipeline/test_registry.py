"""A stage added from a package outside this repository, without touching the engine:
the recipe in docs/development.md, exercised end to end through the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

from deploy.pipeline.errors import ExitCode
from tests.helpers import run_cli

STAGE = '''
"""checksum: the ONNX file's sha256 in a text file."""

import hashlib

from pydantic import BaseModel, ConfigDict, Field

from deploy.pipeline.graph.contract import Artifact, Phase, StageContext, StageSpec


class ChecksumParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: str = Field("sha256:", description="Written before the digest.")


def run(ctx: StageContext, params: ChecksumParams) -> None:
    digest = hashlib.sha256(ctx.input("onnx").read_bytes()).hexdigest()
    ctx.output("checksum").write_text(params.prefix + digest)
    ctx.record("headline", digest[:12])


SPEC = StageSpec(
    name="checksum",
    version=1,
    params=ChecksumParams,
    inputs=("onnx",),
    outputs=(Artifact("checksum", filename="checksum.txt"),),
    run=run,
    phase=Phase.PACKAGE,
    description="sha256 of the ONNX file",
)
'''


def plugin_env(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "plugins" / "my_stages"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "checksum.py").write_text(STAGE)
    path = os.pathsep.join(filter(None, [str(tmp_path / "plugins"), os.environ.get("PYTHONPATH", "")]))
    return {"DEPLOY_STAGE_PACKAGES": "my_stages", "PYTHONPATH": path}


def test_a_stage_from_another_package_runs_and_caches(write_config, tmp_path: Path) -> None:
    env = plugin_env(tmp_path)
    path = write_config(replace={"stages": {"trace": {}, "export": {}, "checksum": {"prefix": "onnx "}}})
    first = run_cli("run", str(path), "--json", str(tmp_path / "first.json"), env=env)
    assert first.returncode == ExitCode.OK, first.stdout + first.stderr
    stages = {s["stage"]: s for s in json.loads((tmp_path / "first.json").read_text())["stages"]}
    assert stages["checksum"]["status"] == "ran"
    assert Path(stages["checksum"]["outputs"]["checksum"]["path"]).read_text().startswith("onnx ")
    second = run_cli("run", str(path), "--json", str(tmp_path / "second.json"), env=env)
    again = {s["stage"]: s["status"] for s in json.loads((tmp_path / "second.json").read_text())["stages"]}
    assert second.returncode == ExitCode.OK and again == {
        "golden": "cached",
        "trace": "cached",
        "export": "cached",
        "checksum": "cached",
    }


def test_without_the_package_the_stage_is_unknown(write_config) -> None:
    path = write_config(replace={"stages": {"trace": {}, "export": {}, "checksum": {}}})
    proc = run_cli("validate", str(path))
    assert (
        proc.returncode == ExitCode.CONFIG and "stages.checksum: unknown stage" in proc.stdout + proc.stderr
    )


def test_an_unimportable_stage_package_is_an_environment_error(write_config) -> None:
    proc = run_cli("validate", str(write_config()), env={"DEPLOY_STAGE_PACKAGES": "no_such_stage_pkg"})
    assert proc.returncode == ExitCode.ENVIRONMENT
    assert (
        "$DEPLOY_STAGE_PACKAGES: cannot import the stage package 'no_such_stage_pkg'"
        in proc.stdout + proc.stderr
    )


RETUNE = '''
"""retune: rewrites the repository, as triton_search does (a transform of `repository`)."""

import shutil

from pydantic import BaseModel, ConfigDict

from deploy.pipeline.graph.contract import Artifact, ArtifactKind, Phase, Publish, StageContext, StageSpec
from deploy.pipeline.errors import StageFailed
from deploy.serving.publishing import when_all


class RetuneParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    fail: bool = False


def run(ctx: StageContext, params: RetuneParams) -> None:
    if params.fail:
        raise StageFailed("retune failed on purpose")
    shutil.copytree(ctx.input("repository"), ctx.output("repository"))
    for config in ctx.output("repository").glob("*/config.pbtxt"):
        config.write_text(config.read_text() + "# retuned\\n")


SPEC = StageSpec(
    name="retune",
    version=1,
    params=RetuneParams,
    inputs=("repository",),
    outputs=(Artifact("repository", ArtifactKind.TREE, publish=Publish.REPOSITORY),),
    run=run,
    phase=Phase.MEASURE,
    publishes=when_all,
    description="rewrites every config.pbtxt",
)
'''


def test_the_repository_is_published_once_as_its_last_transform_leaves_it(
    write_config, tmp_path: Path
) -> None:
    """triton_config and a stage rewriting its repository both publish with `publish: all`:
    only the last link does. Its failure leaves nothing published, not the earlier link's
    tree; its success publishes its own."""
    env = plugin_env(tmp_path)
    (tmp_path / "plugins" / "my_stages" / "retune.py").write_text(RETUNE)
    failing = write_config(override={"stages": {"retune": {"fail": True}}})
    first = run_cli("run", str(failing), env=env)
    assert first.returncode == ExitCode.STAGE and "retune failed on purpose" in first.stdout + first.stderr
    repository = tmp_path / "model_repository"
    assert not repository.exists() or not any(repository.iterdir())
    passing = write_config(override={"stages": {"retune": {"fail": False}}})
    second = run_cli("run", str(passing), env=env)
    assert second.returncode == ExitCode.OK, second.stdout + second.stderr
    configs = sorted(repository.glob("*/config.pbtxt"))
    assert configs and all(c.read_text().endswith("# retuned\n") for c in configs)


FAMILY = '''
"""checksum_sha256 and checksum_md5: one definition, the algorithm its parameter (SPECS)."""

import hashlib

from pydantic import BaseModel, ConfigDict

from deploy.pipeline.graph.contract import Artifact, Phase, StageContext, StageSpec


class Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _run(algorithm):
    def run(ctx: StageContext, params: Params) -> None:
        digest = hashlib.new(algorithm, ctx.input("onnx").read_bytes()).hexdigest()
        ctx.output(f"checksum_{algorithm}").write_text(digest)

    return run


def spec(algorithm):
    return StageSpec(
        name=f"checksum_{algorithm}",
        version=1,
        params=Params,
        inputs=("onnx",),
        outputs=(Artifact(f"checksum_{algorithm}", filename="checksum.txt"),),
        run=_run(algorithm),
        phase=Phase.PACKAGE,
        description=f"{algorithm} of the ONNX file",
    )


SPECS = tuple(spec(a) for a in ("sha256", "md5"))
'''


def test_one_definition_makes_a_stage_per_parameter(write_config, tmp_path: Path) -> None:
    """A module with SPECS: each stage is found by its own name, runs in its own process
    from that module, and writes what its parameter says (as inductor_fp16 / _bf16 do)."""
    import hashlib

    env = plugin_env(tmp_path)
    (tmp_path / "plugins" / "my_stages" / "checksums.py").write_text(FAMILY)
    stages = {"trace": {}, "export": {}, "checksum_sha256": {}, "checksum_md5": {}}
    path = write_config(replace={"stages": stages})
    done = run_cli("run", str(path), "--json", str(tmp_path / "run.json"), env=env)
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    found = {s["stage"]: s for s in json.loads((tmp_path / "run.json").read_text())["stages"]}
    tree = Path(found["export"]["outputs"]["onnx"]["path"])  # a tree: the model and its weights
    onnx = next(tree.glob("*.onnx")).read_bytes()
    for algorithm in ("sha256", "md5"):
        written = Path(found[f"checksum_{algorithm}"]["outputs"][f"checksum_{algorithm}"]["path"])
        assert written.read_text() == hashlib.new(algorithm, onnx).hexdigest(), algorithm
