"""The bad-input battery: each case drives one mistake a user makes through the CLI and
asserts the documented exit code, a message naming the field / file / stage, no Python
traceback on the console, and a cache that holds nothing it did not hold before.

Each case builds its input from the tiny config in a temp dir. Cases that fail inside a
stage use the tiny CNN and stop early (`--to`), so the whole battery runs in about a
minute. The table is the README's "Bad input battery"."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.errors import ExitCode
from tests.conftest import run_cli, tiny_dict

CONFIG, STAGE, ENV, USAGE = ExitCode.CONFIG, ExitCode.STAGE, ExitCode.ENVIRONMENT, ExitCode.USAGE


@dataclass(frozen=True)
class Case:
    id: str
    expect: ExitCode
    says: str  # must appear in the console output
    edit: Callable[[dict[str, Any], Path], Any] = lambda data, tmp: None  # changes the tiny config
    args: tuple[str, ...] = ("run", "{config}")
    raw: str | None = None  # the config file's text, instead of the edited tiny config
    env: dict[str, str] = field(default_factory=dict)
    prepare: tuple[str, ...] = ()  # a good run first (e.g. `--to triton_config`): its cache is the baseline


def _set(path: str, value: Any) -> Callable[[dict[str, Any], Path], None]:
    """An edit that sets a dotted path (`stages.export.opset`) in the config."""

    def edit(data: dict[str, Any], tmp: Path) -> None:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {}) if not part.isdigit() else node[int(part)]
        node[last] = value

    return edit


def _model_file(source: str, callable_name: str = "build") -> Callable[[dict[str, Any], Path], None]:
    def edit(data: dict[str, Any], tmp: Path) -> None:
        (tmp / "user_model.py").write_text(source)
        data["model"] = {"file": str(tmp / "user_model.py"), "callable": callable_name}

    return edit


def _checkpoint(content: bytes | Callable[[Path], None], suffix: str = ".pt") -> Callable[[dict[str, Any], Path], None]:
    def edit(data: dict[str, Any], tmp: Path) -> None:
        path = tmp / f"weights{suffix}"
        content(path) if callable(content) else path.write_bytes(content)
        data["model"]["checkpoint"] = str(path)

    return edit


def _other_state_dict(path: Path) -> None:
    import torch

    torch.save(torch.nn.Linear(3, 2).state_dict(), path)


def _unwritable(key: str) -> Callable[[dict[str, Any], Path], None]:
    """A directory that cannot be created: under a read-only dir, or (as root, who ignores
    modes) under a regular file."""

    def edit(data: dict[str, Any], tmp: Path) -> None:
        blocker = tmp / "locked"
        if os.geteuid() == 0:
            blocker.write_text("a file, not a directory")
        else:
            blocker.mkdir()
            blocker.chmod(0o500)
        data[key] = str(blocker / key)

    return edit


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _url_server(data: dict[str, Any], tmp: Path) -> None:
    port = _closed_port()
    data["stages"]["smoke"] = {"server": {"kind": "url", "url": f"127.0.0.1:{port}", "grpc_url": f"127.0.0.1:{port}", "startup_timeout_s": 2}}


def _docker_server(data: dict[str, Any], tmp: Path) -> None:
    data["stages"]["smoke"] = {"server": {"kind": "docker", "image": "nvcr.io/nvidia/tritonserver:24.10-py3"}}


def _identity_onnx(tmp: Path, ir_version: int = 8) -> None:
    """A one-node ONNX file with a dynamic batch: enough for `deploy bench`'s argument checks."""
    import onnx
    from onnx import TensorProto, helper

    tensor = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4]) for n in ("image", "out")]
    graph = helper.make_graph([helper.make_node("Identity", ["image"], ["out"])], "identity", tensor[:1], tensor[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = ir_version  # 99: from a future onnx, which this ONNX Runtime refuses
    onnx.save(model, str(tmp / "identity.onnx"))


RAISES = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, image):\n        raise RuntimeError('boom in forward')\n\ndef build(width=8):\n    return M()\n"
TWO_OUTPUTS_DECLARED = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, image):\n        return image.flatten(1)\n\ndef build(width=8):\n    return M()\n"
NOT_A_MODULE = "def build(width=8):\n    return 42\n"

