"""The generated references of the docs: the config reference, from the pydantic models,
and the CLI reference, from the typer app.

Every key a config may hold, with its type, its default and its description, is read
from `DeployConfig` (the fields every stage shares) and from each stage's params model
(`StageSpec.params`); every command, argument and option with its help from
`deploy.cli.app`. So neither reference can drift from the code. Each lives in a document
between markers (`<!-- config-reference:start -->` ... `end -->`, `<!-- cli-reference:... -->`):

    python -m deploy.reference               # print the config reference
    python -m deploy.reference --cli         # print the CLI reference
    python -m deploy.reference --write       # replace the marked sections of the docs
                                             # (docs/reference/config.md and cli.md)
    python -m deploy.reference --check       # exit 1, with a diff, if either is stale
    python -m deploy.reference --check FILE  # the marked sections of FILE

Imported only by this command and the tests, never on a `deploy run`: it imports every
stage module and the CLI (stdlib + pydantic + typer otherwise).
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import sys
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from deploy.yaml_text import REQUIRED, is_model, is_union, render_default, render_type, render_value

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"
CLI_START = "<!-- cli-reference:start -->"
CLI_END = "<!-- cli-reference:end -->"
# Where `--write` and `--check` without a FILE look: the docs of this checkout.
DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference"
DEFAULT_FILES = (DOCS / "config.md", DOCS / "cli.md")
REGENERATE = "python -m deploy.reference --write"
# The DeployConfig key under which each stage's params sit (one section per stage).
STAGES_FIELD = "stages"


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class DocSection:
    title: str
    intro: str
    rows: tuple[Row, ...]


# -- walking the models -------------------------------------------------------------------------
def walk(
    model: type[BaseModel], prefix: str = "", _seen: tuple[type[BaseModel], ...] = ()
) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted path, field) for every field of `model`, each followed (depth first) by the
    fields of the models it holds: `prefix.field`, `prefix.list[].field`, `prefix.map.*.field`;
    the variants of a union of models one after the other, as `prefix.field[kind: images].x`."""
    if model in _seen:  # a recursive model: its fields are listed once, further up
        return
    model.model_rebuild()  # resolves postponed annotations (defer_build=True models)
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}" if prefix else field.alias or name
        yield path, field
        yield from _nested(field.annotation, path, (*_seen, model))


def rows(model: type[BaseModel], prefix: str = "") -> Iterator[Row]:
    for path, field in walk(model, prefix):
        yield Row(
            path,
            render_type(field.annotation, field.metadata),
            render_default(field),
            _one_line(field.description),
        )


def _nested(annotation: Any, path: str, seen: tuple[type[BaseModel], ...]) -> Iterator[tuple[str, FieldInfo]]:
    annotation = _strip(annotation)
    if is_model(annotation):
        yield from walk(annotation, path, seen)
        return
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if is_union(annotation):
        variants = [a for a in (_strip(a) for a in args) if a is not type(None)]
        models = [a for a in variants if is_model(a)]
        if len(models) > 1:
            for variant in models:
                yield from walk(variant, f"{path}[{_variant_label(variant)}]", seen)
            return
        for variant in variants:
            yield from _nested(variant, path, seen)
    elif origin in (tuple, list, Sequence, set, frozenset) and args:
        items = [a for a in args if a is not Ellipsis]
        if len(set(items)) == 1:
            yield from _nested(items[0], f"{path}[]", seen)
    elif origin in (dict, Mapping) and len(args) == 2:
        yield from _nested(args[1], f"{path}.*", seen)


def _variant_label(model: type[BaseModel]) -> str:
    """A union variant by its tag (a field that is a one-value Literal), else its class name."""
    for name, field in model.model_fields.items():
        annotation = _strip(field.annotation)
        if typing.get_origin(annotation) is typing.Literal and len(typing.get_args(annotation)) == 1:
            return f"{name}: {render_value(typing.get_args(annotation)[0])}"
    return model.__name__


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


