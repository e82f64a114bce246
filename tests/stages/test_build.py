"""The TensorRT build stage: our derivations (profiles, flags, precision per TensorRT
version) against a fake that follows tensorrt-stubs; the honest skip where TensorRT is
missing; mypy against the stubs; and a real build wherever TensorRT and a GPU exist."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from deploy.pipeline.errors import ConfigError, StageError, StageFailed, StageSkipped
from deploy.pipeline.graph.project import load_project
from deploy.runtimes.engine_manifest import EngineManifest
from deploy.stages import build
from tests.helpers import ROOT, real_tensorrt, run, statuses
from tests.stages import fake_tensorrt as fake

STUBS = ROOT / ".typings" / "tensorrt_bindings" / "tensorrt.pyi"
needs_stubs = pytest.mark.skipif(not STUBS.is_file(), reason="run scripts/setup.sh (it prepares .typings/)")


def stub_names() -> dict[str, set[str]]:
    """class -> the names it defines (methods, annotated attributes) in tensorrt-stubs."""
    names = {}
    for node in ast.parse(STUBS.read_text()).body:
        if isinstance(node, ast.ClassDef):
            methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            fields = {
                n.target.id
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
            names[node.name] = methods | fields
    return names


@needs_stubs
def test_fake_follows_the_stubs():
    stubs = stub_names()
    for name, cls in vars(fake).items():
        if not isinstance(cls, type) or cls.__module__ != fake.__name__:
            continue
        stub = stubs.get(name)
        assert stub is not None, f"fake class {name} is not in tensorrt-stubs"
        methods = {m for m, v in vars(cls).items() if callable(v) and not m.startswith("_")}
        members = {m for m in vars(cls) if not m.startswith("_")} - methods
        assert methods <= stub, f"{name}: {methods - stub} not in the stubs"
        if issubclass(cls, int):
            assert members <= stub, f"{name}: {members - stub} not in the stubs"


def params(**kw) -> build.BuildParams:
    return build.BuildParams.model_validate(kw)


@pytest.mark.parametrize(
    ("major", "source", "flags"),
    [(10, "fp32", 0), (10, "int8", 2), (10, "fp16", 2), (11, "fp32", 2), (11, "int8", 2)],
)
def test_network_flags_per_version_and_source(major, source, flags):
    assert build.network_flags(fake, params(source=source), major) == flags


def test_builder_flags():
    assert build.builder_flags(fake, params(fp16=True), 10) == [fake.BuilderFlag.FP16]
    assert build.builder_flags(fake, params(version_compatible=True), 11) == [
        fake.BuilderFlag.VERSION_COMPATIBLE
    ]
    with pytest.raises(StageFailed, match="TensorRT 11"):
        build.builder_flags(fake, params(fp16=True), 11)
    with pytest.raises(StageFailed, match="source: fp16"):
        build.builder_flags(fake, params(fp16=True, source="int8"), 10)


def test_profiles_default_to_the_shape_spec_and_can_be_overridden(write_config):
    config = load_project(write_config()).config
    default = build.profile_shapes(config, build.Profile(name="d"))
    assert default["image"].model_dump() == {"min": (1, 1, 8, 8), "opt": (4, 1, 8, 8), "max": (16, 1, 8, 8)}
    small = build.Profile(
        name="small",
        shapes={"image": build.ProfileShapes(min=(1, 1, 8, 8), opt=(1, 1, 8, 8), max=(2, 1, 8, 8))},
    )
    assert build.profile_shapes(config, small)["image"].max == (2, 1, 8, 8)


def test_profile_errors_are_config_errors(write_config):
    bad = {
        "profiles": [
            {
                "name": "a",
                "shapes": {"image": {"min": [1, 1, 8, 8], "opt": [8, 1, 8, 8], "max": [4, 1, 9, 8]}},
            },
            {"name": "a", "shapes": {"nope": {"min": [1], "opt": [1], "max": [1]}}},
        ]
    }
    with pytest.raises(ConfigError) as info:
        load_project(write_config(override={"stages": {"build": bad}}))
    text = [str(i) for i in info.value.issues]
    assert any("stages.build.profiles[0].shapes.image: dim 0: need min <= opt <= max" in t for t in text), (
        text
    )
    assert any("dim 2 is static 8" in t for t in text) and any("no input 'nope'" in t for t in text)
    assert any("profile names must be unique" in t for t in text)


def test_build_with_the_fake_writes_raw_plan_manifest_and_profiles(write_config, monkeypatch):
    monkeypatch.setattr(build, "_tensorrt", lambda p: fake)
    monkeypatch.setattr(build, "gpu_identity", lambda: "Fake GPU (sm 9.0)")
    fake.built.clear()
    profiles = [
        {
            "name": "small",
            "shapes": {"image": {"min": [1, 1, 8, 8], "opt": [1, 1, 8, 8], "max": [2, 1, 8, 8]}},
        },
        {"name": "default"},
    ]
    path = write_config(
        replace={
            "stages": {
                "trace": {},
                "export": {},
                "build": {
                    "isolate": False,  # the fake is patched into this process
                    "profiles": profiles,
                    "workspace_mib": 64,
                    "optimization_level": 5,
                    "hardware_compatibility": "ampere_plus",
                },
            }
        }
    )
    results = run(path)
    from tests.helpers import output_path

    assert output_path(path, results, "build", "engine").read_bytes() == fake.PLAN  # no header inside
    manifest = EngineManifest.read(output_path(path, results, "build", "manifest"))
    assert manifest.tensorrt == "10.13.0.35" and manifest.gpu == "Fake GPU (sm 9.0)"
    assert manifest.strongly_typed is False and list(manifest.profiles) == ["small", "default"]
    # What triton_config checks max_batch_size against: the smallest max batch of the profiles used.
    assert (manifest.max_batch(), manifest.max_batch([1])) == (2, 16)
    config = fake.built[-1]["config"]
    assert config.pools[fake.MemoryPoolType.WORKSPACE] == 64 << 20 and config.builder_optimization_level == 5
    assert config.hardware_compatibility_level == fake.HardwareCompatibilityLevel.AMPERE_PLUS
    assert [list(p.shapes["image"][2]) for p in config.profiles] == [[2, 1, 8, 8], [16, 1, 8, 8]]


def test_without_tensorrt_the_build_is_skipped_and_the_rest_completes(write_config):
    try:
        import tensorrt

        if hasattr(tensorrt, "Builder"):
            pytest.skip("TensorRT is installed here")
    except ImportError:
        pass
    stages = {"trace": {}, "export": {}, "build": {}, "triton_config": {"formats": ["onnx", "plan"]}}
    path = write_config(replace={"stages": stages})
    results = run(path)
    assert results["build"].status.value == "skipped" and "TensorRT" in results["build"].message
    assert results["triton_config"].status.value == "ran"
    assert (
        results["triton_config"].metrics["not_written.tiny_plan"]
        == "no engine (stage skipped or not configured)"
    )
    again = run(path)
    assert statuses(again)["build"] == "skipped" and statuses(again)["triton_config"] == "cached"
    with pytest.raises(StageFailed, match="TensorRT engine required"):
        build._tensorrt(params(required=True))
    with pytest.raises(StageSkipped):
        build._tensorrt(params())


@needs_stubs
def test_mypy_with_the_stubs_catches_trt_8_api_misuse(tmp_path):
    wrong = (ROOT / "deploy" / "stages" / "build.py").read_text()
    wrong = wrong.replace(
        "builder.build_serialized_network(network, config)", "builder.build_engine(network, config)"
    )
    wrong = wrong.replace(
        "config.set_memory_pool_limit(trt_module.MemoryPoolType.WORKSPACE, params.workspace_mib << 20)",
        "config.max_workspace_size = params.workspace_mib << 20",
    )
    wrong = wrong.replace(
        "trt_module.Dims(list(s.min)), trt_module.Dims(list(s.opt)), trt_module.Dims(list(s.max))",
        "s.min, s.opt, s.max",
    )
    copy = tmp_path / "stages_copy" / "build_wrong.py"
    copy.parent.mkdir()
    copy.write_text(wrong)
    # follow-imports=skip: the TensorRT stubs are followed whatever it says (stubs always are);
    # deploy's own modules are not checked again (3 s instead of 30 s on a cold cache).
    command = [sys.executable, "-m", "mypy", "--follow-imports=skip", "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.run([*command, str(copy)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert '"Builder" has no attribute "build_engine"' in proc.stdout
    assert '"IBuilderConfig" has no attribute "max_workspace_size"' in proc.stdout
    assert 'expected "Dims"' in proc.stdout


@pytest.mark.tensorrt
@pytest.mark.gpu
@pytest.mark.skipif(not real_tensorrt(), reason="needs TensorRT with its builder libraries and an NVIDIA GPU")
def test_real_tensorrt_builds_the_tiny_engine(write_config):
    path = write_config(replace={"stages": {"trace": {}, "export": {}, "build": {"required": True}}})
    results = run(path)
    assert results["build"].status.value == "ran"
    from tests.helpers import output_path

    plan = output_path(path, results, "build", "engine").read_bytes()
    assert len(plan) > 1000 and not plan.startswith(b"{")


def test_validate_reports_tensorrt_skipped_without_an_engine(write_config):
    if real_tensorrt():
        pytest.skip("TensorRT is installed here")
    stages = {"trace": {}, "export": {}, "build": {}, "validate": {"runtimes": ["onnxruntime", "tensorrt"]}}
    results = run(write_config(replace={"stages": stages}))
    assert statuses(results) == {
        "golden": "ran",
        "trace": "ran",
        "export": "ran",
        "build": "skipped",
        "validate": "ran",
    }
    report = results["validate"].metrics["parity"]
    assert report["onnxruntime"]["passed"] and "skipped" in report["tensorrt"]


def test_triton_plan_max_batch_is_checked_against_the_engine_profiles(write_config, monkeypatch):
    monkeypatch.setattr(build, "_tensorrt", lambda p: fake)
    monkeypatch.setattr(build, "gpu_identity", lambda: "Fake GPU (sm 9.0)")
    small = [
        {
            "name": "small",
            "shapes": {"image": {"min": [1, 1, 8, 8], "opt": [2, 1, 8, 8], "max": [4, 1, 8, 8]}},
        }
    ]
    stages = {
        "trace": {},
        "export": {},
        "build": {"profiles": small, "isolate": False},  # the fake is patched into this process
        "triton_config": {"formats": ["plan"], "max_batch_size": 8},
    }
    with pytest.raises(StageError, match="max_batch_size 8 exceeds the engine's profiles' max batch 4"):
        run(write_config(replace={"stages": stages}))
    stages["triton_config"]["max_batch_size"] = 4
    results = run(write_config(replace={"stages": stages}, name="ok.yaml"))
    from tests.helpers import output_path

    tree = output_path(
        write_config(replace={"stages": stages}, name="ok.yaml"), results, "triton_config", "repository"
    )
    assert (tree / "tiny_plan" / "1" / "model.plan").read_bytes() == fake.PLAN
    assert 'platform: "tensorrt_plan"' in (tree / "tiny_plan" / "config.pbtxt").read_text()


def test_timing_cache_is_carried_from_build_to_build(write_config, monkeypatch):
    monkeypatch.setattr(build, "_tensorrt", lambda p: fake)
    monkeypatch.setattr(build, "gpu_identity", lambda: "Fake GPU (sm 9.0)")
    fake.built.clear()
    stages = {"trace": {}, "export": {}, "build": {"optimization_level": 2, "isolate": False}}
    run(write_config(replace={"stages": stages}))
    assert fake.built[-1]["config"].cache.previous == b""
    stages["build"]["optimization_level"] = 4  # a different build, same TensorRT and GPU
    run(write_config(replace={"stages": stages}))
    assert fake.built[-1]["config"].cache.previous == b"+timing"
