"""The probe: the model built and called once at the min shape, so the mistakes users make
in a config (inputs bound to the wrong parameters, channels-last dims, an integer dtype
for a CNN, a misspelt output name) are config errors naming the key, in seconds, before
any stage does its full work. `deploy validate --probe` runs it alone; golden runs it
before it computes a single reference.

Where the forward raises, the probe calls it once more with a pre-hook on every module to
find the module that raised and what reached it: a dtype or a channel count that does not
fit that module's weights names the input's `dtype` or `dims`, with the fix.

Imported only from inside stage run functions and `validate --probe`: it imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from deploy.domain.issues import Issue
from deploy.modelio.adapter import ForwardRaised, IOAdapter, adapt
from deploy.pipeline.errors import ConfigError
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import InputSpec

Specs = Sequence[InputSpec]
CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def probe(config: DeployConfig, sample: Mapping[str, np.ndarray]) -> IOAdapter:
    """Builds the model and binds / calls / matches it on `sample` (the golden inputs at
    the min shape: `references.probe_sample`)."""
    from deploy.modelio.loading import load_model

    return checked(load_model(config.model), config, sample)


def checked(model: torch.nn.Module, config: DeployConfig, sample: Mapping[str, np.ndarray]) -> IOAdapter:
    """`adapt`, with a forward that raises explained in the config's words where it can be."""
    try:
        return adapt(model, config, sample)
    except ForwardRaised as exc:
        issue = diagnose(model, config, sample)
        if issue is None:
            raise
        raise ConfigError("inputs", [issue]) from exc


@dataclass(frozen=True)
class Entered:
    """The last leaf module entered before the forward raised, and its first tensor input."""

    name: str
    module: torch.nn.Module
    tensor: torch.Tensor


def diagnose(model: torch.nn.Module, config: DeployConfig, sample: Mapping[str, np.ndarray]) -> Issue | None:
    return explain(model, config.inputs, sample, lambda: adapt(model, config, sample))


def explain(
    model: torch.nn.Module, specs: Specs, sample: Mapping[str, np.ndarray], call: Callable[[], object]
) -> Issue | None:
    """Why `call` (the model on `sample`, as declared by `specs`) raised, where the module
    that raised says: an input's dtype, channels or features that do not fit it."""
    entered = _last_entered(model, call)
    if entered is None:
        return None
    spec_index = _fed(specs, entered.tensor, sample)
    if spec_index is None:
        return None
    fed = tuple(sample[specs[spec_index].name].shape) == tuple(entered.tensor.shape)
    return (
        _dtype_issue(entered, specs, spec_index)
        or _channel_issue(entered, specs, spec_index)
        or (_features_issue(entered, specs, spec_index) if fed else None)
    )


def _last_entered(model: torch.nn.Module, call: Callable[[], object]) -> Entered | None:
    seen: list[Entered] = []

    def hook(name: str):  # type: ignore[no-untyped-def]
        def record(module: torch.nn.Module, args: tuple[object, ...]) -> None:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if first is not None and not list(module.children()):
                seen.append(Entered(name, module, first))

        return record

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in model.named_modules()]
    try:
        call()
    except Exception:  # the same failure again, now with the module it came from
        return seen[-1] if seen else None
    finally:
        for h in handles:
            h.remove()
    return None


def _fed(specs: Specs, tensor: torch.Tensor, sample: Mapping[str, np.ndarray]) -> int | None:
    """The declared input that reached the failing module unchanged in shape (the first
    layer), else the only input there is."""
    matches = [i for i, s in enumerate(specs) if tuple(sample[s.name].shape) == tuple(tensor.shape)]
    if len(matches) == 1:
        return matches[0]
    return 0 if len(specs) == 1 else None


def _dtype_issue(entered: Entered, specs: Specs, index: int) -> Issue | None:
    weight = getattr(entered.module, "weight", None)
    if isinstance(entered.module, torch.nn.Embedding | torch.nn.EmbeddingBag):
        return _indices_issue(entered, specs, index)
    if not isinstance(weight, torch.Tensor):
        return None
    if entered.tensor.is_floating_point() or not weight.is_floating_point():
        return None
    want = str(weight.dtype).removeprefix("torch.")
    return Issue(
        f"inputs[{index}].dtype",
        f"'{specs[index].name}' is declared {specs[index].dtype}, but the model's first layer "
        f"'{entered.name}' ({type(entered.module).__name__}) computes in {want}: declare dtype: {want}",
    )


def _indices_issue(entered: Entered, specs: Specs, index: int) -> Issue | None:
    """An embedding looks rows up by integer index: token ids declared float."""
    if not entered.tensor.is_floating_point():
        return None
    return Issue(
        f"inputs[{index}].dtype",
        f"'{specs[index].name}' is declared {specs[index].dtype}, but the model's first layer "
        f"'{entered.name}' ({type(entered.module).__name__}) looks rows up by integer index: declare dtype: int64",
    )


def _channel_issue(entered: Entered, specs: Specs, index: int) -> Issue | None:
    module, shape = entered.module, list(entered.tensor.shape)
    if not isinstance(module, CONVOLUTIONS) or len(shape) < 3 or shape[1] == module.in_channels:
        return None
    spec, channels = specs[index], module.in_channels
    where = f"the model's first layer '{entered.name}' ({type(module).__name__}) takes {channels} channels in dim 1"
    # The layer's dim 1 in the declared dims: 0 where forward added a batch dim (unsqueeze(0)).
    axis = 1 - (len(shape) - len(spec.dims))
    if axis not in (0, 1):
        return Issue(f"inputs[{index}].dims", f"'{spec.name}' is declared {list(spec.dims)}, but {where}")
    if shape[-1] == channels:
        moved = _channels_first(list(spec.dims), axis)
        return Issue(
            f"inputs[{index}].dims",
            f"'{spec.name}' is declared {list(spec.dims)} (channels last, {shape[-1]} at the end), but {where}: "
            f"declare dims {moved}, min {_channels_first(list(spec.min), axis)} (and opt / max alike: channels first)",
        )
    return Issue(
        f"inputs[{index}].dims", f"'{spec.name}' has {shape[1]} in dim {axis} {list(spec.dims)}, but {where}"
    )


def _features_issue(entered: Entered, specs: Specs, index: int) -> Issue | None:
    """A Linear fed the declared input as it is: its last dim must be the layer's in_features."""
    module, shape = entered.module, list(entered.tensor.shape)
    if not isinstance(module, torch.nn.Linear) or not shape or shape[-1] == module.in_features:
        return None
    spec = specs[index]
    return Issue(
        f"inputs[{index}].dims",
        f"'{spec.name}' has {shape[-1]} in its last dim {list(spec.dims)}, but the model's first layer "
        f"'{entered.name}' (Linear) takes {module.in_features} features there",
    )


def _channels_first(dims: list[object], axis: int) -> list[object]:
    """The last dim moved to `axis` (1 after a batch dim, 0 without one)."""
    return [*dims[:axis], dims[-1], *dims[axis:-1]]
