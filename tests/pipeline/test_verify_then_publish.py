"""Verify, then publish: the repository (and its object-storage copy) is replaced only by
a candidate smoke passed on a real tritonserver. A failed smoke leaves both exactly as
they were and names what they keep; a run that stops before smoke publishes nothing new;
a config without smoke publishes, and says plainly that it is unverified."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers import S3Server, run_cli, tiny_dict


@pytest.fixture
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    server.client().create_bucket(Bucket="models")
    yield server
    server.stop()


def files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def objects(s3: S3Server) -> dict[str, str]:
    client = s3.client()
    return {k: client.head_object(Bucket="models", Key=k)["ETag"] for k in s3.keys("models")}


def config(tmp_path: Path, smoke: bool, seed: int, **smoke_params: object) -> Path:
    data = tiny_dict(tmp_path, smoke=smoke)
    data["model"]["seed"] = seed
    data["stages"]["triton_config"]["formats"] = ["python"]
    data["stages"].pop("trace")  # the python format serves the ONNX file
    if smoke:
        data["stages"]["triton_config"]["publish_to"] = "s3://models/repo"
        data["stages"]["smoke"] |= {"batching_requests": 8, **smoke_params}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())


@pytest.mark.triton
def test_a_candidate_that_fails_smoke_replaces_nothing_and_names_what_stays(
    tmp_path: Path, s3: S3Server
) -> None:
    first = run_cli("run", str(config(tmp_path, smoke=True, seed=0)), env=s3.env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert first.stdout.rstrip().endswith("(verified by smoke)")
    repository = tmp_path / "model_repository"
    manifest = json.loads((repository / ".deploy-tiny.json").read_text())
    assert manifest["verified_by"] == ["smoke"] and manifest["models"] == ["tiny_python"]
    before, remote_before = files(repository), objects(s3)
    assert {"repo/.deploy-tiny.json", "repo/tiny_python/1/model.onnx"} <= set(remote_before)

    # New weights, and a smoke no float difference passes: a real failure on a real server.
    strict = {"tolerance": {"atol": 0.0, "rtol": 0.0, "min_cosine": 1.0}}
    second = run_cli("run", str(config(tmp_path, smoke=True, seed=1, **strict)), env=s3.env)
    said = " ".join((second.stdout + second.stderr).split())
    assert second.returncode == 1, said
    assert files(repository) == before and objects(s3) == remote_before  # byte for byte, both
    notes = summary(tmp_path)["publishing"]
    assert [(n["destination"], n["state"]) for n in notes] == [
        (str(repository), "withheld"),
        ("s3://models/repo", "withheld"),
    ]
    assert notes[0]["note"].startswith("smoke, which verifies it, failed; ")
    assert (
        "keeps the last publish (" in notes[0]["note"]
        and ": tiny_python; verified by smoke)" in notes[0]["note"]
    )
    assert f"not published to {repository}: smoke, which verifies it, failed" in said
    assert "NOT replaced" in second.stdout.splitlines()[-1]
    report = (tmp_path / "runs" / "tiny" / "report.html").read_text()
    assert "NOT PUBLISHED to" in report and report.index("NOT PUBLISHED") < report.index("<h2>Stages</h2>")

    # Stopped before smoke (--to triton_config): a new candidate is not published either.
    third = run_cli("run", str(config(tmp_path, smoke=True, seed=2)), "--to", "triton_config", env=s3.env)
    assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-2000:]
    assert files(repository) == before and objects(s3) == remote_before
    assert summary(tmp_path)["publishing"][0]["note"].startswith("smoke, which verifies it, did not run")


def test_without_smoke_the_repository_is_published_and_said_to_be_unverified(tmp_path: Path) -> None:
    done = run_cli("run", str(config(tmp_path, smoke=False, seed=0)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    manifest = json.loads((tmp_path / "model_repository" / ".deploy-tiny.json").read_text())
    assert manifest["verified_by"] == [] and manifest["models"] == ["tiny_python"]
    (note,) = summary(tmp_path)["publishing"]
    assert note["state"] == "unverified" and "no stage of this config verifies it" in note["note"]
    assert "UNVERIFIED: " in done.stdout + done.stderr and "(UNVERIFIED: no server check)" in done.stdout
    report = (tmp_path / "runs" / "tiny" / "report.html").read_text()
    assert "UNVERIFIED: published" in report


@pytest.mark.triton
def test_models_smoke_could_not_load_are_published_as_unverified_and_said_so(tmp_path: Path) -> None:
    """nvidia-pytriton's server has no onnxruntime backend: smoke passes on the python model
    and skips the onnx one. The repository said "verified by smoke" of both."""
    data = tiny_dict(tmp_path, smoke=True)
    data["stages"]["triton_config"]["formats"] = ["onnx", "python"]
    data["stages"].pop("trace")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for _ in ("cold", "warm"):  # a cached smoke says it as well
        done = run_cli("run", str(path))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        last = done.stdout.rstrip().splitlines()[-1]
        assert last.endswith("(verified by smoke; 1 model(s) UNVERIFIED: its server could not load them)")
        manifest = json.loads((tmp_path / "model_repository" / ".deploy-tiny.json").read_text())
        assert manifest["verified_by"] == ["smoke"] and manifest["unverified"] == ["tiny_onnx"]
        [note] = summary(tmp_path)["publishing"]
        assert note["unchecked"] == ["tiny_onnx"] and "no 'onnxruntime' backend" in note["note"]


@pytest.mark.triton
def test_a_publish_that_fails_after_smoke_passed_says_its_checks_passed(tmp_path: Path, s3: S3Server) -> None:
    """Smoke's row read "failed: publishing ... failed", as if the server check had failed:
    the checks passed, the publish they allowed did not (a bucket that does not exist)."""
    path = config(tmp_path, smoke=True, seed=0)
    data = yaml.safe_load(path.read_text())
    data["stages"]["triton_config"]["publish_to"] = "s3://no-such-bucket/repo"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    done = run_cli("run", str(path), env=s3.env)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 4, said
    assert (
        "stage 'smoke' failed: its checks passed, then publishing the repository to s3://no-such-bucket/repo failed"
        in said
    )
    smoke = next(s for s in summary(tmp_path)["stages"] if s["stage"] == "smoke")
    assert smoke["status"] == "failed" and smoke["message"].startswith("its checks passed, then publishing")
    assert "Traceback" not in done.stderr


STOPPED_AFTER = {
    "passed": (
        {},
        "smoke, which verifies it, ended as the run was stopped, before its verdict could publish",
    ),
    # no float difference passes: a real failure on a real server, said as one
    "failed": (
        {"tolerance": {"atol": 0.0, "rtol": 0.0, "min_cosine": 1.0}},
        "smoke, which verifies it, failed",
    ),
}


@pytest.mark.triton
@pytest.mark.parametrize("verdict", list(STOPPED_AFTER))
def test_a_stop_as_smoke_ended_publishes_nothing_and_says_so(
    tmp_path: Path, s3: S3Server, verdict: str
) -> None:
    """A Ctrl-C landing as `smoke ran` was printed said "smoke, which verifies it, did not run
    in this invocation" of a smoke that had just passed (or failed); the run stops before
    publishing and says what smoke's verdict was."""
    smoke, note = STOPPED_AFTER[verdict]
    import os
    import subprocess
    import sys

    from deploy.pipeline.process.faults import FAULT_ENV
    from tests.helpers import signals_as_a_terminal_sends_them

    done = subprocess.run(
        [sys.executable, "-m", "deploy", "run", str(config(tmp_path, smoke=True, seed=1, **smoke))],
        cwd=tmp_path,
        env={**os.environ, **s3.env, FAULT_ENV: "SIGINT@reported:smoke"},
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=signals_as_a_terminal_sends_them,
    )
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 130, said
    notes = summary(tmp_path)["publishing"]
    assert {n["state"] for n in notes} == {"withheld"}, notes
    assert all(n["note"].startswith(note) for n in notes), notes
    assert not (tmp_path / "model_repository" / "tiny_python").exists()
