"""Building the model from its declared source, and running torch modules on numpy.

Imported only from inside stage run functions: it imports torch at module level.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.config import DeployConfig, ModelSource
from pipeline.errors import StageFailed, first_line


def load_model(source: ModelSource) -> torch.nn.Module:
    torch.manual_seed(source.seed)  # random init is reproducible from the config
    if source.torchscript is not None:
        return torch.jit.load(str(source.torchscript), map_location="cpu").eval()
    factory = _factory(source)
    try:
        model = factory(**source.kwargs)
    except Exception as exc:
        raise StageFailed(f"calling the model factory failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise StageFailed(f"the model factory returned {type(model).__name__}, not a torch.nn.Module")
    if source.checkpoint is not None:
        _load_checkpoint(model, source.checkpoint)
    return model.eval()


def _factory(source: ModelSource) -> Any:
    if source.file is not None:
        module = _module_from_file(source.file)
        name = str(source.callable)
    else:
        module_name, _, name = str(source.factory).partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise StageFailed(f"model.factory: cannot import '{module_name}': {exc}") from exc
    if not hasattr(module, name):
        where = f"model.callable: {source.file}" if source.file is not None else f"model.factory: '{module.__name__}'"
        raise StageFailed(f"{where} has no attribute '{name}'")
    return getattr(module, name)


def _module_from_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"deploy_user_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise StageFailed(f"model.file: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # let the file import its siblings
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise StageFailed(f"model.file: {path}, line {exc.lineno}: {exc.msg}") from exc
    except Exception as exc:  # noqa: BLE001 - any error while importing the user's file
        raise StageFailed(f"model.file: importing {path} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(path.parent))
    return module


def _load_checkpoint(model: torch.nn.Module, path: Path) -> None:
    state = _read_state(path)
    if isinstance(state, dict) and set(state) == {"state_dict"}:
        state = state["state_dict"]
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise StageFailed(f"model.checkpoint {path.name} does not fit the model: {exc}") from exc


def _read_state(path: Path) -> Any:
    import pickle

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, SafetensorError, RuntimeError, EOFError, OSError, ValueError) as exc:
        raise StageFailed(f"model.checkpoint: cannot read {path} as a state_dict: {first_line(exc)}") from exc


def example_args(config: DeployConfig, inputs: dict[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(np.ascontiguousarray(inputs[spec.name])) for spec in config.inputs)


def run_module(module: Any, config: DeployConfig, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        with torch.no_grad():
            result = module(*example_args(config, inputs))
    except Exception as exc:  # noqa: BLE001 - the user's forward: its error is the message
        raise StageFailed(f"the model's forward raised: {type(exc).__name__}: {first_line(exc)}") from exc
    flat = _flatten(result)
    names = [spec.name for spec in config.outputs]
    if len(flat) != len(names):
        raise StageFailed(f"the model returns {len(flat)} output(s) but the config declares {len(names)}: {names}")
    return {name: t.detach().cpu().numpy() for name, t in zip(names, flat)}


def _flatten(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, dict):
        return [t for v in result.values() for t in _flatten(v)]
    if isinstance(result, (list, tuple)):
        return [t for v in result for t in _flatten(v)]
    raise StageFailed(f"the model returned a {type(result).__name__}; outputs must be tensors")
