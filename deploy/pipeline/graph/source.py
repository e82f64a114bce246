"""The model's identity, computed without importing torch.

It is the digest of the pipeline's source artifact (`model`): the factory path and
kwargs, the seed, the digests of the checkpoint / source file / TorchScript file / golden
inputs, and the version of the package the factory comes from (so upgrading torchvision
rebuilds).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from deploy.pipeline.graph.hashing import StatMemo, digest_json
from deploy.pipeline.graph.keys import dist_version
from deploy.spec.config import ModelSource


def identity(model: ModelSource, memo: StatMemo) -> dict[str, object]:
    """The JSON document whose digest is the source artifact's (keys as in the module
    docstring; a file-backed field only when the config sets it)."""
    ident: dict[str, object] = model.model_dump(
        mode="json", include={"factory", "callable", "kwargs", "seed"}
    )
    ident["kind"] = model.kind
    for name in ("file", "checkpoint", "torchscript", "golden_inputs"):
        path = getattr(model, name)
        if path is not None:
            ident[f"{name}_sha256"] = memo.digest(path)
    if model.factory is not None:
        here = model.factory_here()  # the working directory's module wins, as it does on import
        top = model.factory.split(":")[0].split(".")[0]
        ident["package"] = f"{top}@sha256:{memo.digest(here)}" if here else _package_identity(top, memo)
    return ident


def source_digest(model: ModelSource, memo: StatMemo) -> str:
    return digest_json(identity(model, memo))


def _package_identity(top: str, memo: StatMemo) -> str | None:
    """`torchvision==0.29.1` for an installed distribution; a file digest for a local module."""
    version = dist_version(top)
    if version is not None:
        return f"{top}=={version}"
    spec = importlib.util.find_spec(top)  # locates, does not execute, a top-level module
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        return None
    return f"{top}@sha256:{memo.digest(Path(spec.origin))}"
