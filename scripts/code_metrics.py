"""The vocabulary metrics issue 40 tracks, measured on deploy/ by its AST:
string-literal comparisons, `Any` (all, and in stages), `dict[str, Any]` in stages, engine
and app, and `type: ignore` comments.   python scripts/code_metrics.py [ROOT]"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _literal_comparisons(tree: ast.AST) -> int:
    def literal(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    found = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and node.ops and isinstance(node.ops[0], ast.Eq | ast.NotEq):
            found += any(literal(side) for side in [node.left, *node.comparators])
    return found


def _any_names(tree: ast.AST) -> int:
    return sum(
        (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")
        for n in ast.walk(tree)
    )


def _dict_str_any(tree: ast.AST) -> int:
    return sum(
        isinstance(n, ast.Subscript) and ast.unparse(n).replace(" ", "") in {"dict[str,Any]", "Dict[str,Any]"}
        for n in ast.walk(tree)
    )


def measure(root: Path) -> dict[str, int]:
    totals = {"literal_comparisons": 0, "any": 0, "any_in_stages": 0, "dict_str_any": 0, "type_ignore": 0}
    for path in sorted((root / "deploy").rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        in_stages = "stages" in path.relative_to(root / "deploy").parts
        totals["literal_comparisons"] += _literal_comparisons(tree)
        totals["any"] += _any_names(tree)
        totals["any_in_stages"] += _any_names(tree) if in_stages else 0
        totals["dict_str_any"] += _dict_str_any(tree)
        totals["type_ignore"] += text.count("type: ignore")
    return totals


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    modules = list((root / "deploy").rglob("*.py"))
    lines = sum(len(p.read_text().splitlines()) for p in modules)
    print(f"modules {len(modules)}  lines {lines}")
    for name, value in measure(root).items():
        print(f"{name:22} {value}")
