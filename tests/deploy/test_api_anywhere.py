"""The Python API from wherever a user calls it: a script without an
`if __name__ == "__main__":` guard, a script piped to `python -`, `python -c`, and a
Jupyter kernel. Each runs two stages of the tiny CNN in their own processes; before the
main module was hidden from multiprocessing, the stage's process re-ran the script (its
run started again inside the stage: "exited with code 1 without a result") or failed
on '<stdin>'. The stage processes must never import the caller's main module: the
script leaves a mark when it is executed, and there must be exactly one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, in_kernel, tiny_dict

SCRIPT = """\
import os
import deploy

with open("executions.txt", "a") as marks:  # once per execution of this script's top level
    marks.write(f"{os.getpid()}\\n")
result = deploy.load("tiny.yaml").run()
print("RESULT", result.ok, {n: s.status.value for n, s in result.stages.items()})
"""


def _folder(tmp: Path) -> Path:
    config = tiny_dict(tmp)
    config["stages"] = {"export": config["stages"]["export"]}
    (tmp / "tiny.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp / "script.py").write_text(SCRIPT)
    return tmp


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}, "PYTHONPATH": str(ROOT)}


def _ran(tmp: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "RESULT True {'golden': 'ran', 'export': 'ran'}" in done.stdout, done.stdout + done.stderr
    assert len((tmp / "executions.txt").read_text().split()) == 1, "a stage process re-ran the script"


@pytest.mark.parametrize("how", ["script", "stdin", "dash-c"])
def test_an_unguarded_script_runs_once_however_python_gets_it(how: str, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    args = {
        "script": [sys.executable, "script.py"],
        "stdin": [sys.executable, "-"],
        "dash-c": [sys.executable, "-c", SCRIPT],
    }[how]
    stdin = SCRIPT if how == "stdin" else None
    done = subprocess.run(
        args, cwd=folder, input=stdin, capture_output=True, text=True, env=_env(), timeout=600
    )
    _ran(folder, done)


def test_a_jupyter_kernel_runs_the_api_and_shows_the_result(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    printed = in_kernel(SCRIPT, folder, _env())
    _ran(folder, subprocess.CompletedProcess([], 0, printed, ""))


THREADS = """\
import threading
import deploy

said = {}


def runs(k):
    try:
        said[k] = [deploy.load("tiny.yaml").run(force=["golden", "export"]).ok for _ in range(3)]
    except BaseException as exc:
        said[k] = repr(exc)


threads = [threading.Thread(target=runs, args=(k,)) for k in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("RESULT", sorted(said.items()))
"""


def test_pipelines_run_from_two_threads_take_turns_and_both_pass(tmp_path: Path) -> None:
    """The fork server died with the thread that started it (its parent-death signal is
    the thread's): the other thread's next stage failed with EOFError or "exited with code
    255 without a result"."""
    _folder(tmp_path)
    (tmp_path / "threads.py").write_text(THREADS)
    done = subprocess.run(
        [sys.executable, "threads.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900
    )
    assert "RESULT [(0, [True, True, True]), (1, [True, True, True])]" in done.stdout, (
        done.stdout + done.stderr[-3000:]
    )
