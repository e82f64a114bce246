"""The docs' generated references (deploy/reference.py): the config reference, from the
pydantic models, must be current, complete (every field described) and faithful (defaults
as YAML that reads back as the default); the CLI reference, from the typer app, current and
complete (every command, argument and option)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from deploy import reference
from deploy.pipeline.graph.registry import stage_specs
from deploy.spec.config import DeployConfig
from tests.helpers import ROOT

CONFIG_DOC = ROOT / "docs" / "reference" / "config.md"
CLI_DOC = ROOT / "docs" / "reference" / "cli.md"
REGENERATE = "python -m deploy.reference --write"


def _row(path: str) -> reference.Row:
    return next(row for section in reference.sections() for row in section.rows if row.path == path)


def _all_fields():
    """(path, FieldInfo) of every key of the shared config and of every stage's params."""
    yield from reference.walk(DeployConfig)
    for name, spec in stage_specs().items():
        yield from reference.walk(spec.params, f"stages.{name}")


def test_the_docs_config_reference_is_the_generated_one():
    current = reference.current(CONFIG_DOC.read_text(encoding="utf-8"))
    assert current == reference.render(), f"{CONFIG_DOC}'s config reference is stale: run `{REGENERATE}`"


def test_the_docs_cli_reference_is_the_generated_one():
    text = CLI_DOC.read_text(encoding="utf-8")
    current = reference.current(text, reference.CLI_START, reference.CLI_END)
    assert current == reference.render_cli(), f"{CLI_DOC}'s CLI reference is stale: run `{REGENERATE}`"


def test_check_without_a_file_checks_both_docs_pages(capsys):
    assert reference.DEFAULT_FILES == (CONFIG_DOC, CLI_DOC)
    assert reference.main(["--check"]) == 0, capsys.readouterr()


@pytest.mark.parametrize(
    ("page", "start", "end", "stale"),
    [
        (CONFIG_DOC, reference.START, reference.END, ("`stages.validate.atol`", "`stages.validate.atoll`")),
        (CLI_DOC, reference.CLI_START, reference.CLI_END, ("Stop after STAGE.", "Stop before STAGE.")),
    ],
)
def test_check_fails_on_a_stale_copy_of_a_docs_page(tmp_path, capsys, page, start, end, stale):
    """A docs page whose generated section was edited by hand (or not regenerated after the
    code changed) fails the check, and --write brings it back to exactly the committed page."""
    copy = tmp_path / page.name
    text = page.read_text(encoding="utf-8")
    assert stale[0] in reference.current(text, start, end)
    copy.write_text(text.replace(stale[0], stale[1], 1), encoding="utf-8")
    assert reference.main(["--check", str(copy)]) == 1
    out = capsys.readouterr()
    assert stale[1] in out.out and "stale" in out.err and "--write" in out.err
    assert reference.main(["--write", str(copy)]) == 0
    assert copy.read_text(encoding="utf-8") == text


def test_the_cli_reference_lists_every_command_and_option():
    import typer.main

    from deploy.cli import app

    text = reference.render_cli()
    root = typer.main.get_command(app)
    context = root.context_class(root, info_name="deploy", **root.context_settings)
    commands = list(reference._commands(root, context))
    assert {ctx.command_path for _, _, ctx in commands} >= {
        "deploy",
        "deploy run",
        "deploy plan",
        "deploy validate",
        "deploy serve",
        "deploy bench",
        "deploy doctor",
        "deploy cache",
        "deploy cache ls",
        "deploy cache gc",
        "deploy cache verify",
    }
    for _, command, ctx in commands:
        assert f"`{ctx.command_path}`" in text
        for param in command.get_params(ctx):
            for opt in [*param.opts, *param.secondary_opts]:
                if opt.startswith("-"):
                    assert opt in text, (ctx.command_path, opt)
    assert "| `--warmUp <float range>` | Warm-up time, ms. [default: 200.0; x>=0] |" in text


def test_every_field_has_a_description():
    missing = reference.missing_descriptions()
    assert not missing, f"fields without Field(description=...): {', '.join(missing)}"


def test_every_stage_and_shared_key_is_listed():
    titles = [section.title for section in reference.sections()]
    assert titles == [
        "Shared keys",
        "Run settings (every stage)",
        *(f"`stages.{name}`" for name in stage_specs()),
    ]
    shared = {row.path for row in reference.sections()[0].rows}
    assert set(DeployConfig.model_fields) <= shared
    assert {"model.factory", "inputs[].dims", "outputs[].name"} <= shared


def test_known_defaults_render_from_the_model():
    from deploy.stages.triton_config.params import TritonParams
    from deploy.stages.validate import ValidateParams

    atol = ValidateParams.model_fields["atol"].default
    assert _row("stages.validate.atol").default == reference.render_value(atol) == repr(atol)
    formats = TritonParams.model_fields["formats"].default
    assert (
        _row("stages.triton_config.formats").default
        == reference.render_value(formats)
        == f"[{', '.join(formats)}]"
    )
    assert _row("name").default == reference.REQUIRED
    assert _row("stages.quantize.holdout").default == "null"
    assert _row("stages.build.profiles[].shapes").default == "{}"


def test_nested_defaults_are_the_parents_where_they_differ():
    """trace's tolerance is tighter than Tolerance's defaults: its own row says so, while
    its fields' rows keep the defaults that apply to keys left out of `tolerance: {...}`."""
    from deploy.gates.tolerance import Tolerance
    from deploy.stages.trace import TraceParams

    tight = TraceParams.model_fields["tolerance"].default
    assert yaml.safe_load(_row("stages.trace.tolerance").default) == tight.model_dump()
    assert _row("stages.trace.tolerance.atol").default == reference.render_value(
        Tolerance.model_fields["atol"].default
    )


