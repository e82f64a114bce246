"""Stage selection and graph construction from artifact names."""

from __future__ import annotations

import pytest

from deploy.pipeline.errors import ConfigError
from deploy.pipeline.graph.dag import select
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.graph.registry import stage_specs


def test_every_stage_module_declares_a_consistent_spec():
    specs = stage_specs()
    assert {"trace", "export", "simplify", "validate", "triton_config"} <= set(specs)
    for spec in specs.values():
        assert spec.version >= 1 and spec.outputs, spec.name
        assert len({a.name for a in spec.outputs}) == len(spec.outputs), spec.name


def test_select_ranges(write_config):
    graph = load_project(write_config()).graph
    assert select(graph, [], None, None) == graph.names()
    assert select(graph, [], "simplify", None) == ["simplify", "trace", "stats", "validate", "triton_config"]
    assert select(graph, [], None, "export") == ["golden", "export"]
    assert select(graph, [], "export", "validate") == ["export", "simplify", "trace", "stats", "validate"]
    assert select(graph, ["validate", "trace"], None, None) == ["trace", "validate"]


@pytest.mark.parametrize(
    ("only", "start", "stop", "fragment"),
    [
        ([], "nope", None, "unknown stage 'nope'"),
        (["trace"], "export", None, "cannot be combined"),
        ([], "validate", "export", "comes after"),
    ],
)
def test_select_rejects_bad_selections(write_config, only, start, stop, fragment):
    graph = load_project(write_config()).graph
    with pytest.raises(ConfigError) as info:
        select(graph, only, start, stop)
    assert fragment in str(info.value)


def spec(name: str, reads: tuple[str, ...], writes: tuple[str, ...], phase=None):
    from pydantic import BaseModel

    from deploy.pipeline.graph.contract import Artifact, Phase, StageSpec

    class Params(BaseModel):
        pass

    return StageSpec(
        name=name,
        version=1,
        params=Params,
        inputs=reads,
        outputs=tuple(Artifact(w) for w in writes),
        run=lambda ctx, p: None,
        phase=phase or Phase.CONVERT,
    ), Params()


def test_transforms_chain_after_their_origin_by_phase_then_name():
    from deploy.pipeline.graph.contract import Phase
    from deploy.pipeline.graph.dag import build_graph

    stages = [
        spec("zeta", ("onnx",), ("onnx",)),
        spec("check", ("onnx",), ("report",), Phase.VERIFY),
        spec("alpha", ("onnx",), ("onnx",)),
        spec("make", ("model",), ("onnx",)),
    ]
    graph = build_graph(stages)
    assert graph.names() == ["make", "alpha", "zeta", "check"]
    bound = {n.name: str(n.bindings.get("onnx", "")) for n in graph.nodes}
    assert bound == {"make": "", "alpha": "make.onnx", "zeta": "alpha.onnx", "check": "zeta.onnx"}


def test_two_origins_of_an_artifact_that_is_read_and_cycles_are_config_errors():
    from deploy.pipeline.graph.dag import build_graph

    with pytest.raises(ConfigError, match="needs artifact 'onnx', which several stages produce"):
        build_graph(
            [spec("a", ("model",), ("onnx",)), spec("b", ("model",), ("onnx",)), spec("c", ("onnx",), ("r",))]
        )
    build_graph([spec("a", ("model",), ("r",)), spec("b", ("model",), ("r",))])  # nobody reads r: fine
    with pytest.raises(ConfigError, match="cycle: a, b"):
        build_graph([spec("a", ("y",), ("x",)), spec("b", ("x",), ("y",))])
