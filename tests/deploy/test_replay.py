"""A warm no-op `deploy run` is replayed from its footprint without loading the pipeline;
anything that could change its outcome takes the full path (deploy.commands.replay)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy.pipeline.store import footprint
from tests.helpers import ROOT, run_cli, tiny_dict

NOTE = "nothing changed since the run that finished"

# What a replay must not import: the config's models, the stage modules, the engine,
# and pydantic's models at all (`deploy run CONFIG` is answered before typer builds the
# commands, whose options it coerces with pydantic TypeAdapters).
PROBE = """
import sys
from deploy.cli import main
sys.argv = ["deploy", "run", {config!r}]
try:
    main()
except SystemExit as exc:
    code = exc.code
loaded = sorted(m for m in sys.modules if m in {watched!r} or m.startswith("deploy.stages"))
print("LOADED=" + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""
WATCHED = (
    "deploy.spec.config",
    "deploy.pipeline.graph.contract",
    "deploy.pipeline.process.runner",
    "deploy.pipeline.graph.project",
)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache built once: each test's pipeline finds every stage in it."""
    tmp = tmp_path_factory.mktemp("replay")
    config = _write(tmp, tmp / "cache")
    built = run_cli("run", str(config))
    assert built.returncode == 0, built.stderr
    return tmp / "cache"


def _write(tmp: Path, cache: Path, **change: object) -> Path:
    data = tiny_dict(tmp)
    data["cache_dir"] = str(cache)
    source = tmp / "tiny_cnn.py"  # a model source the tests may edit
    shutil.copyfile(ROOT / "configs" / "models" / "tiny_cnn.py", source)
    data["model"]["file"] = str(source)
    data.update(change)
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def warm(tmp_path: Path, shared_cache: Path) -> Path:
    """A pipeline whose last run was a no-op: every stage from the cache, published into
    this test's repository (its footprint kept)."""
    config = _write(tmp_path, shared_cache)
    done = run_cli("run", str(config))
    assert done.returncode == 0, done.stderr
    assert NOTE not in done.stdout
    assert (tmp_path / "runs" / "tiny" / footprint.FILE).is_file()
    return config


def _stage_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if not line.startswith(NOTE)]