# -- sections and Markdown -----------------------------------------------------------------------
def sections() -> list[DocSection]:
    """The shared fields, then one section per stage in the registry's (name) order."""
    from deploy.pipeline.graph.registry import stage_specs
    from deploy.spec.config import DeployConfig

    shared = DocSection(
        "Shared keys",
        "Top-level keys of the config file.",
        tuple(rows(DeployConfig)),
    )
    from deploy.pipeline.graph.contract import RunSettings

    run = DocSection(
        "Run settings (every stage)",
        "Beside a stage's params in its section (`export: {opset: 18, timeout_s: 600}`); how the stage's code "
        "is run, not what it computes, so never in its cache key. `timeout_s` defaults per stage (in each "
        "stage's section below).",
        tuple(rows(RunSettings, f"{STAGES_FIELD}.<stage>")),
    )
    out = [shared, run]
    for name, spec in stage_specs().items():
        intro = f"{spec.description}." if spec.description else ""
        intro += f" Default `timeout_s`: {spec.timeout_s:g}."
        out.append(
            DocSection(f"`{STAGES_FIELD}.{name}`", intro, tuple(rows(spec.params, f"{STAGES_FIELD}.{name}")))
        )
    return out


def missing_descriptions() -> list[str]:
    """Paths of every field that has no description (the test lists them)."""
    return [row.path for section in sections() for row in section.rows if not row.description]


