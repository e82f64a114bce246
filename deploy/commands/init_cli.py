"""`deploy init`: its arguments; the work is deploy/commands/init.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deploy.commands.cli_common import console as _console

Inputs = Annotated[
    list[str],
    typer.Option(
        "--input",
        help="NAME:DTYPE:MIN/OPT/MAX (repeatable), e.g. image:float32:1x3x224x224/4x3x224x224/8x3x224x224.",
    ),
]
Factory = Annotated[str | None, typer.Option(help="The model: `module:callable` returning the nn.Module.")]
File = Annotated[Path | None, typer.Option(help="The model: a Python file (with --callable).")]
Callable = Annotated[str | None, typer.Option("--callable", help="The function in --file.")]
TorchScript = Annotated[Path | None, typer.Option(help="The model: a TorchScript file.")]
Kwargs = Annotated[
    list[str], typer.Option("--kwarg", help="KEY=VALUE for the factory (repeatable; VALUE read as YAML).")
]
Name = Annotated[
    str | None,
    typer.Option(help="Pipeline name (default: --output's file name, else from the model's source)."),
]
Output = Annotated[Path | None, typer.Option("--output", "-o", help="Where to write (default: NAME.yaml).")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace an existing file.")]
ValueRanges = Annotated[
    list[str],
    typer.Option(
        "--value-range", help="NAME=LOW,HIGH: an input's values, inclusive for integers (repeatable)."
    ),
]
Values = Annotated[
    list[str],
    typer.Option(
        "--values",
        help="NAME=KIND[:DIM]: what an integer input holds: mask, lengths:DIM, indices:DIM, offsets:DIM "
        "(DIM: the named dim whose size bounds them; repeatable).",
    ),
]
BatchDim = Annotated[
    str | None,
    typer.Option(
        "--batch-dim",
        help="The batch dim's name, or `none` for a model without one. Default: axis 0 where it varies "
        "alike in every input, else none.",
    ),
]


def init(
    inputs: Inputs,
    factory: Factory = None,
    file: File = None,
    callable_: Callable = None,
    torchscript: TorchScript = None,
    kwarg: Kwargs = [],  # noqa: B006
    name: Name = None,
    output: Output = None,
    overwrite: Overwrite = False,
    value_range: ValueRanges = [],  # noqa: B006
    values: Values = [],  # noqa: B006
    batch_dim: BatchDim = None,
) -> None:
    """Write a starter config for a model: it is built and called with the declared shapes
    (twice: a forward that draws noise is named), and its outputs (tensor, tuple, dict,
    NamedTuple, ModelOutput, a cache) become the declared outputs."""
    from deploy.commands.init import InitRequest, initialise

    request = InitRequest(
        factory,
        file,
        callable_,
        torchscript,
        kwarg,
        inputs,
        name,
        output,
        overwrite,
        value_range,
        values,
        batch_dim,
    )
    dest, said = initialise(request)  # how the model was called, and what its run will refuse
    console = _console()
    if said:  # the model's words (shapes, names in brackets) are not markup
        console.print(said, markup=False, highlight=False, soft_wrap=True)
    console.print(f"[green]wrote[/] {dest}: check the guesses, then `deploy run {dest}`")
