"""A pickled model's identity across processes (deploy.optimize): what its key follows
where the pickle's own bytes cannot (torch.save and cloudpickle write random ids)."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def identity(model: torch.nn.Module, weights: Path) -> str | None:
    """The model's digest across processes: the code of each user module its classes come
    from (the whole file: the functions their methods call live there too), each module's
    plain settings, and the weights. The pickle's bytes differ per process (torch.save's
    serialization id, cloudpickle's class ids). None where something cannot be read that
    way (a class from `python -c` or a notebook cell, a hook, an attribute of another kind)."""
    import hashlib
    import inspect

    import torch

    from deploy.pipeline.graph.hashing import digest_file

    found = hashlib.sha256(digest_file(weights).encode())
    hooks = {k for k in vars(torch.nn.Module()) if "hook" in k}
    for path, module in model.named_modules():
        cls, state = type(module), vars(module)
        try:
            mine = cls.__module__ == "__main__" or users_own(sys.modules[cls.__module__])
            code = inspect.getsource(sys.modules[cls.__module__]) if mine else ""
        except (OSError, TypeError, KeyError):
            return None
        settings = {k: v for k, v in state.items() if k not in _MODULE_STATE | hooks}
        if any(state.get(k) for k in hooks) or not all(isinstance(v, _PLAIN) for v in settings.values()):
            return None
        said = f"{path}|{cls.__module__}.{cls.__qualname__}|{code}|{sorted(settings.items())!r}"
        found.update(said.encode())
    return found.hexdigest()


_MODULE_STATE = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training"}
_PLAIN = (int, float, str, bool, type(None))


def users_own(module: Any) -> bool:
    """A module from a file outside the interpreter's and site-packages' folders."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return not any(Path(file).resolve().is_relative_to(Path(p).resolve()) for p in installed)
