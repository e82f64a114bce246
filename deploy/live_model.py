"""`deploy.optimize(model, example_inputs)`: a pipeline for an nn.Module in memory.

What a later `deploy run` (a CI job) needs to repeat the run is written into the work
dir: the weights (`<name>.safetensors`) and the YAML. Its `model:` is the `factory=`
given; else the model's class when it builds with no arguments; else the live module
itself, pickled (`<name>.module.pt`, loaded by a small generated `<name>_module.py` that
names the pickle's digest, so the cache keys on it). Stages run in other processes: a
class they can't import (defined in `__main__` or a notebook cell) is refused with what
to do instead. Without `dynamic=`, dim 0 of every input is the batch, 1 to 8 (or twice
the example's); a model that can't take another batch is served at the example's."""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.init import BINARY_NAMES
from deploy.pipeline.errors import ConfigError, Issue, StageFailed

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
    are named by `example_inputs`' keys (else `input0`, `input1`, ...); `dynamic` maps an
    input's axis to a dim name (min 1, max twice the example) or (name, min, max);
    without it, axis 0 of every input is the batch. `name`: the class's, snake_case."""
    from deploy.api import load

    name = name or default_name(model)
    work = Path(workdir).absolute() / name
    work.mkdir(parents=True, exist_ok=True)
    source = _source(model, work, name, factory, kwargs)
    examples = _named(example_inputs)
    config = work / f"{name}.yaml"
    config.write_text(_config_for(model, name, source, examples, dynamic, work))
    return load(config).run()


def default_name(model: torch.nn.Module) -> str:
    """`ShuffleNetV2` -> `shuffle_net_v2`: a config name (letters, digits, `_`)."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(model).__name__).lower()
    return re.sub(r"[^a-z0-9_]+", "_", words).strip("_")[:48] or "model"


def _config_for(
    model: torch.nn.Module,
    name: str,
    source: dict[str, Any],
    examples: Mapping[str, Any],
    dynamic: Mapping[str, Mapping[int, DimRange]] | None,
    work: Path,
) -> str:
    if dynamic is not None:
        return _config_text(model, name, source, _specs(examples, dynamic), work)
    try:
        return _config_text(model, name, source, _specs(examples, _batch_axes(examples)), work)
    except (ConfigError, StageFailed) as exc:  # it can't take another batch: served at the example's shapes
        log.warning("%s: served at the example's shapes, without a batch dim: %s", name, exc)
        return _config_text(model, name, source, _specs(examples, {}), work)


def _batch_axes(examples: Mapping[str, Any]) -> dict[str, dict[int, DimRange]]:
    return {
        n: {0: ("batch", 1, max(DEFAULT_MAX_BATCH, GROWTH * int(t.shape[0])))}
        for n, t in examples.items()
        if t.dim() >= 1
    }


def _source(
    model: torch.nn.Module, work: Path, name: str, factory: str | None, kwargs: Mapping[str, object] | None
) -> dict[str, Any]:
    weights = {"checkpoint": str(_save_weights(model, work / f"{name}.safetensors"))}
    if factory is not None:
        return {"factory": factory, **({"kwargs": dict(kwargs)} if kwargs else {}), **weights}
    rebuilt = rebuildable(model)
    if rebuilt is not None:
        return {"factory": rebuilt, **weights}
    return {"file": str(_pickled(model, work, name)), "callable": "build", **weights}


def importable(model: torch.nn.Module) -> str:
    """`module:Class` of the model; a ConfigError when another process can't import it
    (defined in `__main__`, a notebook cell or a function)."""
    cls = type(model)
    where = f"{cls.__module__}:{cls.__qualname__}"
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        hint = (
            "the stages run in their own processes, which can't import it: move the class into a module "
            "(e.g. models.py) and import it from there, or pass factory='module:function' that builds it"
        )
        raise ConfigError("model", [Issue("model", f"{where} is defined in __main__ or a function; {hint}")])
    return where


def rebuildable(model: torch.nn.Module) -> str | None:
    """`module:Class` when the class builds with no arguments (torchvision's resnet50
    class does not, its `resnet50` function does: that one is pickled instead)."""
    where = importable(model)
    module, _, qualname = where.partition(":")
    try:
        getattr(importlib.import_module(module), qualname)()
    except Exception:
        return None
    return where


# The generated module that rebuilds a pickled model: the digest makes the cache key follow the pickle.
PICKLED_SOURCE = """\"\"\"Written by deploy.optimize: rebuilds {cls} from {pickle} (sha256 {digest}).\"\"\"

from pathlib import Path

import torch


def build():
    return torch.load(Path(__file__).with_name("{pickle}"), weights_only=False)
"""


def _pickled(model: torch.nn.Module, work: Path, name: str) -> Path:
    import torch

    from deploy.pipeline.hashing import digest_file

    cls = importable(model)
    pickle = work / f"{name}.module.pt"
    try:
        torch.save(model, pickle)
    except Exception as exc:
        hint = "pass factory='module:function' that builds it"
        raise ConfigError("model", [Issue("model", f"cannot pickle {cls} ({exc}); {hint}")]) from None
    source = work / f"{name}_module.py"
    source.write_text(PICKLED_SOURCE.format(cls=cls, pickle=pickle.name, digest=digest_file(pickle)))
    return source


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
    from deploy.pipeline.config import InputSpec

    found = inspect(model.eval(), [InputSpec.model_validate(s) for s in specs])
    text = starter(name, source, detection_inputs(specs) if found.detections else specs, found)
    paths = (
        f"cache_dir: {work / 'cache'}\nrepository: {work / 'model_repository'}\nrun_dir: {work / 'runs'}\n"
    )
    return text.replace("\nstages:\n", f"\n{paths}\nstages:\n", 1)
