"""The Jenkins job without a Jenkins server: the Jenkinsfile is parsed and dry-run by
Groovy (tests/jenkins/dry_run.groovy), and the shell steps it records are checked against
the README and the real CLI."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT, run_cli

HARNESS = ROOT / "tests" / "jenkins" / "dry_run.groovy"
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


def java_home() -> str | None:
    """Debian's groovy launcher wants JAVA_HOME (its default-java link may be missing)."""
    if os.environ.get("JAVA_HOME") and Path(os.environ["JAVA_HOME"], "bin", "java").is_file():
        return os.environ["JAVA_HOME"]
    java = shutil.which("javac") or shutil.which("java")
    return str(Path(java).resolve().parents[1]) if java else None


needs_groovy = pytest.mark.skipif(
    shutil.which("groovy") is None or java_home() is None,
    reason="needs Groovy and a JDK (scripts/setup.sh --tests installs Debian's groovy and default-jdk-headless)",
)


def dry_run(*params: str) -> list[dict[str, Any]]:
    env = {**os.environ, "JAVA_HOME": str(java_home())}
    proc = subprocess.run(
        ["groovy", str(HARNESS), str(ROOT / "Jenkinsfile"), *params],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def steps() -> list[dict[str, Any]]:
    return dry_run()


def shell(steps: list[dict[str, Any]], where: str = "") -> list[str]:
    """The shell lines, `sh 'x'` or `sh(script: 'x', returnStatus: true)`."""
    found = [s["args"][0] for s in steps if s["step"] == "sh" and where in "/".join(s["path"])]
    return [a["script"] if isinstance(a, dict) else a for a in found]


def readme_block(title: str) -> list[str]:
    """The lines of the README's fenced block right after a line containing `title`."""
    text = (ROOT / "README.md").read_text()
    block = re.search(re.escape(title) + r".*?\n```[a-z]*\n(.*?)\n```", text, re.S)
    assert block, f"README has no block after {title!r}"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


@needs_groovy
def test_the_matrix_covers_every_config(steps):
    cells = [p[-1] for s in steps if s["step"] == "agent" and (p := s["path"]) and p[-1].startswith("cell:")]
    assert cells == [f"cell:CONFIG={name}" for name in CONFIGS]
    for name in CONFIGS:  # the job names files by the pipeline name (runs/<name>, <name>_* models)
        assert yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())["name"] == name


@needs_groovy
def test_recorded_commands_are_the_ones_the_readme_documents(steps):
    command = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "-m pytest" in line)
    setup, tests = command.split(" && ")
    tests_stage = shell(steps, "stage:Tests")
    assert tests_stage[:2] == [setup, f"{tests} --junitxml=reports/pytest.xml"]  # the README's test command
    documented = readme_block("step of the job, in order")
    for name in CONFIGS:
        cell = [command.replace(name, "<name>") for command in shell(steps, f"cell:CONFIG={name}")]
        assert tests_stage + cell == documented


@needs_groovy
def test_results_are_published_and_archived_and_servers_cleaned_up(steps):
    junit = [s["args"][0]["testResults"] for s in steps if s["step"] == "junit"]
    assert junit == ["reports/pytest.xml", "reports/kinds.xml", *[f"reports/deploy-{n}.xml" for n in CONFIGS]]
    archived = [s["args"][0]["artifacts"] for s in steps if s["step"] == "archiveArtifacts"]
    assert all(f"model_repository/{n}_*/**" in a and f"runs/{n}/**" in a for n, a in zip(CONFIGS, archived))
    cleanups = [s["path"] for s in steps if s["step"] == "sh" and s["args"][0] == "scripts/ci_cleanup.sh"]
    assert len(cleanups) == 2 + len(CONFIGS) and all(p[-2:] == ["post", "always"] for p in cleanups)


