"""The artifacts are declared objects (deploy/domain/artifacts.py): one per output some
stage declares, owned by a stage that declares it, and stages read and write them by
those objects, never by a string."""

from __future__ import annotations

import re

from deploy.domain import artifacts
from deploy.pipeline.graph.registry import stage_specs
from tests.helpers import ROOT

DECLARED = {k: v for k, v in vars(artifacts).items() if isinstance(v, artifacts.Produced)}


def test_every_declared_artifact_is_an_output_of_its_owner_and_every_output_is_declared() -> None:
    specs = stage_specs()
    outputs = {a.name for spec in specs.values() for a in spec.outputs}
    assert {str(v) for v in DECLARED.values()} == outputs
    for name, produced in DECLARED.items():
        assert name == produced.upper(), name
        assert produced in {a.name for a in specs[produced.owner].outputs}, (produced, produced.owner)


def test_no_stage_names_an_artifact_by_a_string() -> None:
    literal = re.compile(r"ctx\.(input|output)\(\"")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "deploy").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert not found, found


def test_an_artifact_survives_the_trip_to_a_stage_process() -> None:
    import pickle

    back = pickle.loads(pickle.dumps(artifacts.ONNX))
    assert (back, back.owner, type(back)) == ("onnx", "export", artifacts.Produced)
