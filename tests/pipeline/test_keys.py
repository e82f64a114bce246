"""Cache keys: pinned, and sensitive to exactly what a stage declares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.pipeline.graph import keys
from deploy.pipeline.graph.hashing import canonical_json
from deploy.pipeline.graph.project import load_project

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def parts(project, stage: str, inputs=None):
    node = project.graph.node(stage)
    return keys.components(
        node.spec, node.params, project.config, inputs or {"golden": "a" * 64, "onnx": "b" * 64}
    )


def test_key_is_canonical_json_sha256_pinned():
    # Changing how keys are derived must be a deliberate, reviewed diff of this literal.
    doc = {"stage": "x", "version": 1, "params": {"b": 2, "a": 1}, "inputs": {}, "env": {}}
    assert keys.key_of(doc) == "42467bcdf37aadf54a688feff5d8abaf5b09e79d972dcce0b27d8b459ae3eb1a"
    assert keys.key_of(doc) == keys.key_of(
        {"env": {}, "inputs": {}, "params": {"a": 1, "b": 2}, "version": 1, "stage": "x"}
    )


def test_a_stage_key_ignores_other_stages_params(write_config):
    base = load_project(write_config())
    other = load_project(write_config({"stages": {"validate": {"atol": 0.5}}}, name="b.yaml"))
    assert parts(base, "simplify").key == parts(other, "simplify").key
    assert parts(base, "validate").key != parts(other, "validate").key


def test_key_covers_inputs_env_version_and_declared_config(write_config):
    project = load_project(write_config())
    base = parts(project, "simplify")
    assert base.key != parts(project, "simplify", {"golden": "a" * 64, "onnx": "c" * 64}).key
    assert set(base.env) == {"python", "onnx", "onnxsim", "onnxruntime", "numpy"}
    assert base.config == {
        "shapes": project.config.model_dump(mode="json", include={"inputs", "outputs", "batch_dim"})
    }
    renamed = load_project(write_config({"name": "other"}, name="c.yaml"))
    assert parts(renamed, "simplify").key == base.key  # simplify doesn't read the name
    assert parts(renamed, "triton_config").key != parts(project, "triton_config").key


def test_reasons_name_what_changed(write_config):
    old = parts(load_project(write_config()), "validate")
    new = parts(
        load_project(write_config({"stages": {"validate": {"atol": 0.01}}}, name="b.yaml")), "validate"
    )
    assert keys.reasons(old, new) == ["params.atol: 0.0001 -> 0.01"]
    assert keys.reasons(None, new) == ["never ran with this cache"]


def test_key_parts_hash_as_their_json_and_read_back_from_it(write_config):
    """The key is the digest of the record's JSON (what entries and heads store), so a
    record read back from a cache entry gives the same key."""
    found = parts(load_project(write_config()), "validate")
    assert found.key == keys.key_of(found.to_json())
    assert keys.KeyParts.from_json(found.to_json()).key == found.key
    assert found.to_json()["schema"] == keys.KEY_SCHEMA


def test_key_material_canonical_json_is_pinned():
    """The record hashes as the dict `components` returned before it was a record: this
    literal was computed by that code; a change here changes every cache key."""
    found = keys.KeyParts(
        "x",
        1,
        {"b": 2, "a": 1},
        {"shapes": {"batch_dim": 0}},
        {"onnx": "b" * 64, "golden": "a" * 64},
        {"python": "3.11.0", "onnx": None},
    )
    assert canonical_json(found.to_json()) == (
        '{"config":{"shapes":{"batch_dim":0}},"env":{"onnx":null,"python":"3.11.0"},'
        f'"inputs":{{"golden":"{"a" * 64}","onnx":"{"b" * 64}"}},"params":{{"a":1,"b":2}},'
        '"schema":1,"stage":"x","version":1}'
    )
    assert found.key == "c394791d07e768bb4d7b792e7c492c8cc26d293911f8629f9dbf414d6c67e593"


def _legacy_components(spec, params, config, inputs) -> dict:
    """`keys.components` as it was before KeyParts (a plain dict), for the test below."""
    return {
        "schema": keys.KEY_SCHEMA,
        "stage": spec.name,
        "version": spec.version,
        "params": params.model_dump(mode="json"),
        "config": {s.value: s.extract(config) for s in sorted(spec.uses, key=lambda s: s.value)},
        "inputs": dict(sorted(inputs.items())),
        "env": keys.environment(spec, params, config),
    }


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_stage_keys_as_the_legacy_dict(config):
    """Every stage of every shipped config: the record's key and stored JSON are the
    legacy dict's, so caches built before the record still hit."""
    project = load_project(CONFIGS / config)
    for node in project.graph.nodes:
        inputs = {name: f"{i:064x}" for i, name in enumerate(reversed(list(node.bindings)))}
        found = keys.components(node.spec, node.params, project.config, inputs)
        legacy = _legacy_components(node.spec, node.params, project.config, inputs)
        assert canonical_json(found.to_json()) == canonical_json(legacy), node.name
        assert found.key == keys.key_of(legacy), node.name
        assert keys.KeyParts.from_json(json.loads(json.dumps(found.to_json()))) == found, node.name
