"""The shared remote cache against a real S3 server (moto's, over HTTP, on a free
loopback port) and a file:// remote: two agents (separate work dirs and local caches,
separate processes) share one remote; corrupt remote objects are never served; a push
killed with SIGKILL leaves no visible entry; a dead remote costs one warning, not a build."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.graph.hashing import digest_file
from deploy.pipeline.graph.keys import KeyParts
from deploy.pipeline.store.objects import Entry, Store
from tests.helpers import S3_ENV, Cli, S3Server, run, run_cli, tiny_dict

BUCKET, PREFIX = "deploy-ci", "cache"
STAGES = ("golden", "trace", "export", "simplify", "validate", "triton_config")


@pytest.fixture
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    server.client().create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


def agent(workdir: Path, remote: str, endpoint: str | None = None) -> Path:
    """One CI agent: its own work dir, local cache and published repository."""
    workdir.mkdir(parents=True)
    data = tiny_dict(workdir)
    data["stages"] = {
        name: data["stages"][name] for name in STAGES if name in data["stages"]
    }  # golden: implied
    data["stages"]["triton_config"]["formats"] = ["onnx", "python"]
    data["cache"] = {"remote": remote, **({"endpoint_url": endpoint} if endpoint else {})}
    path = workdir / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def deploy_run(config: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], dict, float]:
    started = time.perf_counter()
    summary = config.parent / "summary.json"
    done = run_cli("run", str(config), "--json", str(summary), cwd=config.parent, env=env)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(summary.read_text()), seconds


def statuses(summary: dict) -> dict[str, str]:
    return {s["stage"]: "remote" if s.get("remote") else s["status"] for s in summary["stages"]}


def published(config: Path) -> dict[str, str]:
    root = config.parent / "model_repository"
    return {str(p.relative_to(root)): digest_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_second_agent_downloads_instead_of_rebuilding(s3, tmp_path, cli: Cli) -> None:
    remote = f"s3://{BUCKET}/{PREFIX}"
    first, second = agent(tmp_path / "a", remote), agent(tmp_path / "b", remote)
    done, summary, cold = deploy_run(first, s3.env)
    assert set(statuses(summary).values()) == {"ran"}
    assert f"remote cache: pushed {len(STAGES)} entries" in done.stdout
    assert len([k for k in s3.keys(BUCKET, f"{PREFIX}/actions/")]) == len(STAGES)
    plan = cli("plan", str(second), "--detailed-exitcode", env=s3.env)
    assert plan.returncode == 0, plan.stdout + plan.stderr  # nothing will run: all downloadable
    assert plan.stdout.count("from the remote cache") == len(STAGES), plan.stdout
    done, summary, warm = deploy_run(second, s3.env)
    assert statuses(summary) == dict.fromkeys(STAGES, "remote"), done.stdout
    assert "pushed" not in done.stdout  # nothing new to push
    assert published(second) == published(first)
    # How much faster the download is, is measured, not asserted (docs/how-to/remote-cache.md).
    print(f"agent a built in {cold:.1f} s; agent b downloaded in {warm:.1f} s")


def test_a_flipped_byte_in_a_remote_object_is_detected_and_rebuilt(s3, tmp_path) -> None:
    remote = f"s3://{BUCKET}/{PREFIX}"
    first, second, third = (agent(tmp_path / n, remote) for n in "abc")
    _, summary, _ = deploy_run(first, s3.env)
    traced = next(s for s in summary["stages"] if s["stage"] == "trace")["outputs"]["torchscript"]["digest"]
    key = f"{PREFIX}/objects/{traced[:2]}/{traced}"
    body = bytearray(s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[len(body) // 2] ^= 0x01
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
    done, summary, _ = deploy_run(second, s3.env)
    assert statuses(summary)["trace"] == "ran"
    assert f"remote cache object {traced[:12]} does not match its digest: ignored, rebuilding" in done.stdout
    assert not (second.parent / "cache" / "objects" / traced[:2] / traced).exists() or (
        digest_file(second.parent / "cache" / "objects" / traced[:2] / traced) == traced
    )
    # The second agent's push repaired the remote: a third agent gets everything from it.
    done, summary, _ = deploy_run(third, s3.env)
    assert statuses(summary) == dict.fromkeys(STAGES, "remote"), done.stdout
    assert "does not match" not in done.stdout


def test_a_dead_remote_costs_one_warning_and_the_build_runs_locally(tmp_path) -> None:
    from deploy.serving.ports import free_port

    secret = "s3cr3t-never-printed"
    dead = {
        **S3_ENV,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port('127.0.0.1')}",
    }
    config = agent(tmp_path / "a", f"s3://{BUCKET}/{PREFIX}")
    done, summary, _ = deploy_run(config, dead)
    assert set(statuses(summary).values()) == {"ran"}
    output = done.stdout + done.stderr
    assert output.count(f"remote cache s3://{BUCKET}/{PREFIX} unavailable") == 1, output
    assert "continuing with the local cache only" in output
    assert secret not in output
    # The local cache still works: the next run is all cached, with the same single warning.
    done, summary, _ = deploy_run(config, dead)
    assert set(statuses(summary).values()) == {"cached"}
    assert "unavailable" not in done.stdout + done.stderr  # no local miss: the remote is never asked


def big_entries(store: Store, count: int, size: int) -> list[Entry]:
    """Entries with one large random object each, made through the store's own API."""
    entries = []
    for index in range(count):
        path = store.work_root() / f"big-{index}"
        path.write_bytes(os.urandom(size))
        output = store.ingest(path, ArtifactKind.FILE)
        entry = Entry("big", f"{index:02d}" + "0" * 62, KeyParts("big", 1, {}, {}, {}, {}), {"blob": output})
        store.commit(entry)
        entries.append(entry)
    return entries