CASES = [
    # -- the YAML itself ---------------------------------------------------------------------
    Case("empty-yaml", CONFIG, "the top level must be a mapping", raw=""),
    Case("invalid-yaml", CONFIG, "line 2, column 8", raw="name: tiny\nmodel: [unclosed\n"),
    Case("list-yaml", CONFIG, "the top level must be a mapping", raw="- a\n- b\n"),
    Case("duplicate-key", CONFIG, "duplicate key 'name' at line 2", raw="name: a\nname: b\n"),
    Case("config-is-a-directory", CONFIG, "is a directory; give the config file", args=("run", "{tmp}")),
    Case("config-missing", CONFIG, "no-such.yaml: 1 error(s)\n  config file not found", args=("run", "{tmp}/no-such.yaml")),
    # -- keys, types, shapes ---------------------------------------------------------------
    Case("unknown-top-key", CONFIG, "colour: unknown key", _set("colour", "blue")),
    Case("unknown-stage-key", CONFIG, "stages.export.opsett: unknown key", _set("stages.export.opsett", 17)),
    Case("unknown-stage", CONFIG, "stages.compile: unknown stage", _set("stages.compile", {})),
    Case("wrong-type", CONFIG, "stages.export.opset: Input should be a valid integer", _set("stages.export.opset", "seventeen")),
    Case("out-of-range", CONFIG, "stages.export.opset: Input should be greater than or equal to 13", _set("stages.export.opset", 5)),
    Case("min-above-opt", CONFIG, "need min <= opt <= max", _set("inputs.0.min", [8, 1, 8, 8])),
    Case("static-dim-differs", CONFIG, "but dim 1 is static 1", _set("inputs.0.opt", [4, 2, 8, 8])),
    Case("rank-mismatch", CONFIG, "max has 3 dims, dims has 4", _set("inputs.0.max", [16, 1, 8])),
    Case("integer-without-range", CONFIG, "value_range is required for integer inputs", _set("inputs.0.dtype", "int64")),
    Case("triton-batch-above-spec", CONFIG, "stages.triton_config.max_batch_size: 64 exceeds the shape spec's max batch 16", _set("stages.triton_config.max_batch_size", 64)),
    Case("path-traversal-name", CONFIG, "name: String should match pattern", _set("name", "../../etc")),
    Case("unmade-artifact", CONFIG, "stages.simplify: needs artifact 'onnx', which no stage in this config produces", lambda d, t: d["stages"].pop("export")),
    # -- files the config names --------------------------------------------------------------
    Case("checkpoint-missing", CONFIG, "model.checkpoint: file not found", _set("model.checkpoint", "nope.pt")),
    Case("checkpoint-suffix", CONFIG, "checkpoint must be one of", _checkpoint(b"x", ".bin")),
    Case("checkpoint-corrupt", STAGE, "model.checkpoint: cannot read", _checkpoint(b"not a pickle at all")),
    Case("safetensors-corrupt", STAGE, "model.checkpoint: cannot read", _checkpoint(b"\x00" * 16, ".safetensors")),
    Case("checkpoint-mismatched", STAGE, "does not fit the model", _checkpoint(_other_state_dict)),
    Case("calibration-missing", CONFIG, "stages.quantize.calibration.path", _set("stages.quantize", {"calibration": {"kind": "arrays", "path": "missing.npy"}})),
    Case("golden-inputs-not-npz", CONFIG, "golden_inputs must be an .npz", lambda d, t: (t / "g.txt").write_text("x") and d["model"].update(golden_inputs=str(t / "g.txt"))),
    # -- the model's code --------------------------------------------------------------------
    Case("factory-unimportable", STAGE, "model.factory: cannot import 'no_such_pkg.models'", lambda d, t: d.update(model={"factory": "no_such_pkg.models:net"})),
    Case("callable-missing", STAGE, "has no attribute 'absent'", _model_file(NOT_A_MODULE, "absent")),
    Case("syntax-error", STAGE, "user_model.py, line 1: invalid syntax", _model_file("def build(:\n")),
    Case("import-error-in-file", STAGE, "model.file: importing", _model_file("import no_such_module_here\n")),
    Case("not-a-module", STAGE, "not a torch.nn.Module", _model_file(NOT_A_MODULE)),
    Case("forward-raises", STAGE, "the model's forward raised: RuntimeError: boom in forward", _model_file(RAISES)),
    Case("wrong-output-count", STAGE, "the config declares 2", lambda d, t: (_model_file(TWO_OUTPUTS_DECLARED)(d, t), d.update(outputs=[{"name": "a"}, {"name": "b"}]))),
    # -- directories and servers -------------------------------------------------------------
    Case("cache-unwritable", ENV, "cannot write where the config says: cache_dir:", _unwritable("cache_dir")),
    Case("run-dir-unwritable", ENV, "cannot write where the config says: run_dir:", _unwritable("run_dir")),
    Case("repository-unwritable", ENV, "cannot write where the config says: repository:", _unwritable("repository")),
    Case("server-unreachable", ENV, "no Triton server answers at http://127.0.0.1:", _url_server, ("run", "{config}", "--only", "smoke"), prepare=("--to", "triton_config")),
    Case("docker-missing", ENV, "docker", _docker_server, ("run", "{config}", "--only", "smoke"), env={"PATH": "/nonexistent"}, prepare=("--to", "triton_config")),
    # -- the command line --------------------------------------------------------------------
    Case("only-unknown-stage", CONFIG, "stage selection: unknown stage 'nosuch'", args=("run", "{config}", "--only", "nosuch")),
    Case("bench-bad-batches", CONFIG, "stages.bench.batches", _set("stages.bench", {"batches": [0]})),
    Case("bench-file-missing", CONFIG, "missing.onnx: 1 error(s)\n  MODEL_FILE: file not found", args=("bench", "{tmp}/missing.onnx")),
    Case("bench-bad-shapes", USAGE, "'image:8x' is not NAME:DxDxD", lambda d, t: _identity_onnx(t), ("bench", "{tmp}/identity.onnx", "--shapes", "image:8x")),
    Case("bench-unknown-input", USAGE, "has no input(s) ['mask']", lambda d, t: _identity_onnx(t), ("bench", "{tmp}/identity.onnx", "--shapes", "image:1x4,mask:1x4")),
    Case("bench-unloadable-onnx", STAGE, "ONNX Runtime cannot load", lambda d, t: _identity_onnx(t, ir_version=99), ("bench", "{tmp}/identity.onnx", "--shapes", "image:1x4")),
]


