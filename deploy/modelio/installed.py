"""Whether the packages a model's source needs are installed, answered without importing
them (`deploy validate` reads a config in well under a second: no torch, no torchvision).
Importing the module for real is the probe's job (`deploy validate --probe`)."""

from __future__ import annotations

import importlib.util

from deploy.pipeline.config import ModelSource
from deploy.pipeline.errors import MissingDependency, StageFailed

# Import names whose distribution is called otherwise (the pip install hint).
DISTRIBUTIONS = {"sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python", "yaml": "pyyaml"}


def check_installed(source: ModelSource) -> None:
    """A factory's top-level package is found on the path (find_spec imports nothing for a
    top-level name); a file's imports are the probe's to try."""
    if source.factory is None:
        return
    top = str(source.factory).partition(":")[0].split(".")[0]
    if importlib.util.find_spec(top) is None:
        raise missing(f"model.factory: '{source.factory}'", ModuleNotFoundError(name=top))


def missing(where: str, exc: ModuleNotFoundError) -> MissingDependency | StageFailed:
    top = (exc.name or "").split(".")[0]
    if top and importlib.util.find_spec(top) is not None:  # installed: a module of it is missing
        return StageFailed(f"{where}: cannot import: {exc}")
    if not top:
        return MissingDependency(f"a package {where} imports ({exc})", "pip install <the package>")
    return MissingDependency(
        f"the package '{top}' ({where} imports it)", f"pip install {DISTRIBUTIONS.get(top, top)}"
    )
