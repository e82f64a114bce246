"""What lies in a published repository that no publish or release placed there: a version
directory copied in by hand (`cp -a tiny_python/1 tiny_python/9`, which a server reading
the newest version would serve), a model directory named like the pipeline's that its
manifest does not list, a file no stamp lists. Triton would serve such a version as the
pipeline's, so `deploy serve`, the release gate, `deploy rollback` and `deploy releases`
treat it as foreign: refused, naming it; `deploy serve --repair` moves it aside, beside
the repository (never deleted), and says where.

Only the pipeline's own model dirs are read (another pipeline's, stamped as theirs, are
theirs); Triton's own writes (the python backend's `__pycache__`) are not foreign.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from deploy.pipeline.errors import StageFailed

BYTECODE = "__pycache__"  # what the python backend writes beside model.py as it loads
ASIDE = ".foreign"  # <repository>.foreign/<time>/..., beside the repository


@dataclass(frozen=True)
class Foreign:
    path: str  # inside the repository
    kind: str  # "model dir", "version dir" or "file"

    def text(self) -> str:
        return f"{self.path} ({self.kind} that no publish or release placed)"


def foreign(repository: Path, pipeline: str) -> list[Foreign]:
    """Every version dir, model dir and file of the pipeline's that its stamps do not list."""
    from deploy.pipeline.publish.readback import published_models

    listed = published_models(repository, pipeline)
    if listed is None or not repository.is_dir():
        return []
    found = [Foreign(d.name, "model dir") for d in _unlisted(repository, pipeline, set(listed))]
    for model in listed:
        found += _in_model(repository / model, model)
    return found


def _unlisted(repository: Path, pipeline: str, listed: set[str]) -> list[Path]:
    """Dirs named like the pipeline's models, not in its manifest, not another pipeline's."""
    from deploy.pipeline.publish.tree import STAMP, Stamp

    found = []
    for path in sorted(repository.iterdir()):
        if not path.is_dir() or path.name in listed or not path.name.startswith(f"{pipeline}_"):
            continue
        stamp = Stamp.from_json((path / STAMP).read_bytes()) if (path / STAMP).is_file() else None
        if stamp is None or stamp.pipeline == pipeline:
            found.append(path)
    return found


def _in_model(model_dir: Path, model: str) -> list[Foreign]:
    from deploy.pipeline.publish.tree import STAMP, Stamp

    if not (model_dir / STAMP).is_file():
        return []
    stamp = Stamp.from_json((model_dir / STAMP).read_bytes())
    stamped = set(stamp.files) if stamp is not None else set()
    tops = {rel.split("/")[0] for rel in stamped}
    found = []
    for entry in sorted(model_dir.iterdir()):
        if entry.name in (STAMP, BYTECODE) or entry.name.startswith("."):
            continue  # hidden: a live transaction's staging or temp file (pipeline/store/leftovers.py)
        if entry.is_dir() and entry.name not in tops:
            found.append(
                Foreign(f"{model}/{entry.name}", "version dir" if entry.name.isdigit() else "directory")
            )
        elif entry.is_dir():
            found += [
                Foreign(f"{model}/{rel}", "file") for rel in _files(model_dir, entry) if rel not in stamped
            ]
        elif entry.name not in stamped:
            found.append(Foreign(f"{model}/{entry.name}", "file"))
    return found


def _files(model_dir: Path, folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(model_dir))
        for p in folder.rglob("*")
        if p.is_file() and BYTECODE not in p.parts and not p.name.startswith(".")
    )


def refuse_foreign(repository: Path, pipeline: str) -> None:
    """StageFailed naming what is foreign, and the way out."""
    found = foreign(repository, pipeline)
    if found:
        raise StageFailed(
            f"{repository} holds what deploy never placed, and a server would serve it as '{pipeline}': "
            f"{'; '.join(f.text() for f in found[:8])}; `deploy serve CONFIG --repair` moves it aside "
            "(nothing is deleted)"
        )


def move_aside(repository: Path, found: list[Foreign]) -> list[str]:
    """Each foreign entry renamed to <repository>.foreign/<UTC time>/<its path>; what moved where."""
    when = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = repository.parent / f"{repository.name}{ASIDE}" / when
    said = []
    for item in found:
        target = aside / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(repository / item.path, target)
        said.append(f"moved {repository / item.path} aside to {target}")
    return said
