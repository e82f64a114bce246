"""The user's model behind the pipeline's calling convention: one tensor per declared
input in, one tensor per declared output out, in declared order.

Models return a tensor, a tuple / list, a dict, a nested structure, a Hugging Face
`ModelOutput`, or one dict per image of variable-length tensors (torchvision detection,
padded here to `model.detections.max_detections` rows beside a per-image count); they
take their inputs positionally, by keyword (`input_ids=`, `forward(**kwargs)`) or as a
list of images (`forward(images: list[Tensor])`), and may have further arguments with
defaults (`scale: float = 1.0`), which keep them or take `model.forward_kwargs`: never a
graph input. Trace, both ONNX exporters, the golden reference and bench's eager row all
call the model through one `IOAdapter`, so an output name means the same tensor
everywhere. Where the declared outputs cannot be found in what the model returns, the
error is a config error naming what was found; where they go missing later (another
batch size), deploy's own output matching says so, not "the model's forward raised".

Imported only from inside stage run functions: it imports torch at module level.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from deploy.domain.issues import Issue
from deploy.modelio import detections
from deploy.modelio.outputs import Path, _did_you_mean, _dotted, _take, describe, find_outputs
from deploy.pipeline.errors import ConfigError, StageFailed, first_line
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import Detections, InputsBy


class ForwardRaised(StageFailed):
    """The model's own forward raised on the inputs as declared (probe.diagnose says why)."""


def _user_line(exc: BaseException) -> str:
    """Where in the model's own code it raised: the last frame outside torch and deploy."""
    import os
    import traceback

    own = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(own)]
    return (
        f" (at {frames[-1].filename}:{frames[-1].lineno}: {(frames[-1].line or '').strip()})"
        if frames
        else ""
    )


class OutputMatchingFailed(StageFailed):
    """deploy could not find a declared output in what the model returned: the model ran."""


@dataclass(frozen=True)
class Binding:
    """How the declared inputs reach forward."""

    names: tuple[str, ...]
    keyword: bool
    listed: frozenset[str] = frozenset()  # passed as a list of per-sample tensors (list[Tensor])
    fixed: Mapping[str, Any] = field(default_factory=dict)  # model.forward_kwargs
    extras: tuple[str, ...] = ()  # forward's other arguments (their defaults or `fixed`)

    def call(self, model: torch.nn.Module, args: Sequence[torch.Tensor]) -> Any:
        values = [list(a.unbind(0)) if n in self.listed else a for n, a in zip(self.names, args)]
        if self.keyword:
            return model(**dict(zip(self.names, values)), **self.fixed)
        return model(*values, **self.fixed)


