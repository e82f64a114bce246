"""Models as they come, second half: outputs with names and structure (a NamedTuple, a
decoder's DynamicCache, a ModelOutput, instance masks at each image's size) and a size
computed in Python (refused: wrong off the three golden points). As in
test_model_kinds_inputs.py: init, run as written, a fresh check on its own server."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.kinds import KINDS, try_kind

pytestmark = [pytest.mark.matrix, pytest.mark.triton]

MINE = ("named_cnn", "llama", "mask_rcnn", "convnext", "segformer", "whisper_encoder", "resizer")


@pytest.mark.parametrize("kind", [k for k in KINDS if k.name in MINE], ids=lambda k: k.name)
def test_the_config_init_writes_is_deployed_or_refused_naming_the_cause(kind, tmp_path: Path) -> None:
    row = try_kind(kind, tmp_path)
    assert row.expected, row
