"""Config errors: every problem reported at once, each naming its YAML path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy.pipeline.errors import ConfigError, ExitCode
from deploy.pipeline.graph.project import load_project
from tests.helpers import Cli, tiny_dict


def issues_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_project(path)
    return [str(i) for i in info.value.issues]


def test_tiny_config_is_valid(write_config):
    project = load_project(write_config())
    assert project.graph.names() == [
        "golden",
        "export",
        "simplify",
        "trace",
        "stats",
        "validate",
        "triton_config",
    ]
    assert project.config.batch_range() == (1, 4, 16)


@pytest.mark.parametrize(
    ("override", "where", "fragment"),
    [
        ({"stages": {"export": {"opset": 11}}}, "stages.export.opset", "greater than or equal to 13"),
        ({"stages": {"export": {"opsett": 17}}}, "stages.export.opsett", "unknown key"),
        (
            {"stages": {"simplify": {"on_failure": "ignore"}}},
            "stages.simplify.on_failure",
            "'fail' or 'passthrough'",
        ),
        ({"stages": {"validate": {"atol": -1}}}, "stages.validate.atol", "greater than or equal to 0"),
        (
            {"stages": {"triton_config": {"max_batch_size": 64}}},
            "stages.triton_config.max_batch_size",
            "exceeds the shape spec's max batch 16",
        ),
        (
            {"stages": {"triton_config": {"dynamic_batching": {"preferred_batch_sizes": [32]}}}},
            "stages.triton_config.dynamic_batching.preferred_batch_sizes",
            "exceed max_batch_size",
        ),
        (
            {"stages": {"triton_config": {"formats": ["python_openvino"], "precisions": ["bf16"]}}},
            "stages.triton_config.precisions",
            "needs the openvino stage with its bf16 gate",
        ),
        (
            {
                "stages": {
                    "openvino": {"bf16": False},
                    "triton_config": {"formats": ["python", "openvino"], "precisions": ["fp32", "bf16"]},
                }
            },
            "stages.triton_config.precisions",
            "(stages.openvino.bf16: true)",
        ),
        (
            {"stages": {"triton_config": {"formats": ["onnx", "python"], "precisions": ["fp32", "bf16"]}}},
            "stages.triton_config.precisions",
            "bf16: none of formats ['onnx', 'python'] serves it (formats that do: openvino, python_openvino, "
            "python_inductor)",
        ),
        ({"stages": {"openvino_int8": {}}}, "stages.openvino_int8", "needs artifact 'openvino'"),
        ({"stages": {"bogus": {}}}, "stages.bogus", "unknown stage"),
        ({"model": {"kwargs": {"width": 8}, "seed": "x"}}, "model.seed", "integer"),
        ({"model": {"file": "/nonexistent/model.py"}}, "model.file", "file not found"),
        ({"model": {"factory": "not a path"}}, "model.factory", "'not a path' is not 'module:callable'"),
        ({"batch_dim": "N"}, "inputs[0].dims", "axis 0 must be the batch dim 'N'"),
        ({"name": "bad name!"}, "name", "'bad name!' is not a name of letters, digits"),
        ({"cache_dri": "x"}, "cache_dri", "unknown key"),
        ({"cache": {"remote": "ftp://host/cache"}}, "cache.remote", "is not a URL of s3://"),
        ({"cache": {"remotes": "s3://b/p"}}, "cache.remotes", "unknown key"),
    ],
)
def test_each_error_names_its_field(write_config, override, where, fragment):
    issues = issues_of(write_config(override))
    assert any(i.startswith(f"{where}:") and fragment in i for i in issues), issues


@pytest.mark.parametrize(
    ("shape_override", "fragment"),
    [
        ({"min": [8, 1, 8, 8], "opt": [4, 1, 8, 8]}, "need min <= opt <= max"),
        ({"max": [16, 1, 9, 8]}, "max[2] is 9, but dim 2 is static 8"),
        ({"opt": [4, 1, 8]}, "opt has 3 dims, dims has 4"),
        ({"dtype": "int64"}, "value_range is required for integer inputs"),
    ],
)
def test_shape_spec_cross_checks(write_config, shape_override, fragment):
    base = write_config()
    import yaml

    data = yaml.safe_load(base.read_text())
    data["inputs"][0].update(shape_override)
    base.write_text(yaml.safe_dump(data, sort_keys=False))
    issues = issues_of(base)
    assert any(i.startswith("inputs[0]:") and fragment in i for i in issues), issues


def test_batch_dim_must_agree_across_inputs(write_config):
    second = {"name": "mask", "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [16, 4]}
    path = write_config(
        replace={"inputs": [*__import__("yaml").safe_load(write_config().read_text())["inputs"], second]}
    )
    issues = issues_of(path)
    assert any("dim 'batch' is (1, 4, 16)" in i and "(1, 2, 16) in input 'mask'" in i for i in issues), issues


def test_all_errors_are_reported_at_once(write_config):
    path = write_config({"name": "no spaces", "stages": {"export": {"opset": 5}, "validate": {"rtol": -1}}})
    issues = issues_of(path)
    assert {i.split(":")[0] for i in issues} >= {"name", "stages.export.opset", "stages.validate.rtol"}


def test_stage_order_comes_from_the_artifacts_not_the_yaml(write_config):
    listed = load_project(write_config()).graph.names()
    reversed_yaml = write_config(
        replace={"stages": dict(reversed(list(tiny_dict(write_config().parent)["stages"].items())))},
        name="r.yaml",
    )
    assert (
        load_project(reversed_yaml).graph.names()
        == listed
        == ["golden", "export", "simplify", "trace", "stats", "validate", "triton_config"]
    )


def test_a_config_dumped_with_sorted_keys_loads_and_binds_the_same(write_config, tmp_path):
    """yaml.safe_dump sorts keys by default, so `export` comes before `trace`, whose golden
    data it reads: the artifact graph, not the YAML, orders the stages."""
    original = load_project(write_config())
    data = yaml.safe_load(write_config().read_text())
    sorted_path = tmp_path / "sorted.yaml"
    sorted_path.write_text(yaml.safe_dump(data))  # sort_keys=True, the default
    listed = list(yaml.safe_load(sorted_path.read_text())["stages"])
    assert listed == sorted(listed) and listed.index("export") < listed.index("trace")
    project = load_project(sorted_path)
    assert project.graph.names() == original.graph.names()
    for node in project.graph.nodes:
        assert {k: str(v) for k, v in node.bindings.items()} == {
            k: str(v) for k, v in original.graph.node(node.name).bindings.items()
        }


def test_a_transform_without_its_origin_is_a_config_error(write_config):
    path = write_config(replace={"stages": {"trace": {}, "simplify": {}, "validate": {}}})
    issues = issues_of(path)
    assert any(
        i.startswith("stages.simplify:")
        and "needs artifact 'onnx', which no stage in this config produces" in i
        for i in issues
    ), issues


def test_dropping_simplify_binds_validate_to_export(write_config):
    path = write_config(replace={"stages": {"trace": {}, "export": {}, "validate": {}}})
    graph = load_project(path).graph
    assert str(graph.node("validate").bindings["onnx"]) == "export.onnx"
    assert str(load_project(write_config()).graph.node("validate").bindings["onnx"]) == "simplify.onnx"


def test_duplicate_yaml_key_and_syntax_errors(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: a\nname: b\n")
    assert "duplicate key" in issues_of(dup)[0]
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert issues_of(broken)[0].startswith("yaml:")


def test_a_yaml_merge_key_is_yamls_override_not_a_duplicate(tmp_path):
    """`<<: *defaults` was refused: "could not determine a constructor for the tag ...merge"."""
    from deploy.pipeline.graph.project import read_yaml

    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {count: 16, kind: random}\nother:\n  <<: *b\n  count: 8\n")
    assert read_yaml(path)["other"] == {"count": 8, "kind": "random"}
    path.write_text("base: &b {count: 16}\nother:\n  <<: *b\n  count: 8\n  count: 9\n")
    with pytest.raises(ConfigError, match="duplicate key 'count' at line 5"):
        read_yaml(path)
    path.write_text("model:\n  kwargs: {[a]: 8}\n")  # was TypeError: unhashable type, exit 70
    with pytest.raises(ConfigError, match="a key that is a list at line 2"):
        read_yaml(path)


def test_cli_reports_config_errors_without_traceback(write_config, cli: Cli):
    path = write_config({"stages": {"export": {"opset": 5}}})
    proc = cli("run", str(path))
    assert proc.returncode == ExitCode.CONFIG
    assert "stages.export.opset" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (path.parent / "cache").exists()  # nothing ran, nothing written
    verbose = cli("run", str(path), "-v")
    assert verbose.returncode == ExitCode.CONFIG and "Traceback" in verbose.stderr


def test_cli_validate_command(write_config, cli: Cli):
    ok = cli("validate", str(write_config()))
    assert ok.returncode == 0 and "golden -> export -> simplify -> trace" in ok.stdout
    missing = cli("validate", "/nonexistent.yaml")
    assert missing.returncode == ExitCode.CONFIG and "config file not found" in missing.stderr


def test_a_boolean_where_a_number_is_wanted_is_refused_naming_the_key(tmp_path: Path, write_config) -> None:
    """pydantic reads true as 1.0 and false as 0.0 for a float, and YAML reads yes/no/on/off
    as booleans: `atol: yes` validated as a tolerance 10^4 times looser than meant and
    `min_cosine: no` turned the check off. Each is refused, every one at once; the
    booleans the config's models do take (build.required, a stage's isolate) stay."""
    text = write_config().read_text()
    text = text.replace("atol: 0.0001", "atol: yes").replace("min_cosine: 0.9999", "min_cosine: no")
    text = text.replace("- 1\n  - 1\n  - 8\n  - 8\n  opt", "- on\n  - 1\n  - 8\n  - 8\n  opt", 1)
    text = text.replace("  triton_config:", "  build: {required: false, isolate: true}\n  triton_config:")
    path = tmp_path / "bools.yaml"
    path.write_text(text)
    issues = issues_of(path)
    booleans = [i for i in issues if "a number, not the boolean" in i]
    assert {i.split(":")[0] for i in booleans} == {
        "inputs[0].min[0]", "stages.validate.atol", "stages.validate.min_cosine"
    }, issues  # fmt: skip
    assert (
        "stages.validate.atol: a number, not the boolean true (YAML reads yes/no/on/off as booleans)"
        in issues
    )
    assert issues == booleans, issues  # nothing else is wrong with it
    good = write_config({"stages": {"build": {"required": False, "isolate": True}}})
    assert load_project(good).config.name == "tiny"


@pytest.mark.parametrize(
    ("run_dir", "refused"),
    [
        ("model_repository", "is the repository"),
        ("model_repository/runs", "is inside the repository"),
        (".", None),
        ("model_repository/../runs", None),  # beside it, once `..` is read
    ],
)
def test_run_records_stay_out_of_the_repository(
    write_config, tmp_path: Path, run_dir: str, refused: str | None
) -> None:
    """run_dir equal to the repository put `tiny/summary.json`, logs and the report beside
    the models, a folder a Triton polling it takes for a model; holding it is fine."""
    path = write_config(
        replace={"run_dir": str(tmp_path / run_dir), "repository": str(tmp_path / "model_repository")}
    )
    if refused is None:
        assert load_project(path).config.run_dir == tmp_path / run_dir
        return
    assert any(
        i.startswith("run_dir: ") and refused in i and "give them separate directories" in i
        for i in issues_of(path)
    )
