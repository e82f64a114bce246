"""The user's model behind the pipeline's calling convention: one tensor per declared
input in, one tensor per declared output out, in declared order.

Models return a tensor, a tuple / list, a dict, a nested structure or a Hugging Face
`ModelOutput`, and take their inputs positionally or by keyword (`input_ids=`,
`forward(**kwargs)`). Trace, both ONNX exporters, the golden reference and bench's eager
row all call the model through one `IOAdapter`, so an output name means the same tensor
everywhere. Where the declared outputs cannot be found in what the model returns, the
error is a config error naming what was found.

Imported only from inside stage run functions: it imports torch at module level.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from pipeline.config import DeployConfig, InputsBy, OutputSpec
from pipeline.errors import ConfigError, Issue, StageFailed, first_line

Step = str | int
Path = tuple[Step, ...]


class IOAdapter(torch.nn.Module):
    """`forward(*tensors)` in declared input order -> a tuple in declared output order."""

    def __init__(
        self, model: torch.nn.Module, names: tuple[str, ...], keyword: bool, picks: tuple[Path, ...]
    ):
        super().__init__()
        self.model = model
        self.names, self.keyword, self.picks = names, keyword, picks
        self.plain = False  # set by adapt(): the model already speaks this convention

    def exportable(self) -> torch.nn.Module:
        """What an exporter should see: the model itself where it already takes the
        inputs by position and returns exactly the declared outputs in order, so its
        ONNX node names stay its own (`/fc/Gemm`, not `/model/fc/Gemm`), the names
        that `exclude` lists and earlier caches use; else this adapter."""
        return self.model if self.plain else self

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.keyword:
            result = self.model(**dict(zip(self.names, args)))
        else:
            result = self.model(*args)
        return tuple(_take(result, path) for path in self.picks)


def adapt(model: torch.nn.Module, config: DeployConfig, sample: Mapping[str, np.ndarray]) -> IOAdapter:
    """Binds the inputs, calls the model once on `sample` and finds each declared output
    in what it returns (ConfigError naming the keys / positions found where one is not)."""
    names = tuple(config.input_names())
    result, keyword = probe(model, names, config.model.inputs_by, sample)
    picks = tuple(find_outputs(result, config.outputs))
    adapter = IOAdapter(model, names, keyword, picks).eval()
    adapter.plain = _natural(result, picks) and (not keyword or _in_order(_signature(model), names))
    return adapter


def probe(
    model: torch.nn.Module, names: tuple[str, ...], inputs_by: InputsBy, sample: Mapping[str, np.ndarray]
) -> tuple[Any, bool]:
    """Calls the model once on `sample`, its inputs bound as the pipeline binds them:
    (what it returned, whether by keyword)."""
    keyword = _keyword(model, names, inputs_by)
    args = tuple(torch.from_numpy(np.ascontiguousarray(sample[n])) for n in names)
    try:
        with torch.no_grad():
            result = model(**dict(zip(names, args))) if keyword else model(*args)
    except Exception as exc:
        raise StageFailed(f"the model's forward raised: {type(exc).__name__}: {first_line(exc)}") from exc
    return result, keyword


def returned_tensors(result: Any) -> list[tuple[str, tuple[int, ...], str]]:
    """Each tensor the model returned: its dotted path ('' for a lone tensor), shape and
    dtype, in the order the pipeline would number them."""
    found = []
    for path in _leaves(result, ()):
        tensor = _take(result, path)
        found.append((_dotted(path), tuple(tensor.shape), str(tensor.dtype).removeprefix("torch.")))
    return found


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


def _keyword(model: torch.nn.Module, names: tuple[str, ...], inputs_by: InputsBy) -> bool:
    signature = _signature(model)
    if inputs_by is InputsBy.AUTO:
        params = list(signature.parameters.values()) if signature is not None else []
        named = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        # `forward(**inputs)` and nothing else can only be called by keyword.
        only_kwargs = bool(params) and all(p.kind is p.VAR_KEYWORD for p in params)
        keyword = bool(names) and (set(names) <= named or only_kwargs)
    else:
        keyword = inputs_by is InputsBy.KEYWORD
    if signature is not None:
        _check_binding(signature, names, keyword)
    return keyword


def _signature(model: torch.nn.Module) -> inspect.Signature | None:
    try:
        return inspect.signature(model.forward)
    except (TypeError, ValueError):  # a TorchScript method has none to read
        return None


def _check_binding(signature: inspect.Signature, names: tuple[str, ...], keyword: bool) -> None:
    try:
        if keyword:
            signature.bind(**dict.fromkeys(names))
        else:
            signature.bind(*names)
    except TypeError as exc:
        how = "by keyword" if keyword else "by position"
        raise ConfigError(
            "model.inputs_by",
            [
                Issue(
                    "model.inputs_by",
                    f"the declared inputs {list(names)} cannot be passed {how} to forward{signature}: {exc} "
                    "(set model.inputs_by to positional or keyword, or rename the inputs after forward's parameters)",
                )
            ],
        ) from None


# -- finding the declared outputs in what the model returns ------------------------------
def find_outputs(result: Any, specs: Sequence[OutputSpec]) -> list[Path]:
    """One path into `result` per declared output: its `path`, else its name for a
    mapping result, else its position among the returned tensors."""
    leaves = list(_leaves(result, ()))
    by_name = isinstance(result, Mapping)
    issues, paths = [], []
    for index, spec in enumerate(specs):
        path, problem = _locate(result, spec, index, leaves, by_name)
        if problem:
            issues.append(Issue(f"outputs[{index}]", f"'{spec.name}': {problem}; {describe(result)}"))
        paths.append(path)
    if not issues and not by_name and not any(s.path for s in specs) and len(specs) != len(leaves):
        issues.append(Issue("outputs", f"the config declares {len(specs)} output(s); {describe(result)}"))
    if issues:
        raise ConfigError("outputs", issues)
    return paths


def _locate(
    result: Any, spec: OutputSpec, index: int, leaves: list[Path], by_name: bool
) -> tuple[Path, str | None]:
    if spec.path is not None:
        return _follow(result, spec.path)
    if by_name:
        if spec.name not in result:
            return (
                (),
                f"no key '{spec.name}' in the model's {type(result).__name__} (set outputs[{index}].path)",
            )
        return _follow(result, spec.name)
    if index >= len(leaves):
        return (), f"there is no tensor at position {index}"
    return leaves[index], None


def _follow(result: Any, dotted: str) -> tuple[Path, str | None]:
    """'hidden_states.3' -> ('hidden_states', 3), checked against the probed result."""
    path: list[Step] = []
    node = result
    for part in dotted.split("."):
        step: Step = int(part) if part.isdigit() and not isinstance(node, Mapping) else part
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return (), f"path '{dotted}' has no '{part}'"
        path.append(step)
    if not isinstance(node, torch.Tensor):
        return (), f"path '{dotted}' leads to a {type(node).__name__}, not a tensor"
    return tuple(path), None


def _leaves(result: Any, prefix: Path) -> list[Path]:
    if isinstance(result, torch.Tensor):
        return [prefix]
    if isinstance(result, Mapping):
        return [p for k, v in result.items() for p in _leaves(v, (*prefix, k))]
    if isinstance(result, (list, tuple)):
        return [p for i, v in enumerate(result) for p in _leaves(v, (*prefix, i))]
    return []  # None (an unset ModelOutput field), ints, strings: not outputs


def describe(result: Any) -> str:
    """What the model returned, as a config author needs it: keys / positions and shapes."""
    leaves = _leaves(result, ())
    kind = type(result).__name__
    if not leaves:
        return f"the model returns a {kind} with no tensors"
    shown = ", ".join(f"{_dotted(p) or '(the tensor)'} {list(_take(result, p).shape)}" for p in leaves[:12])
    more = f" and {len(leaves) - 12} more" if len(leaves) > 12 else ""
    return f"the model returns a {kind} with {len(leaves)} tensor(s): {shown}{more}"


def _dotted(path: Path) -> str:
    return ".".join(str(step) for step in path)


def _take(result: Any, path: Path) -> Any:
    for step in path:
        result = result[step]
    return result
