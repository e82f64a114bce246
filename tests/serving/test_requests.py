"""What goes over the wire: feeds at the opt shape named as each served format names its
inputs, InferInputs of either tritonclient protocol holding exactly those bytes, and the
statistics as the totals the benchmark subtracts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from deploy.serving.repository import Model
from deploy.serving.requests import PHASES, Feed, Statistics, infer_inputs, opt_feeds
from deploy.spec.config import DeployConfig


def config() -> DeployConfig:
    return DeployConfig.model_validate(
        {
            "name": "m",
            "model": {"factory": "somewhere.models:build"},
            "inputs": [
                {
                    "name": "image",
                    "dims": ["batch", 3, 4],
                    "min": [1, 3, 4],
                    "opt": [2, 3, 4],
                    "max": [8, 3, 4],
                },
                {
                    "name": "ids",
                    "dtype": "int64",
                    "dims": ["batch", 7],
                    "min": [1, 7],
                    "opt": [2, 7],
                    "max": [8, 7],
                    "value_range": [0, 99],
                },
                {"name": "keep", "dtype": "bool", "dims": ["batch"], "min": [1], "opt": [2], "max": [8]},
            ],
            "outputs": [{"name": "y"}],
            "stages": {"trace": {}},
        }
    )


@pytest.mark.parametrize(
    ("fmt", "names"),
    [
        ("onnx", ["image", "ids", "keep"]),
        ("python", ["image", "ids", "keep"]),
        ("torchscript", ["image__0", "ids__1", "keep__2"]),
    ],
)
def test_opt_feeds_are_named_typed_and_shaped_for_the_format(fmt: str, names: list[str]) -> None:
    feeds = opt_feeds(config(), Model(fmt, fmt, "fp32", Path("."), max_batch_size=8), 5)
    assert [f.name for f in feeds] == names
    assert [f.datatype for f in feeds] == ["FP32", "INT64", "BOOL"]
    # `keep` is one value per sample: [batch] to the model, [batch, 1] on the wire
    # (config.pbtxt dims [1] with reshape to []: Triton refuses empty dims).
    assert [f.array.shape for f in feeds] == [(5, 3, 4), (5, 7), (5, 1)]
    # A model Triton does not batch (max_batch_size 0) takes every tensor whole.
    whole = opt_feeds(config(), Model(fmt, fmt, "fp32", Path(".")), 5)
    assert [f.array.shape for f in whole] == [(5, 3, 4), (5, 7), (5,)]
    assert [f.array.dtype for f in feeds] == [np.float32, np.int64, np.bool_]
    assert 0 <= feeds[1].array.min() and feeds[1].array.max() <= 99


@pytest.mark.parametrize("client", [httpclient, grpcclient], ids=["http", "grpc"])
def test_infer_inputs_hold_the_feeds_bytes_in_c_order(client: Any) -> None:
    image = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))  # not C-contiguous
    feeds = [Feed("image", image, "FP32"), Feed("ids", np.array([[3, 1]], np.int64), "INT64")]
    items = infer_inputs(client, feeds)
    assert [(i.name(), i.shape(), i.datatype()) for i in items] == [
        ("image", [2, 3, 4], "FP32"),
        ("ids", [1, 2], "INT64"),
    ]
    raw = items[0]._get_binary_data() if client is httpclient else items[0]._get_content()
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(2, 3, 4), image)


def test_statistics_totals_name_every_phase_and_counter() -> None:
    stats = Statistics(
        {p: 1000 * (i + 1) for i, p in enumerate(PHASES)}, requests=4, inferences=32, executions=2
    )
    assert stats.as_totals() == {
        "queue_ns": 1000,
        "compute_input_ns": 2000,
        "compute_infer_ns": 3000,
        "compute_output_ns": 4000,
        "requests": 4,
        "inferences": 32,
        "executions": 2,
    }
