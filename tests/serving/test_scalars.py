"""Inputs of every shape a model can have, on a real tritonserver (the nvidia-pytriton
wheel's, python backend): config.pbtxt as triton_config writes it (model_config), the
answers through smoke's own client (checks.infer), compared with torch at shapes the
configs never named.
- a per-sample scalar of a batched model (`lengths` [batch]) in, and a per-sample scalar
  out: `dims: [1]` with `reshape: { shape: [] }` (Triton refuses empty dims), dynamic
  batching on;
- a 0-d input and a 0-d output of a model without a batch dim: [1] on the wire, the
  python backend's model.py gives the model its scalar back (Triton has no 0-d tensors);
- no batch dim, two dynamic dims of their own (flat indices and their offsets): each
  input travels whole, none is cut to another's length;
- a batch dim Triton does not batch (max_batch_size 0, as for an output that depends on its
  batch, here a mean over it): the per-sample scalar travels whole as [batch], the 0-d mean
  as [1], and smoke's client expects what the server declares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.gates.references import Case
from deploy.serving.launch import serve_repository
from deploy.serving.layout import PYTHON_MODEL
from deploy.serving.model_state import ModelState
from deploy.serving.server_spec import ServerSpec
from deploy.spec.config import DeployConfig
from deploy.stages.smoke import checks
from deploy.stages.triton_config.params import TritonParams
from deploy.stages.triton_config.proto import model_config, render

pytestmark = pytest.mark.triton


class Lengths(torch.nn.Module):
    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * lengths[:, None].float()
        return y, y.sum(1)


class Timestep(torch.nn.Module):
    def forward(self, sample: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return sample * t.float(), t.float() * 0.5


class Pooled(torch.nn.Module):
    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * lengths[:, None].float()
        return y.sum(1), y.mean()


class Bag(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bag = torch.nn.EmbeddingBag(10, 4, mode="sum")

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.bag(indices, offsets)


def spec(name: str, inputs: list[dict], outputs: list[str], batch: str | None) -> DeployConfig:
    return DeployConfig.model_validate(
        {
            "name": name,
            "model": {"factory": "nowhere:build"},  # built below, not from here
            "inputs": inputs,
            "outputs": [{"name": o} for o in outputs],
            "batch_dim": batch,
            "stages": {"triton_config": {}},
        }
    )


CONFIGS = {
    "lengths": spec(
        "lengths",
        [
            {"name": "x", "dims": ["batch", 3], "min": [1, 3], "opt": [2, 3], "max": [4, 3]},
            {
                "name": "lengths",
                "dtype": "int64",
                "dims": ["batch"],
                "min": [1],
                "opt": [2],
                "max": [4],
                "value_range": [1, 9],
            },
        ],
        ["y", "total"],
        "batch",
    ),
    "timestep": spec(
        "timestep",
        [
            {"name": "sample", "dims": ["rows", 3], "min": [1, 3], "opt": [2, 3], "max": [6, 3]},
            {
                "name": "t",
                "dtype": "int64",
                "dims": [],
                "min": [],
                "opt": [],
                "max": [],
                "value_range": [0, 999],
            },
        ],
        ["out", "scale"],
        None,
    ),
    "bag": spec(
        "bag",
        [
            {
                "name": "indices",
                "dtype": "int64",
                "dims": ["flat"],
                "min": [2],
                "opt": [8],
                "max": [40],
                "value_range": [0, 9],
            },
            {
                "name": "offsets",
                "dtype": "int64",
                "dims": ["bags"],
                "min": [1],
                "opt": [2],
                "max": [5],
                "values": "offsets",
                "of": "flat",
            },
        ],
        ["pooled"],
        None,
    ),
}
CONFIGS["pooled"] = spec(
    "pooled", [s.model_dump() for s in CONFIGS["lengths"].inputs], ["total", "mean"], "batch"
)
MODELS = {"lengths": Lengths(), "timestep": Timestep(), "bag": Bag(), "pooled": Pooled()}
UNBATCHED = {"pooled"}  # served with max_batch_size 0 though its spec has a batch dim
# The ONNX outputs' dynamic axes.
OUTPUT_AXES = {
    "lengths": {"y": {0: "batch"}, "total": {0: "batch"}},
    "timestep": {"out": {0: "rows"}},
    "bag": {"pooled": {0: "bags"}},
    "pooled": {"total": {0: "batch"}},
}


def inputs_for(name: str, size: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name in ("lengths", "pooled"):
        return {"x": rng.normal(size=(size, 3)).astype(np.float32), "lengths": rng.integers(1, 9, size)}
    if name == "timestep":
        return {"sample": rng.normal(size=(size, 3)).astype(np.float32), "t": np.array(rng.integers(1, 999))}
    offsets = np.sort(rng.integers(0, 4 * size, size))
    offsets[0] = 0
    return {"indices": rng.integers(0, 10, 4 * size), "offsets": offsets}


def answer(name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    config = CONFIGS[name]
    args = [torch.from_numpy(np.require(feeds[n], requirements="C")) for n in config.input_names()]
    with torch.no_grad():
        result = MODELS[name](*args)
    outs = result if isinstance(result, tuple) else (result,)
    return {o: t.numpy() for o, t in zip(config.output_names(), outs)}


def write_model(repo: Path, name: str, golden: dict[str, Case]) -> None:
    """The ONNX file (legacy exporter, dynamic axes from the spec) and config.pbtxt as
    triton_config writes them."""
    config = CONFIGS[name]
    folder = repo / name / "1"
    folder.mkdir(parents=True)
    args = tuple(
        torch.from_numpy(np.require(golden["opt"].inputs[n], requirements="C")) for n in config.input_names()
    )
    axes = {s.name: s.dynamic_axes() for s in config.inputs if s.dynamic_axes()} | OUTPUT_AXES[name]
    torch.onnx.export(
        MODELS[name],
        args,
        str(folder / "model.onnx"),
        input_names=config.input_names(),
        output_names=config.output_names(),
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )
    (folder / "model.py").write_bytes(PYTHON_MODEL.read_bytes())
    batched = config.batch_dim is not None and name not in UNBATCHED
    params = TritonParams(
        formats=("python",),
        dynamic_batching={"max_queue_delay_us": 1000} if batched else None,
        max_batch_size=None if batched else 0,
    )
    (repo / name / "config.pbtxt").write_text(render(model_config(name, "python", params, config, golden)))


def test_scalars_and_unbatched_inputs_load_and_answer_like_torch(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    repo = tmp_path / "repo"
    goldens = {}
    for name in CONFIGS:
        goldens[name] = {
            label: Case(feeds, answer(name, feeds))
            for label, feeds in (
                ("min", inputs_for(name, 1, 0)),
                ("opt", inputs_for(name, 2, 1)),
                ("max", inputs_for(name, 4, 2)),
            )
        }
        write_model(repo, name, goldens[name])
    text = (repo / "lengths" / "config.pbtxt").read_text()
    assert 'name: "lengths"\n  data_type: TYPE_INT64\n  dims: 1\n  reshape {\n  }' in text
    assert 'key: "deploy_scalars"' in (repo / "timestep" / "config.pbtxt").read_text()
    pooled = (repo / "pooled" / "config.pbtxt").read_text()
    assert "max_batch_size: 0" in pooled or "max_batch_size" not in pooled, pooled
    assert 'string_value: "mean"' in pooled, pooled
    with serve_repository(ServerSpec(startup_timeout_s=120), repo, tmp_path / "work") as served:
        assert {n: s.state for n, s in served.states.items()} == dict.fromkeys(CONFIGS, ModelState.READY), {
            n: s.reason for n, s in served.states.items()
        }
        for protocol, module in (("http", httpclient), ("grpc", grpcclient)):
            url = served.server.http if protocol == "http" else served.server.grpc
            conn = module.InferenceServerClient(url)
            for name, config in CONFIGS.items():
                model = served.found[name]
                assert model.batched == (config.batch_dim is not None and name not in UNBATCHED), name
                inputs, outputs = checks.expected(config, "python", goldens[name], model.batched)
                meta = (
                    conn.get_model_metadata(name, as_json=True)
                    if protocol == "grpc"
                    else conn.get_model_metadata(name)
                )
                assert checks.metadata_problems(meta, inputs, outputs) == [], name
                target = checks.ModelEndpoint(conn, protocol, name, model.max_batch_size)
                # Shapes none of the configs named: 3 rows, 5 bags of 20 flat indices.
                feeds = inputs_for(name, 3 if name != "bag" else 5, seed=7)
                want = answer(name, feeds)
                got = checks.infer(target, Case(feeds, want), inputs, outputs)
                for out, value in want.items():
                    assert got[out].shape == value.shape, (name, out, got[out].shape, value.shape)
                    np.testing.assert_allclose(got[out], value, rtol=1e-5, atol=1e-5, err_msg=f"{name}.{out}")
            conn.close()