def _cell(text: str) -> str:
    """A table cell: `|` escaped (also inside code spans, as GFM tables require), and `<`
    outside code spans, so that `<name>` is not taken for an HTML tag."""
    parts = text.split("`")
    parts[::2] = [part.replace("<", "\\<") for part in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def render(parts: Sequence[DocSection] | None = None) -> str:
    """Markdown: a short preamble, then per section a heading and a table of
    field | type | default | description. Deterministic."""
    parts = sections() if parts is None else parts
    lines = [
        f"<!-- Generated by `{REGENERATE}` from the pydantic models: do not edit by hand. -->",
        "",
        "Every key a config may hold. A nested object's own row gives its default as a whole; the",
        "defaults of its fields' rows are those of the keys you leave out when you write that object",
        "(writing `tolerance: {atol: 0.1}` resets the other keys to their defaults listed here).",
        "`list[...]` is a YAML sequence, `map[...]` a mapping; `a[]` is every item of the list `a`,",
        "`m.*` every value of the mapping `m`.",
    ]
    for section in parts:
        lines += ["", f"### {section.title}", ""]
        if section.intro:
            lines += [section.intro, ""]
        lines += ["| field | type | default | description |", "| --- | --- | --- | --- |"]
        if not section.rows:
            lines.append("| (none) | | | This stage takes no parameters. |")
        lines += [
            f"| {_code(r.path)} | {_code(r.type)} | {_code(r.default) if r.default != REQUIRED else REQUIRED} | {_cell(r.description)} |"
            for r in section.rows
        ]
    return "\n".join(lines) + "\n"


# -- the CLI reference -----------------------------------------------------------------------------
def render_cli(root: Any = None) -> str:
    """Markdown: per command of the `deploy` app (groups first, then their commands, in the
    order they were registered), its help, its usage line and a table of its arguments and
    options as `--help` words them (defaults, ranges, `[required]`). Deterministic: it never
    depends on the terminal's width."""
    if root is None:
        import typer.main

        from deploy.cli import app

        root = typer.main.get_command(app)
    lines = [
        f"<!-- Generated by `{REGENERATE}` from the typer app (deploy/cli.py): do not edit by hand. -->",
    ]
    context = root.context_class(root, info_name="deploy", **root.context_settings)
    for depth, command, ctx in _commands(root, context):
        lines += ["", f"{'#' * (depth + 2)} `{ctx.command_path}`", ""]
        if command.help:
            lines += [_text(paragraph) for paragraph in _paragraphs(command.help)]
            lines.append("")
        usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
        lines += ["```text", f"Usage: {usage}", "```", ""]
        records = [
            record
            for param in command.get_params(ctx)
            if not getattr(param, "hidden", False) and (record := param.get_help_record(ctx)) is not None
        ]
        lines += ["| argument / option | description |", "| --- | --- |"]
        lines += [f"| {_code(_one_line(name))} | {_cell(_one_line(text))} |" for name, text in records]
        subcommands = _subcommands(command, ctx)
        if subcommands:
            lines += ["", "| command | what it does |", "| --- | --- |"]
            lines += [
                f"| {_code(f'{ctx.command_path} {name}')} | {_cell(_one_line(_paragraphs(sub.help or '')[0] if sub.help else ''))} |"
                for name, sub in subcommands
            ]
    return "\n".join(lines) + "\n"


def _commands(command: Any, ctx: Any, depth: int = 0) -> Iterator[tuple[int, Any, Any]]:
    yield depth, command, ctx
    for name, sub in _subcommands(command, ctx):
        child = sub.context_class(sub, info_name=name, parent=ctx, **sub.context_settings)
        yield from _commands(sub, child, depth + 1)


def _subcommands(command: Any, ctx: Any) -> list[tuple[str, Any]]:
    if not hasattr(command, "list_commands"):
        return []
    found = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
    return [(name, sub) for name, sub in found if sub is not None and not getattr(sub, "hidden", False)]


def _paragraphs(text: str) -> list[str]:
    """A help text's paragraphs, each on one line (click rewraps them to the terminal)."""
    return [" ".join(block.split()) for block in inspect.cleandoc(text).split("\n\n") if block.strip()]


def _text(text: str) -> str:
    """Prose outside a table: `<` outside code spans escaped, so `<name>` is not an HTML tag."""
    parts = text.split("`")
    parts[::2] = [part.replace("<", "\\<") for part in parts[::2]]
    return "`".join(parts)


# -- the marked sections of a document -------------------------------------------------------------
def current(document: str, start: str = START, end: str = END) -> str:
    """The text between the markers (exclusive), without the newline that follows `start`."""
    first, last = _bounds(document, start, end)
    return document[first:last]


def replace(document: str, reference: str, start: str = START, end: str = END) -> str:
    first, last = _bounds(document, start, end)
    return document[:first] + reference + document[last:]


def _bounds(document: str, start: str, end: str) -> tuple[int, int]:
    first, last = document.find(start), document.find(end)
    if first < 0 or last < first or document.count(start) != 1 or document.count(end) != 1:
        raise ValueError(f"expected exactly one '{start}' followed by one '{end}'")
    body = first + len(start)
    if document.startswith("\n", body):
        body += 1
    return body, last


# The generated sections a document may hold: its markers, what goes between them, a name.
SECTIONS: tuple[tuple[str, str, Callable[[], str], str], ...] = (
    (START, END, render, "config reference"),
    (CLI_START, CLI_END, render_cli, "CLI reference"),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.reference", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--check",
        type=Path,
        nargs="*",
        metavar="FILE",
        help="exit 1, with a diff, if a marked section of FILE (default: the docs' references) is stale",
    )
    group.add_argument(
        "--write",
        type=Path,
        nargs="*",
        metavar="FILE",
        help="replace the marked sections of FILE (default: the docs' references) with the generated ones",
    )
    group.add_argument("--cli", action="store_true", help="print the CLI reference instead of the config one")
    args = parser.parse_args(argv)
    targets = args.check if args.check is not None else args.write
    if targets is None:
        sys.stdout.write(render_cli() if args.cli else render())
        return 0
    status = 0
    for target in targets or DEFAULT_FILES:
        status = max(status, _sync(target, write=args.write is not None))
    return status


def _sync(target: Path, write: bool) -> int:
    """Check (or write) every marked section of one document: 0 current, 1 stale, 2 unusable."""
    if target.is_absolute() and target.is_relative_to(Path.cwd()):
        target = target.relative_to(Path.cwd())  # messages name it as the user would
    try:
        document = target.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"{target}: {exc}", file=sys.stderr)
        return 2
    found = [section for section in SECTIONS if section[0] in document or section[1] in document]
    if not found:
        print(f"{target}: no generated section ('{START}' or '{CLI_START}')", file=sys.stderr)
        return 2
    status, updated = 0, document
    for start, end, generate, name in found:
        try:
            old = current(updated, start, end)
        except ValueError as exc:
            print(f"{target}: {exc}", file=sys.stderr)
            return 2
        new = generate()
        if write:
            updated = replace(updated, new, start, end)
            print(f"{target}: {name} {'updated' if old != new else 'already up to date'}")
        elif old != new:
            diff = difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"{target} (current)",
                "generated",
            )
            sys.stdout.writelines(diff)
            print(f"\n{target}: the {name} is stale; run: {REGENERATE} {target}", file=sys.stderr)
            status = 1
    if write and updated != document:
        target.write_text(updated, encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
