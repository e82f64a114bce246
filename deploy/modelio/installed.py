"""Whether the packages a model's source needs are installed, answered without importing
them (`deploy validate` reads a config in well under a second: no torch, no torchvision).
Importing the module for real is the probe's job (`deploy validate --probe`)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from deploy.pipeline.errors import MissingDependency, StageFailed
from deploy.spec.config import ModelSource

# Import names whose distribution is called otherwise (the pip install hint).
DISTRIBUTIONS = {"sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python", "yaml": "pyyaml"}


def check_installed(source: ModelSource) -> None:
    """A factory's top-level package, and the top-level packages a model file imports
    (read from its syntax tree, not run), are found on the path: find_spec imports nothing
    for a top-level name. Running the imports is the probe's job."""
    if source.factory is not None:
        module = str(source.factory).partition(":")[0]
        if source.factory_here() is None:  # a module in the working directory imports as `python -m` finds it
            _found(
                module.split(".")[0],
                f"model.factory: '{module}'",
                f"searched the working directory {Path.cwd()} and sys.path",
            )
    elif source.file is not None:
        for top in _imported(source.file):
            if not _sibling(source.file.parent, top):
                _found(top, f"model.file: {source.file}")


def _found(top: str, where: str, searched: str = "") -> None:
    if importlib.util.find_spec(top) is None:
        raise missing(where, ModuleNotFoundError(name=top), searched)


def _imported(path: Path) -> list[str]:
    """The top-level names the module's own top-level `import` statements name: those run
    whenever it loads (one inside `try:` may be optional, one inside a function may never
    run; relative ones are its package's). A file that does not parse is the probe's to
    report, with its line."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module.split(".")[0])
    return list(dict.fromkeys(found))


def _sibling(folder: Path, top: str) -> bool:
    """The file imports its siblings (its folder is on the path while it loads)."""
    return (folder / f"{top}.py").is_file() or (folder / top).is_dir()


def missing(where: str, exc: ModuleNotFoundError, searched: str = "") -> MissingDependency | StageFailed:
    top = (exc.name or "").split(".")[0]
    if top and importlib.util.find_spec(top) is not None:  # installed: a module of it is missing
        return StageFailed(f"{where}: cannot import: {exc}")
    if not top:
        return MissingDependency(f"a package {where} imports ({exc})", "pip install <the package>")
    from deploy.pipeline.graph.extras import EXTRA_OF, install_hint

    looked = f"; {searched}" if searched else ""
    hint = (  # torch, onnx, …: deploy's own extra, as deploy was installed
        install_hint(top)
        if top in EXTRA_OF
        else f"pip install {DISTRIBUTIONS.get(top, top)}, or run from the folder that holds {top}.py"
    )
    return MissingDependency(f"the package '{top}' ({where} imports it{looked})", hint)
