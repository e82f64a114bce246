"""What is published is what was verified, with faults injected from outside: a byte
flipped in a cache object with its mtime put back, a published file edited the same way,
a publish that runs out of space, a repository missing a file, concurrent runs of one
config on one cache, a run under umask 000, temp dirs of a run that died."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy.pipeline.errors import EnvError
from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.graph.hashing import digest_file
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.publish.readback import complete
from deploy.pipeline.publish.tree import publish
from deploy.pipeline.store.objects import Output, Store
from tests.helpers import Cli, Recorder, run, run_cli, tiny_dict

# Weights of 2 MB: above the size under which the cache rehashes every file anyway.
WIDE = """
import torch


def wide():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 10))
"""


def wide_config(tmp: Path) -> Path:
    (tmp / "wide.py").write_text(WIDE)
    data = tiny_dict(tmp)
    data["model"] = {"file": str(tmp / "wide.py"), "callable": "wide"}
    data["stages"] = {"export": {"exporter": "torchscript"}, "triton_config": {"formats": ["python"]}}
    path = tmp / "wide.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def flip_a_byte_keeping_mtime(path: Path, offset: int = 1 << 20) -> None:
    """What bit rot, a bad disk or a careless edit does: one byte, mtime put back."""
    before = path.stat()
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        value = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([value[0] ^ 0xFF]))
    os.chmod(path, stat.S_IMODE(before.st_mode))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size


def test_a_flipped_byte_in_a_cached_object_is_found_and_the_stage_rebuilt(tmp_path: Path) -> None:
    path = wide_config(tmp_path)
    first = run(path)
    onnx = first["export"].outputs["onnx"]
    store = Store(load_project(path).cache_dir)
    (model_file,) = [m.digest for m in store.tree_manifest(onnx.digest).values() if m.size > 1 << 20]
    flip_a_byte_keeping_mtime(store.object_path(model_file))
    recorder = Recorder()
    again = run(path, recorder=recorder)
    assert again["export"].status.value == "ran", recorder.warnings  # rebuilt, not served
    assert any("export: cache entry" in w and "does not match its digest" in w for w in recorder.warnings)
    published = tmp_path / "model_repository" / "tiny_python" / "1" / "model.onnx"
    assert digest_file(published) == model_file  # what Triton reads is the verified file


def test_a_published_file_changed_behind_deploys_back_is_restored_and_said(tmp_path: Path) -> None:
    path = wide_config(tmp_path)
    run(path)
    published = tmp_path / "model_repository" / "tiny_python" / "1" / "model.onnx"
    good = digest_file(published)
    flip_a_byte_keeping_mtime(published)
    recorder = Recorder()
    again = run(path, recorder=recorder)
    assert {r.status.value for r in again.values()} == {"cached"}  # nothing rebuilt
    assert digest_file(published) == good
    note = again["triton_config"].message
    assert "restored" in note and "tiny_python: 1/model.onnx had changed since it was published" in note
    assert any("restored" in w for w in recorder.warnings)


FILES = {"a_model/config.pbtxt": "a", "a_model/1/model.onnx": "x" * 10, "b_model/config.pbtxt": "b"}


def tree(store: Store, root: Path, files: dict[str, str | bytes]) -> Output:
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content if isinstance(content, bytes) else content.encode())
    return store.ingest(root, ArtifactKind.TREE)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 256 KiB tmpfs where one can be mounted (root); else None (the write is failed
    with ENOSPC instead, below)."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True
    )
    try:
        yield where if mounted.returncode == 0 else None
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_publish_that_runs_out_of_space_leaves_the_previous_repository(
    tmp_path: Path, small_disk: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "cache")
    dest = (small_disk or tmp_path) / "repo"
    publish(store, tree(store, tmp_path / "w1", FILES), dest, "m")
    before = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    # Both models change; the second does not fit (a_model sorts first: without staging it
    # would already be replaced when b_model runs out of space).
    bigger: dict[str, str | bytes] = {
        **FILES,
        "a_model/config.pbtxt": "a2",
        "b_model/1/model.onnx": os.urandom(400 << 10),
    }
    if small_disk is None:
        import fsspec.implementations.local as local

        real = local.LocalFileSystem.put_file

        def full(self, lpath, rpath, **kw):
            if "b_model" in str(rpath):
                raise OSError(28, "No space left on device")
            return real(self, lpath, rpath, **kw)

        monkeypatch.setattr(local.LocalFileSystem, "put_file", full)
    with pytest.raises(EnvError, match="No space left on device"):
        publish(store, tree(store, tmp_path / "w2", bigger), dest, "m")
    after = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert after == before  # the previous repository, whole
    assert not [p for p in dest.parent.iterdir() if ".staging-" in p.name]  # nothing left beside it
    assert complete(dest, "m") == []


def test_an_incomplete_repository_is_named_and_not_served(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    dest = tmp_path / "repo"
    publish(store, tree(store, tmp_path / "w1", FILES), dest, "m")
    (dest / "a_model" / "1" / "model.onnx").unlink()
    assert complete(dest, "m") == ["a_model/1/model.onnx: missing or resized"]
    (dest / ".deploy-m.json").unlink()  # as a publish killed before its end leaves it
    assert complete(dest, "m") == ["no .deploy-m.json: the last publish of 'm' never finished"]


def _alter_in_place(path: Path) -> None:
    """A same-size change with the mtime kept: what a size check (or mtime) cannot see."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_an_altered_published_file_is_found_by_digest_and_repaired_from_the_cache(tmp_path: Path) -> None:
    from deploy.pipeline.publish.published_check import altered, repair

    store = Store(tmp_path / "cache")
    dest = tmp_path / "repo"
    publish(store, tree(store, tmp_path / "w1", FILES), dest, "m")
    target = dest / "a_model" / "1" / "model.onnx"
    published = target.read_bytes()
    _alter_in_place(target)
    assert complete(dest, "m") == []  # sizes agree
    for memo in (store, Store(tmp_path / "cache"), None):  # the stat memo, a fresh one, none: all see it
        (found,) = altered(dest, "m", memo)
        assert (found.model, found.rel) == ("a_model", "1/model.onnx")
    assert repair(dest, [found], store) == [
        f"repaired a_model/1/model.onnx from the cache ({found.digest[:12]})"
    ]
    assert target.read_bytes() == published and altered(dest, "m", store) == []
    _alter_in_place(target)
    store.object_path(found.digest).unlink()  # the cache was collected since
    with pytest.raises(EnvError, match="cache no longer holds"):
        repair(dest, altered(dest, "m", None), store)


