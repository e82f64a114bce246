"""`deploy.optimize(model, example_inputs)`: a pipeline for an nn.Module in memory.

What a later `deploy run` (a CI job) needs to repeat the run is written into the work
dir: the weights (`<name>.safetensors`) and the YAML. Its `model:` is the `factory=`
given; else the model's class, but only when it builds with no arguments *and* the
rebuilt module equals the live one (same state_dict keys and shapes, the same outputs on
the example inputs once the weights are loaded): a fine-tuned torchvision model whose
head was replaced builds as its class, but as another architecture. Otherwise the live
module itself travels by value (`<name>.module.pt`, written with cloudpickle, so a class
defined in `__main__`, a notebook cell, a function or the user's own unpackaged module
goes along; loaded by a small generated `<name>_module.py` that names the pickle's
digest, so the cache keys on it). Where it cannot be pickled, the error says why and that
`factory=` is the way. Without `dynamic=`, dim 0 of every input is the batch, 1 to 8 (or
twice the example's); a model that can't take another batch is served at the example's."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.issues import Issue
from deploy.live_identity import identity, users_own
from deploy.pipeline.errors import ConfigError, StageFailed
from deploy.starter.entries import Guide, InputEntry, SourceEntry, input_entry, with_values

if TYPE_CHECKING:
    import torch

    from deploy.api import RunResult

# A named dim without an explicit range goes from 1 to this multiple of the example's size.
GROWTH = 2
# The default batch range's top: at least this, or GROWTH times the example's batch.
DEFAULT_MAX_BATCH = 8
DimRange = str | tuple[str, int, int]  # a name, or (name, min, max)
log = logging.getLogger("deploy")


def optimize(
    model: torch.nn.Module,
    example_inputs: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor,
    name: str | None = None,
    dynamic: Mapping[str, Mapping[int, DimRange]] | None = None,
    workdir: Path | str = ".deploy-optimize",
    factory: str | None = None,
    kwargs: Mapping[str, object] | None = None,
) -> RunResult:
    """Exports, checks and serves `model` like `deploy run` on a starter config (export,
    simplify, validate, a python-backend Triton model, smoke on a real server). Inputs
    are named by `example_inputs`' keys, else by forward's parameters (one tensor: `input0`); `dynamic` maps an
    input's axis to a dim name (min 1, max twice the example) or (name, min, max);
    without it, axis 0 of every input is the batch. `name`: the class's, snake_case."""
    from deploy.api import load

    return load(write_config(model, example_inputs, name, dynamic, workdir, factory, kwargs)).run()


def write_config(
    model: torch.nn.Module,
    example_inputs: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor,
    name: str | None = None,
    dynamic: Mapping[str, Mapping[int, DimRange]] | None = None,
    workdir: Path | str = ".deploy-optimize",
    factory: str | None = None,
    kwargs: Mapping[str, object] | None = None,
) -> Path:
    """What `optimize` runs: the weights, the model's source and the YAML, in the work dir."""
    from deploy.pipeline.process.child_call import CallEnded, bounded

    model = _uncompiled(model)
    name = name or default_name(model)
    work = Path(workdir).absolute() / name
    work.mkdir(parents=True, exist_ok=True)
    examples = _named(example_inputs, model)
    config = work / f"{name}.yaml"
    with bounded():  # the live model runs here, in the caller's process: a hang is bounded too
        source = _source(model, work, name, factory, kwargs, examples)
        try:
            text = _config_for(model, name, source, examples, dynamic, work)
        except CallEnded:
            raise
        except StageFailed as exc:  # the model's own failure on the user's examples: one of the typed errors
            raise ConfigError(
                "example_inputs", [Issue("example_inputs", f"the model does not run on them: {exc}")]
            ) from exc
    config.write_text(text)
    return config


def _uncompiled(model: torch.nn.Module) -> torch.nn.Module:
    """torch.compile's wrapper around the user's module: the module is what is deployed
    (both exporters failed on the wrapper, torch.export on its calling convention)."""
    inner = getattr(model, "_orig_mod", None)
    if type(model).__name__ == "OptimizedModule" and inner is not None:
        log.info("deploying the module torch.compile wrapped (%s)", type(inner).__name__)
        return inner
    return model


def default_name(model: torch.nn.Module) -> str:
    """`ShuffleNetV2` -> `shuffle_net_v2`: a config name (letters, digits, `_`)."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(model).__name__).lower()
    return re.sub(r"[^a-z0-9_]+", "_", words).strip("_")[:48] or "model"


def _config_for(
    model: torch.nn.Module,
    name: str,
    source: SourceEntry,
    examples: Mapping[str, Any],
    dynamic: Mapping[str, Mapping[int, DimRange]] | None,
    work: Path,
) -> str:
    seen = _seen(examples)
    if dynamic is not None:
        return _config_text(model, name, source, _specs(examples, dynamic), work, seen)
    try:
        return _config_text(model, name, source, _specs(examples, _batch_axes(examples)), work, seen)
    except (ConfigError, StageFailed) as exc:  # it can't take another batch: served at the example's shapes
        log.warning("%s: served at the example's shapes, without a batch dim: %s", name, exc)
        return _config_text(model, name, source, _specs(examples, {}), work, seen)


def _seen(examples: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """The range each integer example spans (where it spans one): its values' range, where
    the input's name says nothing of them."""
    found = {}
    for input_name, tensor in examples.items():
        if not tensor.is_floating_point() and tensor.numel() and tensor.dtype != torch_bool():
            low, high = float(tensor.min()), float(tensor.max())
            if high > low:
                found[input_name] = (low, high)
    return found


