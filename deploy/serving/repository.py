"""A generated Triton repository as the smoke and bench stages see it: which models it
holds, in which format and precision, and which of them a given server can load.

Light at import (stdlib, pydantic via the server spec); protobuf and tritonclient are
imported by the functions that parse configs.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from deploy.serving.generate_record import GENERATE_PARAMETER
from deploy.serving.layout import BY_PLATFORM, FORMAT_PARAMETER, skip_reason
from deploy.serving.server_spec import ServerSpec
from deploy.serving.service import ROLE_PARAMETER, Role

ENSEMBLE = "ensemble"  # Triton's built-in platform: no backend directory


@dataclass(frozen=True)
class Model:
    fmt: str
    backend: str
    precision: str
    directory: Path
    role: Role = Role.MODEL
    steps: tuple[str, ...] = ()  # an ensemble's composing models, in order
    instances: int = 1  # instance_group counts, summed (Triton's default: one)
    # Triton batches it (max_batch_size > 0): clients leave the batch dim out of its dims and a
    # per-sample scalar travels as [batch, 1]; at 0 every tensor travels whole (layout.wire_dims).
    max_batch_size: int = 0

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0


def private_copy(tree: Path, dest: Path) -> Path:
    """Hard-linked copy: the server and its python stubs may write beside the models
    (__pycache__), which must not land in the cache's laid-out tree."""
    shutil.copytree(tree, dest, copy_function=os.link)
    return dest


def models(repo: Path) -> dict[str, Model]:
    """model name -> what its config.pbtxt says (parsed as Triton's ModelConfig)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    found = {}
    for path in sorted(repo.glob("*/config.pbtxt")):
        config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
        kind = config.platform or config.backend
        layout = BY_PLATFORM.get(kind)
        fmt, backend = (layout.fmt, layout.backend) if layout else (kind, kind)
        if FORMAT_PARAMETER in config.parameters:
            fmt = config.parameters[FORMAT_PARAMETER].string_value
        precision = (
            config.parameters["deploy_precision"].string_value
            if "deploy_precision" in config.parameters
            else "fp32"
        )
        role = (
            Role(config.parameters[ROLE_PARAMETER].string_value)
            if ROLE_PARAMETER in config.parameters
            else Role.GENERATE
            if GENERATE_PARAMETER in config.parameters
            else Role.MODEL
        )
        steps = tuple(step.model_name for step in config.ensemble_scheduling.step)
        instances = sum(g.count or 1 for g in config.instance_group) or 1
        found[path.parent.name] = Model(
            fmt, backend, precision, path.parent, role, steps, instances, config.max_batch_size
        )
    return found


def threads_implied(found: dict[str, Model], name: str) -> str:
    """What the served model's instance settings imply for threads: each instance runs its
    runtime with that runtime's default intra-op threads (the python backend's ONNX Runtime:
    one per physical core; OpenVINO and torch: every core), so a served row may use more
    threads than the cores, which in-process rows never do."""
    from deploy.runtimes.contention import cores as logical
    from deploy.runtimes.contention import physical_cores

    cores, physical = logical(), physical_cores()
    parts = [found[s] for s in found[name].steps if s in found] or [found[name]]
    said = []
    for m in parts:
        each = physical if m.fmt == "onnx" else cores
        said.append(f"{m.directory.name}: {m.instances} instance(s) x {each} = {m.instances * each} threads")
    return f"{'; '.join(said)} on {cores} cores (each instance its runtime's default intra-op threads)"


def backends(spec: ServerSpec, workdir: Path) -> set[str] | None:
    """The backends a local server has; None where that is unknown until a load is
    tried (a URL or a docker image)."""
    from deploy.serving.locate import locate

    if not spec.kind.backends_known:
        return None
    launch = locate(spec, workdir)
    return {p.name for p in launch.backend_dir.iterdir()} if launch.backend_dir else None


def loadable(found: dict[str, Model], have: set[str] | None) -> list[str]:
    """Models whose backend the server has; an ensemble when all its steps are loadable."""
    return [name for name in found if _loadable(name, found, have)]


def _loadable(name: str, found: dict[str, Model], have: set[str] | None) -> bool:
    info = found.get(name)
    if info is None:
        return False
    if info.backend == ENSEMBLE:
        return all(_loadable(step, found, have) for step in info.steps if step != name)
    return have is None or info.backend in have


def missing_backend(name: str, found: dict[str, Model], have: set[str] | None) -> tuple[str, str]:
    """(the backend, why) that keeps model `name` from loading; for an ensemble, the first
    step that cannot load."""
    info = found[name]
    if info.backend != ENSEMBLE:
        return info.backend, skip_reason(info.backend)
    step = next((s for s in info.steps if s != name and not _loadable(s, found, have)), None)
    if step is None or step not in found:
        return ENSEMBLE, f"step '{step}' is not in the repository"
    backend, _ = missing_backend(step, found, have)
    return backend, f"its step {step} needs the '{backend}' backend, which the server lacks"
