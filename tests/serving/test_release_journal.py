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

from deploy.pipeline.process.faults import FAULT_ENV
from deploy.pipeline.publish.tree import STAMP, Stamp
from deploy.serving import release_journal, releases
from deploy.serving.release_journal import recover, releasing
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
    repository, killed = _release_v2_in_a_child(released_v1, tmp_path, point)
    assert killed.returncode == -9, killed.stderr
    assert release_journal.path(repository, "relt").is_file()  # the journal outlived the kill

    (said,) = recover(repository)
    expected = "old" if point in PLACING else "new"
    assert said.startswith("reverted" if point in PLACING else "completed"), said
    assert _served_checkpoints(repository) == {expected}
    assert [releases.versions(repository / m) for m in MODELS] == [[1] if expected == "old" else [1, 2]] * 3
    _whole(repository)
    assert recover(repository) == []  # done once


def _release_v2_in_a_child(
    released_v1: Path, tmp_path: Path, fault: str, prelude: str = ""
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A copy of the v1 repository, and a process releasing v2 into it with DEPLOY_FAULT=`fault`."""
    root = tmp_path / "run"
    shutil.copytree(released_v1, root)
    repository = root / "repo"
    placed = [(str(d), str(c), r.to_json()) for d, c, r in _candidates(root, "new", 2)]
    args = json.dumps({"repository": str(repository), "placed": placed})
    done = subprocess.run(
        [sys.executable, "-c", prelude + RELEASE, args],
        env={**_env(), FAULT_ENV: fault},
        capture_output=True,
        text=True,
    )
    return repository, done


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


ROLLBACK = """
import json, sys
from pathlib import Path
from deploy.releasing.rollback import roll_back_in
args = json.loads(sys.argv[1])
roll_back_in(Path(args["repository"]), "relt", args["to"], [])
"""


def _released_twice(root: Path) -> Path:
    """v1 ("old") and v2 ("new") released, the pipeline's manifest written as publishes do."""
    from deploy.pipeline.publish.tree import write_manifest_here

    repository = root / "repo"
    assert releasing(repository, "relt", 3, _candidates(root, "old", 1), []) == []
    assert releasing(repository, "relt", 3, _candidates(root, "new", 2), []) == []
    write_manifest_here(repository, "relt", list(MODELS))
    return repository


def _killed_at_every(script: str, args: dict[str, object], kind: str, repository: Path) -> list[str]:
    """The script run once per `kind` point (write#1, write#2, ...) on a fresh copy of the
    repository, killed there, then recovered; stops at the first run no point killed.
    Returns what each recovery said; asserts the repository whole after each."""
    pristine = repository.parent / "pristine"
    shutil.copytree(repository, pristine)
    said = []
    for turn in range(1, 60):
        shutil.rmtree(repository)
        shutil.copytree(pristine, repository)
        done = subprocess.run(
            [sys.executable, "-c", script, json.dumps(args)],
            env={**_env(), FAULT_ENV: f"{kind}#{turn}"},
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return said  # no point left: every one was killed at once
        assert done.returncode == -9, done.stderr
        said += recover(repository)
        _no_leftovers(repository)
        _whole(repository)
        assert len(_served_checkpoints(repository)) == 1, (kind, turn)
    raise AssertionError(f"more than 60 {kind} points")


def _no_leftovers(repository: Path) -> None:
    """No temp file, no staging dir, anywhere (each named with its dead owner's pid)."""
    stray = [p for p in repository.rglob("*") if p.name.endswith(".tmp") or ".staging-" in p.name]
    assert not stray, stray


@pytest.mark.parametrize("kind", ["write", "rename"])
def test_a_release_killed_at_any_write_or_rename_leaves_one_checkpoint_and_no_temp_file(
    released_v1: Path, tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "run"
    shutil.copytree(released_v1, root)
    repository = root / "repo"
    placed = [(str(d), str(c), r.to_json()) for d, c, r in _candidates(root, "new", 2)]
    said = _killed_at_every(RELEASE, {"repository": str(repository), "placed": placed}, kind, repository)
    assert said and all(line.startswith(("reverted", "completed")) for line in said), said


@pytest.mark.parametrize("kind", ["write", "rename"])
def test_a_rollback_killed_at_any_write_is_completed_by_the_next_command(tmp_path: Path, kind: str) -> None:
    repository = _released_twice(tmp_path)
    said = _killed_at_every(ROLLBACK, {"repository": str(repository), "to": None}, kind, repository)
    if kind == "write":  # a rollback renames nothing but its temp files into place
        assert said and all(line.startswith("completed the interrupted rollback of 'relt'") for line in said)


def _rolled_back(repository: Path, model: str) -> dict[int, str | None]:
    return {r.version: r.record.rolled_back for r in releases.releases(repository / model) if r.record}


def test_rollback_history_stays_a_line(tmp_path: Path) -> None:
    """--to 1 marks v2 (the version left); --to 2 rolls forward: v2 is good again and v1
    is not marked; a plain rollback then goes to v1 again; a release keeps both."""
    from deploy.releasing.rollback import roll_back_in

    repository = _released_twice(tmp_path)
    roll_back_in(repository, "relt", 1, [])
    assert _served_checkpoints(repository) == {"old"}
    marked = _rolled_back(repository, MODELS[0])
    assert marked[1] is None and marked[2] is not None and marked[2].endswith("to v1")
    roll_back_in(repository, "relt", 2, [])
    assert _served_checkpoints(repository) == {"new"} and _rolled_back(repository, MODELS[0]) == {
        1: None,
        2: None,
    }
    said = roll_back_in(repository, "relt", None, [])  # plain: the newest good one before v2
    assert said[0] == f"{MODELS[0]}: v2 -> v1" and _served_checkpoints(repository) == {"old"}
    assert releasing(repository, "relt", 3, _candidates(tmp_path, "newer", 3), []) == []
    assert [releases.versions(repository / m) for m in MODELS] == [[1, 2, 3]] * 3
    _whole(repository)


def test_rollback_refuses_a_version_nobody_released(tmp_path: Path) -> None:
    from deploy.pipeline.errors import StageFailed
    from deploy.releasing.rollback import roll_back_in

    repository = _released_twice(tmp_path)
    shutil.copytree(repository / MODELS[0] / "1", repository / MODELS[0] / "9")
    configs = [(repository / m / "config.pbtxt").read_text() for m in MODELS]
    with pytest.raises(
        StageFailed, match=rf"{MODELS[0]}/9 \(version dir that no publish or release placed\)"
    ):
        roll_back_in(repository, "relt", 1, [])
    assert [(repository / m / "config.pbtxt").read_text() for m in MODELS] == configs  # nothing touched


def test_rollback_refuses_files_edited_or_removed_since_they_were_released(tmp_path: Path) -> None:
    """A rollback restamps what it moves: an edited config or a removed version would be
    taken in as verified, so it refuses them, as `deploy serve` does, touching nothing."""
    from deploy.pipeline.errors import StageFailed
    from deploy.releasing.rollback import roll_back_in

    repository = _released_twice(tmp_path)
    config = repository / MODELS[1] / "config.pbtxt"
    config.write_text(config.read_text() + "\n# edited by hand\n")
    before = {p: p.read_bytes() for p in sorted(repository.rglob("*")) if p.is_file()}
    with pytest.raises(StageFailed, match=rf"nothing is rolled back: .*{MODELS[1]}/config.pbtxt"):
        roll_back_in(repository, "relt", 1, [])
    assert {p: p.read_bytes() for p in sorted(repository.rglob("*")) if p.is_file()} == before
    config.write_text(config.read_text().removesuffix("\n# edited by hand\n"))
    shutil.rmtree(repository / MODELS[2] / "1")
    with pytest.raises(StageFailed, match=rf"nothing is rolled back: .*{MODELS[2]}/1/"):
        roll_back_in(repository, "relt", 1, [])
    assert _served_checkpoints(repository) == {"new"}


RECOVER = """
import json, sys
from pathlib import Path
from deploy.serving.release_journal import recover
recover(Path(json.loads(sys.argv[1])["repository"]))
"""


def test_a_recovery_killed_at_any_write_is_finished_by_the_next_one(
    released_v1: Path, tmp_path: Path
) -> None:
    """A release killed while switching, then its recovery killed at each of its writes in
    turn: the next recovery finishes it, and never stamps a stray temp file."""
    repository, killed = _release_v2_in_a_child(released_v1, tmp_path, f"switched:{MODELS[0]}")
    assert killed.returncode == -9, killed.stderr
    said = _killed_at_every(RECOVER, {"repository": str(repository)}, "write", repository)
    assert said and all(line.startswith("completed the interrupted release") for line in said)
    assert _served_checkpoints(repository) == {"new"}


def test_a_release_that_fails_half_way_says_what_becomes_of_its_journal(tmp_path: Path) -> None:
    """A write refused after the journal (an immutable model dir): the failure says the next
    command reverts it; a refusal of its own kind, or a full disk, keeps its own words and code."""
    import errno

    from deploy.pipeline.errors import StageFailed
    from deploy.serving.release_journal import path
    from deploy.stages.release.stage import with_journal

    repository = tmp_path / "repo"
    repository.mkdir()
    refused = PermissionError(errno.EPERM, "Operation not permitted", str(repository / "tiny_onnx" / "2"))
    assert with_journal(refused, repository, "tiny") is None  # no journal: nothing to say
    path(repository, "tiny").write_text("{}")
    told = with_journal(refused, repository, "tiny")
    assert isinstance(told, StageFailed) and str(told).startswith(
        "PermissionError: [Errno 1] Operation not permitted"
    )
    assert ".deploy-tiny.release-journal is left in the repository: the next `deploy releases`" in str(told)
    full = OSError(errno.ENOSPC, "No space left on device")
    assert with_journal(full, repository, "tiny") is None

    class Refusal(StageFailed):
        pass

    assert with_journal(Refusal("regression"), repository, "tiny") is None


def test_a_journal_naming_a_server_urllib_cannot_take_is_still_completed(tmp_path: Path) -> None:
    """`rollback --server 'not a url'` killed after its journal: every later command raised
    urllib's ValueError (exit 70) completing it, so the repository was stuck until the
    journal was edited by hand. The server is now one that did not switch."""
    repository = _released_twice(tmp_path)
    script = ROLLBACK.replace('args["to"], [])', 'args["to"], ["not a url"])')
    killed = subprocess.run(
        [sys.executable, "-c", script, json.dumps({"repository": str(repository), "to": None})],
        env={**_env(), FAULT_ENV: "write#2"},  # the journal written, the first config not yet
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr
    (said,) = recover(repository)
    assert said.startswith("completed the interrupted rollback of 'relt'") and "not a url" in said, said
    assert _served_checkpoints(repository) == {"old"}
    assert recover(repository) == []


STOPPABLE = {
    # as `deploy rollback` / `deploy release` run it: a stop raises KeyboardInterrupt
    "command": "from deploy.pipeline.process import stopping; stopping.stop_on_signals()\n",
    # as a release stage's child runs it: a stop is the stage's SIGTERM to its group
    "stage child": "from deploy.pipeline.process import lifeline; lifeline.contain()\n",
}


@pytest.mark.parametrize("where", list(STOPPABLE))
def test_a_stop_amid_the_switch_waits_for_every_config(released_v1: Path, tmp_path: Path, where: str) -> None:
    """SIGTERM 4 ms after the journal appeared left one model serving v1 and another v2 until
    another command ran: a poll-mode server served the mix. A catchable stop now lands once
    every config is switched; the next command only settles what is left."""
    repository, stopped = _release_v2_in_a_child(
        released_v1, tmp_path, f"SIGTERM@switched:{MODELS[0]}", STOPPABLE[where]
    )
    assert stopped.returncode != 0, stopped.stderr  # it did stop, there
    assert release_journal.path(repository, "relt").is_file(), stopped.stderr  # before settling
    assert _served_checkpoints(repository) == {"new"}  # every config, before any recovery
    (said,) = recover(repository)
    assert said.startswith("completed the interrupted release of 'relt'"), said
    _whole(repository)
