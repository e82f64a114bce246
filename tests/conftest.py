"""Shared fixtures: tiny configs written into tmp dirs, the CLI in this process or a subprocess, and a
small CNN trained on scikit-learn's digits (real weights for the numeric gates)."""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import (
    RUN_MARK,
    Cli,
    cli_here,
    cuda_available,
    merge,
    shared_digits,
    tiny_dict,
    tritonservers,
)

# Every process the suite starts inherits this: the orphan check stops only those.
os.environ[RUN_MARK] = uuid.uuid4().hex


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--matrix-run",
        metavar="DIR",
        default=None,
        help="with -m matrix: the workspace where the Jenkins matrix cell already ran its config "
        "(its reports/ and runs/); checked there instead of running the config again",
    )


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """write_config(override={...}, name="x.yaml") -> path of a tiny config in tmp_path."""

    def write(
        override: dict[str, Any] | None = None,
        name: str = "tiny.yaml",
        replace: dict[str, Any] | None = None,
        smoke: bool = False,
    ) -> Path:
        data = merge(tiny_dict(tmp_path, smoke), override or {})
        data.update(replace or {})
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def cli(capfd: pytest.CaptureFixture[str]) -> Cli:
    """cli(*args, cwd=..., env=...): the CLI run in this process (tests.helpers.cli_here),
    answering as run_cli does; for tests about what the CLI says, not its process."""
    return functools.partial(cli_here, capfd)


# The heaviest test files, heaviest first (seconds of their tests on three workers, a
# 2-core machine busy with other work too, 2026-11-30; -m matrix's from 2026-11-27):
# pytest-xdist hands whole files to its workers in collection order, so starting these
# first keeps one long file from running alone at the end.
HEAVIEST = (
    "matrix/test_resnet50.py",  # 633 (with -m matrix: the configs' checks)
    "serving/test_decoder.py",  # 560 (a decoder trained, deployed, then retrained and released)
    "stages/test_smoke.py",  # 157
    "stages/test_release.py",  # 139
    "stages/test_bench.py",  # 139
    "pipeline/test_remote.py",  # 115
    "stages/test_export_errors.py",  # 114
    "stages/test_build.py",  # 101
    "deploy/test_replay.py",  # 101
    "serving/test_live_switch.py",  # 100
    "deploy/test_optimize.py",  # 97
    "stages/test_openvino_int8.py",  # 91
    "deploy/test_init.py",  # 88
    "stages/test_inductor.py",  # 86
    "stages/test_bench_contention.py",  # 81
    "stages/test_quantize.py",  # 75
    "stages/test_select.py",  # 75
    "pipeline/test_bad_inputs.py",  # 74
)


def _weight(item: pytest.Item) -> int:
    path = item.path.as_posix()
    return next((i for i, name in enumerate(HEAVIEST) if path.endswith(f"tests/{name}")), len(HEAVIEST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heaviest files first (a stable sort: the rest keep their order). Tests marked
    `gpu` need a CUDA GPU; without one they are skipped, with that reason."""
    items.sort(key=_weight)
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_tests and not cuda_available():
        for item in gpu_tests:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)"))


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """TinyCNN trained on sklearn's 8x8 digits; returns (state_dict path, test accuracy)."""
    return shared_digits(tmp_path_factory, epochs=30)


@pytest.fixture(scope="session", autouse=True)
def no_orphan_tritonserver():
    """After the whole suite, no tritonserver this run started may still be running; a
    user's, or another run's, is none of its business (tritonservers() follows RUN_MARK)."""
    before = tritonservers()
    yield
    import psutil

    deadline = time.monotonic() + 10  # a server stopped by SIGKILL needs a moment to be reaped
    while (left := tritonservers() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        psutil.Process(pid).kill()
    assert not left, f"tritonserver processes outlived the test suite: {sorted(left)}"
