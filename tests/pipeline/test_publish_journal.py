"""A local publish killed with SIGKILL between its renames (Ctrl-C and SIGTERM are held
there; SIGKILL cannot be) is completed by the next command that touches the repository:
every model then holds the new publish, the manifest lists it, and nothing is left over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.pipeline.errors import ExitCode
from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.process.faults import FAULT_ENV
from deploy.pipeline.publish import publish_journal
from deploy.pipeline.publish.readback import complete
from deploy.pipeline.publish.tree import Verification, publish
from deploy.pipeline.store.objects import Store
from deploy.serving.release_journal import recover

OLD = {
    "a_model/config.pbtxt": "a1",
    "a_model/1/model.onnx": "x1",
    "b_model/config.pbtxt": "b1",
    "c_model/x": "c",
}
NEW = {"a_model/config.pbtxt": "a2", "a_model/1/model.onnx": "x2", "b_model/config.pbtxt": "b2"}
PUBLISH = """
import sys
from pathlib import Path
from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.publish.tree import Verification, publish
from deploy.pipeline.store.objects import Store
store = Store(Path(sys.argv[1]))
publish(store, store.ingest(Path(sys.argv[2]), ArtifactKind.TREE), Path(sys.argv[3]), "m", Verification(("smoke",), "t2"))
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _published(repository: Path) -> dict[str, str]:
    return {
        str(p.relative_to(repository)): p.read_text()
        for p in repository.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def _killed_publish(tmp_path: Path, rename: int) -> Path:
    """The repository as a publish of NEW over OLD left it, killed before its N-th rename."""
    store, repository = Store(tmp_path / "cache"), tmp_path / "repo"
    publish(store, store.ingest(_write(tmp_path / "old", OLD), ArtifactKind.TREE), repository, "m")
    env = {**os.environ, FAULT_ENV: f"rename#{rename}"}
    args = [str(tmp_path / "cache"), str(_write(tmp_path / "new", NEW)), str(repository)]
    killed = subprocess.run([sys.executable, "-c", PUBLISH, *args], env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert publish_journal.path(repository, "m").is_file()  # the journal outlived the kill
    return repository


def _whole_and_new(repository: Path) -> None:
    assert _published(repository) == NEW
    manifest = json.loads((repository / ".deploy-m.json").read_text())
    assert (manifest["models"], manifest["verified_by"], manifest["tree"]) == (
        ["a_model", "b_model"],
        ["smoke"],
        "t2",
    )
    assert complete(repository, "m") == []
    assert not list(repository.glob(".deploy-*.publish-journal"))
    assert not [p for p in repository.parent.iterdir() if ".staging-" in p.name]


# Two models replaced, each by two renames (the old aside, the staged in): a kill before each.
@pytest.mark.parametrize("rename", [1, 2, 3, 4])
def test_a_publish_killed_between_renames_is_completed_by_the_next_command(
    tmp_path: Path, rename: int
) -> None:
    repository = _killed_publish(tmp_path, rename)
    assert _published(repository) != NEW  # what `deploy serve` used to serve: a mix, or a model missing
    (said,) = recover(repository)  # what serve, releases, rollback and a release run first
    assert said == "completed the interrupted publish of 'm' (2 model(s))"
    _whole_and_new(repository)
    assert recover(repository) == []  # done once


def test_the_next_publish_completes_a_killed_one_first(tmp_path: Path) -> None:
    repository = _killed_publish(tmp_path, 3)
    store = Store(tmp_path / "cache")
    done = publish(
        store,
        store.ingest(_write(tmp_path / "again", NEW), ArtifactKind.TREE),
        repository,
        "m",
        Verification(("smoke",), "t2"),
    )
    assert done.written == []  # the killed publish's staged models, renamed in: nothing left to write
    _whole_and_new(repository)


def test_an_unreadable_publish_journal_is_named_with_what_to_do(tmp_path: Path) -> None:
    from deploy.pipeline.errors import EnvError

    repository = _killed_publish(tmp_path, 2)
    publish_journal.path(repository, "m").write_text("{not json")
    with pytest.raises(EnvError, match=r"\.deploy-m\.publish-journal: an interrupted publish's journal"):
        recover(repository)


@pytest.mark.triton
def test_a_stop_amid_the_renames_is_held_and_the_run_records_what_it_published(tmp_path: Path) -> None:
    """SIGTERM during a run's publish renames is held until they are done: the new tree is
    served, and the run said nothing was published (an empty `publishing`, no closing note)."""
    import yaml

    from tests.helpers import run_cli, tiny_dict

    data = tiny_dict(tmp_path, smoke=True)
    data["stages"]["triton_config"]["formats"] = ["python"]
    data["stages"].pop("trace")
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_cli("run", str(config)).returncode == 0
    data["model"]["seed"] = 1  # new weights: a new tree to publish
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    target = tmp_path / "model_repository" / "tiny_python"
    stopped = run_cli("run", str(config), env={FAULT_ENV: f"SIGTERM@rename:{target}"})
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    [note] = summary["publishing"]
    manifest = json.loads((tmp_path / "model_repository" / ".deploy-tiny.json").read_text())
    assert note["state"] == "verified" and note["models"] == ["tiny_python"]
    assert manifest["tree"] == next(
        s["outputs"]["repository"]["digest"] for s in summary["stages"] if s["stage"] == "triton_config"
    )
    assert stopped.stdout.rstrip().endswith("(verified by smoke)")
    assert not publish_journal.path(tmp_path / "model_repository", "tiny").exists()
    # A journal left by a publish killed amid its renames: every stage cached, yet the next run
    # has work to do, so plan says so (it said nothing and exited 0 to --detailed-exitcode).
    assert run_cli("run", str(config)).returncode == 0
    assert run_cli("plan", str(config), "--detailed-exitcode").returncode == 0
    publish_journal.path(tmp_path / "model_repository", "tiny").write_text("{}")
    pending = run_cli("plan", str(config), "--detailed-exitcode")
    assert pending.returncode == ExitCode.WILL_RUN, pending.stdout + pending.stderr
    assert "a publish was stopped amid its renames" in " ".join(pending.stderr.split())


def test_the_closing_line_names_a_journal_left_in_the_repository(tmp_path: Path) -> None:
    """A run stopped between a release's switches printed only `run interrupted`."""
    from deploy.commands.runs import journal_left
    from deploy.serving import release_journal

    assert journal_left(tmp_path, "tiny") == ""
    release_journal.path(tmp_path, "tiny").write_text("{}")
    said = journal_left(tmp_path, "tiny")
    assert (
        said.startswith("a release was stopped amid its renames: its journal is there")
        and "completes it" in said
    )


def test_a_rollback_s_journal_is_named_a_rollback() -> None:
    """One journal file serves releases and rollbacks: an interrupted rollback was called a release."""
    import tempfile

    from deploy.commands.runs import journal_left
    from deploy.serving import release_journal

    with tempfile.TemporaryDirectory() as tmp:
        entry = release_journal.JournalEntry("tiny_onnx", 1, "src", "config", "before", "")
        journal = release_journal.Journal("tiny", 2, [entry], kind=release_journal.Kind.ROLLBACK)
        release_journal.path(Path(tmp), "tiny").write_text(journal.to_json())
        assert journal_left(Path(tmp), "tiny").startswith("a rollback was stopped amid its renames")