@pytest.mark.triton
def test_deploy_serve_refuses_a_repository_missing_a_file(tmp_path: Path, write_config, cli: Cli) -> None:
    path = write_config()
    assert cli("run", str(path), "--to", "triton_config", cwd=tmp_path).returncode == 0
    (tmp_path / "model_repository" / "tiny_python" / "1" / "model.onnx").unlink()
    served = run_cli("serve", str(path), cwd=tmp_path)
    console = " ".join((served.stdout + served.stderr).split())
    assert served.returncode == 1, console
    assert (
        "does not hold 'tiny' whole, so it is not served: tiny_python/1/model.onnx: missing or resized"
        in console
    )
    assert "HTTP" not in served.stdout  # no server was started


def test_deploy_serve_refuses_an_altered_file_and_repair_puts_it_back(
    tmp_path: Path, write_config, cli: Cli
) -> None:
    from deploy.commands.serve import PublishedCheck, _verify

    path = write_config()
    assert cli("run", str(path), "--to", "triton_config", cwd=tmp_path).returncode == 0
    target = tmp_path / "model_repository" / "tiny_python" / "1" / "model.onnx"
    published = target.read_bytes()
    _alter_in_place(target)
    served = run_cli("serve", str(path), cwd=tmp_path)
    console = " ".join((served.stdout + served.stderr).split())
    assert served.returncode == 1 and "tiny_python/1/model.onnx: not the file published" in console, console
    assert "--repair" in console and "HTTP" not in served.stdout  # no server was started
    said: list[str] = []
    store = Store(load_project(path).cache_dir)
    _verify("tiny", tmp_path / "model_repository", PublishedCheck(store, repair=True), said.append)
    # tiny_onnx serves the same model.onnx, held once (a hard link): the edit altered both
    digest = said[0].split("(")[1][:12]
    assert said == [
        f"repaired tiny_{fmt}/1/model.onnx from the cache ({digest})" for fmt in ("onnx", "python")
    ]
    assert target.read_bytes() == published
    assert (tmp_path / "model_repository" / "tiny_onnx" / "1" / "model.onnx").read_bytes() == published


