"""The model's file saved while a run is under way: what a stage built from it may come from
either version, so it is never cached under the key of the version the run started with
(it was, and replayed for that version ever after: a repository of the new code under the
old file's key)."""

from __future__ import annotations

import json
from pathlib import Path

from deploy.pipeline.errors import ExitCode
from tests.helpers import Cli

# The factory saves an edit of its own file when golden calls it: the edit lands while the
# stage runs, as an editor's save during `deploy run` does.
MODEL = """
from pathlib import Path

import torch

SCALE = 1.0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)

    def forward(self, image):
        return self.conv(image).mean((2, 3)) * SCALE


def net():
    here = Path(__file__)
    here.write_text(here.read_text().replace("SCALE = 1.0", "SCALE = 2.0"))
    return Net()
"""


def test_a_model_file_saved_during_a_stage_fails_it_naming_the_edit_and_caches_nothing(
    tmp_path: Path, write_config, cli: Cli
) -> None:
    (tmp_path / "edited.py").write_text(MODEL)
    model = {"file": str(tmp_path / "edited.py"), "callable": "net", "seed": 0}
    path = write_config(replace={"model": model, "stages": {"export": {"exporter": "torchscript"}}})
    first = cli("run", str(path))
    said = " ".join((first.stdout + first.stderr).split())
    assert first.returncode == ExitCode.STAGE, said
    assert "the model's source (model.file) changed while golden ran" in said and "nothing was cached" in said
    plan = {row["stage"]: row for row in json.loads(cli("plan", str(path), "--json").stdout)}
    assert plan["golden"]["action"] == "run"  # nothing kept under the first version's key
    again = cli("run", str(path))  # the file as it is now (the factory's edit leaves it so)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "SCALE = 2.0" in (tmp_path / "edited.py").read_text()
