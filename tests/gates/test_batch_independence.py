"""Batch independence, measured: each sample's answer inside a batch of distinct samples
against its answer alone, with real torch models (a per-sample CNN, a batch-centred head,
a CLIP-like similarity matrix) and the record golden writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.gates.batch_independence import NOISE, BatchIndependence, measure
from deploy.pipeline.graph.records import SchemaMismatch


def infer_with(model: torch.nn.Module):
    def infer(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            out = model(torch.from_numpy(feeds["x"]))
        outs = out if isinstance(out, tuple) else (out,)
        return {f"y{i}": t.numpy() for i, t in enumerate(outs)}

    return infer


class PerSample(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).relu().mean((2, 3)))


class Centred(PerSample):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = super().forward(x)
        return y, y - y.mean(0, keepdim=True)


class Similarity(PerSample):
    """CLIP's logits_per_image: every sample against every other one, [batch, batch]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.normalize(super().forward(x), dim=1)
        return y @ y.T


def batch(n: int = 6) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((n, 3, 16, 16)).astype(np.float32)}


def measured(model: torch.nn.Module, feeds: dict[str, np.ndarray]) -> BatchIndependence:
    infer = infer_with(model.eval())
    return measure(infer, feeds, infer(feeds))


def test_a_per_sample_model_is_independent_within_float_noise() -> None:
    record = measured(PerSample(), batch())
    (out,) = record.outputs
    assert record.batch == 6 and out.independent and out.scaled_err is not None
    assert out.scaled_err < NOISE / 100  # float noise is orders of magnitude below the threshold
    assert record.dependent() == [] and record.text().startswith("every output per sample")


def test_a_batch_centred_output_is_dependent_and_its_plain_twin_is_not() -> None:
    record = measured(Centred(), batch())
    plain, centred = record.outputs
    assert plain.independent and not centred.independent
    assert centred.scaled_err is not None and centred.scaled_err > 0.1
    assert record.dependent() == [centred]
    assert "y1 depend(s) on the rest of the batch" in record.text()
    assert "differs from its answer alone by max |Δ|" in centred.difference()


def test_an_output_shaped_by_the_batch_is_dependent_by_its_shape() -> None:
    (out,) = measured(Similarity(), batch(4)).outputs
    assert not out.independent and out.max_abs is None
    assert out.difference() == "its shape is [4, 4] for the batch but [1, 1] for one sample alone"


class Mean(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean()  # 0-d: over the whole batch


def test_a_0d_output_over_the_batch_is_said_to_have_no_batch_axis() -> None:
    (out,) = measured(Mean(), batch(4)).outputs
    assert not out.independent and out.max_abs is None
    assert out.difference() == "it has no batch axis (shape [] for the batch and for one sample alone)"


def test_copies_of_one_sample_hide_the_dependence_so_nothing_is_claimed() -> None:
    feeds = {"x": np.repeat(batch(1)["x"], 4, axis=0)}
    record = measured(Centred(), feeds)
    assert not record.measured and record.reason == "the 4 samples of the batch are not distinct"
    assert record.text() == "batch independence not measured: the 4 samples of the batch are not distinct"


def test_the_record_round_trips_and_refuses_another_layout(tmp_path: Path) -> None:
    record = measured(Centred(), batch())
    path = tmp_path / "batching.json"
    path.write_text(json.dumps(record.to_json()))
    assert BatchIndependence.read(path) == record
    path.write_text(json.dumps({**record.to_json(), "schema": 99}))
    with pytest.raises(SchemaMismatch):
        BatchIndependence.read(path)
