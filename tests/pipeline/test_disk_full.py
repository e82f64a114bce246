"""A full disk is an error, not a crash: `deploy run` with its whole working dir (cache,
runs, repository, CI files) on a small tmpfs exits 4 naming a path, or succeeds; it never
prints a traceback, always leaves a summary and a JUnit file somewhere it says, and
leaves no temp file behind."""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from deploy.pipeline.errors import DiskFull, ExitCode, disk_full
from deploy.pipeline.graph.hashing import atomic_write_text, write_with_room
from tests.helpers import run_cli, tiny_dict

LEFT_BEHIND = ("*.tmp", "tree-*", "*.staging-*", "*.repair-*")


@pytest.fixture
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={request.param}k", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("small_fs", [120, 250, 400], indirect=True)
def test_a_run_on_a_full_disk_exits_4_with_its_summary_and_junit(small_fs: Path, tmp_path: Path) -> None:
    config = tmp_path / "tiny.yaml"  # the config itself beside, as a user's checkout would be
    config.write_text(yaml.safe_dump(tiny_dict(small_fs)))
    before = set(Path(tempfile.gettempdir()).glob("deploy-*"))
    done = run_cli(
        "run", str(config), "--junit", str(small_fs / "junit.xml"), "--json", str(small_fs / "s.json")
    )
    said = done.stdout + done.stderr
    assert done.returncode in (ExitCode.OK, ExitCode.ENVIRONMENT), said
    assert "Traceback" not in said and "internal error" not in said
    if done.returncode == ExitCode.ENVIRONMENT:
        assert "no space left on the device for /" in " ".join(said.split()), said
    moved = set(Path(tempfile.gettempdir()).glob("deploy-*")) - before
    try:
        for name in ("junit.xml", "s.json"):  # where asked, or in the temp dir, said so
            there = (small_fs / name).is_file()
            elsewhere = [p for p in moved if p.name.endswith(f"-{name}")]
            assert there or (elsewhere and str(elsewhere[0]) in " ".join(said.split())), (name, said)
    finally:
        for path in moved:
            path.unlink(missing_ok=True)
    left = [p for pattern in LEFT_BEHIND for p in small_fs.rglob(pattern)]
    assert left == [], left


def test_a_write_that_finds_no_room_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "runs" / "summary.json"
    real = Path.write_text

    def full(self: Path, *args: object, **kwargs: object) -> int:
        if self.parent == target.parent:
            real(self, "partial")  # what a short write leaves before ENOSPC
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(DiskFull, match=str(target)) as raised:
        atomic_write_text(target, "{}")
    assert isinstance(raised.value, OSError) and raised.value.exit_code == ExitCode.ENVIRONMENT
    assert list(target.parent.iterdir()) == []
    went = write_with_room(target, "{}")
    try:
        assert went.parent == Path(tempfile.gettempdir()) and went.read_text() == "{}"
    finally:
        went.unlink()


def test_disk_full_is_found_in_a_cause_chain() -> None:
    copied = OSError(
        errno.ENOSPC, "No space left on device", "/cache/objects/ab", None, "/repo/m/1/model.onnx"
    )
    try:
        try:
            raise copied
        except OSError as exc:
            raise RuntimeError("publishing failed") from exc
    except RuntimeError as wrapped:
        found = disk_full(wrapped)
    assert found is not None and found.path == "/repo/m/1/model.onnx"  # the write's target, not the source
    assert disk_full(OSError(errno.EACCES, "denied")) is None


FILE_SIZE_LIMIT = """
import resource, sys
from pathlib import Path
from deploy.pipeline.errors import DiskFull
from deploy.pipeline.graph.hashing import atomic_write_text
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))  # a CI agent's ulimit -f
try:
    atomic_write_text(Path(sys.argv[1]), "x" * 4096)
except DiskFull as full:
    print(full.exit_code, full)
"""


def test_a_file_size_limit_is_named_as_one_with_the_environments_exit_code(tmp_path: Path) -> None:
    """`ulimit -f` made writes fail with EFBIG, which ended a stage as a plain failure (exit 1,
    "OSError: [Errno 27] File too large")."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT, str(tmp_path / "summary.json")],
        capture_output=True,
        text=True,
    )
    code, _, said = done.stdout.strip().partition(" ")
    assert int(code) == ExitCode.ENVIRONMENT, done.stdout + done.stderr
    assert said == f"the file size limit (ulimit -f) stops {tmp_path / 'summary.json'}: raise it, then rerun"
