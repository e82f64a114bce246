"""Made-up inputs: opt_inputs follows the shape spec (batch axis replaced, or none),
random_input respects each input's dtype and value_range, random_array gives small
integers and normal floats, and varying_axes finds the dynamic axes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from deploy.runtimes.arrays import opt_inputs, random_array, random_input, varying_axes
from deploy.runtimes.dtypes import numpy_name
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import InputSpec

IMAGE = {"name": "image", "dims": ["batch", 3, "h"], "min": [1, 3, 4], "opt": [2, 3, 6], "max": [8, 3, 8]}
IDS = {
    "name": "ids",
    "dtype": "int64",
    "dims": ["batch", 5],
    "min": [1, 5],
    "opt": [2, 5],
    "max": [8, 5],
    "value_range": [0, 9],
}


def config(inputs: list[dict[str, Any]], batch_dim: str | None = "batch") -> DeployConfig:
    return DeployConfig.model_validate(
        {
            "name": "m",
            "model": {"factory": "somewhere.models:build"},  # never imported here
            "inputs": inputs,
            "outputs": [{"name": "y"}],
            "batch_dim": batch_dim,
            "stages": {"trace": {}},
        }
    )


def spec(dtype: str, value_range: tuple[float, float] | None = None, n: int = 4000) -> InputSpec:
    return InputSpec(name="x", dtype=dtype, dims=[n], min=[n], opt=[n], max=[n], value_range=value_range)


@pytest.mark.parametrize("batch", [1, 5])
def test_opt_inputs_take_the_opt_shape_with_the_batch_asked_for(batch: int) -> None:
    arrays = opt_inputs(config([IMAGE, IDS]), batch)
    assert list(arrays) == ["image", "ids"]
    assert arrays["image"].shape == (batch, 3, 6) and arrays["image"].dtype == np.float32
    assert arrays["ids"].shape == (batch, 5) and arrays["ids"].dtype == np.int64
    assert 0 <= arrays["ids"].min() and arrays["ids"].max() <= 9


def test_opt_inputs_are_the_same_on_every_call() -> None:
    first, second = opt_inputs(config([IMAGE, IDS]), 3), opt_inputs(config([IMAGE, IDS]), 3)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    assert first["image"].std() > 0  # random values, not a constant


def test_without_a_batch_dim_the_opt_shape_is_used_as_it_is() -> None:
    unbatched = {"name": "image", "dims": [3, "h"], "min": [3, 4], "opt": [3, 6], "max": [3, 8]}
    arrays = opt_inputs(config([unbatched], batch_dim=None), 7)
    assert arrays["image"].shape == (3, 6)


@pytest.mark.parametrize(("dtype", "low", "high"), [("int64", 0, 1), ("int32", -3, 3), ("uint8", 250, 255)])
def test_integer_value_ranges_are_inclusive(dtype: str, low: int, high: int) -> None:
    values = random_input(spec(dtype, (low, high)), (4000,), np.random.default_rng(0))
    assert values.dtype == np.dtype(dtype)
    assert set(np.unique(values).tolist()) == set(range(low, high + 1))  # both ends drawn, nothing else


@pytest.mark.parametrize("dtype", ["float32", "float64"])  # a bfloat16 input is refused (spec.tensors)
def test_float_value_ranges_bound_the_values(dtype: str) -> None:
    values = random_input(spec(dtype, (-2.0, 0.5)), (4000,), np.random.default_rng(0))
    assert values.dtype == np.dtype(numpy_name(dtype))
    assert -2.0 <= values.min() and values.max() < 0.5
    assert values.min() < -1.9 and values.max() > 0.4  # spread over the range, uniformly


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_without_a_range_floats_are_standard_normal(dtype: str) -> None:
    values = random_input(spec(dtype), (20000,), np.random.default_rng(0)).astype(np.float64)
    assert abs(values.mean()) < 0.05 and abs(values.std() - 1.0) < 0.05


def test_booleans_are_both_values() -> None:
    values = random_input(spec("bool"), (1000,), np.random.default_rng(0))
    assert values.dtype == np.bool_ and set(np.unique(values).tolist()) == {False, True}


def test_random_array_gives_small_integers_and_normal_floats() -> None:
    ints = random_array((4000,), "int64")
    assert ints.dtype == np.int64 and set(np.unique(ints).tolist()) == set(range(10))
    assert random_array((3, 2), "uint8").dtype == np.uint8
    floats = random_array((20000,), "float32")
    assert floats.dtype == np.float32 and abs(floats.mean()) < 0.05 and abs(floats.std() - 1) < 0.05
    assert random_array((4,), "bfloat16").dtype == np.float32  # carried as float32
    flags = random_array((1000,), "bool")
    assert flags.dtype == np.bool_ and 0 < flags.sum() < 1000


def test_random_array_is_seeded() -> None:
    np.testing.assert_array_equal(random_array((8,), "float32"), random_array((8,), "float32"))
    assert not np.array_equal(random_array((8,), "float32", seed=0), random_array((8,), "float32", seed=1))


@pytest.mark.parametrize(
    ("shapes", "axes"),
    [
        ([(1, 3, 8), (4, 3, 8), (16, 3, 8)], {0}),
        ([(1, 3, 8), (4, 3, 16), (16, 3, 32)], {0, 2}),
        ([(2, 3), (2, 3), (2, 3)], set()),
        ([(1, 7), (1, 7), (1, 9)], {1}),  # differing only at max still varies
    ],
)
def test_varying_axes_are_those_whose_length_differs(shapes, axes) -> None:
    assert varying_axes(shapes) == axes


def test_padding_values_are_the_mask_s_complement_with_the_edges_golden_adds() -> None:
    """A bool key_padding_mask (True = padding) was drawn at random: no row ever had the
    trailing padding a real batch has, and a transformer's export that computed padded
    positions differently from eager (2.6 off; NaN for a row all padding) passed every gate."""
    from deploy.gates.cases import Edge, _edge
    from deploy.runtimes.arrays import structured
    from deploy.spec.tensors import ValueKind

    padding = InputSpec(
        name="pad_mask", dtype="bool", dims=["batch", "sequence"], min=[1, 4], opt=[6, 10], max=[8, 16],
        values=ValueKind.PADDING,
    )  # fmt: skip
    drawn = structured(padding, (6, 10), np.random.default_rng(0), {}).astype(bool)
    assert not drawn[0].any()  # the first row whole
    for row in drawn:  # zeros, then ones: padding at the end, at least one position kept
        kept = int((~row).sum())
        assert kept >= 1 and not row[:kept].any() and row[kept:].all()
    assert drawn[1:].any(), "no row is padded"
    rng = np.random.default_rng(0)
    assert not _edge(padding, drawn, Edge.HIGH, rng, 0).any()  # none padded
    low = _edge(padding, drawn, Edge.LOW, rng, 0)
    assert not low[:, 0].any() and low[:, 1:].all()  # one position kept per row
