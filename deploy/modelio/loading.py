"""Building the model from its declared source (factory, file + callable, TorchScript),
with its checkpoint. Running it is runtimes.torchrt's job.

Imported only from inside stage run functions: it imports torch at module level.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from deploy.domain.issues import Issue
from deploy.modelio.installed import missing as _missing
from deploy.pipeline.errors import ConfigError, EnvError, StageFailed, first_line
from deploy.spec.config import DeployConfig, ModelSource

if TYPE_CHECKING:
    from deploy.modelio.adapter import IOAdapter


def load_model(source: ModelSource) -> torch.nn.Module:
    torch.manual_seed(source.seed)  # random init is reproducible from the config
    if source.torchscript is not None:
        return _load_torchscript(source.torchscript)
    factory = _factory(source)
    try:
        model = factory(**source.kwargs)
    except ModuleNotFoundError as exc:  # e.g. a weights package the factory imports when called
        raise _missing("the model factory, when called,", exc) from exc
    except ImportError as exc:  # the factory's own words on what to install
        raise EnvError(f"calling the model factory: {exc}") from exc
    except FileNotFoundError as exc:  # weights or a vocabulary the factory reads: the config's to fix
        raise ConfigError(
            _where(source), [Issue(_where(source), f"the factory reads a file that is not there: {exc}")]
        ) from exc
    except Exception as exc:
        if isinstance(exc, OSError) and _network(exc):
            raise EnvError(f"calling the model factory: {_OFFLINE} ({type(exc).__name__}: {exc})") from exc
        raise StageFailed(f"calling the model factory failed: {type(exc).__name__}: {exc}") from exc
    except SystemExit as exc:  # in `validate --probe` and `init`, exit 0 read as success by CI
        raise StageFailed(f"calling the model factory called sys.exit({exc.code!r})") from exc
    if not isinstance(model, torch.nn.Module):  # the field names something that is no model: exit 3
        where = _where(source)
        raise ConfigError(
            where, [Issue(where, f"the factory returned {type(model).__name__}, not a torch.nn.Module")]
        )
    if source.checkpoint is not None:
        _load_checkpoint(model, source.checkpoint)
    _exported_math(model)
    from deploy.modelio.decoder import with_cache

    return with_cache(model.eval(), source.decoder)


_OFFLINE = (
    "it tried to download something (pretrained weights?) and could not reach the network; give the weights "
    "as model.checkpoint, or a factory kwarg that turns downloading off (torchvision: weights: null, "
    "weights_backbone: null)"
)


def _network(exc: OSError) -> bool:
    """A download that failed for want of a network: urllib's, socket's, requests' errors."""
    import socket
    from urllib.error import URLError

    if isinstance(exc, (URLError, ConnectionError, socket.gaierror, socket.timeout)):
        return True
    return any(word in type(exc).__name__ for word in ("Connection", "HTTPError", "Timeout"))


def _where(source: ModelSource) -> str:
    return f"model.callable ({source.file})" if source.file is not None else "model.factory"


def _load_torchscript(path: Path) -> torch.nn.Module:
    try:
        return torch.jit.load(str(path), map_location="cpu").eval()
    except (
        RuntimeError,
        ValueError,
    ) as exc:  # torch's zip reader: not a TorchScript archive (e.g. a pickled eager model)
        raise StageFailed(f"model.torchscript: cannot load {path} as TorchScript: {first_line(exc)}") from exc


def _factory(source: ModelSource) -> Any:
    if source.file is not None:
        module = _module_from_file(source.file)
        name = str(source.callable)
    else:
        module_name, _, name = str(source.factory).partition(":")
        try:
            module = _import_factory(module_name, source.factory_here())
        except ModuleNotFoundError as exc:
            raise _missing(f"model.factory: '{module_name}'", exc, searched()) from exc
        except ImportError as exc:
            raise StageFailed(f"model.factory: cannot import '{module_name}': {exc}") from exc
    if not hasattr(module, name):
        where = (
            f"model.callable: {source.file}"
            if source.file is not None
            else f"model.factory: '{module.__name__}'"
        )
        raise StageFailed(f"{where} has no attribute '{name}'")
    return getattr(module, name)


def _import_factory(module_name: str, here: Path | None) -> Any:
    """The factory's module as `python -m` would find it: the working directory first
    (only while it is imported: nothing else of deploy's is shadowed by a file there)."""
    if here is None:
        return importlib.import_module(module_name)
    folder = str(Path.cwd())
    sys.path.insert(0, folder)
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        return importlib.import_module(module_name)
    finally:
        sys.dont_write_bytecode = writes_bytecode
        sys.path.remove(folder)


def searched() -> str:
    """Where a factory module was looked for, for the message that it was not found."""
    return f"searched the working directory {Path.cwd()} and sys.path"


def _module_from_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"deploy_user_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise StageFailed(f"model.file: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # let the file import its siblings
    # deploy writes nothing into the user's folder, not even __pycache__ (it may be
    # read-only or shared, and `deploy init` promises nothing written on bad input).
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        raise _missing(f"model.file: {path}", exc) from exc
    except SyntaxError as exc:  # NUL bytes, binary: no line to name (it was "line None")
        where = f", line {exc.lineno}" if exc.lineno else " is not Python source"
        raise StageFailed(f"model.file: {path}{where}: {exc.msg}") from exc
    except Exception as exc:
        raise StageFailed(f"model.file: importing {path} failed: {type(exc).__name__}: {exc}") from exc
    except SystemExit as exc:  # a training script's top-level argparse / sys.exit, run on import
        raise StageFailed(
            f"model.file: importing {path} called sys.exit({exc.code!r}); "
            "put script code under `if __name__ == '__main__':`"
        ) from exc
    finally:
        sys.dont_write_bytecode = writes_bytecode
        sys.path.remove(str(path.parent))
    return module


def _load_checkpoint(model: torch.nn.Module, path: Path) -> None:
    state = _read_state(path)
    if isinstance(state, dict) and set(state) == {"state_dict"}:
        state = state["state_dict"]
    if not isinstance(
        state, Mapping
    ):  # torch.load reads any pickled container; load_state_dict would raise a bare TypeError
        raise StageFailed(
            f"model.checkpoint: {path} holds a {type(state).__name__}, not a state_dict (a mapping of tensors)"
        )
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


# Modules PyTorch's multi-head attention fast path runs in eager (eval, no_grad).
FAST_PATH_MODULES = (
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "TransformerEncoder",
)


def _exported_math(model: torch.nn.Module) -> None:
    """The MHA fast path is eager's alone: with a padding mask, nn.TransformerEncoder answers
    padded positions with zeros (nested tensors) that no exported graph computes, so every
    reference differed there (cosine 0.81) and the model was refused as "not float rounding".
    Off in this process for a model holding such modules: eager computes what ONNX does."""
    if any(type(m).__name__ in FAST_PATH_MODULES and isinstance(m, torch.nn.Module) for m in model.modules()):
        torch.backends.mha.set_fastpath_enabled(False)


def load_adapted(config: DeployConfig, sample: Mapping[str, Any]) -> IOAdapter:
    """The model behind the pipeline's calling convention (modelio.adapter): one tensor
    per declared input in, the declared outputs as a tuple out; `sample` (numpy arrays by
    input name) is what it is probed with to find them."""
    from deploy.modelio.adapter import adapt

    return adapt(load_model(config.model), config, sample)
