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

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.issues import Issue
from deploy.live_source import source_entry
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
        source = source_entry(model, work, name, factory, kwargs, examples)
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
