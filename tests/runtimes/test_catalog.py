"""The bench runtimes' one registry agrees with the pipeline: every artifact it names
is made by some stage, every Triton format it names is a serving layout."""

from __future__ import annotations

from deploy.domain.vocabulary import Runtime
from deploy.pipeline.contract import SOURCE_ARTIFACT
from deploy.pipeline.registry import stage_specs
from deploy.runtimes.catalog import CATALOG, IN_PROCESS, artifact_of
from deploy.serving.layout import LAYOUTS


def test_every_runtime_is_catalogued_and_loads_an_artifact_a_stage_makes() -> None:
    made = {a.name for spec in stage_specs().values() for a in spec.outputs} | {SOURCE_ARTIFACT}
    assert set(CATALOG) == set(Runtime)
    assert {artifact_of(r) for r in Runtime} <= made


def test_served_formats_are_serving_layouts_and_triton_is_not_a_candidate() -> None:
    assert {f for d in CATALOG.values() for f in d.served_as} <= set(LAYOUTS)
    assert Runtime.TRITON not in IN_PROCESS and len(IN_PROCESS) == len(Runtime) - 1
    assert f"{Runtime.ONNXRUNTIME_INT8}" == "onnxruntime_int8"  # formats as its value in tables
