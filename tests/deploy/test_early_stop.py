"""A stop at any moment of a command's start: Ctrl-C, SIGTERM or SIGHUP while Python was
still loading the command line printed a KeyboardInterrupt traceback, or killed it with a
silent 143; inside typer it exited 130 without a word; inside pydantic's schema building it
became a SchemaError reported as deploy's "internal error" (exit 70); inside a finalizer it
was printed as "Exception ignored" and dropped, and the command went on to exit 0. Now each
is one line and exit 130 (deploy/entry.py, pipeline/process/stopping.listening)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.pipeline.errors import ExitCode
from deploy.pipeline.process import stopping
from tests.helpers import ROOT, signals_as_a_terminal_sends_them

# Offsets after deploy's own handler is in place: they span its imports, typer's command
# building and the config's validation (about 0.3 s here, more on a loaded machine).
OFFSETS = (0.0, 0.01, 0.03, 0.05, 0.08, 0.12, 0.16, 0.2, 0.25, 0.35)


def _deploy_catches_stops(pid: int) -> bool:
    """Whether deploy's own handler is in place: the process runs deploy (it was exec'd)
    and catches SIGTERM (Linux's SigCgt mask), which Python itself leaves alone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        started = b"deploy" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return started and bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


def _stopped_at(offset: float, sig: signal.Signals) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "deploy", "validate", str(ROOT / "configs" / "tiny.yaml")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=signals_as_a_terminal_sends_them,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not _deploy_catches_stops(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)  # Python's own start (before deploy runs a line) is not deploy's to word
    assert proc.poll() is None, "deploy ran to its end without a handler for SIGTERM"
    time.sleep(offset)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_at_any_moment_of_the_start_is_one_line_and_exit_130(sig: signal.Signals) -> None:
    name = "Ctrl-C" if sig == signal.SIGINT else f"signal {sig.name}"
    for offset in OFFSETS:
        done = _stopped_at(offset, sig)
        said = done.stdout + done.stderr
        assert "Traceback" not in said and "internal error" not in said, (offset, said)
        whole = done.stdout.startswith("ok ") and "TensorRT" in done.stdout  # its last word said
        if whole and not done.stderr:  # finished; a stop after its last word ends it quietly
            assert done.returncode in (ExitCode.OK, ExitCode.INTERRUPTED, -sig), (
                offset,
                done.returncode,
                said,
            )
            continue
        # -SIGINT: CPython's exit once a KeyboardInterrupt passed through exec()'d code (a
        # dataclass's or pydantic's generated function), whatever sys.exit said; a shell reads 130
        assert done.returncode in (ExitCode.INTERRUPTED, -signal.SIGINT), (offset, done.returncode, said)
        assert done.stderr.startswith(f"interrupted ({name})"), (offset, said)  # while it worked or printed


class _Dropped:
    """A finalizer that raises the stop: Python prints it as "Exception ignored" and goes on."""

    def __del__(self) -> None:
        raise KeyboardInterrupt("Ctrl-C")


def test_a_stop_dropped_by_a_finalizer_is_raised_again() -> None:
    before = sys.unraisablehook
    # Ctrl-C as a terminal's foreground job has it: a suite started in the background (CI's
    # `&`) runs with SIGINT ignored, which deploy keeps ignored, and then nothing is raised.
    terminal = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt, match="Ctrl-C"), stopping.listening():
            _Dropped()  # collected at once: its __del__ raises where nothing can catch it
            time.sleep(5)  # where the stop lands again
    finally:
        signal.signal(signal.SIGINT, terminal)
    assert sys.unraisablehook is before and stopping.stopped_by() == "Ctrl-C"


WRAPPED = r"""
import importlib.abc, importlib.util, os, signal, sys, time

class Field:
    def __set_name__(self, owner, name):  # where rich's dataclasses met the stop in CI
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2)

class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "deploy.cli" else None

    def exec_module(self, module):
        type("Holder", (), {"field": Field()})

sys.meta_path.insert(0, Finder())
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal has it (CI's background job ignores it)
from deploy import entry
entry.main()
"""


def test_a_stop_that_a_library_wraps_in_its_own_error_is_still_one_line_and_exit_130() -> None:
    """Python 3.11 turns an exception raised inside __set_name__ into RuntimeError ("Error
    calling __set_name__"): a Ctrl-C landing in a dataclass's creation while the CLI loaded
    printed that traceback (seen in CI at 0.08 s)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WRAPPED], capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    assert done.returncode == 130 and "Traceback" not in said, said
    assert said.strip() == "interrupted (Ctrl-C) while deploy started: nothing was done", said
