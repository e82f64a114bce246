"""How `deploy.optimize`'s model travels to the stages' processes (live_model.py): the
`factory=` given, else the model's class where it rebuilds to the very model, else the
live module by value (cloudpickle, with a generated module naming its digest); the
weights in safetensors beside it."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.issues import Issue
from deploy.live_identity import identity, users_own
from deploy.pipeline.errors import ConfigError
from deploy.starter.entries import SourceEntry

if TYPE_CHECKING:
    import torch

log = logging.getLogger("deploy")


def source_entry(
    model: torch.nn.Module,
    work: Path,
    name: str,
    factory: str | None,
    kwargs: Mapping[str, object] | None,
    examples: Mapping[str, Any],
) -> SourceEntry:
    weights = str(_save_weights(model, work / f"{name}.safetensors"))
    if factory is not None:
        found = SourceEntry(factory=factory)
        if kwargs:
            found["kwargs"] = dict(kwargs)
        found["checkpoint"] = weights
        return found
    rebuilt = rebuildable(model, examples)
    if rebuilt is not None:
        return SourceEntry(factory=rebuilt, checkpoint=weights)
    return SourceEntry(file=str(_pickled(model, work, name, weights)), callable="build", checkpoint=weights)


def importable(model: torch.nn.Module) -> str | None:
    """`module:Class` of the model, or None where another process can't import it by that
    name (defined in `__main__`, a notebook cell or a function)."""
    cls = type(model)
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return None
    return f"{cls.__module__}:{cls.__qualname__}"


def rebuildable(model: torch.nn.Module, examples: Mapping[str, Any]) -> str | None:
    """`module:Class` when the class builds with no arguments and the result, with the
    live weights, *is* the live model; None (it travels by value) otherwise, with why."""
    where = importable(model)
    if where is None:
        return None
    module, _, qualname = where.partition(":")
    try:
        rebuilt = getattr(importlib.import_module(module), qualname)()
    except Exception:  # needs arguments (torchvision's ResNet class; its resnet50 function doesn't)
        return None
    differs = differences(model, rebuilt, examples)
    if differs:
        log.info(
            "%s() builds another model than the one given (%s): the live module is pickled", where, differs
        )
        return None
    return where


def differences(live: torch.nn.Module, rebuilt: torch.nn.Module, examples: Mapping[str, Any]) -> str:
    """'' when `rebuilt`, given the live weights, answers the examples as `live` does."""
    import torch

    mine, theirs = live.state_dict(), rebuilt.state_dict()
    shapes = {k: tuple(v.shape) for k, v in mine.items()}
    if shapes != {k: tuple(v.shape) for k, v in theirs.items()}:
        changed = sorted(set(shapes) ^ set(theirs)) or [
            k for k in shapes if shapes[k] != tuple(theirs[k].shape)
        ]
        return f"state_dict keys or shapes differ: {', '.join(changed[:3])}"
    rebuilt.load_state_dict(mine, strict=True)
    try:
        want, got = _answer(live, examples), _answer(rebuilt, examples)
    except Exception as exc:  # the pipeline's own binding will say what is wrong with the examples
        return f"cannot compare the two on the examples ({type(exc).__name__})"
    same = len(want) == len(got) and all(
        a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(want, got, strict=True)
    )
    return "" if same else "outputs on the example inputs differ"


def _answer(model: torch.nn.Module, examples: Mapping[str, Any]) -> list[Any]:
    """Every tensor the model returns for the examples, bound as the pipeline binds them."""
    import torch

    from deploy.modelio.adapter import bind
    from deploy.modelio.outputs import flat
    from deploy.spec.tensors import InputsBy

    binding = bind(model, tuple(examples), InputsBy.AUTO, {})
    with torch.no_grad():
        return list(flat(binding.call(model.eval(), list(examples.values()))).values())


# The generated module that rebuilds a pickled model: the digest makes the cache key follow the
# model (its classes' code, settings and weights where they can be read; else the pickle's bytes).
PICKLED_SOURCE = """\"\"\"Written by deploy.optimize: rebuilds {cls} (sha256 {digest}) from {pickle} (its bytes' sha256 {pickled}).\"\"\"

from pathlib import Path

import torch


def build():
    return torch.load(Path(__file__).with_name("{pickle}"), weights_only=False)
"""


def _pickled(model: torch.nn.Module, work: Path, name: str, weights: str) -> Path:
    import cloudpickle
    import torch

    from deploy.pipeline.graph.hashing import atomic_write_text, digest_file

    cls = f"{type(model).__module__}:{type(model).__qualname__}"
    pickle, source = work / f"{name}.module.pt", work / f"{name}_module.py"
    same = identity(model, Path(weights))
    if same and _pickled_before(source, pickle, same):
        return source  # the model as pickled before: its bytes (random ids inside) and the key kept
    written = pickle.with_name(f".{pickle.name}.{os.getpid()}.tmp")
    try:
        with _by_value(type(model)):
            torch.save(model, written, pickle_module=cloudpickle)
        os.replace(written, pickle)  # a kill mid-save leaves the pickle its source names, whole
    except Exception as exc:
        written.unlink(missing_ok=True)
        hint = "pass factory='module:function' that builds it (the stages run in their own processes)"
        why = f"{type(exc).__name__}: {exc}"
        raise ConfigError(
            "model", [Issue("model", f"cannot pickle {cls} by value ({why}); {hint}")]
        ) from None
    pickled = digest_file(pickle)
    text = PICKLED_SOURCE.format(cls=cls, pickle=pickle.name, digest=same or pickled, pickled=pickled)
    atomic_write_text(source, text)
    return source


def _pickled_before(source: Path, pickle: Path, same: str) -> bool:
    """The source names this identity and the pickle beside it is the one it was written with."""
    from deploy.pipeline.graph.hashing import digest_file

    if not (source.is_file() and pickle.is_file()):
        return False
    text = source.read_text()
    return f"(sha256 {same})" in text and f"(its bytes' sha256 {digest_file(pickle)})" in text


@contextlib.contextmanager
def _by_value(cls: type) -> Iterator[None]:
    """The class's own module goes by value where it is the user's (not an installed
    package): the stages' processes may not have the script's folder on their path.
    `__main__` and notebook cells go by value anyway (cloudpickle's rule)."""
    import cloudpickle

    module = sys.modules.get(cls.__module__)
    mine = module is not None and cls.__module__ != "__main__" and users_own(module)
    if mine:
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        if mine:
            cloudpickle.unregister_pickle_by_value(module)


def _save_weights(model: torch.nn.Module, path: Path) -> Path:
    from safetensors.torch import save_file

    state, seen = {}, set()
    for key, value in model.state_dict().items():
        tensor = value.detach().cpu()
        storage = tensor.untyped_storage().data_ptr()
        # Tied weights (GPT-2's lm_head and wte) share one storage, which safetensors refuses
        # to write twice: the second name gets a copy, and loading ties nothing apart.
        state[key] = tensor.clone() if storage in seen else tensor.contiguous()
        seen.add(storage)
    save_file(state, str(path))
    return path
