"""benchmarks/zoo.py: every entry writes a config the pipeline accepts, for both
exporters and auto, and one small entry runs through smoke and lands in the table as
`ran`, its auto row naming the exporter auto took."""

from __future__ import annotations

import sys

import pytest

from deploy.pipeline.graph.project import load_project
from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import zoo  # benchmarks/ is a script directory, not a package


@pytest.mark.parametrize("exporter", zoo.EXPORTERS)
def test_every_zoo_entry_is_a_valid_config(tmp_path, exporter):
    assert len(zoo.ZOO) >= 12
    for entry in zoo.ZOO:
        project = load_project(zoo.config_for(entry, exporter, tmp_path))
        assert project.graph.names()[0] == "golden" and "smoke" in project.graph.names(), entry.name


@pytest.mark.triton
def test_a_zoo_entry_runs_through_smoke_and_fills_its_row(tmp_path):
    entry = next(e for e in zoo.ZOO if e.name == "kwargs_only")
    row = zoo.run_one(entry, "auto", tmp_path)
    assert row["exit"] == 0 and row["stages"] == {
        **dict.fromkeys(zoo.STAGES, "ran"),
        "export": "ran (dynamo)",
    }, row
    assert f"| {entry.name} | auto | ran | ran (dynamo) |" in zoo.markdown([row])


def test_the_summary_counts_passes_per_exporter_and_names_the_path_auto_took():
    ran = dict.fromkeys(zoo.STAGES, "ran")
    rows = [
        {
            "model": "ssdlite",
            "exporter": "dynamo",
            "exit": 1,
            "seconds": 20.0,
            "stages": {
                **ran,
                "export": "failed: torch.export failed: the model branches on values: X",
                "smoke": "not run",
            },
        },
        {
            "model": "ssdlite",
            "exporter": "auto",
            "exit": 0,
            "seconds": 50.0,
            "stages": {**ran, "export": "ran (torchscript after torch.export failed)"},
        },
        {
            "model": "clip",
            "exporter": "auto",
            "exit": 0,
            "seconds": 12.0,
            "stages": {**ran, "export": "ran (dynamo)", "smoke": "cached"},
        },
    ]
    text = zoo.summary(rows)
    assert (
        "| ssdlite | detection, list of per-image dicts (NMS), MobileNetV3 | export failed: the model branches on values | smoke passed (torchscript after torch.export failed), 50.0 s |"
        in text
    )
    assert "| clip |" in text and "smoke passed (dynamo), 12.0 s" in text
    assert text.endswith("through smoke: dynamo: 0 of 1, auto: 2 of 2")
