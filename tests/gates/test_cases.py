"""Golden data that means something, and golden cases beyond the shape spec's three
points: masks of ones with padding, lengths within their sequence, indices below the size
they index, offsets into a flat input; shapes drawn inside [min, max] (a dim shared by two
inputs drawn once); the opt inputs at the edges of their values."""

from __future__ import annotations

import numpy as np
import pytest

from deploy.gates import cases
from deploy.runtimes.arrays import inputs_at
from deploy.spec.tensors import InputSpec


def spec(**fields: object) -> InputSpec:
    return InputSpec.model_validate(fields)


TOKENS = spec(
    name="tokens",
    dtype="int64",
    dims=["batch", "sequence"],
    min=[1, 2],
    opt=[4, 8],
    max=[8, 16],
    value_range=[0, 99],
)
MASK = spec(
    name="mask", dtype="int64", dims=["batch", "sequence"], min=[1, 2], opt=[4, 8], max=[8, 16], values="mask"
)
LENGTHS = spec(
    name="lengths", dtype="int64", dims=["batch"], min=[1], opt=[4], max=[8], values="lengths", of="sequence"
)
X = spec(name="x", dims=["rows", 32], min=[4, 32], opt=[16, 32], max=[64, 32])
EDGES = spec(
    name="edges",
    dtype="int64",
    dims=[2, "edges"],
    min=[2, 8],
    opt=[2, 32],
    max=[2, 128],
    values="indices",
    of="rows",
)
FLAT = spec(name="flat", dtype="int64", dims=["flat"], min=[2], opt=[8], max=[40], value_range=[0, 9])
OFFSETS = spec(
    name="offsets", dtype="int64", dims=["bags"], min=[1], opt=[2], max=[5], values="offsets", of="flat"
)


def test_structured_values_mean_what_they_say() -> None:
    rng = np.random.default_rng(0)
    drawn = inputs_at([TOKENS, MASK, LENGTHS], {"tokens": (6, 10), "mask": (6, 10), "lengths": (6,)}, rng)
    mask = drawn["mask"]
    # Ones then zeros along the sequence, at least one kept, the first row unpadded.
    kept = mask.sum(1)
    assert np.array_equal(mask, (np.arange(10)[None, :] < kept[:, None]).astype(mask.dtype))
    assert kept.min() >= 1 and kept[0] == 10 and kept.min() < 10
    lengths = drawn["lengths"]
    assert lengths[0] == 10 and lengths.min() >= 1 and np.all(np.diff(lengths) <= 0)  # longest first
    graph = inputs_at([X, EDGES], {"x": (20, 32), "edges": (2, 50)}, rng)
    assert graph["edges"].min() >= 0 and graph["edges"].max() < 20 and graph["edges"].max() > 10
    bags = inputs_at([FLAT, OFFSETS], {"flat": (30,), "offsets": (5,)}, rng)
    offsets = bags["offsets"]
    assert offsets[0] == 0 and np.all(np.diff(offsets) >= 0) and offsets.max() < 30


def test_a_bounded_kind_needs_its_dim_and_an_integer_dtype() -> None:
    with pytest.raises(ValueError, match="values: lengths needs `of`"):
        spec(name="n", dtype="int64", dims=["batch"], min=[1], opt=[1], max=[2], values="lengths")
    with pytest.raises(ValueError, match="values: indices needs an integer dtype"):
        spec(name="n", dims=["batch"], min=[1], opt=[1], max=[2], values="indices", of="batch")
    with pytest.raises(ValueError, match="value_range is required for integer inputs"):
        spec(name="n", dtype="int64", dims=["batch"], min=[1], opt=[1], max=[2])


def test_sampled_shapes_stay_inside_the_range_and_share_their_dims() -> None:
    found = cases.sampled_shapes([TOKENS, MASK, LENGTHS], 5, seed=3)
    assert list(found) == [f"sample{i}" for i in range(1, 6)]
    for shapes in found.values():
        batch, sequence = shapes["tokens"]
        assert 1 <= batch <= 8 and 2 <= sequence <= 16
        assert shapes["mask"] == (batch, sequence) and shapes["lengths"] == (batch,)
    assert len({shapes["tokens"] for shapes in found.values()}) > 1  # not one shape five times
    assert found == cases.sampled_shapes([TOKENS, MASK, LENGTHS], 5, seed=3)  # seeded
    static = spec(name="s", dims=[1, 3], min=[1, 3], opt=[1, 3], max=[1, 3])
    assert cases.sampled_shapes([static], 3, seed=0) == {}


def test_the_edges_move_every_input_to_one_end_of_its_values() -> None:
    rng = np.random.default_rng(0)
    image = spec(name="image", dims=["batch", 4], min=[1, 4], opt=[2, 4], max=[4, 4])
    ranged = spec(name="r", dims=["batch", 4], min=[1, 4], opt=[2, 4], max=[4, 4], value_range=[2.0, 3.0])
    base = inputs_at([image, ranged, TOKENS], {"image": (2, 4), "r": (2, 4), "tokens": (2, 8)}, rng)
    low = cases.at_edge([image, ranged, TOKENS], base, cases.Edge.LOW, rng)
    high = cases.at_edge([image, ranged, TOKENS], base, cases.Edge.HIGH, rng)
    assert np.all(low["image"] <= 0) and np.all(high["image"] >= 0)
    # Each edge its own magnitudes: an even function (x², a norm) answers differently at all three.
    magnitudes = [np.abs(a["image"]) for a in (base, low, high)]
    assert not any(np.array_equal(a, b) for i, a in enumerate(magnitudes) for b in magnitudes[i + 1 :])
    # The low / high quarter of the range, spread over it (not one value: ties).
    assert np.all(low["r"] < 2.25) and np.all(high["r"] > 2.75) and np.all(high["r"] <= 3.0)
    assert low["r"].std() > 0.03 and high["r"].std() > 0.03
    assert low["tokens"].max() <= 24 and high["tokens"].min() >= 75
