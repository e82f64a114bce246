"""`deploy doctor`: what this machine can run, and what to install for the rest."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploy.pipeline.graph.keys import dist_version

if TYPE_CHECKING:
    from deploy.pipeline.graph.project import Project

PACKAGES = {
    "torch": "trace, export",
    "torchvision": "configs/resnet50.yaml's factory",
    "onnx": "export, simplify",
    "onnxsim": "simplify",
    "onnxruntime": "export/simplify/validate/quantize checks, python serving format",
    "onnxscript": "export with exporter: dynamo",
    "tritonclient": "triton_config, smoke",
    "nvidia-pytriton": "smoke's default tritonserver",
    "pillow": "quantize from image folders",
    "openvino": "the openvino stages and runtimes (the CPU target)",
    "nncf": "openvino_int8",
    "matplotlib": "the run report's charts, bench's plot",
    "fsspec": "the remote cache, publish_to",
    "s3fs": "s3:// remotes",
}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def checks() -> list[Check]:
    found = [_package(name, used) for name, used in PACKAGES.items()]
    return [*found, _tensorrt(), _gpu(), _cuda(), _tritonserver(), _docker(), *_runtimes()]


def _runtimes() -> list[Check]:
    """Every registered runtime (runtimes/catalog.py) on the device it runs on (a CUDA one
    on the GPU, the rest on the CPU): whether this install can run it, and why not."""
    from deploy.runtimes.base import Device
    from deploy.runtimes.catalog import PLUGINS

    found = []
    for p in PLUGINS:
        device = p.on(Device.CPU)
        reason = p.reason_unavailable(device)
        files = ""
        if p.open_file:  # picked for its files' suffixes, or only when asked for by name
            how = "deploy bench" if p.by_suffix else f"deploy bench --runtime {p.name}"
            files = f"; runs {', '.join(p.suffixes)} files ({how})"
        detail = f"{p.family} {p.precision or 'as served'} on {device.value}{files}"
        found.append(Check(f"runtime {p.name}", reason is None, detail if reason is None else reason))
    return found


def config_checks(project: Project) -> list[Check]:
    """One failed check per part of the config this machine's install cannot run (the
    run skips it); one passed check when there is none."""
    from deploy.pipeline.graph.project import host_issues

    found = [Check(issue.where, False, issue.message) for issue in host_issues(project)]  # says its fix
    found += _model_packages(project)
    return found or [
        Check(str(project.path), True, "every configured runtime and the model's packages are here")
    ]


def _model_packages(project: Project) -> list[Check]:
    """The packages the model's source imports (read, not run), found or not."""
    from deploy.modelio.installed import check_installed
    from deploy.pipeline.errors import MissingDependency

    try:
        check_installed(project.config.model)
    except MissingDependency as exc:
        return [Check("model", False, exc.what, exc.install)]
    return []


def _package(name: str, used: str) -> Check:
    from deploy.pipeline.graph.extras import DISTRIBUTION_OF, install_hint

    version = dist_version(name)
    module = {d: m for m, d in DISTRIBUTION_OF.items()}.get(name, name)
    fix = "" if version else install_hint(module)
    return Check(name, version is not None, f"{version or 'missing'} (for {used})", fix)


def _tensorrt() -> Check:
    from deploy.runtimes.devices import tensorrt_version

    version = tensorrt_version()
    try:
        import tensorrt
    except ImportError:
        return Check(
            "tensorrt",
            False,
            f"not importable (distribution: {version or 'none'}); the build stage is skipped",
            "pip install tensorrt (needs NVIDIA's package index and a GPU driver)",
        )
    if not hasattr(tensorrt, "Builder"):
        return Check(
            "tensorrt",
            False,
            "imports, but has no builder (bindings without libraries?)",
            "install tensorrt's libs wheel",
        )
    return Check("tensorrt", True, f"{tensorrt.__version__} with builder")


def _gpu() -> Check:
    from deploy.runtimes.devices import gpu_identity

    gpu = gpu_identity()
    return Check(
        "gpu",
        gpu is not None,
        gpu or "no NVIDIA GPU (nvidia-smi absent or found none)",
        "" if gpu else "a machine with an NVIDIA GPU for engine builds",
    )


def _cuda() -> Check:
    if dist_version("torch") is None:
        from deploy.pipeline.graph.extras import install_hint

        return Check("cuda", False, "torch missing", install_hint("torch"))
    import torch

    available = torch.cuda.is_available()
    detail = f"torch built for CUDA {torch.version.cuda}; device {'available' if available else 'not available (runs on CPU)'}"
    return Check(
        "cuda",
        available,
        detail,
        "" if available else "an NVIDIA driver + GPU (optional: everything but build runs on CPU)",
    )


def _tritonserver() -> Check:
    from deploy.serving.server_spec import ServerSpec, find_binary

    binary = find_binary(ServerSpec())
    if binary is None or not binary.is_file():
        return Check(
            "tritonserver",
            False,
            "not found",
            "pip install nvidia-pytriton (ships one), or put tritonserver on PATH",
        )
    backends = binary.parent.parent / "backends"
    names = sorted(p.name for p in backends.iterdir()) if backends.is_dir() else []
    return Check(
        "tritonserver", True, f"{binary} (backends: {', '.join(names) or 'see its --backend-directory'})"
    )


def _docker() -> Check:
    if shutil.which("docker") is None:
        return Check("docker", False, "no docker client (smoke server kind docker unavailable)", "optional")
    engine = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20
    )
    ok = engine.returncode == 0
    return Check(
        "docker",
        ok,
        f"engine {engine.stdout.strip()}" if ok else "client only, no engine reachable",
        "" if ok else "optional",
    )
