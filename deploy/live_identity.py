"""A pickled model's identity across processes (deploy.optimize): what its key follows
where the pickle's own bytes cannot (torch.save and cloudpickle write random ids)."""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_MODULE_STATE = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training"}


def identity(model: torch.nn.Module, weights: Path) -> str | None:
    """The model's digest across processes: the weights, every buffer (a non-persistent one
    is in no state_dict), each module's plain settings, and for each user module its classes
    come from, its code (the whole file: the functions their methods call live there) and
    its globals (a constant read from the command line changes no code). None where
    something cannot be read that way (a class from `python -c` or a notebook cell, a hook,
    a setting or a global of another kind): the pickle's digest keys it then."""
    from deploy.pipeline.graph.hashing import digest_file

    try:
        return _identity(model, hashlib.sha256(digest_file(weights).encode()))
    except Exception:  # a tensor of a kind read no other way (quantized, sparse): the pickle keys it
        return None


def _identity(model: torch.nn.Module, found: Any) -> str | None:
    import torch

    hooks = {k for k in vars(torch.nn.Module()) if "hook" in k}
    sources: dict[str, str | None] = {}
    for path, module in model.named_modules():
        cls, state = type(module), vars(module)
        settings = {k: v for k, v in state.items() if k not in _MODULE_STATE | hooks}
        if any(state.get(k) for k in hooks) or not all(_plain(v) for v in settings.values()):
            return None
        if sources.setdefault(cls.__module__, _module_text(cls.__module__)) is None:
            return None
        found.update(f"{path}|{cls.__module__}.{cls.__qualname__}|{sorted(settings.items())!r}".encode())
        for name, buffer in module.named_buffers(recurse=False):
            found.update(name.encode() + _bytes(buffer))
    for code in sources.values():
        found.update(str(code).encode())
    return str(found.hexdigest())


def _module_text(name: str) -> str | None:
    """A user module's code and globals ("" for an installed one); None where either cannot
    be read."""
    import inspect

    module = sys.modules.get(name)
    if module is None or not (name == "__main__" or users_own(module)):
        return "" if module is not None else None
    try:
        code = inspect.getsource(module)
    except (OSError, TypeError):
        return None
    values = {
        k: _digest(v) for k, v in vars(module).items() if not k.startswith("__") and not _code_or_import(v)
    }
    return None if None in values.values() else f"{code}|{sorted(values.items())!r}"


def _code_or_import(value: object) -> bool:
    """Functions, classes and modules: their code is the file's or an installed package's."""
    import inspect
    import types

    return inspect.isroutine(value) or inspect.isclass(value) or isinstance(value, types.ModuleType)


def _digest(value: object) -> str | None:
    """A global's content: plain values as written, tensors, arrays and modules (the model a
    script holds) by their bytes; None for anything else."""
    import numpy as np
    import torch

    if _plain(value):
        return repr(value)
    if isinstance(value, torch.nn.Module):
        tensors = [t for _, t in [*value.named_parameters(), *value.named_buffers()]]
        return repr(value) + "|" + "|".join(hashlib.sha256(_bytes(t)).hexdigest() for t in tensors)
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}{tuple(value.shape)}{hashlib.sha256(_bytes(value)).hexdigest()}"
    if isinstance(value, np.ndarray):
        return (
            f"{value.dtype}{value.shape}{hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()}"
        )
    return None


def _bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's bytes whatever its dtype (numpy has no bfloat16)."""
    import torch

    return bytes(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _plain(value: object) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, (int, float, str, bool, type(None)))


def users_own(module: Any) -> bool:
    """A module from a file outside the interpreter's and site-packages' folders."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return not any(Path(file).resolve().is_relative_to(Path(p).resolve()) for p in installed)
