"""Models as they come, first half: inputs of every shape (no batch dim, a per-sample
scalar, a 0-d timestep, flat indices with offsets, two int64 inputs, a noise input) and
forwards no export can match (refused, naming the cause). Each model: `deploy init`, then
`deploy run` of the config as written, then the published repository on a fresh
tritonserver at a shape none of the stages used, against eager (benchmarks/kinds.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.kinds import KINDS, try_kind

pytestmark = [pytest.mark.matrix, pytest.mark.triton]

MINE = ("scatter_graph", "tagger", "tiny_unet", "bag", "small_bert", "vit_mae", "branchy", "masker")


@pytest.mark.parametrize("kind", [k for k in KINDS if k.name in MINE], ids=lambda k: k.name)
def test_the_config_init_writes_is_deployed_or_refused_naming_the_cause(kind, tmp_path: Path) -> None:
    row = try_kind(kind, tmp_path)
    assert row.expected, row
