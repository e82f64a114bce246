"""`deploy run --junit FILE --json FILE`: what a CI server reads, per stage."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from deploy.pipeline.errors import ExitCode
from tests.helpers import Cli

STRICT = {"atol": 0.0, "rtol": 0.0, "min_cosine": 1.0}  # ONNX Runtime differs from eager by ~1e-8


def stages(validate):
    return {
        "trace": {},
        "export": {},
        "build": {"required": False},
        "validate": {"runtimes": ["onnxruntime"], **validate},
        "triton_config": {"formats": ["onnx"], "max_batch_size": 16},
    }


def cases(path):
    suite = ET.parse(path).getroot()
    return suite, {c.get("name"): c for c in suite.iter("testcase")}


def test_one_testcase_per_stage_with_its_status(write_config, tmp_path, cli: Cli):
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.json"
    config = write_config(replace={"stages": stages(STRICT)})
    failed = cli("run", str(config), "--junit", str(junit), "--json", str(summary))
    assert failed.returncode == ExitCode.STAGE
    suite, by_name = cases(junit)
    assert list(by_name) == ["golden", "export", "build", "trace", "validate", "triton_config"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("6", "1", "2")
    assert by_name["trace"].find("failure") is None and by_name["trace"].find("skipped") is None
    assert "TensorRT" in by_name["build"].find("skipped").get("message")
    failure = by_name["validate"].find("failure")
    assert (
        "parity failed" in failure.get("message")
        and "validate.log" in failure.text
        and "ERROR" in failure.text
    )
    assert "not run" in by_name["triton_config"].find("skipped").get("message")
    assert json.loads(summary.read_text())["status"] == "failed"
    report = (tmp_path / "runs" / "tiny" / "report.html").read_text()  # the run report says the same
    assert (
        "<span class='failed'>failed</span>" in report
        and "parity failed" in report
        and "<span class='not run'>not run</span>" in report
    )

    fixed = write_config(replace={"stages": stages({})})
    assert cli("run", str(fixed), "--junit", str(junit), "--json", str(summary)).returncode == 0
    suite, by_name = cases(junit)
    assert (suite.get("failures"), suite.get("skipped")) == ("0", "1")
    assert (
        by_name["trace"].find("system-out").text.startswith("cached; key ")
        and by_name["trace"].get("time") == "0.000"
    )
    assert by_name["validate"].find("system-out").text.startswith("ran; key ")
    assert [s["status"] for s in json.loads(summary.read_text())["stages"]] == [
        "cached",
        "cached",
        "skipped",
        "cached",
        "ran",
        "ran",
    ]


def test_a_config_that_does_not_load_is_one_failed_testcase(write_config, tmp_path, cli: Cli):
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.json"
    config = write_config({"stages": {"export": {"opset": 5}}})
    proc = cli("run", str(config), "--junit", str(junit), "--json", str(summary))
    assert proc.returncode == ExitCode.CONFIG and "Traceback" not in proc.stderr
    _, by_name = cases(junit)
    text = by_name["config"].find("failure").text
    assert list(by_name) == ["config"] and "stages.export.opset" in text and "log: None" not in text
    assert json.loads(summary.read_text())["status"] == "config error"


def test_control_characters_from_native_logs_keep_the_xml_readable(tmp_path):
    from deploy.pipeline.report.junit import write_xml
    from deploy.pipeline.report.results import RunStatus, RunSummary, StageSummary, Status

    log = tmp_path / "stage.log"
    log.write_text("\x1b[31mW onnxruntime: colour\x1b[0m\x00\n")
    stage = StageSummary("export", Status.FAILED, message="bad \x07 bell", log=str(log), seconds=1.0)
    write_xml(
        tmp_path / "j.xml",
        RunSummary(
            "p", "p.yaml", RunStatus.FAILED, [stage], finished="2026-01-01T00:00:00+00:00", wall_s=1.0
        ),
    )
    failure = ET.parse(tmp_path / "j.xml").getroot().find("testcase/failure")
    assert failure.get("message") == "bad \ufffd bell" and "[31mW onnxruntime: colour" in failure.text


def test_a_cache_that_cannot_take_a_stage_s_outputs_fails_that_stage_not_the_run_as_interrupted(
    write_config, tmp_path, cli: Cli
):
    """A cache folder broken after the check (here: every objects/<xx> a file) failed the
    store with a raw OSError: the run read `interrupted`, its JUnit had no failure."""
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.json"
    config = write_config(replace={"stages": {"trace": {}}})
    objects = tmp_path / "cache" / "objects"
    objects.mkdir(parents=True)
    for prefix in range(256):
        (objects / f"{prefix:02x}").write_text("not a folder")
    proc = cli("run", str(config), "--junit", str(junit), "--json", str(summary))
    said = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.ENVIRONMENT and "Traceback" not in said, said
    suite, by_name = cases(junit)
    assert (
        suite.get("failures") == "1"
        and "could not take its outputs" in by_name["golden"].find("failure").text
    )
    recorded = json.loads(summary.read_text())
    assert recorded["status"] == "failed" and recorded["stages"][0]["message"].startswith(
        f"the cache at {tmp_path / 'cache'} could not take its outputs: [Errno 17] File exists"
    )


def test_deploy_s_own_bug_in_a_run_still_fails_its_stage_in_the_records(
    write_config, tmp_path, cli: Cli, monkeypatch
):
    """An error deploy did not foresee keeps its traceback (exit 70), and the summary and the
    JUnit say the stage failed with it (they said `interrupted`, no failure: green to a CI)."""
    from deploy.pipeline.store.objects import Store

    def broken(self, path, kind):
        raise ZeroDivisionError("a bug of deploy's own")

    monkeypatch.setattr(Store, "ingest", broken)
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.json"
    config = write_config(replace={"stages": {"trace": {}}})
    proc = cli("run", str(config), "--junit", str(junit), "--json", str(summary))
    assert proc.returncode == ExitCode.INTERNAL and "Traceback" in proc.stdout + proc.stderr
    suite, by_name = cases(junit)
    assert suite.get("failures") == "1"
    assert (
        "internal error in deploy: ZeroDivisionError: a bug of deploy's own"
        in by_name["golden"].find("failure").text
    )
    recorded = json.loads(summary.read_text())
    assert recorded["status"] == "failed" and recorded["stages"][0]["status"] == "failed"
