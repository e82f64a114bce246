"""The README's config reference, generated from the pydantic models.

Every key a config may hold, with its type, its default and its description, is read
from `DeployConfig` (the fields every stage shares) and from each stage's params model
(`StageSpec.params`), so the reference cannot drift from the schema:

    python -m deploy.reference                    # print it
    python -m deploy.reference --write README.md  # replace the marked section
    python -m deploy.reference --check README.md  # exit 1, with a diff, if stale

Imported only by this command and the tests, never on a `deploy run`: it imports every
stage module (stdlib + pydantic otherwise).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from deploy.yaml_text import REQUIRED, is_model, is_union, render_default, render_type, render_value

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"
# The DeployConfig key under which each stage's params sit (one section per stage).
STAGES_FIELD = "stages"


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
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
def sections() -> list[Section]:
    """The shared fields, then one section per stage in the registry's (name) order."""
    from pipeline.config import DeployConfig
    from pipeline.registry import stage_specs

    shared = Section(
        "Shared keys",
        "Top-level keys of the config file.",
        tuple(rows(DeployConfig)),
    )
    from pipeline.contract import RunSettings

    run = Section(
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
            Section(f"`{STAGES_FIELD}.{name}`", intro, tuple(rows(spec.params, f"{STAGES_FIELD}.{name}")))
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


def render(parts: Sequence[Section] | None = None) -> str:
    """Markdown: a short preamble, then per section a heading and a table of
    field | type | default | description. Deterministic."""
    parts = sections() if parts is None else parts
    lines = [
        "<!-- Generated by `python -m deploy.reference --write README.md` from the pydantic models: do not edit by hand. -->",
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


# -- the README section -----------------------------------------------------------------------------
def current(document: str) -> str:
    """The text between the markers (exclusive), without the newline that follows START."""
    start, end = _bounds(document)
    return document[start:end]


def replace(document: str, reference: str) -> str:
    start, end = _bounds(document)
    return document[:start] + reference + document[end:]


def _bounds(document: str) -> tuple[int, int]:
    start, end = document.find(START), document.find(END)
    if start < 0 or end < start or document.count(START) != 1 or document.count(END) != 1:
        raise ValueError(f"expected exactly one '{START}' followed by one '{END}'")
    body = start + len(START)
    if document.startswith("\n", body):
        body += 1
    return body, end


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.reference", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--check",
        type=Path,
        metavar="FILE",
        help="exit 1, with a diff, if FILE's section is not the generated one",
    )
    group.add_argument(
        "--write", type=Path, metavar="FILE", help="replace FILE's section with the generated one"
    )
    args = parser.parse_args(argv)
    reference = render()
    target = args.check or args.write
    if target is None:
        sys.stdout.write(reference)
        return 0
    try:
        document = target.read_text(encoding="utf-8")
        old = current(document)
    except (OSError, ValueError) as exc:
        print(f"{target}: {exc}", file=sys.stderr)
        return 2
    if args.write:
        if old != reference:
            target.write_text(replace(document, reference), encoding="utf-8")
        print(f"{target}: config reference {'updated' if old != reference else 'already up to date'}")
        return 0
    if old == reference:
        return 0
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), reference.splitlines(keepends=True), f"{target} (current)", "generated"
    )
    sys.stdout.writelines(diff)
    print(
        f"\n{target}: the config reference is stale; run: python -m deploy.reference --write {target}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
