"""What every stage declares must be true of its code:

- `inputs` is the maximal set: whatever `select_inputs` picks for any params is in it;
- `env` names every third-party distribution the stage's code imports (directly or
  through the project modules it uses), so that upgrading one reruns the stage.

Read from the source with `ast`; nothing heavy is imported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from deploy.pipeline.graph.contract import StageSpec
from deploy.pipeline.graph.registry import stage_specs

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("pipeline", "stages", "gates", "datasources", "modelio", "runtimes", "serving", "deploy", "tests")
# Followed: the code a stage runs. Not followed: the engine, keyed by KEY_SCHEMA instead.
FOLLOWED = ("stages", "gates", "datasources", "modelio", "runtimes", "serving")
# import name -> distribution name, where they differ
DISTRIBUTION = {
    "PIL": "pillow",
    "yaml": "pyyaml",
    "google": "protobuf",
    "onnx_tool": "onnx-tool",
    "onnx_ir": "onnx-ir",
    "onnxconverter_common": "onnxconverter-common",
    "sklearn": "scikit-learn",
}
# Imported but deliberately not in keys: the orchestrator's own model layer, and
# libraries whose identity a stage records otherwise (TensorRT: version + GPU in `identity`).
UNKEYED = {"pydantic", "typing_extensions", "tensorrt", "modelopt"}

SPECS = stage_specs()

# Params that make each stage with select_inputs read every artifact it ever reads.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "build": [{"source": s} for s in ("fp32", "int8", "fp16")],
    "validate": [{"runtimes": ["onnxruntime", "torchscript", "openvino", "tensorrt"]}],
    "triton_config": [
        {
            "formats": [
                "onnx",
                "torchscript",
                "python",
                "openvino",
                "python_openvino",
                "python_inductor",
                "plan",
            ],
            "precisions": ["fp32", "int8", "fp16", "bf16"],
        }
    ],
    "bench": [
        {
            "runtimes": [
                "eager",
                "torchscript",
                "onnxruntime",
                "onnxruntime_int8",
                "onnxruntime_fp16",
                "openvino",
                "openvino_fp16",
                "openvino_bf16",
                "openvino_int8",
                "tensorrt",
                "inductor",
                "inductor_fp16",
                "inductor_bf16",
                "triton",
            ]
        }
    ],
}


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.select_inputs is not None))
def test_selected_inputs_are_within_the_declared_ones(name: str) -> None:
    spec = SPECS[name]
    picked: set[str] = set()
    for values in [{}, *VARIANTS.get(name, [])]:
        picked |= set(spec.inputs_for(spec.params.model_validate(values)))
    assert picked <= set(spec.inputs), f"{name} reads {sorted(picked - set(spec.inputs))} beyond SPEC.inputs"
    assert picked == set(spec.inputs), (
        f"{name} declares {sorted(set(spec.inputs) - picked)} that no params read"
    )


def test_every_stage_with_select_inputs_has_variants() -> None:
    assert {n for n, s in SPECS.items() if s.select_inputs is not None} <= set(VARIANTS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_env_covers_the_distributions_the_stage_imports(name: str) -> None:
    spec = SPECS[name]
    imported = third_party(module_file(spec))
    declared = set(spec.env)
    missing = sorted(d for d in imported if d not in declared and d not in UNKEYED)
    assert not missing, f"{name} imports {missing} but its env does not name them"


def module_file(spec: StageSpec) -> Path:
    module = sys.modules[spec.run.__module__]
    assert module.__file__ is not None
    return Path(module.__file__)


def third_party(start: Path) -> set[str]:
    """Distributions imported by `start` and by every project module it reaches."""
    seen: set[Path] = set()
    todo, found = [start], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imports(path):
            top = name.split(".")[0]
            if top in FOLLOWED:
                todo += [p for p in project_files(name) if p not in seen]
            elif top in PROJECT:
                continue
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.add(DISTRIBUTION.get(top, top))
    return found


def imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def project_files(name: str) -> list[Path]:
    base = ROOT.joinpath(*name.split("."))
    return [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]
