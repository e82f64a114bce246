"""`deploy.optimize(model, example_inputs, ...)`: a pipeline for an nn.Module in memory.

What a later `deploy run` (a CI job) needs to repeat the run is written into the work
dir: the weights (`<name>.safetensors`) and the YAML, whose `model:` names an importable
factory (the model's class, or the `factory=` given) with the weights as its checkpoint.
The cache keys on the weights' digest and the factory's package version or module file,
as for any config. A model whose class can't be imported again (defined in `__main__`
or a notebook cell) is refused with what to do instead."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.init import BINARY_NAMES
from pipeline.errors import ConfigError, Issue

if TYPE_CHECKING:
    import torch

    from deploy.api import RunResult

# A named dim without an explicit range goes from 1 to this multiple of the example's size.
GROWTH = 2
DimRange = str | tuple[str, int, int]  # a name, or (name, min, max)


def optimize(
    model: torch.nn.Module,
    example_inputs: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor,
    name: str,
    dynamic: Mapping[str, Mapping[int, DimRange]] | None = None,
    workdir: Path | str = ".deploy-optimize",
    factory: str | None = None,
    kwargs: Mapping[str, object] | None = None,
) -> RunResult:
    """Exports, checks and serves `model` like `deploy run` on a starter config (export,
    simplify, validate, a python-backend Triton model, smoke on a real server). Inputs
    are named by `example_inputs`' keys (else `input0`, `input1`, ...); `dynamic` maps an
    input's axis to a dim name (min 1, max twice the example) or (name, min, max)."""
    from deploy.api import load

    work = Path(workdir).absolute() / name
    work.mkdir(parents=True, exist_ok=True)
    source = {"factory": factory or importable(model), **({"kwargs": dict(kwargs)} if kwargs else {})}
    source["checkpoint"] = str(_save_weights(model, work / f"{name}.safetensors"))
    examples = _named(example_inputs)
    specs = _specs(examples, dynamic or {})
    config = work / f"{name}.yaml"
    config.write_text(_config_text(model, name, source, specs, work))
    return load(config).run()


def importable(model: torch.nn.Module) -> str:
    """`module:Class` when the model's class can be imported again and built with no
    arguments; else a ConfigError saying how to make it so."""
    cls = type(model)
    where = f"{cls.__module__}:{cls.__qualname__}"
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        hint = "move the class into a module (e.g. models.py), import it from there and call optimize again"
        raise ConfigError("model", [Issue("model", f"{where} is defined in __main__ or a function: {hint}")])
    try:
        found = getattr(importlib.import_module(cls.__module__), cls.__qualname__)
        found()
    except Exception as exc:
        hint = "pass factory='module:function' (and kwargs=) that builds this model"
        raise ConfigError(
            "model", [Issue("model", f"cannot rebuild {where} from its class ({exc}): {hint}")]
        ) from None
    return where


def _save_weights(model: torch.nn.Module, path: Path) -> Path:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(path))
    return path


def _named(examples: Any) -> dict[str, Any]:
    import torch

    if isinstance(examples, torch.Tensor):
        return {"input0": examples}
    if isinstance(examples, Mapping):
        return dict(examples)
    return {f"input{i}": t for i, t in enumerate(examples)}


def _specs(
    examples: Mapping[str, Any], dynamic: Mapping[str, Mapping[int, DimRange]]
) -> list[dict[str, Any]]:
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


def _spec(
    input_name: str, dtype: str, shape: tuple[int, ...], axes: Mapping[int, DimRange]
) -> dict[str, Any]:
    dims: list[int | str] = list(shape)
    low, high = list(shape), list(shape)
    for axis, dim in axes.items():
        dim_name, lo, hi = (dim, 1, max(GROWTH * shape[axis], 2)) if isinstance(dim, str) else dim
        dims[axis], low[axis], high[axis] = dim_name, lo, hi
    spec: dict[str, Any] = {"name": input_name, "dtype": dtype, "dims": dims}
    spec |= {"min": low, "opt": list(shape), "max": high}
    if dtype.startswith(("int", "uint")):
        spec["value_range"] = [0, 1] if BINARY_NAMES.search(input_name) else [0, 99]
    return spec


def _config_text(
    model: torch.nn.Module,
    name: str,
    source: dict[str, Any],
    specs: list[dict[str, Any]],
    work: Path,
) -> str:
    from deploy.init import detection_inputs, starter
    from deploy.init_model import inspect
    from pipeline.config import InputSpec

    found = inspect(model.eval(), [InputSpec.model_validate(s) for s in specs])
    text = starter(name, source, detection_inputs(specs) if found.detections else specs, found)
    paths = (
        f"cache_dir: {work / 'cache'}\nrepository: {work / 'model_repository'}\nrun_dir: {work / 'runs'}\n"
    )
    return text.replace("\nstages:\n", f"\n{paths}\nstages:\n", 1)