class IOAdapter(torch.nn.Module):
    """`forward(*tensors)` in declared input order -> a tuple in declared output order."""

    def __init__(
        self,
        model: torch.nn.Module,
        binding: Binding,
        picks: tuple[Path, ...],
        padding: Detections | None = None,
    ):
        super().__init__()
        self.model = model
        self.binding, self.picks, self.padding = binding, picks, padding
        self.plain = False  # set by adapt(): the model already speaks this convention

    @property
    def names(self) -> tuple[str, ...]:
        return self.binding.names

    def exportable(self) -> torch.nn.Module:
        """What an exporter should see: the model itself where it already takes the
        inputs by position and returns exactly the declared outputs in order, so its
        ONNX node names stay its own (`/fc/Gemm`, not `/model/fc/Gemm`), the names
        that `exclude` lists and earlier caches use; else this adapter (whose forward
        takes exactly the declared inputs: no default argument becomes a graph input)."""
        return self.model if self.plain else self

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        result = shaped(self.binding.call(self.model, args), self.padding)
        return tuple(self._take(result, path, args) for path in self.picks)

    def _take(self, result: Any, path: Path, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
        try:
            return _take(result, path)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            shapes = ", ".join(f"{n} {list(a.shape)}" for n, a in zip(self.names, args))
            raise OutputMatchingFailed(
                f"deploy's output matching (not the model): '{_dotted(path)}' is not in what the model returned for "
                f"{shapes}: {describe(result)}. It was there when the model was probed at the opt shape, so the "
                "result's structure changes with the input (one entry per image? set model.detections)"
            ) from exc


def shaped(result: Any, padding: Detections | None) -> Any:
    """The result as outputs are found in it: per-image detections padded and stacked."""
    return result if padding is None else detections.padded(result, padding)


def adapt(model: torch.nn.Module, config: DeployConfig, sample: Mapping[str, np.ndarray]) -> IOAdapter:
    """Binds the inputs, calls the model once on `sample` and finds each declared output
    in what it returns (ConfigError naming the keys / positions found where one is not)."""
    source = config.model
    result, binding = probe(
        model, tuple(config.input_names()), source.inputs_by, sample, source.forward_kwargs
    )
    result = shaped(result, source.detections)
    picks = tuple(find_outputs(result, config.outputs))
    adapter = IOAdapter(model, binding, picks, source.detections).eval()
    direct = not binding.keyword or _in_order(_signature(model), binding.names)
    # A decoder takes its past as *args: exported through the adapter, whose dynamic shapes fit that.
    untouched = not (binding.listed or binding.fixed or binding.extras or source.detections or source.decoder)
    adapter.plain = _natural(result, picks) and direct and untouched
    return adapter


def probe(
    model: torch.nn.Module,
    names: tuple[str, ...],
    inputs_by: InputsBy,
    sample: Mapping[str, np.ndarray],
    fixed: Mapping[str, Any] | None = None,
) -> tuple[Any, Binding]:
    """Calls the model once on `sample`, its inputs bound as the pipeline binds them:
    (what it returned, the binding)."""
    binding = bind(model, names, inputs_by, fixed or {})
    # Copies: a forward that writes into its input must not change the sample it is called again on.
    args = tuple(torch.from_numpy(np.require(sample[n], requirements="C")).clone() for n in names)
    try:
        with torch.no_grad():
            result = binding.call(model, args)
    except Exception as exc:
        said = f"{type(exc).__name__}: {first_line(exc)}{_user_line(exc)}"
        raise ForwardRaised(f"the model's forward raised: {said}") from exc
    except SystemExit as exc:  # in-process callers (init, validate --probe) would exit with its code
        raise ForwardRaised(f"the model's forward called sys.exit({exc.code!r}){_user_line(exc)}") from exc
    return result, binding


def bind(
    model: torch.nn.Module, names: tuple[str, ...], inputs_by: InputsBy, fixed: Mapping[str, Any]
) -> Binding:
    signature = _signature(model)
    keyword = _keyword(signature, names, inputs_by)
    if signature is None:
        return Binding(names, keyword, fixed=dict(fixed))
    bound = _check_binding(signature, names, keyword, fixed)
    params = signature.parameters
    listed = frozenset(
        n for n, p in _receivers(bound, names, keyword).items() if _takes_list(params[p].annotation)
    )
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    extras = tuple(
        p.name for p in params.values() if p.name not in bound.arguments and p.kind not in variadic
    )
    return Binding(names, keyword, listed, dict(fixed), extras)


def _receivers(bound: inspect.BoundArguments, names: tuple[str, ...], keyword: bool) -> dict[str, str]:
    """Declared input -> the forward parameter that receives it (bound with the names
    themselves as values)."""
    if keyword:
        return {n: n for n in names if n in bound.signature.parameters}
    return {
        value: param for param, value in bound.arguments.items() if isinstance(value, str) and value in names
    }


def _takes_list(annotation: Any) -> bool:
    """`images: list[Tensor]` (torchvision detection): the batch goes in as a list."""
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.replace("typing.", "").startswith(("list[", "List["))


def _in_order(signature: inspect.Signature | None, names: tuple[str, ...]) -> bool:
    """Whether passing `names` by keyword is the same call as passing them by position."""
    if signature is None:
        return False
    positional = [
        p.name
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return tuple(positional[: len(names)]) == names


def _natural(result: Any, picks: tuple[Path, ...]) -> bool:
    """A tensor, or a flat tuple / list of exactly the picked tensors, in order."""
    if isinstance(result, torch.Tensor):
        return picks == ((),)
    flat = isinstance(result, tuple | list) and all(isinstance(r, torch.Tensor) for r in result)
    return flat and picks == tuple((i,) for i in range(len(result)))


def _keyword(signature: inspect.Signature | None, names: tuple[str, ...], inputs_by: InputsBy) -> bool:
    """Inputs bind by name wherever names can be read; position only where it cannot be
    wrong (one input, `forward(*args)`) or where the config says so (model.inputs_by)."""
    params = list(signature.parameters.values()) if signature is not None else []
    named = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if inputs_by is InputsBy.POSITION:
        _refuse_reordered(names, named)
        return False
    if inputs_by is InputsBy.KEYWORD:
        return True
    # `forward(**inputs)` and nothing else can only be called by keyword.
    if params and all(p.kind is p.VAR_KEYWORD for p in params):
        return True
    if signature is None:  # a TorchScript method: no names to read
        return False
    if set(names) <= set(named):
        return bool(names)
    if len(names) == 1 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    raise ConfigError("model.inputs", [_binding_issue(names, named)])


def _binding_issue(names: tuple[str, ...], named: list[str]) -> Issue:
    """Some declared names are forward's parameters and some are not: a typo (did you mean);
    none are: the config must say how they bind."""
    known = [n for n in names if n in named]
    if not known:
        return Issue(
            "model.inputs_by",
            f"none of the declared inputs {list(names)} is a parameter of forward({', '.join(named)}): "
            "say how they bind: name the inputs after forward's parameters, or set model.inputs_by: position "
            "(in declared order)",
        )
    stray = [n for n in names if n not in named]
    hints = "; ".join(f"'{n}'{_did_you_mean(n, [p for p in named if p not in names])}" for n in stray)
    return Issue(
        "model.inputs",
        f"{hints} {'is' if len(stray) == 1 else 'are'} not a parameter of forward({', '.join(named)}), "
        f"while {known} {'is' if len(known) == 1 else 'are'}: inputs bind by name",
    )


def _refuse_reordered(names: tuple[str, ...], named: list[str]) -> None:
    """inputs_by: position with forward's own names in another order feeds each to another."""
    if len(names) > 1 and set(names) <= set(named) and tuple(named[: len(names)]) != names:
        raise ConfigError(
            "model.inputs",
            [
                Issue(
                    "model.inputs_by",
                    f"model.inputs_by is position, but the declared inputs {list(names)} are forward's parameters "
                    f"in another order ({', '.join(named)}): each would feed another; bind them by name "
                    "(model.inputs_by: auto) or declare them in forward's order",
                )
            ],
        )


def positional_names(model: torch.nn.Module, count: int) -> list[str] | None:
    """The names forward gives its first `count` positional parameters: what a list of
    example tensors is called by (None where forward has fewer, or no signature to read)."""
    signature = _signature(model)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in signature.parameters.values() if p.kind in kinds] if signature else []
    return names[:count] if len(names) >= count else None


def _signature(model: torch.nn.Module) -> inspect.Signature | None:
    try:
        return inspect.signature(model.forward)
    except (TypeError, ValueError):  # a TorchScript method has none to read
        return None


def _check_binding(
    signature: inspect.Signature, names: tuple[str, ...], keyword: bool, fixed: Mapping[str, Any]
) -> inspect.BoundArguments:
    try:
        if keyword:
            return signature.bind(**dict.fromkeys(names), **fixed)
        return signature.bind(*names, **fixed)
    except TypeError as exc:
        how = "by keyword" if keyword else "by position"
        given = f" with model.forward_kwargs {sorted(fixed)}" if fixed else ""
        raise ConfigError(
            "model.inputs_by",
            [
                Issue(
                    "model.forward_kwargs" if fixed and _names_fixed(exc, fixed) else "model.inputs_by",
                    f"the declared inputs {list(names)} cannot be passed {how}{given} to forward{signature}: {exc} "
                    f"({_binding_hint(signature, names, keyword)})",
                )
            ],
        ) from None


def _binding_hint(signature: inspect.Signature, names: tuple[str, ...], keyword: bool) -> str:
    params = [p for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(params) == 1 and len(names) > 1:  # forward(batch): the inputs in one dict or tuple
        return (
            f"forward takes one argument for {len(names)} declared inputs: a model that takes them in one dict or "
            f"tuple needs a wrapper, a factory returning a module whose forward({', '.join(names)}) calls it with them"
        )
    other = "position" if keyword else "keyword"
    return (
        f"set model.inputs_by to {other}, rename the inputs after forward's parameters, or give "
        "forward's other required arguments in model.forward_kwargs"
    )


def _names_fixed(exc: TypeError, fixed: Mapping[str, Any]) -> bool:
    return any(f"'{name}'" in str(exc) for name in fixed)
