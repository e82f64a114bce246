"""Stage selection and graph construction from artifact names."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.graph import select
from pipeline.project import load_project
from pipeline.registry import stage_specs


def test_every_stage_module_declares_a_consistent_spec():
    specs = stage_specs()
    assert {"trace", "export", "simplify", "validate", "triton_config"} <= set(specs)
    for spec in specs.values():
        assert spec.version >= 1 and spec.outputs, spec.name
        assert len({a.name for a in spec.outputs}) == len(spec.outputs), spec.name


def test_select_ranges(write_config):
    graph = load_project(write_config()).graph
    assert select(graph, [], None, None) == graph.names()
    assert select(graph, [], "simplify", None) == ["simplify", "stats", "validate", "triton_config"]
    assert select(graph, [], None, "export") == ["trace", "export"]
    assert select(graph, [], "export", "validate") == ["export", "simplify", "stats", "validate"]
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
