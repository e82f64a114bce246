"""Finding the declared outputs in what a model returns: a tensor, tuples and lists,
dicts, NamedTuples, Hugging Face ModelOutputs and transformers' caches, each leaf named
by its dotted path.

Imported only from inside stage run functions: it imports torch at module level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from deploy.domain.issues import Issue
from deploy.modelio import detections
from deploy.pipeline.errors import ConfigError
from deploy.spec.tensors import OutputSpec

Step = str | int


Path = tuple[Step, ...]


def returned_tensors(result: Any) -> list[tuple[str, tuple[int, ...], str]]:
    """Each tensor the model returned: its dotted path ('' for a lone tensor), shape and
    dtype, in the order the pipeline would number them."""
    found = []
    for path in _leaves(result, ()):
        tensor = _take(result, path)
        found.append((_dotted(path), tuple(tensor.shape), str(tensor.dtype).removeprefix("torch.")))
    return found


def flat(result: Any) -> dict[str, torch.Tensor]:
    """Every tensor the model returned by dotted path ('' for a lone tensor), in order."""
    return {_dotted(path): _take(result, path) for path in _leaves(result, ())}


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


# -- finding the declared outputs in what the model returns ------------------------------
def find_outputs(result: Any, specs: Sequence[OutputSpec]) -> list[Path]:
    """One path into `result` per declared output: its `path`, else its name for a
    mapping result, else its position among the returned tensors."""
    leaves = list(_leaves(result, ()))
    by_name = bool(_names(result))
    issues, paths = [], []
    for index, spec in enumerate(specs):
        path, problem = _locate(result, spec, index, leaves, by_name)
        if problem:
            issues.append(Issue(f"outputs[{index}]", f"'{spec.name}': {problem}; {describe(result)}"))
        paths.append(path)
    if not issues and not by_name and not any(s.path for s in specs) and len(specs) != len(leaves):
        issues.append(Issue("outputs", f"the config declares {len(specs)} output(s); {describe(result)}"))
    if issues:
        raise ConfigError("outputs", issues + detections.hint(result))
    return paths


def _locate(
    result: Any, spec: OutputSpec, index: int, leaves: list[Path], by_name: bool
) -> tuple[Path, str | None]:
    if spec.path is not None:
        return _follow(result, spec.path)
    if by_name:
        if spec.name not in _names(result):
            hint = _did_you_mean(spec.name, _names(result))
            return (
                (),
                f"no key '{spec.name}'{hint} in the model's {type(result).__name__} (set outputs[{index}].path)",
            )
        return _follow(result, spec.name)
    if index >= len(leaves):
        return (), f"there is no tensor at position {index}"
    return leaves[index], None


def _names(result: Any) -> list[str]:
    """What outputs are found by in a result: a dict's keys, a NamedTuple's fields."""
    if isinstance(result, Mapping):
        return [str(k) for k in result]
    if _is_dataclass(result):
        return _fields(result)
    return list(result._fields) if isinstance(result, tuple) and hasattr(result, "_fields") else []


def _is_dataclass(node: Any) -> bool:
    import dataclasses

    return dataclasses.is_dataclass(node) and not isinstance(node, type)


def _fields(node: Any) -> list[str]:
    import dataclasses

    return [f.name for f in dataclasses.fields(node)]


def _follow(result: Any, dotted: str) -> tuple[Path, str | None]:
    """'hidden_states.3' -> ('hidden_states', 3), checked against the probed result. A
    dict key that holds dots itself ('head.logits') is one step: the longest key the path
    starts with is taken whole."""
    path: list[Step] = []
    node, rest = result, dotted
    while rest:
        part, rest = _next_step(node, rest)
        step: Step = int(part) if part.isdigit() and not isinstance(node, Mapping) else part
        try:
            node = _step(node, step)
        except (KeyError, IndexError, TypeError, AttributeError):
            return (), f"path '{dotted}' has no '{part}'{_fields_hint(node)}"
        path.append(step)
    if not isinstance(node, torch.Tensor):
        return (), f"path '{dotted}' leads to a {type(node).__name__}, not a tensor"
    return tuple(path), None


def _next_step(node: Any, dotted: str) -> tuple[str, str]:
    """The first step of `dotted` and the rest: a mapping's longest key it starts with, else
    up to the first dot."""
    if isinstance(node, Mapping):
        keys = [k for k in node if isinstance(k, str) and (dotted == k or dotted.startswith(f"{k}."))]
        if keys:
            key = max(keys, key=len)
            return key, dotted[len(key) + 1 :]
    part, _, rest = dotted.partition(".")
    return part, rest


def _leaves(result: Any, prefix: Path) -> list[Path]:
    if isinstance(result, torch.Tensor):
        return [prefix]
    if isinstance(result, Mapping):
        return [p for k, v in result.items() for p in _leaves(v, (*prefix, k))]
    if isinstance(result, tuple) and hasattr(result, "_fields"):  # a NamedTuple: its fields by name
        return [p for k, v in zip(result._fields, result) for p in _leaves(v, (*prefix, k))]
    if isinstance(result, (list, tuple)):
        return [p for i, v in enumerate(result) for p in _leaves(v, (*prefix, i))]
    if _is_cache(result):  # transformers' Cache: layers[i].keys / .values
        return [(*prefix, "layers", i, part) for i, layer in enumerate(result.layers) for part in _kv(layer)]
    if _is_dataclass(result):  # its fields by name, as a NamedTuple's
        return [p for k in _fields(result) for p in _leaves(getattr(result, k), (*prefix, k))]
    return []  # None (an unset ModelOutput field), ints, strings: not outputs


def not_tensors(result: Any, prefix: Path = ()) -> list[str]:
    """What the model returned that is neither a tensor nor None (a float, a string, a numpy
    array): no output can carry it, so it is left out, and `deploy init` says so."""
    if result is None or isinstance(result, torch.Tensor) or _is_cache(result):
        return []
    if isinstance(result, Mapping):
        return [p for k, v in result.items() for p in not_tensors(v, (*prefix, k))]
    if isinstance(result, tuple) and hasattr(result, "_fields"):
        return [p for k, v in zip(result._fields, result) for p in not_tensors(v, (*prefix, k))]
    if isinstance(result, (list, tuple)):
        return [p for i, v in enumerate(result) for p in not_tensors(v, (*prefix, i))]
    if _is_dataclass(result):
        return [p for k in _fields(result) for p in not_tensors(getattr(result, k), (*prefix, k))]
    return [f"{_dotted(prefix) or 'the result'} ({type(result).__name__})"]


def _is_cache(node: Any) -> bool:
    """A transformers Cache (DynamicCache and its kin): a list of layers with keys / values."""
    layers = getattr(node, "layers", None)
    return isinstance(layers, list) and all(hasattr(layer, "keys") for layer in layers)


def _kv(layer: Any) -> list[str]:
    return [part for part in ("keys", "values") if isinstance(getattr(layer, part, None), torch.Tensor)]


def _step(node: Any, step: Step) -> Any:
    """One step into a result: a key, a position, or a field / attribute (a NamedTuple's,
    a cache's `layers`, a layer's `keys`)."""
    if isinstance(step, str) and not isinstance(node, Mapping):
        return getattr(node, step)
    return node[step]


def _fields_hint(node: Any) -> str:
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return f" (its fields: {', '.join(node._fields)})"
    if _is_cache(node):
        return f" (a {type(node).__name__}: layers.N.keys / layers.N.values, N < {len(node.layers)})"
    return ""


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
        result = _step(result, step)
    return result
