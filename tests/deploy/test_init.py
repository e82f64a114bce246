"""`deploy init` on models nobody configured: a tensor-returning CNN from a file, a dict-
returning segmentation-style model, and a transformer taking `input_ids` and
`attention_mask` by keyword (Hugging Face's BertModel, a ModelOutput). Each starter
config is then run as written, through a real tritonserver. Bad input writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy.init import discover, input_specs, parse_input
from pipeline.errors import ConfigError
from tests.helpers import ROOT, run_cli

MODELS = """
import torch
from torch import nn


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 5, 1)

    def forward(self, image):
        features = torch.relu(self.body(image))
        return {"out": self.head(features), "features": features.mean(dim=(2, 3))}


def segmenter():
    torch.manual_seed(0)
    return Segmenter()


def small_bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    return BertModel(config)


def broken():
    class Broken(nn.Module):
        def forward(self, image):
            raise RuntimeError("this forward is broken")

    return Broken()
"""

CASES = {
    "tiny_cnn": (
        ["--file", str(ROOT / "configs" / "models" / "tiny_cnn.py"), "--callable", "tiny_cnn"],
        ["image:float32:1x1x8x8/4x1x8x8/16x1x8x8"],
        [{"name": "output", "kind": "logits"}],
    ),
    "segmenter": (
        ["--file", "models.py", "--callable", "segmenter"],
        ["image:float32:1x3x16x16/2x3x16x16/4x3x32x32"],
        [{"name": "out", "kind": "other"}, {"name": "features", "kind": "embedding"}],
    ),
    "small_bert": (
        ["--file", "models.py", "--callable", "small_bert"],
        ["input_ids:int64:1x8/2x16/4x32", "attention_mask:int64:1x8/2x16/4x32"],
        [{"name": "last_hidden_state", "kind": "embedding"}, {"name": "pooler_output", "kind": "embedding"}],
    ),
}


@pytest.mark.triton
@pytest.mark.parametrize("case", sorted(CASES))
def test_init_then_run_passes_as_written(tmp_path: Path, case: str) -> None:
    source, inputs, outputs = CASES[case]
    (tmp_path / "models.py").write_text(MODELS)
    args = [a for i in inputs for a in ("--input", i)]
    made = run_cli("init", *source, *args, cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    written = yaml.safe_load((tmp_path / f"{case}.yaml").read_text())
    assert written["outputs"] == outputs
    done = run_cli("run", f"{case}.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "smoke" in done.stdout and "passed" in done.stdout


def test_shared_sequence_dims_get_one_name_and_a_static_batch_drops_the_batch_dim() -> None:
    specs = input_specs([parse_input("ids:int64:1x8/2x16/4x32"), parse_input("mask:int64:1x8/2x16/4x32")])
    assert [s["dims"] for s in specs] == [["batch", "dim1"], ["batch", "dim1"]]
    assert specs[0]["value_range"] == [0, 99]
    static = input_specs([parse_input("x:float32:1x3/1x3/1x3")])
    assert static[0]["dims"] == [1, 3]


def test_outputs_are_named_by_key_position_or_as_the_lone_tensor() -> None:
    by_key = discover([("logits", (2, 10), "float32"), ("hidden_states.3", (2, 4, 8), "float32")], True)
    assert [(f.name, f.path, f.kind) for f in by_key] == [
        ("logits", None, "logits"),
        ("hidden_states_3", "hidden_states.3", "embedding"),
    ]
    by_position = discover([("0", (2, 10), "float32"), ("1", (2,), "int64")], True)
    assert [(f.name, f.path, f.kind) for f in by_position] == [
        ("output0", None, "embedding"),
        ("output1", None, "other"),
    ]
    assert discover([("", (2, 10), "float32")], True)[0].name == "output"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--callable", "broken", "--input", "image:float32:1x3x8x8/1x3x8x8/2x3x8x8"],
            "this forward is broken",
        ),
        (
            ["--callable", "segmenter", "--input", "image:float32:1x3x8x8"],
            "--input: 'image:float32:1x3x8x8' is not",
        ),
        (["--callable", "nosuch", "--input", "image:float32:1x3x8x8/1x3x8x8/2x3x8x8"], "nosuch"),
        (["--callable", "segmenter", "--input", "image:float33:1x3x8x8/1x3x8x8/2x3x8x8"], "--input image"),
    ],
)
def test_bad_input_says_which_and_writes_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    done = run_cli("init", "--file", "models.py", "--name", "m", *args, cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    assert says in " ".join((done.stdout + done.stderr).split()) and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.py"]


def test_an_existing_file_is_kept_unless_overwrite(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("mine")
    done = run_cli("init", "--factory", "x:y", "--name", "m", "--input", "a:float32:1/1/1", cwd=tmp_path)
    assert done.returncode == 3 and "--overwrite" in done.stdout + done.stderr
    assert (tmp_path / "m.yaml").read_text() == "mine"
    with pytest.raises(ConfigError, match="is not NAME:DTYPE"):
        parse_input("a:float32")
