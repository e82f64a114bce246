"""The layering, read from the source with `ast` (nothing is imported). One import
package, `deploy`, whose folders are the layers:

    deploy/*.py          the app (CLI, API)           may import everything below
    deploy/stages/       the stages, nothing else     a stage imports no other stage, and
                                                      reads no other stage's YAML section
    deploy/gates/ datasources/ modelio/ runtimes/ serving/ starter/ samples/
                         libraries the stages share   import neither stages nor the app
    deploy/pipeline/     the engine                   imports no stage, app or library
    deploy/spec/         what a config declares       imports the vocabulary only
                         (the model's source, tensors, detections, paths)
    deploy/domain/       the domain's vocabulary      imports no other deploy package

Below, a module is named by its layer (`pipeline.process.runner` is `deploy.pipeline.process.runner`,
`deploy.cli` the app's)
and no two modules import each other, directly or through others; no module name is
used in two packages; library modules say what they are in a docstring; and project
modules are imported under their own names."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("gates", "datasources", "modelio", "runtimes", "serving", "starter", "samples")
PACKAGES = ("deploy", "pipeline", "stages", "spec", "domain", *LIBRARIES)
LAYERED = ("pipeline", "stages", "spec", "domain", *LIBRARIES)  # sub-packages of deploy named by their layer


def logical(name: str) -> str:
    """`deploy.pipeline.process.runner` -> `pipeline.process.runner`; app modules keep `deploy.`."""
    parts = name.split(".")
    return ".".join(parts[1:]) if len(parts) > 1 and parts[0] == "deploy" and parts[1] in LAYERED else name


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return logical(".".join(parts[:-1] if parts[-1] == "__init__" else parts))


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "deploy").rglob("*.py"))}


def package_of(path: Path) -> str:
    return module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]


def imported(path: Path, package: str) -> Iterator[str]:
    """Every module an import statement names, at any depth (lazy imports count too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (logical(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            yield logical(base)
            yield from (logical(f"{base}.{alias.name}") for alias in node.names)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def project_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules a file imports. `from pkg import mod` imports `pkg.mod`; the
    package itself counts only when a name taken from it is not a module."""
    names = set(imported(path, package_of(path)))
    parents = {n.rpartition(".")[0] for n in names if n in known and "." in n}
    return {n for n in names if n in known and not (n in parents and not _takes_attribute(n, names, known))}


def _takes_attribute(package: str, names: set[str], known: dict[str, Path]) -> bool:
    return any(
        n.startswith(package + ".") and n not in known and n.count(".") == package.count(".") + 1
        for n in names
    )


def is_stage(name: str, known: dict[str, Path]) -> bool:
    """A stage is a module of `stages` (or a package under it) that defines SPEC, or
    SPECS: one definition making a stage per parameter (a precision)."""
    parts = name.split(".")
    if parts[0] != "stages" or len(parts) < 2 or parts[1].startswith("_"):
        return False
    text = known[name].read_text()
    return "SPEC = StageSpec(" in text or "\nSPECS = " in text or (f"{name}.stage" in known)


def stage_of(name: str, known: dict[str, Path]) -> str | None:
    parts = name.split(".")
    head = ".".join(parts[:2])
    return head if len(parts) >= 2 and head in known and is_stage(head, known) else None


KNOWN = modules()


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if n.startswith("pipeline")))
def test_the_engine_imports_no_stage_app_or_library(name: str) -> None:
    bad = sorted(
        i for i in project_imports(KNOWN[name], KNOWN) if i.split(".")[0] in ("stages", "deploy", *LIBRARIES)
    )
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if n.startswith("domain")))
def test_the_vocabulary_imports_no_other_deploy_package(name: str) -> None:
    bad = sorted(i for i in project_imports(KNOWN[name], KNOWN) if not i.startswith("domain"))
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if n.startswith("spec")))
def test_the_spec_imports_only_the_vocabulary(name: str) -> None:
    """The engine is generic: it validates and hashes the spec but the spec knows no engine."""
    bad = sorted(i for i in project_imports(KNOWN[name], KNOWN) if i.split(".")[0] not in ("spec", "domain"))
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if n.split(".")[0] in LIBRARIES))
def test_shared_libraries_import_no_stage_and_no_app(name: str) -> None:
    bad = sorted(i for i in project_imports(KNOWN[name], KNOWN) if i.split(".")[0] in ("stages", "deploy"))
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if n.startswith("stages.")))
def test_a_stage_imports_no_other_stage(name: str) -> None:
    own = stage_of(name, KNOWN)
    others = {stage_of(i, KNOWN) for i in project_imports(KNOWN[name], KNOWN)} - {None, own}
    assert not others, f"{name} imports the stage(s) {sorted(o for o in others if o)}"


def raw_stage_reads(path: Path) -> list[str]:
    """Reads of a stage's YAML section by subscript, `.get` or iteration (`x.stages[...]`,
    `x.stages.get(...)`, `x.stages.items()`): outside the engine, another stage's
    settings come through a declared fact (pipeline/graph/facts.py). Asking whether a stage is
    configured (`"select" in config.stages`) is not a read."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        target = node.value if isinstance(node, ast.Subscript) else None
        if isinstance(node, ast.Attribute) and node.attr in ("get", "items", "values", "keys", "__getitem__"):
            target = node.value
        if isinstance(target, ast.Attribute) and target.attr == "stages" and _is_config(target.value):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _is_config(node: ast.expr) -> bool:
    """`config`, `ctx.config`, `self.project.config`, `raw_config`: a DeployConfig (or its YAML)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "config" in name.lower()


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if not n.startswith("pipeline")))
def test_no_stage_reads_another_stages_yaml(name: str) -> None:
    reads = raw_stage_reads(KNOWN[name])
    assert not reads, f"{name} reads stage sections of the raw config: {reads}"


def test_a_planted_raw_read_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text(
        "def f(config, ctx):\n"
        "    a = config.stages['triton_config']['publish']\n"
        "    b = (ctx.config.stages.get('smoke') or {}).get('server')\n"
        "    c = [s for s in config.stages.values()]\n"
        "    d = result.stages.get('smoke')  # a run result's rows, not the config\n"
        "    return 'select' in config.stages\n"
    )
    assert sorted(r.split(":")[0] for r in raw_stage_reads(planted)) == ["line 2", "line 3", "line 4"]


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if n.count(".") == 1 and n.startswith("stages.")))
def test_the_stages_package_holds_only_stages(name: str) -> None:
    """Helpers of one stage live in its package; helpers of several in a library."""
    assert is_stage(name, KNOWN), f"{name} is not a stage: move it into its stage's package or a library"


def test_no_module_name_is_used_in_two_packages() -> None:
    """`from X import stage` must say which: the engine's contract or a stage's module."""
    where: dict[str, set[str]] = {}
    for name in KNOWN:
        parts = name.split(".")
        for leaf in {parts[0], parts[-1]}:
            where.setdefault(leaf, set()).add(parts[0])
    shared = {leaf: sorted(packages) for leaf, packages in where.items() if len(packages) > 1}
    assert not shared, f"names used in more than one package: {shared}"


@pytest.mark.parametrize("name", sorted(n for n in KNOWN if n.split(".")[0] in LIBRARIES))
def test_library_modules_say_what_they_are(name: str) -> None:
    doc = ast.get_docstring(ast.parse(KNOWN[name].read_text()))
    assert doc and len(doc.splitlines()[0]) > 10, f"{name}: a module docstring, its first line a summary"


def aliased_project_imports(path: Path) -> list[str]:
    """`import runtimes.harness as _bench`: the reader no longer sees what `_bench` is."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            base = getattr(node, "module", None) or ""
            for alias in node.names:
                full = logical(f"{base}.{alias.name}" if base else alias.name)
                if alias.asname and full in KNOWN:
                    found.append(f"{full} as {alias.asname}")
    return found


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_project_modules_are_imported_under_their_own_names(name: str) -> None:
    assert not aliased_project_imports(KNOWN[name]), f"{name}: {aliased_project_imports(KNOWN[name])}"


def test_no_import_cycles() -> None:
    graph = {name: project_imports(path, KNOWN) - {name} for name, path in KNOWN.items()}
    cycles = sorted({tuple(sorted(c)) for c in _cycles(graph)})
    assert not cycles, f"import cycles: {cycles}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """The checker itself can fail: a module importing a stage is reported."""
    bad = tmp_path / "pipeline" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("def f():\n    from stages.smoke import serve\n")
    assert "stages.smoke" in set(imported(bad, "pipeline"))


TEST_FILES = sorted((ROOT / "tests").rglob("test_*.py"))


@pytest.mark.parametrize("path", TEST_FILES, ids=[str(p.relative_to(ROOT)) for p in TEST_FILES])
def test_tests_share_code_only_through_helpers(path: Path) -> None:
    """Test modules import shared code from tests/helpers.py, never from each other or
    from conftest (whose fixtures pytest injects)."""
    names = set(imported(path, "tests"))
    bad = sorted(
        n
        for n in names
        if n.startswith(
            (
                "tests.conftest",
                "tests.stages.test_",
                "tests.pipeline.test_",
                "tests.deploy.test_",
                "tests.test_",
            )
        )
    )
    assert not bad, f"{path.name} imports {bad}"


# Triton's python backend requires this class name in every model file it loads.
REQUIRED_NAMES = {"TritonPythonModel"}


def test_no_class_name_means_two_things() -> None:
    """One name per concept: a class name is defined once in the package."""
    where: dict[str, list[str]] = {}
    for name, path in KNOWN.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name not in REQUIRED_NAMES:
                where.setdefault(node.name, []).append(name)
    twice = {cls: modules for cls, modules in where.items() if len(modules) > 1}
    assert not twice, f"class names defined in more than one module: {twice}"


# Exceptions that never reach the user: each is caught by the code that raises it.
INTERNAL_SIGNALS = {
    "StageSkipped": "a stage that does not apply here: the runner records it as skipped",
    "_Cancelled": "a client dropped its stream: the served generate model stops that sequence",
    "Stopped": "a signal turned into an exception: the runner stops the run with its summary",
    "_Refused": "a YAML bound hit: turned into a ConfigError by bounds.check",
    "TooLarge": "a replay input over its limit: replay says so",
    "StopRequested": "SIGTERM/SIGINT while serving: serve stops the server",
    "StaleRelease": "a version dir without its record: releases skips it",
    "SummarySchemaError": "another release's summary.json: readers treat it as absent",
    "StaleRecord": "another release's service record: smoke says to rerun triton_config",
    "_Overran": "a live model's call past its timeout: child_call.bounded raises CallEnded for it",
}


def exception_classes() -> dict[str, list[str]]:
    """Every exception class deploy/ defines -> its bases' names."""
    found = {}
    for path in KNOWN.values():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                found[node.name] = bases
    errors = {"Exception", "BaseException", "ValueError", "OSError", "RuntimeError"}
    grown = True
    while grown:  # close over subclasses of exception classes
        known = {n for n, bases in found.items() if set(bases) & errors}
        grown = not known <= errors
        errors |= known
    return {n: b for n, b in found.items() if n in errors}


def test_errors_are_one_tree() -> None:
    """Every exception deploy raises to its caller is a DeployError (one exit code each,
    mapped in one place: the CLI's handler); the rest are the internal signals above."""
    classes = exception_classes()

    def rooted(name: str) -> bool:
        return name == "DeployError" or any(rooted(b) for b in classes.get(name, []) if b in classes)

    stray = sorted(n for n in classes if not rooted(n) and n not in INTERNAL_SIGNALS)
    assert not stray, f"exceptions outside the DeployError tree: {stray}"
    assert rooted("StageFailed"), "StageFailed is raised by libraries outside any stage"


def package_of_module(name: str) -> str:
    """A module's package at the layer's grain: `stages.smoke`, `gates`, `pipeline`; the
    app's modules are one package, `app`."""
    parts = name.split(".")
    if parts[0] == "deploy":
        return "app"
    return ".".join(parts[:2]) if parts[0] == "stages" and len(parts) > 1 else parts[0]


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in KNOWN.items():
        for other in project_imports(path, KNOWN):
            if package_of_module(name) != package_of_module(other):
                graph.setdefault(package_of_module(name), set()).add(package_of_module(other))
    return graph


def test_the_package_graph_is_acyclic() -> None:
    """Packages import one another one way only (lazy imports count): gates and
    datasources, or modelio and gates, importing each other is a cycle."""
    cycles = sorted({tuple(sorted(c)) for c in _cycles(package_graph())})
    assert not cycles, f"package import cycles: {cycles}"
