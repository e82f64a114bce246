"""Cache keys: pinned, and sensitive to exactly what a stage declares."""

from __future__ import annotations

from pipeline import keys
from pipeline.project import load_project


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
