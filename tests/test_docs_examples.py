"""The docs' examples run, or say they don't: every shell, console and Python block of the
README and of every page of the site carries a marker on the line before it,

    <!-- example: runs in tests/some_test.py::test_name -->     (that test runs it)
    <!-- example: illustrative: why it cannot run in CI -->      (a GPU, a server left up, …)

and the README's Python block runs here as written, from a fresh cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]  # every page of the site
LANGUAGES = ("bash", "console", "python", "shell", "sh")
MARKER = re.compile(
    r"<!-- example: (?:runs in (?P<test>tests/[\w/]+\.py::\w+)|illustrative: (?P<why>.+?)) -->"
)


def examples(page: Path) -> list[tuple[int, str, str]]:
    """(line number, language, the line before the fence) of every example block."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, inside = [], False
    for number, line in enumerate(lines):
        if line.startswith("```"):
            if not inside and line[3:].strip() in LANGUAGES:
                found.append((number + 1, line[3:].strip(), lines[number - 1] if number else ""))
            inside = not inside
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_runs_in_a_test_or_says_it_is_illustrative(page: Path) -> None:
    problems = []
    for number, language, before in examples(page):
        marked = MARKER.search(before)
        where = f"{page.relative_to(ROOT)}:{number} ({language})"
        if marked is None:
            problems.append(f"{where}: no '<!-- example: … -->' marker on the line before it")
        elif marked["test"]:
            path, name = marked["test"].split("::")
            if f"def {name}(" not in (ROOT / path).read_text(encoding="utf-8"):
                problems.append(f"{where}: {marked['test']} does not exist")
    assert not problems, "\n".join(problems)


def python_block(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    block = re.search(r"## From Python.*?```python\n(.*?)\n```", text, re.S)
    assert block, f"{page.name} has no Python block under 'From Python'"
    return block.group(1)


def test_the_readme_python_example_runs_as_written(tmp_path: Path) -> None:
    """A new user's first script: no `__main__` guard, a fresh cache, the checkout's configs.
    getting-started shows the same block (so this runs both)."""
    readme = python_block(ROOT / "README.md")
    assert python_block(ROOT / "docs" / "getting-started.md") == readme
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    script = tmp_path / "first.py"
    script.write_text(readme)
    env = {**os.environ, "DEPLOY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout.splitlines()
    assert any(line.startswith("validate run ") for line in said), proc.stdout
    # validate's headline compares each runtime with eager: ONNX Runtime within float rounding
    cosine = re.search(r"onnxruntime: max\|Δ\| \S+ \(\S+ of max\|ref\|\), min cos ([0-9.]+)", proc.stdout)
    assert cosine and float(cosine.group(1)) >= 0.9999, proc.stdout
    onnx = next(Path(line) for line in said if line.endswith(".onnx"))
    assert onnx.is_file() and str(onnx).startswith(str(tmp_path / "cache")), onnx
