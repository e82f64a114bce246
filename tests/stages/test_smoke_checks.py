"""What the smoke checks expect of a served model, from the shape spec and the golden
outputs: tensor names per format, -1 for dynamic axes, Triton datatypes; what differs in
the server's metadata is named; a max_batch_size above the spec's is a problem."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from deploy.spec.config import DeployConfig
from deploy.stages.smoke.checks import Tensor, batch_problem, expected, metadata_problems


@dataclass(frozen=True)
class Case:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


CONFIG = DeployConfig.model_validate(
    {
        "name": "m",
        "model": {"factory": "somewhere.models:build"},
        "inputs": [
            {
                "name": "image",
                "dims": ["batch", 1, "side", 8],
                "min": [1, 1, 4, 8],
                "opt": [4, 1, 8, 8],
                "max": [16, 1, 16, 8],
            },
            {
                "name": "ids",
                "dtype": "int64",
                "dims": ["batch", 5],
                "min": [1, 5],
                "opt": [4, 5],
                "max": [16, 5],
                "value_range": [0, 9],
            },
        ],
        "outputs": [{"name": "logits"}, {"name": "mask"}],
        "stages": {"trace": {}},
    }
)


def golden() -> dict[str, Case]:
    """Outputs at min / opt / max: logits [batch, 10] float32, mask [batch, side] bool."""
    return {
        label: Case({}, {"logits": np.zeros((b, 10), np.float32), "mask": np.zeros((b, side), np.bool_)})
        for label, b, side in (("min", 1, 4), ("opt", 4, 8), ("max", 16, 16))
    }


@pytest.mark.parametrize(
    ("fmt", "suffix"), [("onnx", ["", "", "", ""]), ("torchscript", ["__0", "__1", "__0", "__1"])]
)
def test_expected_tensors_follow_the_spec_and_the_golden_outputs(fmt: str, suffix: list[str]) -> None:
    inputs, outputs = expected(CONFIG, fmt, golden(), batched=True)
    assert inputs == [
        Tensor(f"image{suffix[0]}", "image", "FP32", [-1, 1, -1, 8]),
        Tensor(f"ids{suffix[1]}", "ids", "INT64", [-1, 5]),
    ]
    assert outputs == [
        Tensor(f"logits{suffix[2]}", "logits", "FP32", [-1, 10]),
        Tensor(f"mask{suffix[3]}", "mask", "BOOL", [-1, -1]),
    ]


def meta(inputs: list[Tensor], outputs: list[Tensor]) -> dict:
    def entries(tensors: list[Tensor]) -> list[dict]:
        return [{"name": t.name, "datatype": t.datatype, "shape": [str(d) for d in t.shape]} for t in tensors]

    return {"name": "m_onnx", "inputs": entries(inputs), "outputs": entries(outputs)}


def test_metadata_that_matches_has_no_problems_and_each_difference_is_named() -> None:
    inputs, outputs = expected(CONFIG, "onnx", golden(), batched=True)
    assert metadata_problems(meta(inputs, outputs), inputs, outputs) == []
    served = meta(inputs, outputs)
    served["inputs"][1]["datatype"] = "INT32"
    served["outputs"][0]["shape"] = ["-1", "12"]
    del served["outputs"][1]
    assert metadata_problems(served, inputs, outputs) == [
        "input 'ids': server says INT32 [-1, 5], shape spec says INT64 [-1, 5]",
        "output 'logits': server says FP32 [-1, 12], shape spec says FP32 [-1, 10]",
        "output 'mask' missing (server has ['logits'])",
    ]


@pytest.mark.parametrize(
    ("size", "spec_max", "problem"),
    [
        (16, 16, None),
        (8, 16, None),
        (32, 16, "max_batch_size 32 exceeds the shape spec's max batch 16"),
        (32, None, None),  # no batch dim in the spec: nothing to exceed
        (None, 16, None),  # max_batch_size absent: 0, no batching
    ],
)
def test_max_batch_size_may_not_exceed_the_specs(
    size: int | None, spec_max: int | None, problem: str | None
) -> None:
    config = {} if size is None else {"max_batch_size": size}
    assert batch_problem(config, spec_max) == problem


def test_the_cases_each_protocol_sends() -> None:
    from deploy.stages.smoke.model_check import cases_sent
    from deploy.stages.smoke.params import GoldenCases

    golden = {label: object() for label in ("min", "opt", "max", "sample1", "low")}

    def sent(cases: GoldenCases, validated: bool) -> list[list[str]]:
        return [sorted(cases_sent(golden, cases, validated, i)) for i in range(3)]  # type: ignore[arg-type]

    every = sorted(golden)
    assert sent(GoldenCases.AUTO, True) == [["max", "min"], ["min", "opt"], ["min", "opt"]]
    assert sent(GoldenCases.AUTO, False) == [every] * 3  # nothing compared the files at every case
    assert sent(GoldenCases.ALL, True) == [every] * 3
    assert sent(GoldenCases.SHAPE_SPEC, False) == [["max", "min"], ["min", "opt"], ["min", "opt"]]