def test_a_push_killed_with_sigkill_leaves_no_visible_entry(s3, tmp_path, cli: Cli) -> None:
    store = Store(tmp_path / "cache")
    entries = big_entries(store, count=3, size=120 << 20)  # multipart uploads, seconds each
    command = [sys.executable, "-m", "deploy", "cache", "push", "--cache-dir", str(store.root)]
    command += ["--remote", f"s3://{BUCKET}/{PREFIX}"]
    push = subprocess.Popen(
        command, env={**os.environ, **s3.env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not s3.client().list_multipart_uploads(Bucket=BUCKET).get(
        "Uploads"
    ):
        time.sleep(0.02)
    push.send_signal(signal.SIGKILL)
    push.wait(timeout=30)
    assert push.returncode == -signal.SIGKILL
    assert s3.keys(BUCKET, f"{PREFIX}/actions/") == []
    # A complete push afterwards: every visible entry has every object, intact.
    done = cli(*command[3:], env=s3.env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pushed 3 entries" in done.stdout
    for entry in entries:
        blob = entry.outputs["blob"].digest
        body = s3.client().get_object(Bucket=BUCKET, Key=f"{PREFIX}/objects/{blob[:2]}/{blob}")["Body"].read()
        assert len(body) == entry.outputs["blob"].size
    listed = cli("cache", "ls", "--remote", f"s3://{BUCKET}/{PREFIX}", env=s3.env)
    assert listed.stdout.count("big") == 3, listed.stdout


def test_a_file_remote_is_shared_and_pull_verifies(tmp_path) -> None:
    """file:// (a shared directory, e.g. NFS): the same read-through, in process."""
    remote = (tmp_path / "shared").as_uri()
    first, second = agent(tmp_path / "a", remote), agent(tmp_path / "b", remote)
    assert {r.status.value for r in run(first).values()} == {"ran"}
    assert not list((tmp_path / "shared").rglob("*.tmp-*"))  # written under temp names, renamed
    results = run(second)
    assert {name: r.remote for name, r in results.items()} == dict.fromkeys(STAGES, True)
    pulled = Store(second.parent / "cache")
    for result in results.values():
        for output in result.outputs.values():
            assert pulled.problem(output, deep=True) is None


@pytest.mark.triton
def test_the_repository_is_published_to_s3_and_smoke_serves_it_from_there(s3, tmp_path, monkeypatch) -> None:
    s3.client().create_bucket(Bucket="models")
    config = agent(tmp_path / "a", f"s3://{BUCKET}/{PREFIX}")
    data = yaml.safe_load(config.read_text())
    data["stages"]["triton_config"]["publish_to"] = "s3://models/repo"
    data["stages"]["smoke"] = {
        "source": "published",
        "server": {"kind": "auto", "startup_timeout_s": 120},
        "protocols": ["http"],
        "batching_requests": 0,
    }
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    _, summary, _ = deploy_run(config, s3.env)
    local = published(config)
    remote = {k.removeprefix("repo/") for k in s3.keys("models", "repo/")}
    assert remote == set(local) and not any(".staging-" in k for k in remote)
    for rel, digest in local.items():
        body = s3.client().get_object(Bucket="models", Key=f"repo/{rel}")["Body"].read()
        assert hashlib.sha256(body).hexdigest() == digest
    smoke = next(s for s in summary["stages"] if s["stage"] == "smoke")
    report = json.loads(Path(smoke["outputs"]["smoke"]["path"]).read_text())
    assert report["models"]["tiny_python"]["status"] == "passed", report
    server_log = Path(smoke["outputs"]["server_log"]["path"]).read_text()
    # The server read the candidate beside publish_to, removed once smoke passed.
    assert f"s3://http://127.0.0.1:{s3.port}/models/repo.candidate" in server_log
    assert not s3.keys("models", "repo.candidate/")
    # A model the pipeline no longer produces leaves the bucket too.
    data["stages"]["triton_config"]["formats"] = ["python"]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    deploy_run(config, s3.env)
    # (and the pipeline's manifest at the root lists what it published)
    assert {k.split("/")[1] for k in s3.keys("models", "repo/")} == {"tiny_python", ".deploy-tiny.json"}
    # A bucket missing a file of the last publish is refused by smoke, naming the file.
    from deploy.pipeline.errors import StageFailed
    from deploy.pipeline.publish.readback import complete
    from deploy.stages.smoke.stage import _refuse_incomplete

    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    assert complete("s3://models/repo", "tiny") == []
    s3.client().delete_object(Bucket="models", Key="repo/tiny_python/config.pbtxt")
    with pytest.raises(StageFailed, match=r"tiny_python/config\.pbtxt: missing or resized"):
        _refuse_incomplete("s3://models/repo", "tiny")


def test_a_remote_object_that_expired_is_a_miss_not_a_failure(tmp_path) -> None:
    """A bucket lifecycle rule may delete objects under live entries: that stage runs."""
    shared = tmp_path / "shared"
    first, second = agent(tmp_path / "a", shared.as_uri()), agent(tmp_path / "b", shared.as_uri())
    traced = run(first)["trace"].outputs["torchscript"].digest
    (shared / "objects" / traced[:2] / traced).unlink()
    results = run(second)
    assert results["trace"].status.value == "ran" and not results["trace"].remote
    assert (shared / "objects" / traced[:2] / traced).is_file() or results["trace"].outputs[
        "torchscript"
    ].digest != traced


def test_publishing_to_a_missing_bucket_fails_that_stage_with_exit_4(s3, tmp_path, cli: Cli) -> None:
    config = agent(tmp_path / "a", f"s3://{BUCKET}/{PREFIX}")
    data = yaml.safe_load(config.read_text())
    data["stages"]["triton_config"]["publish_to"] = "s3://no-such-bucket/repo"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    done = cli("run", str(config), env=s3.env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert (
        "stage 'triton_config' failed: publishing the repository to s3://no-such-bucket/repo failed"
        in " ".join(done.stderr.split())
    )
    assert "Traceback" not in done.stderr and "run failed" in done.stdout
