"""Nothing outlives deploy (pipeline/process/lifeline.py), proved with real processes and real
signals: a stage whose model hangs in forward after starting a daemon (a grandchild that
double-forks and calls setsid, as a server or a leaky library does), then deploy killed
with SIGKILL (a cancelled CI job), closed with SIGHUP (an ssh session gone), or the
stage's own timeout. Each test fails without the fix: the fork server, the stage child
or the daemon would still be alive."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from deploy.pipeline.errors import ExitCode
from tests.helpers import signals_as_a_terminal_sends_them

HANGING_MODEL = """
import os, subprocess, sys, time
import torch

DAEMON = '''
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
'''


class Hang(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        pid_file = os.environ["HANG_DAEMON_PID_FILE"]
        if not os.path.exists(pid_file + ".started"):
            open(pid_file + ".started", "w").close()
            subprocess.Popen([sys.executable, "-c", DAEMON, pid_file])
        time.sleep(600)
        return self.fc(x)


def make():
    return Hang().eval()
"""


# The stage must build the model and start its daemon before this, on a loaded machine too.
DAEMON_TIMEOUT_S = 15


def _config(tmp: Path, timeout_s: int = 120) -> Path:
    (tmp / "hang.py").write_text(HANGING_MODEL)
    config = {
        "name": "hang",
        "model": {"file": "hang.py", "callable": "make"},
        "inputs": [{"name": "x", "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]}],
        "outputs": [{"name": "y"}],
        "stages": {"golden": {"timeout_s": timeout_s}, "export": {"exporter": "torchscript"}},
    }
    path = tmp / "hang.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def _start(tmp: Path, config: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}
    env["HANG_DAEMON_PID_FILE"] = str(tmp / "daemon.pid")
    return subprocess.Popen(
        [sys.executable, "-m", "deploy", "run", str(config), *args],
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the test's kill reaches deploy alone, not its group
        preexec_fn=signals_as_a_terminal_sends_them,
    )


def _daemon(tmp: Path, proc: subprocess.Popen[bytes]) -> int:
    """The daemon's pid, once it has double-forked, called setsid and written it."""
    pid_file = tmp / "daemon.pid"
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0].decode()[-3000:]
        time.sleep(0.1)
    return int(pid_file.read_text())


def _tree(pid: int) -> set[int]:
    return {p.pid for p in psutil.Process(pid).children(recursive=True)}


def _alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                living.add(pid)
        except psutil.NoSuchProcess:
            continue
    return living


def _gone_within(pids: set[int], seconds: float) -> set[int]:
    """The pids still alive after `seconds` (empty when all died)."""
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


@pytest.fixture
def reaper() -> Iterator[set[int]]:
    """Pids the test saw; whatever of them lives after the test is killed (a failing
    test must not leave a sleeping daemon on the machine)."""
    seen: set[int] = set()
    yield seen
    for pid in _alive(seen):
        os.kill(pid, signal.SIGKILL)


def test_kill_9_of_deploy_takes_the_fork_server_the_stage_and_its_daemon_along(tmp_path, reaper):
    proc = _start(tmp_path, _config(tmp_path))
    daemon = _daemon(tmp_path, proc)
    tree = _tree(proc.pid) | {daemon}
    reaper.update(tree)
    # The daemon is no orphan of init: the stage's child is its subreaper.
    assert daemon in _tree(proc.pid), "the double-forked daemon escaped the stage's process tree"
    assert len(tree) >= 3  # fork server, stage child, daemon (and the tracker, where one runs)
    proc.kill()
    proc.communicate(timeout=30)
    assert not _gone_within(tree, 15), "outlived a killed deploy: " + ", ".join(
        " ".join(psutil.Process(p).cmdline())[:120] for p in _alive(tree)
    )