def test_rendered_defaults_read_back_as_the_defaults():
    """Each default, pasted into a config, validates to the model's default."""
    checked = 0
    for path, field in _all_fields():
        if field.is_required():
            continue
        rendered = reference.render_default(field)
        default = field.get_default(call_default_factory=True, validated_data={})
        adapter = TypeAdapter(
            Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        )
        assert adapter.validate_python(yaml.safe_load(f"v: {rendered}")["v"]) == default, (path, rendered)
        checked += 1
    assert checked > 50


def test_types_render_readably():
    class Inner(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        kind: Literal["a"] = "a"
        x: int = Field(1, ge=1, description="x")

    class Other(BaseModel):
        kind: Literal["b"] = "b"
        path: Path = Field(Path("p"), description="p")

    class Sample(BaseModel):
        choice: Literal["p", "q", "r"] = Field("p", description="c")
        shape: tuple[int, ...] = Field((1, 2), min_length=1, description="s")
        pair: tuple[float, float] | None = Field(None, description="p")
        port: int | None = Field(None, ge=1, le=65535, description="p")
        named: dict[str, Inner] = Field(default_factory=dict, description="n")
        either: Inner | Other = Field(Inner(), description="e")
        scale: float = Field(1e-05, gt=0, description="s")
        need: list[str] = Field(description="n")

    rows = {row.path: row for row in reference.rows(Sample, "s")}
    assert rows["s.choice"].type == "p | q | r"
    assert (rows["s.shape"].type, rows["s.shape"].default) == ("non-empty list[int]", "[1, 2]")
    assert (rows["s.pair"].type, rows["s.pair"].default) == ("[float, float] | null", "null")
    assert rows["s.port"].type == "1 ≤ int ≤ 65535 | null"
    assert (rows["s.named"].type, rows["s.named"].default) == ("map[str, object]", "{}")
    assert rows["s.named.*.x"].type == "int ≥ 1"
    assert rows["s.either"].type == "object"
    assert {"s.either[kind: a].x", "s.either[kind: b].path"} <= set(rows)
    assert (rows["s.scale"].type, rows["s.scale"].default) == ("float > 0", "1.0e-05")
    assert rows["s.need"].default == reference.REQUIRED


def test_markdown_escapes_table_pipes_and_tags():
    row = reference.Row("a", "x | null", "null", "`a|b` or <name> | c")
    line = reference.render([reference.DocSection("S", "", (row,))]).splitlines()[-1]
    assert line == r"| `a` | `x \| null` | `null` | `a\|b` or \<name> \| c |"


def test_check_and_write(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{reference.START}\nold text\n{reference.END}\nafter\n")
    assert reference.main(["--check", str(readme)]) == 1
    out = capsys.readouterr()
    assert "-old text" in out.out and "--write" in out.err
    assert reference.main(["--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n" + reference.START + "\n") and text.endswith(
        reference.END + "\nafter\n"
    )
    assert reference.current(text) == reference.render()
    assert reference.main(["--check", str(readme)]) == 0
    (tmp_path / "no_markers.md").write_text("nothing\n")
    assert reference.main(["--check", str(tmp_path / "no_markers.md")]) == 2
    (tmp_path / "half.md").write_text(f"{reference.CLI_START}\nno end\n")
    assert reference.main(["--check", str(tmp_path / "half.md")]) == 2


def test_check_and_write_both_sections_of_one_file(tmp_path):
    doc = tmp_path / "both.md"
    doc.write_text(
        f"a\n{reference.START}\nold\n{reference.END}\nb\n{reference.CLI_START}\nold\n{reference.CLI_END}\nc\n"
    )
    assert reference.main(["--check", str(doc)]) == 1
    assert reference.main(["--write", str(doc)]) == 0
    text = doc.read_text()
    assert reference.current(text) == reference.render()
    assert reference.current(text, reference.CLI_START, reference.CLI_END) == reference.render_cli()
    assert text.startswith("a\n") and text.endswith(f"{reference.CLI_END}\nc\n")
    assert reference.main(["--check", str(doc)]) == 0


def test_the_config_reference_example_is_a_valid_config(tmp_path):
    """The hand-written example before the generated tables must stay a working config."""
    from deploy.pipeline.graph.project import load_project

    text = CONFIG_DOC.read_text(encoding="utf-8")
    before = text[: text.index(reference.START)]
    example = re.findall(r"```yaml\n(.*?)```", before, re.S)[-1]
    data = yaml.safe_load(example)
    data["model"]["file"] = str(ROOT / "configs" / data["model"]["file"])
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    project = load_project(path, tmp_path / "cache")
    assert project.config.name == data["name"]


def test_run_path_never_imports_the_generator():
    code = "import sys, deploy.cli, deploy.pipeline.graph.project, deploy.pipeline.process.runner; print('deploy.reference' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "true"),
        (0.0001, "0.0001"),
        (1e-05, "1.0e-05"),
        ((), "[]"),
        ({}, "{}"),
        (("onnx", "python"), "[onnx, python]"),
        (Path(".deploy-cache"), ".deploy-cache"),
        ("8.0", '"8.0"'),
        ("127.0.0.1", "127.0.0.1"),
        ("no", '"no"'),
        ({"a": [1, 2]}, "{a: [1, 2]}"),
    ],
)
def test_values_render_as_yaml(value, text):
    assert reference.render_value(value) == text
    assert yaml.safe_load(f"v: {text}")["v"] == (
        list(value) if isinstance(value, tuple) else str(value) if isinstance(value, Path) else value
    )
