"""A docker-kind tritonserver is removed when its stage is stopped. A container runs under
the docker daemon, not under the stage, so killing the stage's processes leaves it
serving; the stage's child removes it (`docker rm -f`) on its way out.

No Docker engine can run here: `docker` is a stand-in script on PATH that keeps one file
per running container (`run -d --name N` creates it, `rm -f N` / `stop N` deletes it),
which is all the stage asks of the CLI before the server answers. The server never
answers, so the stage hangs in its wait, and its timeout stops it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from deploy.pipeline.errors import ExitCode
from tests.helpers import run_cli, tiny_dict

FAKE_DOCKER = """#!/bin/sh
state="$FAKE_DOCKER_DIR"
case "$1" in
  run)
    prev=""; for a in "$@"; do [ "$prev" = "--name" ] && touch "$state/container-$a"; prev="$a"; done
    echo 0123456789ab; exit 0;;
  rm|stop)
    echo "$*" >> "$state/calls.log"
    for a in "$@"; do rm -f "$state/container-$a"; done; exit 0;;
esac
exit 0
"""


def test_a_stage_timeout_removes_its_docker_container(tmp_path: Path) -> None:
    bin_dir, state = tmp_path / "bin", tmp_path / "docker-state"
    bin_dir.mkdir()
    state.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    data = tiny_dict(tmp_path, smoke=True)
    data["stages"]["triton_config"]["formats"] = ["python"]
    server = {"kind": "docker", "image": "nvcr.io/nvidia/tritonserver:24.10-py3", "startup_timeout_s": 300}
    data["stages"]["smoke"] = {"server": server, "timeout_s": 20}  # after `docker run`, loaded or not
    config = tmp_path / "docker.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DOCKER_DIR": str(state)}
    done = run_cli("run", str(config), "--to", "smoke", cwd=tmp_path, env=env)
    assert done.returncode == ExitCode.LIMIT, done.stdout[-3000:] + done.stderr[-3000:]
    assert "exceeded timeout_s 20" in done.stdout + done.stderr
    calls = (state / "calls.log").read_text() if (state / "calls.log").exists() else ""
    assert "rm -f deploy-smoke-" in calls, calls
    assert not list(state.glob("container-*")), "the container outlived its stage"
