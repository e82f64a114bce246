"""`deploy releases CONFIG` on a real published repository."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from deploy.serving import releases
from deploy.serving.releases import ReleaseRecord
from tests.helpers import Cli


def test_releases_lists_every_version_with_its_record(
    write_config: Callable[..., Path], tmp_path: Path, cli: Cli
) -> None:
    config = write_config()
    never = cli("releases", str(config))
    assert never.returncode == 0 and "no releases: nothing of this pipeline is published" in never.stdout
    assert cli("run", str(config)).returncode == 0
    listed = json.loads(cli("releases", str(config), "--json").stdout)
    models = {row["model"] for row in listed}
    assert "tiny_onnx" in models and all(row["version"] == 1 and row["served"] for row in listed)
    assert all("published before releases" in row["note"] for row in listed)

    model_dir = tmp_path / "model_repository" / "tiny_onnx"
    record = ReleaseRecord(
        "tiny",
        "tiny_onnx",
        2,
        releases.file_digests(model_dir / "1"),
        "2026-11-25T21:00:00+00:00",
        checkpoint_sha256="ab" * 32,
        accuracy={"cosine to FP32": 0.99991},
        build_url="https://ci.example/job/tiny/7/",
    )
    releases.place(model_dir, model_dir / "1", record)
    releases.stamp(model_dir, "tiny", placed=[2])  # as a release's transaction does
    rows = [r for r in json.loads(cli("releases", str(config), "--json").stdout) if r["model"] == "tiny_onnx"]
    assert [(r["version"], r["served"]) for r in rows] == [(1, False), (2, True)]
    assert rows[1]["checkpoint"] == "ab" * 8 and rows[1]["build"] == "https://ci.example/job/tiny/7/"
    assert rows[1]["rolled back"] == "" and rows[1]["accepted"] == "" and rows[1]["compared"] == ""
    assert rows[1]["accuracy"] == "cosine to FP32 0.99991"
    plain = cli("releases", str(config)).stdout
    assert "tiny_onnx | 2 | yes | 2026-11-25T21:00:00+00:00 | abababababababab" in plain


def test_a_version_nobody_released_is_listed_as_foreign_not_served(
    write_config: Callable[..., Path], tmp_path: Path, cli: Cli
) -> None:
    """`cp -a tiny_onnx/1 tiny_onnx/9`: Triton would serve v9 (the newest); deploy never
    placed it, so the listing says so instead of calling it served."""
    import shutil

    config = write_config()
    assert cli("run", str(config)).returncode == 0
    model_dir = tmp_path / "model_repository" / "tiny_onnx"
    shutil.copytree(model_dir / "1", model_dir / "9")
    rows = [r for r in json.loads(cli("releases", str(config), "--json").stdout) if r["model"] == "tiny_onnx"]
    assert [(r["version"], r["served"]) for r in rows] == [(1, False), (9, "FOREIGN")]
    assert "no publish or release placed it" in rows[1]["note"]


def test_a_hand_edit_since_the_publish_is_warned_about_beside_the_list(
    write_config: Callable[..., Path], tmp_path: Path, cli: Cli
) -> None:
    """The list says what is there; a config edited by hand is not what was verified."""
    config = write_config()
    assert cli("run", str(config)).returncode == 0
    clean = cli("releases", str(config))
    assert clean.returncode == 0 and "warning" not in clean.stderr, clean.stderr
    edited = tmp_path / "model_repository" / "tiny_onnx" / "config.pbtxt"
    edited.write_text(edited.read_text() + "\n# edited by hand\n")
    listed = cli("releases", str(config))
    assert listed.returncode == 0 and "tiny_onnx" in listed.stdout
    assert "does not hold what was released: tiny_onnx/config.pbtxt: missing or resized" in listed.stderr
    assert "deploy serve CONFIG --repair" in listed.stderr