def test_a_warm_noop_run_prints_the_same_without_loading_the_pipeline(warm: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(config=str(warm), watched=WATCHED)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(NOTE)
    full = run_cli("run", str(warm), "-v")  # -v: always the full path
    assert full.returncode == 0 and NOTE not in full.stdout
    assert _stage_lines(proc.stdout) == _stage_lines(full.stdout)
    loaded = next(ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED="))
    assert loaded == "LOADED="


def test_a_replay_writes_nothing(warm: Path, tmp_path: Path) -> None:
    before = _listing(tmp_path)
    again = run_cli("run", str(warm))
    assert again.returncode == 0 and again.stdout.startswith(NOTE)
    assert _listing(tmp_path) == before


def _listing(root: Path) -> dict[str, list[int]]:
    """Every path below `root` by its full stat, folders' mtimes too (a file written and
    removed again shows), independent of what the footprint keeps."""
    found = {}
    for parent, dirs, files in os.walk(root):
        for path in (os.path.join(parent, n) for n in (*dirs, *files)):
            st = os.lstat(path)
            found[path] = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]
    return found


def _edit_config(config: Path) -> None:
    data = yaml.safe_load(config.read_text())
    data["stages"]["validate"]["atol"] = 2.0e-4
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def _alter_published(config: Path) -> None:
    pbtxt = config.parent / "model_repository" / "tiny_onnx" / "config.pbtxt"
    os.chmod(pbtxt, 0o644)
    pbtxt.write_text(pbtxt.read_text() + "\n# edited by hand\n")


def _drop_report(config: Path) -> None:
    (config.parent / "runs" / "tiny" / "report.html").unlink()


def _edit_source(config: Path) -> None:
    source = config.parent / "tiny_cnn.py"
    source.write_text(source.read_text() + "\n# a comment changes the source's digest\n")


def _restore_mtime_after_edit(config: Path) -> None:
    """An in-place edit of the same size whose mtime is put back: only ctime tells."""
    config_stat = config.stat()
    text = config.read_text()
    config.write_text(text.replace("atol: 0.0001", "atol: 0.0009"))
    os.utime(config, ns=(config_stat.st_atime_ns, config_stat.st_mtime_ns))


CHANGES = {
    "config edited": (_edit_config, "validate        ran"),
    "config edited, mtime restored": (_restore_mtime_after_edit, "validate        ran"),
    "published file altered": (_alter_published, "had changed since it was published"),
    "report deleted": (_drop_report, "triton_config   cached"),
    "model source edited": (_edit_source, "trace           ran"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_takes_the_full_path(warm: Path, change: str) -> None:
    mutate, expected = CHANGES[change]
    mutate(warm)
    proc = run_cli("run", str(warm))
    assert proc.returncode == 0, proc.stderr
    assert NOTE not in proc.stdout and expected in proc.stdout
    assert (warm.parent / "runs" / "tiny" / "report.html").is_file()
    if change == "published file altered":
        assert (
            "edited by hand"
            not in (warm.parent / "model_repository" / "tiny_onnx" / "config.pbtxt").read_text()
        )


def test_another_invocation_takes_the_full_path(warm: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args, env, cwd in (
        (["run", str(warm), "--junit", str(tmp_path / "junit.xml")], None, None),
        (["run", str(warm)], {"DEPLOY_SOMETHING": "1"}, None),
        (["run", str(warm)], None, elsewhere),
    ):
        proc = run_cli(*args, env=env, cwd=cwd)
        assert proc.returncode == 0, proc.stderr
        assert NOTE not in proc.stdout and "triton_config   cached" in proc.stdout
    assert "<testsuite" in (tmp_path / "junit.xml").read_text()


def test_a_run_that_ran_a_stage_keeps_no_footprint(warm: Path) -> None:
    kept = warm.parent / "runs" / "tiny" / footprint.FILE
    forced = run_cli("run", str(warm), "--force", "stats")
    assert forced.returncode == 0 and "stats           ran" in forced.stdout
    assert not kept.exists()
    plain = run_cli("run", str(warm))  # a no-op again, checked in full: kept again
    assert plain.returncode == 0 and NOTE not in plain.stdout and kept.is_file()


def test_a_failed_run_keeps_no_footprint(warm: Path) -> None:
    kept = warm.parent / "runs" / "tiny" / footprint.FILE
    data = yaml.safe_load(warm.read_text())
    data["stages"]["validate"]["min_cosine"] = 1.5  # not a cosine: a config error
    warm.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("run", str(warm))
    assert proc.returncode == 3 and NOTE not in proc.stdout
    assert kept.is_file()  # rejected before anything ran: the pipeline's state is unchanged
    source = warm.parent / "tiny_cnn.py"
    source.write_text("raise RuntimeError('broken model')\n")
    data["stages"]["validate"]["min_cosine"] = 0.9999
    warm.write_text(yaml.safe_dump(data, sort_keys=False))
    failed = run_cli("run", str(warm))
    assert failed.returncode == 1 and NOTE not in failed.stdout
    assert not kept.exists()


def test_a_damaged_footprint_costs_only_the_full_path(warm: Path) -> None:
    kept = warm.parent / "runs" / "tiny" / footprint.FILE
    kept.write_text('{"schema": 1, "files": ')
    proc = run_cli("run", str(warm))
    assert proc.returncode == 0 and NOTE not in proc.stdout and "Traceback" not in proc.stderr
    assert json.loads(kept.read_text())["schema"] == footprint.SCHEMA  # kept again, whole


def test_difference_sees_entries_added_below_a_tree_and_chmod(tmp_path: Path) -> None:
    tree = tmp_path / "data"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "x.txt").write_text("x")
    invoked = {"config": "c"}
    found = footprint.take(invoked, [tree], [], {}, "then")
    assert footprint.difference(found, invoked) is None
    assert footprint.difference(found, {"config": "other"}) == "the invocation differs"
    (tree / "a" / "y.txt").write_text("y")
    assert footprint.difference(found, invoked) == f"{tree / 'a'} changed"
    found = footprint.take(invoked, [tree], [], {}, "then")
    os.chmod(tree / "a" / "x.txt", 0o400)
    assert footprint.difference(found, invoked) == f"{tree / 'a' / 'x.txt'} changed"


def test_bytecode_written_into_a_tree_is_no_change(tmp_path: Path) -> None:
    """A server loading a published python-backend model writes `1/__pycache__` beside
    its model.py: the next run is still a replay. A file beside model.py is a change."""
    version = tmp_path / "repo" / "model" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("X = 1\n")
    invoked = {"config": "c"}
    found = footprint.take(invoked, [tmp_path / "repo"], [], {}, "then")
    (version / "__pycache__").mkdir()
    (version / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    assert footprint.difference(found, invoked) is None
    (version / "extra.py").write_text("")
    assert footprint.difference(found, invoked) == f"{version} changed"


def test_bytecode_and_dot_folders_beside_code_change_no_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's first import writes a `__pycache__` into deploy's folders, and
    mypy a `.mypy_cache` into the working directory, at any moment: neither is a change
    (a CI run's replay took the full path on one). A module added or edited is one."""
    code, cwd = tmp_path / "deploy", tmp_path / "work"
    (code / "sub").mkdir(parents=True)
    (code / "sub" / "mod.py").write_text("X = 1\n")
    cwd.mkdir()
    monkeypatch.setattr(footprint, "CODE", code)
    monkeypatch.setattr(sys, "path", ["", str(code / "absent.zip")])
    monkeypatch.chdir(cwd)
    before = footprint.environment()
    for cache in (code / "sub" / "__pycache__", code / "__pycache__", cwd / ".mypy_cache"):
        cache.mkdir()
        (cache / "mod.cpython-311.pyc").write_bytes(b"\0")
    assert footprint.environment() == before
    (cwd / "torch.py").write_text("")  # would shadow an installed torch
    assert footprint.environment()["sys_path"] != before["sys_path"]
    (code / "sub" / "mod.py").write_text("X = 2\n")
    assert footprint.environment()["code"] != before["code"]
