"""The packages type-check (mypy, pydantic plugin): stage code follows the APIs it calls."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT


def test_mypy_is_clean():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "deploy",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
