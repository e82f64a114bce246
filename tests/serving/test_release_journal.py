"""A pipeline's release is one transaction (deploy.serving.release_journal): a process
releasing three models is killed with SIGKILL at each fault-injection point in turn, and
recovery then leaves every model serving one checkpoint, the old or the new, with the
stamps right and nothing half-written left."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.pipeline.publish import STAMP, Stamp
from deploy.serving import release_journal, releases
from deploy.serving.release_journal import FAULT_ENV, recover, releasing
from deploy.serving.releases import ReleaseRecord

MODELS = ("relt_onnx", "relt_python", "relt_torchscript")
CONFIG = 'name: "{}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
PLACING = ["journal", "pinned", *(f"placed:{m}" for m in MODELS)]
SWITCHING = ["switching", *(f"switched:{m}" for m in MODELS), "settled"]
RELEASE = """
import json, sys
from pathlib import Path
from deploy.serving.release_journal import releasing
from deploy.serving.releases import ReleaseRecord
args = json.loads(sys.argv[1])
placed = [(Path(d), Path(c), ReleaseRecord.from_json(r)) for d, c, r in args["placed"]]
releasing(Path(args["repository"]), "relt", 3, placed, [])
"""


def _candidates(root: Path, checkpoint: str, version: int) -> list[tuple[Path, Path, ReleaseRecord]]:
    """Each model's candidate version dir for `checkpoint`, with its record."""
    found = []
    for model in MODELS:
        candidate = root / f"tree-{checkpoint}" / model
        (candidate / "1").mkdir(parents=True, exist_ok=True)
        (candidate / "1" / "model.onnx").write_bytes(f"{model} weights of {checkpoint}".encode())
        (candidate / "config.pbtxt").write_text(CONFIG.format(model))
        files = releases.file_digests(candidate / "1")
        record = ReleaseRecord(
            "relt", model, version, files, "2026-11-26T22:00:00+00:00", checkpoint_sha256=checkpoint
        )
        found.append((root / "repo" / model, candidate / "1", record))
    return found


def _served_checkpoints(repository: Path) -> set[str]:
    """The checkpoint each model serves, by its config's version policy and records."""
    found = set()
    for model in MODELS:
        (served,) = releases.served(repository / model)
        record = next(r.record for r in releases.releases(repository / model) if r.version == served)
        assert record is not None
        found.add(record.checkpoint_sha256)
    return found


def _whole(repository: Path) -> None:
    """No journal, no staging, every stamp listing exactly the files there."""
    assert not list(repository.glob("*.release-journal"))
    for model in MODELS:
        model_dir = repository / model
        assert not list(model_dir.glob(f"{releases.STAGING_PREFIX}*"))
        stamp = Stamp.from_json((model_dir / STAMP).read_text())
        assert stamp is not None
        on_disk = {
            str(p.relative_to(model_dir)) for p in model_dir.rglob("*") if p.is_file() and p.name != STAMP
        }
        assert set(stamp.files) == on_disk


@pytest.fixture(scope="module")
def released_v1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("v1")
    assert releasing(root / "repo", "relt", 3, _candidates(root, "old", 1), []) == []
    return root


def test_a_release_switches_every_model(released_v1: Path, tmp_path: Path) -> None:
    shutil.copytree(released_v1, tmp_path / "run")
    repository = tmp_path / "run" / "repo"
    assert _served_checkpoints(repository) == {"old"}
    assert releasing(repository, "relt", 3, _candidates(tmp_path / "run", "new", 2), []) == []
    assert _served_checkpoints(repository) == {"new"}
    assert [releases.versions(repository / m) for m in MODELS] == [[1, 2]] * 3
    _whole(repository)


@pytest.mark.parametrize("point", PLACING + SWITCHING)
def test_a_kill_at_any_step_is_reverted_or_completed(released_v1: Path, tmp_path: Path, point: str) -> None:
    root = tmp_path / "run"
    shutil.copytree(released_v1, root)
    repository = root / "repo"
    placed = [(str(d), str(c), r.to_json()) for d, c, r in _candidates(root, "new", 2)]
    args = json.dumps({"repository": str(repository), "placed": placed})
    killed = subprocess.run(
        [sys.executable, "-c", RELEASE, args],
        env={**_env(), FAULT_ENV: point},
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr
    assert release_journal.path(repository, "relt").is_file()  # the journal outlived the kill

    (said,) = recover(repository)
    expected = "old" if point in PLACING else "new"
    assert said.startswith("reverted" if point in PLACING else "completed"), said
    assert _served_checkpoints(repository) == {expected}
    assert [releases.versions(repository / m) for m in MODELS] == [[1] if expected == "old" else [1, 2]] * 3
    _whole(repository)
    assert recover(repository) == []  # done once


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != FAULT_ENV}


def test_a_first_release_killed_leaves_no_model_behind(tmp_path: Path) -> None:
    placed = [(str(d), str(c), r.to_json()) for d, c, r in _candidates(tmp_path, "new", 1)]
    args = json.dumps({"repository": str(tmp_path / "repo"), "placed": placed})
    killed = subprocess.run(
        [sys.executable, "-c", RELEASE, args],
        env={**_env(), FAULT_ENV: f"placed:{MODELS[1]}"},
        capture_output=True,
    )
    assert killed.returncode == -9
    (said,) = recover(tmp_path / "repo")
    assert said.startswith("reverted") and sorted(p.name for p in (tmp_path / "repo").iterdir()) == []


def test_a_journal_with_a_wrong_field_stops_recovery_naming_it(released_v1: Path, tmp_path: Path) -> None:
    """Recovery reverts or completes what the journal says: a journal whose step is not
    one it knows is not guessed at; the command stops, naming the file and the field."""
    from deploy.pipeline.errors import EnvError

    root = tmp_path / "run"
    shutil.copytree(released_v1, root)
    repository = root / "repo"
    journal = release_journal.path(repository, "relt")
    entries = [
        {"model": d.name, "version": 2, "source": str(c), "config": "", "before": None, "record": r.to_json()}
        for d, c, r in _candidates(root, "new", 2)
    ]
    journal.write_text(
        json.dumps({"schema": 1, "pipeline": "relt", "keep": 3, "entries": entries, "step": "halfway"})
    )
    with pytest.raises(EnvError, match=r"cannot be read \(.*not a release journal \(step:"):
        recover(repository)
    assert journal.is_file() and _served_checkpoints(repository) == {"old"}  # nothing touched