@needs_groovy
def test_every_stage_has_a_timeout_and_the_cache_is_persistent(steps):
    stages = {
        "/".join(s["path"]) + f"/stage:{s['args'][0]}"
        for s in steps
        if s["step"] == "stage" and s["args"][0] != "Pipelines"
    }
    timed = {"/".join(s["path"][:-1]) for s in steps if s["step"] == "timeout" and s["path"][-1] == "options"}
    assert stages and stages <= timed
    env = {s["args"][0]: s["args"][1] for s in steps if s["step"] == "env"}
    assert env["DEPLOY_CACHE_DIR"] == "/var/cache/deploy"
    assert env["DEPLOY_CACHE_REMOTE"] == ""  # no remote unless the build asks for one
    shared = {s["args"][0]: s["args"][1] for s in dry_run("REMOTE_CACHE=s3://ci/cache") if s["step"] == "env"}
    assert shared["DEPLOY_CACHE_REMOTE"] == "s3://ci/cache"
    assert env["DEPLOY_ACCEPT_REGRESSION"] == ""  # the release gate decides unless a build says why not
    accepted = {
        s["args"][0]: s["args"][1] for s in dry_run("ACCEPT_REGRESSION=retrained") if s["step"] == "env"
    }
    assert accepted["DEPLOY_ACCEPT_REGRESSION"] == "retrained"
    labels = {
        s["args"][0] for s in dry_run("AGENT_LABEL=gpu", "STAGE_CACHE=/srv/cache") if s["step"] == "label"
    }
    assert labels == {"gpu"}


@needs_groovy
def test_recorded_deploy_commands_parse_and_their_configs_load(steps, tmp_path):
    import typer

    from deploy.cli import app

    deploy = [shlex.split(c) for c in shell(steps) if c.startswith(".venv/bin/deploy ")]
    assert len(deploy) == 2 * len(CONFIGS)
    group = typer.main.get_command(app)
    for argv in deploy:
        name, *rest = argv[1:]
        command = group.get_command(group.make_context("deploy", [name]), name)  # type: ignore[attr-defined]
        context = command.make_context(name, list(rest))  # raises on an unknown option or a bad value
        config = ROOT / context.params["config"]
        for verb in ("validate", "plan"):
            proc = run_cli(verb, str(config), cwd=tmp_path, env={"DEPLOY_CACHE_DIR": str(tmp_path / "cache")})
            assert proc.returncode == 0, proc.stderr


def test_ci_cleanup_stops_only_stray_servers_of_this_checkout(tmp_path):
    checkout, elsewhere = tmp_path / "workspace", tmp_path / "other-workspace"
    cache = checkout / ".deploy-cache"
    old, young = cache / "tmp" / "smoke-old", cache / "tmp" / "smoke-young"
    for folder in (old, young, elsewhere):
        folder.mkdir(parents=True)
    os.utime(old, (0, 0))
    # Stand-ins for servers: named tritonserver in their command line, as deploy starts them.
    server = [
        "python3",
        "-c",
        "import time; time.sleep(120)",
        "tritonserver",
        f"--model-repository={young}/server/repository",
    ]
    ours = subprocess.Popen(server, cwd=checkout)
    theirs = subprocess.Popen(server, cwd=elsewhere)  # another matrix cell sharing the cache
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "ci_cleanup.sh"), str(checkout)],
            env={**os.environ, "DEPLOY_CACHE_DIR": str(cache)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and f"stopping stray tritonserver(s): {ours.pid}" in done.stdout
        assert ours.wait(timeout=10) != 0 and theirs.poll() is None
        assert not old.exists() and young.exists()
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()


def test_every_config_has_its_matrix_checks_and_the_test_command_leaves_them_out():
    """The matrix cell's Check step runs tests/matrix/test_<name>.py on its own run; the
    README's test command deselects them (each model runs once per build, in its cell)."""
    import sys

    assert all((ROOT / "tests" / "matrix" / f"test_{name}.py").is_file() for name in CONFIGS)
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "tests/matrix"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "no tests collected" in listed.stdout and " deselected)" in listed.stdout, listed.stdout
    chosen = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-m", "matrix", "tests/matrix"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    modules = {line.split("::")[0] for line in chosen.stdout.splitlines() if "::" in line}
    kinds = {f"tests/matrix/test_model_kinds_{half}.py" for half in ("inputs", "outputs")}
    assert modules == {f"tests/matrix/test_{name}.py" for name in CONFIGS} | kinds, chosen.stdout