def write_case(case: Case, tmp: Path) -> Path:
    path = tmp / "bad.yaml"
    if case.raw is not None:
        path.write_text(case.raw)
        return path
    data = tiny_dict(tmp)
    case.edit(data, tmp)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cache_listing(tmp: Path) -> list[str]:
    root = tmp / "cache"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path) -> None:
    config = write_case(case, tmp_path)
    if case.prepare:
        assert run_cli("run", str(config), *case.prepare, cwd=tmp_path).returncode == 0
    before = cache_listing(tmp_path)
    args = [a.format(config=config, tmp=tmp_path) for a in case.args]
    proc = run_cli(*args, cwd=tmp_path, env=case.env)
    console = proc.stdout + proc.stderr
    assert proc.returncode == case.expect, console
    assert case.says in console, console
    assert "Traceback" not in console, console
    assert [p for p in cache_listing(tmp_path) if not p.startswith("state")] == [p for p in before if not p.startswith("state")], console


def test_the_battery_is_large_and_distinct() -> None:
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


def test_the_readme_lists_every_case_with_its_exit_code() -> None:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = text.split("<!-- bad-input-battery:start -->")[1].split("<!-- bad-input-battery:end -->")[0]
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in table.strip().splitlines()[2:]}
    assert rows == {c.id: str(int(c.expect)) for c in CASES}
