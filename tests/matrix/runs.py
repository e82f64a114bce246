"""The Jenkins matrix's configs, checked once: each test module takes the run of its
config that the matrix cell made (`pytest -m matrix --matrix-run WORKSPACE`), or, with no
cell before it (`.ci/run`, a developer), runs the config itself exactly as the cell does.
The README's test command leaves them out (`-m "not matrix"` in pytest's addopts)."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, run_cli

OPTION = "--matrix-run"


@dataclass(frozen=True)
class MatrixRun:
    """Where `deploy run configs/<name>.yaml --junit ... --json ...` ran (the cell's workspace)."""

    name: str
    dir: Path

    @property
    def config(self) -> Path:
        return ROOT / "configs" / f"{self.name}.yaml"

    def summary(self) -> dict[str, Any]:
        return json.loads((self.dir / "runs" / self.name / "summary.json").read_text())

    def metrics(self, stage: str) -> dict[str, Any]:
        return next(s for s in self.summary()["stages"] if s["stage"] == stage)["metrics"]

    def junit_cases(self) -> dict[str, ET.Element]:
        root = ET.parse(self.dir / "reports" / f"deploy-{self.name}.xml").getroot()
        return {c.get("name", ""): c for c in root.iter("testcase")}

    def again(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A deploy command on the same config, in the same place (the same cache)."""
        return run_cli(*args, str(self.config), cwd=self.dir)


def matrix_run(name: str, request: pytest.FixtureRequest, tmp: pytest.TempPathFactory) -> MatrixRun:
    given = request.config.getoption(OPTION)
    if given:
        run = MatrixRun(name, Path(given).resolve())
        if not (run.dir / "runs" / name / "summary.json").is_file():
            pytest.fail(
                f"{OPTION} {given}: no runs/{name}/summary.json there (deploy run {run.config} first)"
            )
        return run
    run = MatrixRun(name, tmp.mktemp(name))
    reports = (f"reports/deploy-{name}.xml", f"reports/deploy-{name}.json")
    done = run_cli("run", str(run.config), "--junit", reports[0], "--json", reports[1], cwd=run.dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run


def matrix_fixture(name: str) -> Any:
    """The `run` fixture of a config's module: its run, made once per module."""

    @pytest.fixture(scope="module")
    def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> MatrixRun:
        return matrix_run(name, request, tmp_path_factory)

    return run


def check_the_run_passed(run: MatrixRun) -> None:
    """What every cell must show: the run ok, every stage ran or came from the cache (a
    skip says why), JUnit without a failure, the report written, and a second run that
    would do nothing (`deploy plan --detailed-exitcode`: 0 when every stage is cached)."""
    summary = run.summary()
    assert summary["status"] == "ok" and summary["pipeline"] == run.name, summary["message"]
    for stage in summary["stages"]:
        assert stage["status"] in ("ran", "cached") or (stage["status"] == "skipped" and stage["message"])
    assert all(c.find("failure") is None and c.find("error") is None for c in run.junit_cases().values())
    assert "<h2>Stages</h2>" in (run.dir / "runs" / run.name / "report.html").read_text()
    plan = run.again("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
