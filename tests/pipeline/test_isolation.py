"""Stages in child processes: a native crash, an abort, a hang, a memory blow-up or a
SIGTERM of the run becomes that stage's failure (or the run's interruption) with the
signal or limit named, and the run still writes its summary, JUnit and report, keeps
nothing half-written in the cache and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.pipeline.errors import ExitCode
from tests.helpers import ROOT, run_cli, tritonservers

MODEL = """
import ctypes, os, time
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, fault):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.fault = fault

    def forward(self, x):
        if self.fault == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV in native code
        elif self.fault == "abort":
            os.abort()
        elif self.fault == "hang":
            time.sleep(600)
        elif self.fault == "pid":  # which process ran the model
            with open(os.path.join(os.path.dirname(__file__), "pid.txt"), "a") as fh:
                fh.write(f"{os.getpid()} ")
        elif self.fault == "memory":
            held = [torch.ones(2**26) for _ in range(12)]  # 12 x 256 MB, touched
            time.sleep(60)
        return self.fc(x)


def net(fault="none"):
    return Net(fault)
"""


def faulty_config(tmp: Path, fault: str, golden: dict[str, Any] | None = None, smoke: bool = False) -> Path:
    (tmp / "faulty.py").write_text(MODEL)
    stages: dict[str, Any] = {"golden": golden or {}, "export": {}, "validate": {"runtimes": ["onnxruntime"]}}
    if smoke:
        # A million warm-ups keep the model loading (the server up) past smoke's timeout_s,
        # whatever the machine: a stage's server is otherwise stopped within a second or two.
        warmup = {"count": 1_000_000}
        # timeout_s leaves a loaded machine time to start the stage and its server first.
        stages |= {"triton_config": {"formats": ["python"], "warmup": warmup}, "smoke": {"timeout_s": 10}}
    data = {
        "name": "faulty",
        "model": {"file": "faulty.py", "callable": "net", "kwargs": {"fault": fault}},
        "inputs": [{"name": "x", "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]}],
        "outputs": [{"name": "y"}],
        "stages": stages,
    }
    path = tmp / "faulty.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_faulty(tmp: Path, fault: str, golden: dict[str, Any] | None = None) -> tuple[Any, str]:
    config = faulty_config(tmp, fault, golden)
    proc = run_cli("run", str(config), "--junit", str(tmp / "junit.xml"), cwd=tmp)
    return proc, proc.stdout + proc.stderr


def assert_run_records_the_failure(tmp: Path, says: str) -> None:
    summary = json.loads((tmp / "runs" / "faulty" / "summary.json").read_text())
    rows = {row["stage"]: row for row in summary["stages"]}
    assert summary["status"] == "failed" and says in rows["golden"]["message"], rows["golden"]
    assert rows["export"]["status"] == rows["validate"]["status"] == "not run"
    failures = ET.parse(tmp / "junit.xml").getroot().iter("failure")
    assert any(says in (f.get("message") or "") for f in failures)
    assert (tmp / "runs" / "faulty" / "report.html").read_text().count(says) >= 1
    entries = list((tmp / ".deploy-cache").rglob("entries/**/*.json"))
    assert entries == [], entries  # nothing of the failed stage, nothing half-written


@pytest.mark.parametrize(("fault", "signal_name"), [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_native_crash_fails_the_stage_and_the_run_keeps_its_records(tmp_path, fault, signal_name):
    proc, console = run_faulty(tmp_path, fault)
    assert proc.returncode == ExitCode.CRASHED, console
    assert f"killed by {signal_name}" in console and "resume: deploy run" in console, console
    assert "Traceback" not in console
    assert_run_records_the_failure(tmp_path, f"killed by {signal_name}")
    log = (tmp_path / "runs" / "faulty" / "logs" / "golden.log").read_text()
    assert "Fatal Python error" in log and "faulty.py" in log  # where Python was, from faulthandler


def test_a_hang_is_stopped_at_timeout_s(tmp_path):
    started = time.monotonic()
    proc, console = run_faulty(tmp_path, "hang", {"timeout_s": 3})
    assert proc.returncode == ExitCode.LIMIT, console
    assert "exceeded timeout_s 3" in console and time.monotonic() - started < 60
    assert_run_records_the_failure(tmp_path, "exceeded timeout_s 3")


def test_a_memory_blow_up_is_stopped_at_memory_mb(tmp_path):
    proc, console = run_faulty(tmp_path, "memory", {"memory_mb": 1200})
    assert proc.returncode == ExitCode.LIMIT, console
    assert "exceeded memory_mb 1200" in console
    assert_run_records_the_failure(tmp_path, "exceeded memory_mb 1200")


def descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_sigterm_stops_the_stage_and_the_run_says_interrupted(tmp_path):
    import psutil

    config = faulty_config(tmp_path, "hang")
    cli = [sys.executable, "-c", "import sys; from deploy.cli import main; sys.argv[0] = 'deploy'; main()"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*cli, "run", str(config)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    log = tmp_path / "runs" / "faulty" / "logs" / "golden.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "running" not in log.read_text() and descendants(proc.pid)):
        assert time.monotonic() < deadline, "the stage never started"
        time.sleep(0.5)
    time.sleep(2)  # the child is now in the model's forward
    stage = [p for p in descendants(proc.pid) if "forkserver" not in " ".join(psutil.Process(p).cmdline())]
    names = {p: " ".join(psutil.Process(p).cmdline())[:150] for p in stage}
    proc.send_signal(signal.SIGTERM)
    console = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == ExitCode.INTERRUPTED, console
    summary = json.loads((tmp_path / "runs" / "faulty" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert stage and not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in stage
    ), names


@pytest.mark.triton
def test_a_stage_stopped_while_its_server_runs_leaves_no_tritonserver(tmp_path):
    """smoke's timeout_s ends it while its tritonserver (a session of its own) runs."""
    before = tritonservers()
    config = faulty_config(tmp_path, "none", smoke=True)
    env = {k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "run", str(config)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    seen: set[int] = set()
    while proc.poll() is None:
        seen |= tritonservers() - before
        time.sleep(0.2)
    console = proc.communicate()[0].decode()
    assert proc.returncode == ExitCode.LIMIT and "exceeded timeout_s 10" in console, console
    assert seen, "the smoke stage never started its server"
    assert not tritonservers() & seen  # the run waited for it (or killed it) before ending


@pytest.mark.parametrize("isolate", [True, False])
def test_isolate_false_runs_the_stage_in_the_runners_process(tmp_path, isolate):
    from tests.helpers import run

    config = faulty_config(tmp_path, "pid", {"isolate": isolate})
    data = yaml.safe_load(config.read_text())
    data |= {"cache_dir": str(tmp_path / "cache"), "run_dir": str(tmp_path / "runs")}
    config.write_text(yaml.safe_dump(data))
    assert run(config, stop="golden")["golden"].status.value == "ran"
    pids = {int(p) for p in (tmp_path / "pid.txt").read_text().split()}
    assert (pids == {os.getpid()}) is not isolate, pids


def test_a_users_own_pipeline_folder_in_the_working_directory_shadows_nothing(write_config, tmp_path) -> None:
    """The fork server imports our packages, not same-named folders where `deploy` (the
    console script, as users run it) is run."""
    import shutil
    import subprocess
    import sys

    # A copy of ours that fails where the fork server would import it from (a stale
    # checkout in the working directory): it must never be imported.
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy", ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "deploy" / "pipeline" / "isolation.py").open("a") as planted:
        planted.write("\nraise RuntimeError('imported from the working directory')\n")
    path = write_config(replace={"stages": {"export": {}}})
    deploy = Path(sys.executable).parent / "deploy"
    done = subprocess.run(
        [str(deploy), "run", str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "export" in done.stdout and "ran" in done.stdout


def test_an_outcome_sent_just_before_the_child_exits_is_read_not_taken_for_a_crash(tmp_path):
    """The runner polls the pipe, then asks whether the child lives: a child that sent its
    outcome and exited between the two was reported as 'exited with code 0 without a
    result' (seen under load in the suite). The race cannot be timed for real here, so the
    child is a stand-in that sends exactly in that gap; the pipe is real."""
    import multiprocessing
    from types import SimpleNamespace

    from deploy.pipeline.process.execute import Outcome
    from deploy.pipeline.process.isolation import Limits, _wait
    from deploy.pipeline.report.results import Status

    receive, send = multiprocessing.Pipe(duplex=False)
    sent = Outcome(Status.RAN, "done")

    class SendsThenExits:
        pid, exitcode = os.getpid(), 0

        def is_alive(self) -> bool:
            send.send(sent)  # after the runner's poll timed out
            return False

        def join(self, timeout: float) -> None:
            pass

    job = SimpleNamespace(log=tmp_path / "stage.log", stage="golden")
    outcome = _wait(SendsThenExits(), receive, job, Limits(60, None), set(), None)
    assert outcome.status is Status.RAN and outcome.message == "done"
