"""Locating a local tritonserver and what it needs to start: the binary, its backends, the
python backend's stub for this interpreter, and the environment it runs in."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from deploy.pipeline.errors import EnvError, MissingDependency
from deploy.serving.server_spec import ServerKind, ServerSpec, find_binary, pytriton_root


@dataclass(frozen=True)
class Launch:
    binary: Path
    backend_dir: Path | None
    env: dict[str, str]


# -- locating a local binary ------------------------------------------------------------------
def locate(spec: ServerSpec, workdir: Path) -> Launch:
    binary = find_binary(spec)
    if spec.kind is ServerKind.BINARY and (binary is None or not binary.is_file()):
        # The user named this file: say which, not how to install some other server.
        raise EnvError(
            f"tritonserver is not available: server.path {binary} (server kind 'binary') is not a file"
        )
    if binary is None or not binary.is_file():
        raise MissingDependency(
            "tritonserver", "pip install nvidia-pytriton (ships one), or put tritonserver on PATH"
        )
    root = pytriton_root()
    if root is not None and binary.is_relative_to(root):
        return _pytriton_launch(root, binary, workdir)
    backends = binary.parent.parent / "backends"
    return Launch(binary, backends if backends.is_dir() else None, _env(None))


def _pytriton_launch(root: Path, binary: Path, workdir: Path) -> Launch:
    """The wheel's server needs its bundled libraries and a python-backend stub built
    for this interpreter; the backend dir is assembled in our work dir rather than
    written into the installed package."""
    server = root / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise MissingDependency(
            f"a python-backend stub for Python {version}", "a Python version nvidia-pytriton supports"
        )
    backends = workdir / "backends"
    python = backends / "python"
    python.mkdir(parents=True, exist_ok=True)
    for source in sorted((server / "backends" / "python").glob("*.*")):
        target = python / source.name
        if not target.exists():
            target.symlink_to(source)
    _stub_wrapper(python / stub.name, stub, workdir / "stub-views")
    libs = root.parent / "nvidia_pytriton.libs"
    return Launch(binary, backends, _env(libs if libs.is_dir() else None))


# The python backend's stub runs Python isolated (environment ignored) and imports the
# model's model.py from the repository before any code of ours runs, so Python writes its
# bytecode into the published version dir. The stub is started through this wrapper,
# which hands it a view of the version dir (a symlink per entry) under the server's work
# dir instead: the model reads the same files, and __pycache__ lands in the view.
STUB_WRAPPER = """#!/bin/sh
model="$1"; shift
version_dir=$(dirname "$model"); model_dir=$(dirname "$version_dir")
view="{views}/$$/$(basename "$model_dir")/$(basename "$version_dir")"
if mkdir -p "$view"; then
    for entry in "$version_dir"/* "$version_dir"/.[!.]*; do
        [ -e "$entry" ] && [ "$(basename "$entry")" != __pycache__ ] && ln -s "$entry" "$view/"
    done
    model="$view/$(basename "$model")"
fi
exec "{stub}" "$model" "$@"
"""


def _stub_wrapper(target: Path, stub: Path, views: Path) -> None:
    """The wrapper at `target`; it execs the wheel's stub through a link beside it (the
    stub's process is named from the work dir, as when the link itself was the stub)."""
    linked = target.with_name(f"{target.name}.wheel")
    if not linked.is_symlink():
        linked.symlink_to(stub)
    if target.is_symlink() or target.exists():
        target.unlink()
    target.write_text(STUB_WRAPPER.format(views=views, stub=linked))
    target.chmod(0o755)


def _env(libs: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    # The python-backend stub imports numpy and onnxruntime from this environment.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if libs is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p)
    return env
