"""A no-op run's footprint: everything the outcome of a fully cached `deploy run` rests
on, by stat, so the next identical invocation can be answered without loading the
pipeline (the stage modules and the config's pydantic models are most of a warm run's
time).

Written only after a run in which every stage came from the local cache, nothing was
repaired and nothing was pushed. Matched, it is that run again: the same invocation
(config file, working directory, --cache-dir, the environment variables that steer
deploy), the same interpreter and installed distributions (the directories on
sys.path: installing or removing one changes their listing), deploy's own code, the
same CPU and GPUs, and every file the run consulted — the config, the model's
sources, the files its params name, the cache entries and objects it served, the
repository files it published and the run records it wrote — with the same inode,
size, mtime, ctime and mode. ctime is the kernel's: any write, chmod or utime moves
it, so an in-place edit that restores mtime still shows (as for the stat memo in
pipeline.graph.hashing).

The code and the sys.path directories are judged by what they hold, not by their own
mtime: Python writing a `__pycache__` on a first import, or a tool a dot-folder
(.mypy_cache) into the working directory, changes nothing a run would do, and another
process does both at any moment.

Standard library only: checking a footprint must cost less than importing what it saves.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.pipeline.graph.hashing import atomic_write_text, digest_json

SCHEMA = 1
FILE = "noop.json"
# Environment variables that change what a run finds (tools on PATH, libraries, GPUs).
ENV_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
ENV_PREFIX = "DEPLOY_"  # every deploy setting ($DEPLOY_CACHE_DIR, $DEPLOY_CACHE_REMOTE, ...)
TOOLS = ("nvidia-smi", "tritonserver", "docker")  # found on PATH by stages' identities
GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the driver sees
CODE = Path(__file__).resolve().parents[2]  # the deploy package: stage versions and logic
MAX_PATHS = 20_000  # a footprint larger than this is not worth keeping: the run takes its full path

MAX_BYTES = 64 << 20  # a footprint file larger than MAX_PATHS could make is not ours
# A file: [inode, size, mtime_ns, ctime_ns, mode]; a folder walked: [inode, mode, its
# entries' names]; None: absent.
Token = list[int | str] | None
BYTECODE = "__pycache__"


class TooLarge(Exception):
    """More paths than MAX_PATHS: no footprint is kept."""


def token(path: Path | str) -> Token:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def _bytecode(name: str) -> bool:
    """What a server loading a published python-backend model, or a model package
    imported, writes beside the code: it changes nothing a run does."""
    return name == BYTECODE


def _incidental(name: str) -> bool:
    """Written beside code by the tools that read it (mypy, pytest), never imported."""
    return name.startswith(".") or name == BYTECODE


def tree(root: Path, into: dict[str, Token], skip: Callable[[str], bool] = _bytecode) -> None:
    """`root` and, for a directory, every directory and file below it but those `skip`
    names (a directory's own token changes when an entry is added, removed or renamed)."""
    into[str(root)] = _walked(str(root), skip)
    if not root.is_dir() or root.is_symlink():
        return
    for parent, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not skip(d)]
        into.update(
            {p: _walked(p, skip) for p in (os.path.join(parent, n) for n in (*dirs, *files) if not skip(n))}
        )
        if len(into) > MAX_PATHS:
            raise TooLarge(str(root))


def _again(path: str, kept: Token) -> Token:
    """The path's token now, taken as `kept` was (a folder walked has three fields)."""
    return _walked(path) if kept is not None and len(kept) == 3 else token(path)


def _walked(path: str, skip: Callable[[str], bool] = _bytecode) -> Token:
    """A folder by the names in it but those `skip` names (its mtime moves when
    `__pycache__` appears); anything else, and a folder that can't be listed, by its token."""
    if os.path.islink(path) or not os.path.isdir(path):
        return token(path)
    try:
        st, names = os.stat(path), os.listdir(path)
    except OSError:
        return token(path)
    return [st.st_ino, st.st_mode, digest_json(sorted(n for n in names if not skip(n)))]


def invocation(config: Path, cache_dir: Path | None) -> dict[str, object]:
    """What the command line and its environment say."""
    env = {k: v for k, v in os.environ.items() if k in ENV_VARS or k.startswith(ENV_PREFIX)}
    return {
        "config": str(config.absolute()),
        "cwd": os.getcwd(),
        "cache_dir": None if cache_dir is None else str(cache_dir.absolute()),
        "env": dict(sorted(env.items())),
    }


def environment() -> dict[str, object]:
    """The interpreter, the installed distributions, deploy's code and the hardware."""
    return {
        "python": [sys.executable, sys.version],
        # A distribution installed, upgraded or removed renames its dist-info in a listing.
        "sys_path": {
            os.path.abspath(entry): _walked(os.path.realpath(entry or "."), _incidental) for entry in sys.path
        },
        "code": _code(),
        "cpu": [_cpu_model(), os.cpu_count()],
        "gpus": sorted(os.listdir(GPUS)) if GPUS.is_dir() else [],
        "tools": {tool: _tool(tool) for tool in TOOLS},
    }


def _code() -> str:
    """deploy's own files and folders, and nothing Python or its tools cache beside them."""
    found: dict[str, Token] = {}
    tree(CODE, found, _incidental)
    return digest_json(found)


def _tool(name: str) -> list[object] | None:
    """Where a tool is and its token (a binary replaced in place is another server)."""
    found = shutil.which(name)
    return None if found is None else [found, token(found)]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line for line in fh if line.startswith("model name")), "").strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Footprint:
    invocation: Mapping[str, object]
    environment: Mapping[str, object]
    files: Mapping[str, Token]
    screen: Mapping[str, Any]  # what the run printed, as data (deploy.console.screen renders it)
    made: str  # when the replayed run finished (UTC, ISO)

    def to_json(self) -> dict[str, object]:
        return {"schema": SCHEMA, **{k: getattr(self, k) for k in _FIELDS}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Footprint:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"footprint schema {data.get('schema')!r}, expected {SCHEMA}")
        return cls(*(data[k] for k in _FIELDS))


_FIELDS = ("invocation", "environment", "files", "screen", "made")


def take(
    invoked: Mapping[str, object],
    trees: Iterable[Path],
    listed: Iterable[Path],
    screen: Mapping[str, Any],
    made: str,
) -> Footprint:
    """`trees`: each path with everything below it; `listed`: a folder's own token only
    (entries added, removed or renamed in it)."""
    files: dict[str, Token] = {}
    for path in trees:
        tree(path.absolute(), files)
    files.update({str(p.absolute()): token(p) for p in listed})
    return Footprint(invoked, environment(), files, screen, made)


def difference(found: Footprint, invoked: Mapping[str, object]) -> str | None:
    """The first thing that differs now, cheapest checks first; None when nothing does."""
    if found.invocation != invoked:
        return "the invocation differs"
    changed = next((p for p, t in found.files.items() if _again(p, t) != t), None)
    if changed is not None:
        return f"{changed} changed"
    if found.environment != environment():
        return "the environment differs"
    return None


def save(path: Path, footprint: Footprint) -> None:
    atomic_write_text(path, json.dumps(footprint.to_json()))


def load(path: Path) -> Footprint | None:
    """The footprint at `path`; None when there is none or it can't be read (a lost or
    damaged footprint only costs the full path)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        return Footprint.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def forget(path: Path) -> None:
    path.unlink(missing_ok=True)