def torch_bool() -> Any:
    import torch

    return torch.bool


def _batch_axes(examples: Mapping[str, Any]) -> dict[str, dict[int, DimRange]]:
    return {
        n: {0: ("batch", 1, max(DEFAULT_MAX_BATCH, GROWTH * int(t.shape[0])))}
        for n, t in examples.items()
        if t.dim() >= 1
    }


def _source(
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


def _named(examples: Any, model: torch.nn.Module) -> dict[str, Any]:
    """The examples by input name: a dict's own, else forward's parameters' (a list of two
    was named input0, input1, which a forward(x, y) binds by no name)."""
    import torch

    from deploy.modelio.adapter import positional_names

    if isinstance(examples, torch.Tensor):
        return {"input0": examples}
    found = dict(examples) if isinstance(examples, Mapping) else None
    if found is None and isinstance(examples, (list, tuple)):
        by_forward = positional_names(model, len(examples)) if len(examples) > 1 else None
        found = dict(zip(by_forward or [f"input{i}" for i in range(len(examples))], examples, strict=True))
    if found == {}:  # nothing to send: Triton's requests carry inputs
        why = "no example inputs: deploy serves models that take at least one tensor; give the one(s) forward takes"
        raise ConfigError("example_inputs", [Issue("example_inputs", why)])
    wrong = [f"{n}: {type(t).__name__}" for n, t in (found or {}).items() if not isinstance(t, torch.Tensor)]
    if found is None or wrong:
        said = (
            ", ".join(wrong[:4]) + (", …" if len(wrong) > 4 else "")
            if wrong
            else f"a {type(examples).__name__}"
        )
        why = f"examples must be torch tensors (one, a list or tuple, or a dict by input name); got {said}"
        raise ConfigError(
            "example_inputs", [Issue("example_inputs", f"{why}: torch.as_tensor(...) makes one")]
        )
    return found


def _specs(examples: Mapping[str, Any], dynamic: Mapping[str, Mapping[int, DimRange]]) -> list[InputEntry]:
    unknown = sorted(set(dynamic) - set(examples))
    if unknown:
        raise ConfigError(
            "dynamic", [Issue("dynamic", f"no example input named {unknown} (inputs: {sorted(examples)})")]
        )
    specs = []
    for input_name, tensor in examples.items():
        shape = tuple(int(d) for d in tensor.shape)
        axes = dynamic.get(input_name, {})
        bad = [a for a in axes if not 0 <= a < len(shape)]
        if bad:
            raise ConfigError(
                "dynamic", [Issue(f"dynamic.{input_name}", f"axes {bad} outside a {len(shape)}-d input")]
            )
        specs.append(_spec(input_name, str(tensor.dtype).removeprefix("torch."), shape, axes))
    return specs


def _spec(input_name: str, dtype: str, shape: tuple[int, ...], axes: Mapping[int, DimRange]) -> InputEntry:
    dims: list[int | str] = list(shape)
    low, high = list(shape), list(shape)
    for axis, dim in axes.items():
        dim_name, lo, hi = (dim, 1, max(GROWTH * shape[axis], 2)) if isinstance(dim, str) else dim
        dims[axis], low[axis], high[axis] = dim_name, lo, hi
    return input_entry(input_name, dtype, dims, low, shape, high)


def _config_text(
    model: torch.nn.Module,
    name: str,
    source: SourceEntry,
    specs: list[InputEntry],
    work: Path,
    seen: Mapping[str, tuple[float, float]],
) -> str:
    from deploy.spec.tensors import InputSpec
    from deploy.starter.config_text import OPTIMIZE, starter
    from deploy.starter.entries import detection_inputs
    from deploy.starter.inspection import inspect, vocabulary

    on = bool(specs) and all(s["dims"] and s["dims"][0] == "batch" for s in specs)
    specs = with_values(specs, Guide(vocabulary(model), on, seen=seen))
    found = inspect(model.eval(), [InputSpec.model_validate(s) for s in specs], on)
    written = detection_inputs(specs) if found.detections else specs
    text = starter(name, source, written, found, "batch" if on else None, OPTIMIZE)
    paths = (
        f"cache_dir: {work / 'cache'}\nrepository: {work / 'model_repository'}\nrun_dir: {work / 'runs'}\n"
    )
    return text.replace("\nstages:\n", f"\n{paths}\nstages:\n", 1)