def test_sighup_is_an_interrupt_that_still_writes_the_summary_junit_and_report(tmp_path, reaper):
    proc = _start(tmp_path, _config(tmp_path), "--junit", "junit.xml")
    daemon = _daemon(tmp_path, proc)
    tree = _tree(proc.pid) | {daemon}
    reaper.update(tree)
    proc.send_signal(signal.SIGHUP)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == ExitCode.INTERRUPTED, out[-3000:]
    runs = tmp_path / "runs" / "hang"
    summary = json.loads((runs / "summary.json").read_text())
    golden = next(s for s in summary["stages"] if s["stage"] == "golden")
    assert golden["status"] == "interrupted", golden
    junit = (tmp_path / "junit.xml").read_text()
    assert 'errors="1"' in junit and "interrupted (signal SIGHUP)" in junit, junit
    assert (runs / "report.html").exists()
    assert not _gone_within(tree, 15), "outlived SIGHUP"


def test_a_stop_while_the_first_stage_is_starting_leaves_no_child(tmp_path, reaper):
    """SIGTERM the moment the first stage begins: the fork server is still importing torch
    and the child's pid is not known yet. The stop waits for the start, then stops it."""
    proc = _start(tmp_path, _config(tmp_path))
    log = tmp_path / "runs" / "hang" / "logs" / "golden.log"
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    tree = _tree(proc.pid)
    reaper.update(tree)
    proc.terminate()
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == ExitCode.INTERRUPTED, out[-3000:]
    reaper.update(tree)
    assert not _gone_within(tree, 15), "outlived a SIGTERM at the start of a stage"


def test_nohup_keeps_sighup_ignored(tmp_path, reaper):
    """`nohup deploy run` must survive its terminal closing: an ignored SIGHUP stays ignored."""
    env = {k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}
    env["HANG_DAEMON_PID_FILE"] = str(tmp_path / "daemon.pid")
    proc = subprocess.Popen(
        ["nohup", sys.executable, "-m", "deploy", "run", str(_config(tmp_path, timeout_s=DAEMON_TIMEOUT_S))],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=signals_as_a_terminal_sends_them,  # nohup, not the suite, ignores SIGHUP
    )
    reaper.add(_daemon(tmp_path, proc))
    proc.send_signal(signal.SIGHUP)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == ExitCode.LIMIT, out[-3000:]  # it ran on, to the stage's timeout


def test_the_stage_timeout_kills_the_daemon_its_model_started(tmp_path, reaper):
    proc = _start(tmp_path, _config(tmp_path, timeout_s=DAEMON_TIMEOUT_S))
    daemon = _daemon(tmp_path, proc)
    reaper.add(daemon)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == ExitCode.LIMIT, out[-3000:]
    assert "timeout" in out.lower() or "timed out" in out.lower(), out[-3000:]
    assert not _gone_within({daemon}, 5), "the daemon survived its stage's timeout"


def test_a_silent_stage_shows_a_heartbeat_in_a_ci_log(tmp_path, reaper):
    """golden hangs (it prints nothing and reports no steps): the piped console (a CI log)
    still says every 10 s that it runs, until its timeout."""
    proc = _start(tmp_path, _config(tmp_path, timeout_s=16))
    reaper.add(_daemon(tmp_path, proc))
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == ExitCode.LIMIT, out[-3000:]
    # 10 s after the stage last spoke; a loaded machine may show it a second or two late.
    assert re.search(r"golden: still running \((1[0-5]) s\)", out), out[-3000:]


def test_the_tree_of_a_process_that_just_exited_is_empty_not_an_error():
    """descendants() races the processes it walks; a pid gone meanwhile has no children."""
    from deploy.pipeline.process import lifeline

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time;"
            "c = subprocess.Popen(['sleep', '30']); print(c.pid, flush=True);"
            "time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        child = int(parent.stdout.readline())
        assert lifeline.descendants(parent.pid) == [child]
    finally:
        parent.kill()
        parent.wait()
        os.kill(child, signal.SIGKILL)
    assert lifeline.descendants(parent.pid) == []
