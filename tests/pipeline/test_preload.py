"""The fork server imports the model's library once (pipeline/process/isolation.preload):
a stage's child, forked from it, finds torchvision already imported where the model
comes from torchvision, and a user's own module never imported by the server. A real
fork server, in a fresh interpreter (the test process's own may already run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

PROBE = """
import sys
def report(conn):
    conn.send(sorted(m for m in ("torchvision", "mymodels") if m in sys.modules))
"""

SCRIPT = """
import multiprocessing, sys
from types import SimpleNamespace
sys.path.insert(0, sys.argv[2])
import probe
from deploy.pipeline.process.isolation import preload
job = SimpleNamespace(config=SimpleNamespace(model=SimpleNamespace(factory=sys.argv[1])))
mp = multiprocessing.get_context("forkserver")
mp.set_forkserver_preload(preload(job))
receive, send = mp.Pipe(duplex=False)
child = mp.Process(target=probe.report, args=(send,))
child.start()
print(receive.recv())
child.join()
"""


@pytest.mark.parametrize(
    ("factory", "imported"),
    [("torchvision.models:resnet18", "['torchvision']"), ("mymodels:net", "[]")],
    ids=["model-library", "users-module"],
)
def test_a_stage_child_finds_the_model_library_imported(tmp_path: Path, factory: str, imported: str) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "mymodels.py").write_text("raise SystemExit('imported by the fork server')\n")
    found = subprocess.run(
        [sys.executable, "-c", SCRIPT, factory, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    assert found.stdout.strip() == imported, found.stderr
