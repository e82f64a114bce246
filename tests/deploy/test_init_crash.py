"""`deploy init` calls the user's model in a child process
(pipeline/process/child_call.py): a native crash or an os._exit() in the model's code
ended the command itself, with no message and no config, or with exit 0, which CI reads
as success. Now the refusal names how it ended, and Ctrl-C still stops both. `validate --probe`
does the same. Each runs deploy as its own process: in a process with other threads (a test
worker) the call is made in place, since a fork there can inherit a held lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, living_in_session, run_cli, signals_as_a_terminal_sends_them

MODELS = """
import ctypes
import os
import time

import torch


class Crashes(torch.nn.Module):
    def forward(self, x):
        ctypes.string_at(0)  # reads address 0: SIGSEGV, as a broken extension would
        return x


class Quits(torch.nn.Module):
    def forward(self, x):
        os._exit(0)


class Hangs(torch.nn.Module):
    def forward(self, x):
        time.sleep(300)
        return x


class Doubles(torch.nn.Module):
    def forward(self, x):
        return 2 * x
"""
SHAPES = "x:float32:1x4/2x4/4x4"


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("Crashes", "the process running the model's code was killed by SIGSEGV"),
        ("Quits", "the model's code ended the process (exit code 0) before it returned, as os._exit() does"),
    ],
)
def test_a_model_that_ends_the_process_is_named_and_nothing_is_written(
    tmp_path: Path, model: str, said: str
) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    made = run_cli("init", "--file", "models.py", "--callable", model, "--input", SHAPES, cwd=tmp_path)
    assert made.returncode == 5, made.stderr  # as a stage's process that dies
    assert f"model: {said}" in made.stderr and "while deploy init built and called it" in made.stderr
    assert not (tmp_path / f"{model}.yaml").exists()


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("Crashes", "the process running the model's code was killed by SIGSEGV"),
        ("Quits", "the model's code ended the process (exit code 0) before it returned, as os._exit() does"),
    ],
)
def test_validate_probe_names_a_model_that_ends_the_process(tmp_path: Path, model: str, said: str) -> None:
    """--probe ran the model in deploy's own process: a segfault ended it without a word,
    and an os._exit(0) read as `ok` (exit 0) to CI."""
    (tmp_path / "models.py").write_text(MODELS)
    made = run_cli("init", "--file", "models.py", "--callable", "Doubles", "--input", SHAPES, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "Doubles.yaml").read_text()
    (tmp_path / "other.yaml").write_text(text.replace("callable: Doubles", f"callable: {model}"))
    probed = run_cli("validate", "--probe", "other.yaml", cwd=tmp_path)
    assert probed.returncode == 5, probed.stderr
    assert f"model: {said}" in probed.stderr and "while --probe built and called it" in probed.stderr
    assert run_cli("validate", "--probe", "Doubles.yaml", cwd=tmp_path).returncode == 0


def test_a_model_that_hangs_is_stopped_after_the_call_timeout_and_named(tmp_path: Path) -> None:
    """init waited for ever on a forward that never returned."""
    (tmp_path / "models.py").write_text(MODELS)
    started = time.monotonic()
    made = run_cli(
        "init", "--file", "models.py", "--callable", "Hangs", "--input", SHAPES, cwd=tmp_path,
        env={"DEPLOY_CALL_TIMEOUT_S": "4"},
    )  # fmt: skip
    assert made.returncode == 6, made.stderr  # as a stage stopped at its timeout_s
    assert "model: the model's code did not return within 4 s" in made.stderr
    assert time.monotonic() - started < 60 and not (tmp_path / "Hangs.yaml").exists()


def test_ctrl_c_while_the_model_hangs_stops_init_and_its_child(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    command = [sys.executable, "-m", "deploy", "init", "--file", "models.py", "--callable", "Hangs"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    init = subprocess.Popen(
        [*command, "--input", SHAPES],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=signals_as_a_terminal_sends_them,
    )
    deadline = time.monotonic() + 60
    while len(living_in_session(init.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # the child that calls the model has started
    assert len(living_in_session(init.pid)) == 2
    time.sleep(3)  # it is inside the forward by now (imports take about 2 s)
    os.killpg(init.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the whole group
    _, err = init.communicate(timeout=60)
    assert init.returncode == 130, err
    assert not living_in_session(init.pid)
    assert not (tmp_path / "Hangs.yaml").exists()


def test_a_process_with_other_threads_makes_the_call_in_place() -> None:
    """A fork copies only the forking thread: a lock another thread held (a test worker's
    I/O thread) stayed held in the child, which waited on it for ever."""
    import threading

    from deploy.pipeline.process.child_call import in_child

    done = threading.Event()
    other = threading.Thread(target=done.wait)
    other.start()
    try:
        assert in_child(os.getpid) == os.getpid()
    finally:
        done.set()
        other.join()
    alone = "import os; from deploy.pipeline.process.child_call import in_child; print(in_child(os.getpid) != os.getpid())"
    forked = subprocess.run(
        [sys.executable, "-c", alone],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert forked.stdout.strip() == "True", forked.stderr
