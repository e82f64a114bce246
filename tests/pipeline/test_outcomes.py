"""What a run says about itself must be true: the summary, JSON, JUnit and report of a
rejected invocation, of a stage that fails with an environment error, and per-run
history that a failure never erases."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from deploy.pipeline.errors import ExitCode
from tests.helpers import Cli, run_cli


@pytest.fixture
def finished(write_config) -> Path:
    """A tiny config that ran once: its summary and report exist."""
    path = write_config()
    assert run_cli("run", str(path)).returncode == 0
    return path


def run_dir(config: Path) -> Path:
    return config.parent / "runs" / "tiny"


def test_a_rejected_selection_writes_an_error_and_keeps_the_last_report(finished, tmp_path, cli: Cli):
    before = {name: (run_dir(finished) / name).read_bytes() for name in ("summary.json", "report.html")}
    history = sorted((run_dir(finished) / "history").iterdir())
    out_json, out_xml = tmp_path / "s.json", tmp_path / "s.xml"
    proc = cli(
        "run",
        str(finished),
        "--only",
        "validate",
        "--cache-dir",
        str(tmp_path / "empty"),
        "--json",
        str(out_json),
        "--junit",
        str(out_xml),
    )
    assert proc.returncode == ExitCode.CONFIG and "Traceback" not in proc.stderr
    assert "outside the selected stages" in proc.stderr
    summary = json.loads(out_json.read_text())
    assert summary["status"] == "selection error" and summary["stages"][0]["status"] == "failed"
    suite = ET.parse(out_xml).getroot()
    assert suite.get("failures") == "1" and suite.find("testcase").get("name") == "selection"
    assert {name: (run_dir(finished) / name).read_bytes() for name in before} == before
    assert sorted((run_dir(finished) / "history").iterdir()) == history
    assert not (tmp_path / "empty" / "actions").exists()  # nothing ran, nothing cached


def test_an_environment_error_inside_a_stage_fails_that_stage_with_its_exit_code(
    write_config, tmp_path, cli: Cli
):
    """A missing tritonserver (MissingDependency, exit 4) is raised from smoke's code."""
    missing = tmp_path / "nowhere" / "tritonserver"
    config = write_config(
        {"stages": {"smoke": {"server": {"kind": "binary", "path": str(missing)}}}}, smoke=True
    )
    out_json, out_xml = tmp_path / "s.json", tmp_path / "s.xml"
    proc = cli("run", str(config), "--json", str(out_json), "--junit", str(out_xml))
    assert proc.returncode == ExitCode.ENVIRONMENT and "Traceback" not in proc.stderr
    assert "stage 'smoke' failed: tritonserver is not available" in proc.stderr and "smoke.log" in proc.stderr
    summary = json.loads(out_json.read_text())
    assert summary["status"] == "failed"
    smoke = next(s for s in summary["stages"] if s["stage"] == "smoke")
    assert smoke["status"] == "failed" and "tritonserver" in smoke["message"]
    assert json.loads((run_dir(config) / "summary.json").read_text())["status"] == "failed"
    cases = {c.get("name"): c for c in ET.parse(out_xml).getroot().iter("testcase")}
    assert cases["smoke"].find("failure") is not None
    report = (run_dir(config) / "report.html").read_text()
    assert "<h2 class='failed'>smoke failed</h2>" in report and "<pre class='failure'>" in report


def test_each_run_keeps_its_report_and_a_failure_does_not_erase_the_last_good_one(
    finished, write_config, cli: Cli
):
    good = run_dir(finished) / "latest"
    good_report = (good / "report.html").read_text()
    assert "<span class='ok'>ok</span>" in good_report
    strict = write_config({"stages": {"validate": {"atol": 0.0, "rtol": 0.0, "min_cosine": 1.0}}})
    assert cli("run", str(strict)).returncode == ExitCode.STAGE
    runs = sorted((run_dir(finished) / "history").iterdir())
    assert len(runs) == 2 and (runs[0] / "report.html").read_text() == good_report
    assert (run_dir(finished) / "latest").resolve() == runs[1].resolve()
    latest = (run_dir(finished) / "report.html").read_text()
    assert latest == (runs[1] / "report.html").read_text() and "<span class='failed'>failed</span>" in latest


def test_the_report_names_host_versions_commit_and_cached_times(finished, cli: Cli):
    assert cli("run", str(finished)).returncode == 0  # every stage cached now
    summary = json.loads((run_dir(finished) / "summary.json").read_text())
    trace = next(s for s in summary["stages"] if s["stage"] == "trace")
    assert trace["status"] == "cached" and trace["seconds"] > 0 and trace["created"]
    provenance = summary["provenance"]
    assert provenance["libraries"]["onnxruntime"] and provenance["cores"] >= 1
    report = (run_dir(finished) / "report.html").read_text()
    assert f"(ran {trace['seconds']:.2f} s, made {trace['created']})" in report
    assert f"onnxruntime {provenance['libraries']['onnxruntime']}" in report and provenance["host"] in report
    assert f"commit {provenance['commit'] or 'not in a git repository'}" in report


def test_the_commit_is_read_from_the_repository_holding_the_config(tmp_path):
    import subprocess

    from deploy.pipeline.store.provenance import git_commit

    outside = not any((d / ".git").exists() for d in (tmp_path, *tmp_path.parents))
    assert outside, "the temporary directory lies inside a git repository: this test needs one that does not"
    assert git_commit(tmp_path) is None
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
        check=True,
    )
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (tmp_path / "configs").mkdir()
    assert git_commit(tmp_path / "configs") == head
    subprocess.run(["git", "-C", str(tmp_path), "pack-refs", "--all"], check=True)
    assert git_commit(tmp_path / "configs") == head  # from packed-refs too