def test_deploy_serve_serves_only_what_was_released(tmp_path: Path, write_config, cli: Cli) -> None:
    """A version dir copied in by hand (a server reading the newest would serve it), a model
    dir named like the pipeline's, a stray file: refused, naming each; --repair moves them
    aside beside the repository, never deletes them, and says where."""
    import shutil

    from deploy.commands.serve import PublishedCheck, _verify

    path = write_config()
    assert cli("run", str(path), "--to", "triton_config", cwd=tmp_path).returncode == 0
    repository = tmp_path / "model_repository"
    shutil.copytree(repository / "tiny_python" / "1", repository / "tiny_python" / "9")
    shutil.copytree(repository / "tiny_python", repository / "tiny_python2")
    (repository / "tiny_onnx" / "notes.txt").write_text("mine")
    served = run_cli("serve", str(path), cwd=tmp_path)
    console = " ".join((served.stdout + served.stderr).split())
    assert served.returncode == 1 and "HTTP" not in served.stdout, console
    for said in (
        "tiny_python2 (model dir that no publish or release placed)",
        "tiny_onnx/notes.txt (file that no publish or release placed)",
        "tiny_python/9 (version dir that no publish or release placed)",
        "`deploy serve CONFIG --repair` moves it aside (nothing is deleted)",
    ):
        assert said in console, console
    lines: list[str] = []
    store = Store(load_project(path).cache_dir)
    _verify("tiny", repository, PublishedCheck(store, repair=True), lines.append)
    moved = [line for line in lines if line.startswith("moved ")]
    assert len(moved) == 3 and all(" aside to " in line for line in moved), lines
    aside = next((tmp_path / "model_repository.foreign").iterdir())
    assert (aside / "tiny_python" / "9" / "model.onnx").is_file() and (aside / "tiny_python2").is_dir()
    assert (aside / "tiny_onnx" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (repository / "tiny_python").iterdir() if not p.name.startswith(".")) == [
        "1",
        "config.pbtxt",
    ]


def test_concurrent_runs_of_one_config_build_each_stage_once(tmp_path: Path, write_config) -> None:
    path = write_config()
    env = {**os.environ, "COLUMNS": "200"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "deploy", "run", str(path), "--json", str(tmp_path / f"s{i}.json")],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(3)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in runs]
    assert all(p.returncode == 0 for p in runs), outputs
    summaries = [json.loads((tmp_path / f"s{i}.json").read_text()) for i in range(3)]
    built = {}
    for summary in summaries:
        for stage in summary["stages"]:
            built[stage["stage"]] = built.get(stage["stage"], 0) + (stage["status"] == "ran")
    assert set(built.values()) == {1}, built  # each stage built by exactly one of the three
    assert any("waiting for pid" in out for out in outputs), outputs


def test_nothing_deploy_writes_is_world_writable_under_umask_000(tmp_path: Path, write_config) -> None:
    path = write_config()
    done = subprocess.run(
        [sys.executable, "-m", "deploy", "run", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(0),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    written = [p for d in ("cache", "runs", "model_repository") for p in (tmp_path / d).rglob("*")]
    assert len(written) > 50
    open_to_all = [str(p) for p in written if not p.is_symlink() and p.stat().st_mode & stat.S_IWOTH]
    assert not open_to_all, open_to_all[:10]


def test_temp_dirs_of_a_run_that_died_are_removed_by_the_next_run_and_by_gc(
    tmp_path: Path, write_config, cli: Cli
) -> None:
    path = write_config()
    run(path, stop="golden")
    tmp = tmp_path / "cache" / "tmp"
    gone = subprocess.run(["true"], check=True)  # a pid that has exited
    assert gone.returncode == 0
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    dead = tmp / f"export-{dead_pid.pid}-abcd1234"
    live = tmp / f"export-{os.getpid()}-abcd1234"
    for folder in (dead, live):
        (folder / "onnx").mkdir(parents=True)
        (folder / "onnx" / "model.onnx").write_bytes(b"half written")
    run(path, stop="golden")
    assert not dead.exists() and live.exists()
    dead.mkdir()
    gc = cli("cache", "gc", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert gc.returncode == 0, gc.stderr
    assert not dead.exists() and live.exists()


def test_releases_and_serve_take_the_runs_cache_dir(tmp_path: Path, write_config, cli: Cli) -> None:
    """They had no --cache-dir: after `run --cache-dir X`, `releases` made the config's own
    cache where there was none, and `serve --repair` looked for the files there."""
    path = write_config()
    own = load_project(path).cache_dir
    other = tmp_path / "other-cache"
    assert (
        cli("run", str(path), "--to", "triton_config", "--cache-dir", str(other), cwd=tmp_path).returncode
        == 0
    )
    target = tmp_path / "model_repository" / "tiny_python" / "1" / "model.onnx"
    published = target.read_bytes()
    listed = cli("releases", str(path), "--cache-dir", str(other), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    _alter_in_place(target)
    # --repair with a port taken: the files are put back, then the server cannot start (exit 4)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        served = run_cli(
            "serve", str(path), "--repair", "--cache-dir", str(other), "--http-port", port, cwd=tmp_path
        )
    assert "repaired tiny_python/1/model.onnx from the cache" in served.stdout + served.stderr, served.stderr
    assert target.read_bytes() == published
    assert not own.exists()
