"""Where a run happened: host, Python, library versions and the config's git commit.

Read without importing any of the libraries and without a subprocess (a fully cached
run writes this too, inside its 0.3 s budget): versions from `.dist-info` names, the
commit from the `.git` directory's files.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from deploy.pipeline.graph.keys import dist_version

LIBRARIES = (
    "deploy",
    "torch",
    "torchvision",
    "onnx",
    "onnxsim",
    "onnxruntime",
    "tensorrt",
    "tritonclient",
    "nvidia-pytriton",
)


@dataclass(frozen=True)
class Provenance:
    """Where and with what a run ran: the run summary and report show it."""

    host: str
    cpu: str
    cores: int | None
    python: str
    libraries: dict[str, str | None]
    commit: str | None


def collect(config: Path) -> Provenance:
    libraries = {name: dist_version(name) for name in LIBRARIES}
    commit = git_commit(config.absolute().parent)
    return Provenance(
        platform.node(), cpu_model(), os.cpu_count(), platform.python_version(), libraries, commit
    )


@cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit(start: Path) -> str | None:
    """HEAD's commit of the repository holding `start`, or None outside one."""
    git = next((d / ".git" for d in (start, *start.parents) if (d / ".git").exists()), None)
    if git is None or not git.is_dir():
        return None  # not a repository (or a worktree's .git file: not worth following)
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head  # detached
        return _ref(git, head.removeprefix("ref: "))
    except OSError:
        return None


def _ref(git: Path, ref: str) -> str | None:
    loose = git / ref
    if loose.is_file():
        return loose.read_text().strip()
    packed = git / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    return None
