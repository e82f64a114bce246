"""Shared fixtures: tiny configs written into tmp dirs, the CLI in a subprocess, and a
small CNN trained on scikit-learn's digits (real weights for the numeric gates)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
HEAVY = ("torch", "onnx", "onnxruntime", "onnxsim", "tensorrt", "tritonclient")


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def tiny_dict(workdir: Path, smoke: bool = False) -> dict[str, Any]:
    """configs/tiny.yaml rooted in `workdir`; without the smoke stage unless asked, so
    that only tests marked `triton` start a server, and without the TensorRT build
    (tests/stages/test_build.py covers it), so that statuses don't depend on TensorRT."""
    data = yaml.safe_load(TINY.read_text())
    if not smoke:
        data["stages"].pop("smoke")
    data["stages"].pop("build")
    formats = data["stages"]["triton_config"]["formats"]
    data["stages"]["triton_config"]["formats"] = [f for f in formats if f != "plan"]
    data["model"]["file"] = str(ROOT / "configs" / "models" / "tiny_cnn.py")
    data["cache_dir"] = str(workdir / "cache")
    data["repository"] = str(workdir / "model_repository")
    data["run_dir"] = str(workdir / "runs")
    return data


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """write_config(override={...}, name="x.yaml") -> path of a tiny config in tmp_path."""

    def write(
        override: dict[str, Any] | None = None, name: str = "tiny.yaml",
        replace: dict[str, Any] | None = None, smoke: bool = False,
    ) -> Path:
        data = merge(tiny_dict(tmp_path, smoke), override or {})
        data.update(replace or {})
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` need a CUDA GPU; without one they are skipped, with that reason."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_tests and not cuda_available():
        for item in gpu_tests:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)"))


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}
    full_env = {**inherited, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "deploy", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=1800
    )


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """TinyCNN trained on sklearn's 8x8 digits; returns (state_dict path, test accuracy)."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    sys.path.insert(0, str(ROOT / "configs" / "models"))
    from tiny_cnn import tiny_cnn

    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    order = torch.randperm(len(x))
    train, test = order[:1400], order[1400:]
    model = tiny_cnn(width=8)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(30):
        for batch in train.split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x[test]).argmax(1) == y[test]).float().mean())
    path = tmp_path_factory.mktemp("digits") / "tiny_digits.pt"
    torch.save(model.state_dict(), path)
    np.save(path.parent / "train.npy", x[train].numpy())
    np.save(path.parent / "test.npy", x[test].numpy())
    np.save(path.parent / "test_labels.npy", y[test].numpy())
    return path, accuracy


def tritonservers() -> set[int]:
    import psutil

    found = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] == "tritonserver" or "tritonserver" in " ".join(proc.info["cmdline"] or [])[:200].split(" ")[0]:
                found.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_orphan_tritonserver():
    """After the whole suite, no tritonserver we started may still be running."""
    before = tritonservers()
    yield
    import psutil

    deadline = time.monotonic() + 10  # a server stopped by SIGKILL needs a moment to be reaped
    while (left := tritonservers() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        psutil.Process(pid).kill()
    assert not left, f"tritonserver processes outlived the test suite: {sorted(left)}"
