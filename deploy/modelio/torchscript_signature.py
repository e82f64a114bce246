"""The forward signature of a saved TorchScript module, read without torch.

A TorchScript file is a zip: `data.pkl` pickles the top-level module, whose class is
the first global it names (e.g. `__torch__.M`), and `code/__torch__[/...].py` holds that
class's TorchScript source, which is Python syntax with type annotations. Both are read
as data: nothing is unpickled or executed.
"""

from __future__ import annotations

import ast
import pickletools
import zipfile
from pathlib import Path


def forward_args(path: Path) -> list[tuple[str, str]] | None:
    """[(name, annotation)] of forward's arguments after self; None when the file does
    not have the expected layout (the trace stage will report what torch makes of it)."""
    try:
        with zipfile.ZipFile(path) as archive:
            root = archive.namelist()[0].split("/")[0]
            qualified = _top_class(archive.read(f"{root}/data.pkl"))
            if qualified is None:
                return None
            module, _, name = qualified.rpartition(".")
            source = archive.read(f"{root}/code/{module.replace('.', '/')}.py").decode()
    except (OSError, KeyError, IndexError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    return _forward(source, name)


def _top_class(pickled: bytes) -> str | None:
    """The first global the pickle names: the class of the object it builds."""
    strings: list[str] = []
    for op, arg, _ in pickletools.genops(pickled):
        if op.name == "GLOBAL":
            return str(arg).replace(" ", ".")
        if isinstance(arg, str):
            strings.append(arg)
        if op.name == "STACK_GLOBAL" and len(strings) >= 2:
            return f"{strings[-2]}.{strings[-1]}"
    return None


def _forward(source: str, class_name: str) -> list[tuple[str, str]] | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return [
                        (a.arg, ast.unparse(a.annotation) if a.annotation else "Tensor")
                        for a in item.args.args[1:]
                    ]
    return None
