"""The smoke stage against a real tritonserver (the one in the nvidia-pytriton wheel):
a passing run, each fault it must catch, and the server's lifecycle."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.pipeline.errors import ExitCode, StageFailed
from deploy.pipeline.graph.contract import StageContext
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.store.objects import Store
from deploy.stages.smoke import stage as smoke
from tests.helpers import (
    CASES,
    Cli,
    output_path,
    run,
    run_cli,
    signals_as_a_terminal_sends_them,
    tritonservers,
)

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny pipeline up to triton_config: (config, repository tree, golden file)."""
    import yaml

    from tests.helpers import tiny_dict

    tmp = tmp_path_factory.mktemp("smoke")
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(tmp, smoke=True), sort_keys=False))
    results = run(path, stop="triton_config")
    store = Store(tmp / "cache")
    return (
        path,
        store.path_of(results["triton_config"].outputs["repository"]),
        store.path_of(results["golden"].outputs["golden"]),
    )


def python_only_repo(built, tmp_path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(built[1] / "tiny_python", repo / "tiny_python")
    for path in repo.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return repo


def smoke_run(built, repo, tmp_path, **params):
    config = load_project(built[0]).config
    work = tmp_path / "work"
    work.mkdir()
    outputs = {a.name: a for a in smoke.SPEC.outputs}
    ctx = StageContext(
        config, {"repository": repo, "golden": built[2]}, work, outputs, logging.getLogger("smoke-test")
    )
    before = tritonservers()
    try:
        smoke.run(ctx, smoke.SmokeParams.model_validate(params))
    finally:
        assert not tritonservers() - before, "the stage left a tritonserver running"
    return ctx


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, text
    path.write_text(text.replace(old, new, 1))


def test_full_smoke_passes_over_http_and_grpc_with_batching(built, tmp_path):
    """No validate report among its inputs: every golden case over both protocols."""
    ctx = smoke_run(built, built[1], tmp_path)
    report = json.loads(ctx.output("smoke").read_text())
    python = report["models"]["tiny_python"]
    assert python["status"] == "passed" and set(python["protocols"]) == {"http", "grpc"}
    for protocol in ("http", "grpc"):
        assert {label for label in python["protocols"][protocol]} == set(CASES)
        assert python["protocols"][protocol]["max"]["logits"]["max_abs"] < 1e-5
    traffic = python["traffic"]
    # 8 clients at once, each its own rows of golden's inputs (batch 1, 2, 3), all answered
    # as their own request alone would be; bursts are sent until the batcher merged requests
    # of several (it did in nearly every run; in one fresh-clone CI run 3 bursts of a model
    # this fast all arrived one by one, which the report then says instead of claiming it).
    assert (
        traffic["clients"] == 8 and traffic["requests"] == 16 and sorted(set(traffic["batches"])) == [1, 2, 3]
    )
    assert traffic["mismatch_count"] == 0 and (traffic["merged"] or traffic["rounds"] == 3), traffic
    assert traffic["executions"] < 64
    assert report["models"]["tiny_onnx"] == {
        "status": "skipped",
        "reason": "the server has no 'onnxruntime' backend",
        "format": "onnx",
        "precision": "fp32",
        "role": "model",
        "backend": "onnxruntime",
    }
    assert report["server"]["version"] and "python" in report["server"]["backends"]
    assert "Started GRPCInferenceService" in ctx.output("server_log").read_text()


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (
            ("config.pbtxt", 'name: "logits"', 'name: "logit"'),
            "output 'logits' missing (server has ['logit'])",
        ),
        (
            ("config.pbtxt", "dims: 8\n  dims: 8", "dims: 9\n  dims: 8"),
            "input 'image': server says FP32 [-1, 1, 9, 8], shape spec says FP32 [-1, 1, 8, 8]",
        ),
        (
            ("config.pbtxt", "max_batch_size: 16", "max_batch_size: 64"),
            "max_batch_size 64 exceeds the shape spec's max batch 16",
        ),
    ],
)
def test_config_faults_are_caught(built, tmp_path, fault, expected):
    repo = python_only_repo(built, tmp_path)
    edit(repo / "tiny_python" / fault[0], fault[1], fault[2])
    with pytest.raises(StageFailed) as info:
        smoke_run(built, repo, tmp_path)
    assert expected in str(info.value)
    assert "server log tail" in str(info.value)


def test_corrupted_model_file_is_caught(built, tmp_path):
    repo = python_only_repo(built, tmp_path)
    (repo / "tiny_python" / "1" / "model.onnx").write_bytes(b"\x08\x07not an onnx file")
    with pytest.raises(StageFailed, match=r"tiny_python: UNAVAILABLE: .*(onnx|ONNX|protobuf|Protobuf)"):
        smoke_run(built, repo, tmp_path)


def test_wrong_numbers_fail_the_tolerance(built, tmp_path, digits_checkpoint, write_config):
    """A model with other (trained) weights answers with other numbers than the reference."""
    checkpoint, _ = digits_checkpoint
    other = write_config({"model": {"checkpoint": str(checkpoint)}}, name="digits.yaml")
    results = run(other, stop="export")
    trained_onnx = output_path(other, results, "export", "onnx")
    repo = python_only_repo(built, tmp_path)
    shutil.copyfile(trained_onnx, repo / "tiny_python" / "1" / "model.onnx")
    with pytest.raises(StageFailed, match=r"tiny_python: http min/logits: .*cosine"):
        smoke_run(built, repo, tmp_path)


def test_server_that_never_gets_ready_times_out_and_is_stopped(built, tmp_path):
    repo = python_only_repo(built, tmp_path)
    edit(
        repo / "tiny_python" / "1" / "model.py",
        "    def initialize(self, args):\n",
        "    def initialize(self, args):\n        import time; time.sleep(600)\n",
    )
    start = time.monotonic()
    with pytest.raises(
        StageFailed, match=r"(?s)did not become live within the startup timeout.*loading: tiny_python"
    ):
        smoke_run(built, repo, tmp_path, server={"startup_timeout_s": 12, "stop_grace_s": 2})
    # One startup_timeout_s for the whole start: the port check and the wait for `live` each
    # took a whole one (2 x 12 s and more; 241 s at the default 120). The rest of the bound is
    # smoke's own setup on a loaded machine.
    assert time.monotonic() - start < 22


def test_a_configured_port_that_is_taken_is_an_error_naming_it(built, tmp_path):
    """Clients were told that port: moving silently to another one would hide the clash."""
    from deploy.serving.ports import PortInUse

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortInUse, match=rf"^port {port} \(server\.http_port\) is already in use") as info:
            smoke_run(
                built,
                python_only_repo(built, tmp_path),
                tmp_path,
                server={"http_port": port},
                batching_requests=0,
            )
    assert info.value.exit_code == ExitCode.ENVIRONMENT


def test_full_pipeline_cli_then_cached_without_server(tmp_path, write_config, cli: Cli):
    path = write_config(smoke=True)
    first = cli("run", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    smoke_row = next(s for s in summary["stages"] if s["stage"] == "smoke")
    assert smoke_row["status"] == "ran"
    protocols = smoke_row["metrics"]["smoke"]["models"]["tiny_python"]["protocols"]
    assert protocols["grpc"]["opt"]["logits"]["passed"]
    # validate compared the served files with eager at every golden case: smoke sends the
    # shape spec's cases, min and max over the first protocol, min and opt over the other.
    assert {p: sorted(cases) for p, cases in protocols.items()} == {
        "http": ["max", "min"],
        "grpc": ["min", "opt"],
    }
    again = cli("run", str(path))
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    assert again.returncode == 0 and {s["status"] for s in summary["stages"]} == {"cached"}


def wait_for_server(before: set[int], timeout: float = 120) -> set[int]:
    deadline = time.monotonic() + timeout
    while not (started := tritonservers() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started, "no tritonserver started"
    return started


def shm_regions(servers: set[int], timeout: float = 60) -> list[Path]:
    """The /dev/shm regions of our servers' python backends, named by the prefix their
    command lines give (read there, so the test assumes nothing of how it is made)."""
    prefixes = []
    for pid in servers:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        flag = next(a.decode() for a in args if b"shm-region-prefix-name=" in a)
        prefixes.append(flag.split("shm-region-prefix-name=", 1)[1])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for prefix in prefixes for p in Path("/dev/shm").glob(f"{prefix}*")]
        if found:
            return found
        time.sleep(0.1)
    return []


def alive_in_group(group: int) -> list[int]:
    """Processes of the group that are not zombies (a killed stub waits for init to reap it)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile
            if os.getpgid(proc.pid) == group and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
    return found


def wait_gone(pids: set[int], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while pids & tritonservers() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not pids & tritonservers()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_server_dies_with_an_interrupted_or_killed_pipeline(built, write_config, sig):
    path = write_config(smoke=True, name=f"sig{int(sig)}.yaml")
    run(path, stop="triton_config")
    before = tritonservers()
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "run", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=signals_as_a_terminal_sends_them,
    )
    started = wait_for_server(before)
    time.sleep(1.0)
    regions = shm_regions(started)
    os.kill(proc.pid, sig)
    proc.communicate(timeout=120)
    assert wait_gone(started), "tritonserver outlived the pipeline process"
    # A killed server never unlinks its python backend's regions: /dev/shm would fill run by run.
    assert regions and not [r for r in regions if r.exists()]
    if sig == signal.SIGINT:
        assert proc.returncode == ExitCode.INTERRUPTED
        assert not list((path.parent / "cache").glob("tmp/*"))


def test_deploy_serve_answers_and_stops_on_ctrl_c(built, cli: Cli):
    path = built[0]
    assert cli("run", str(path), "--to", "smoke").returncode == 0  # published once smoke passed
    before = tritonservers()
    from deploy.serving.ports import free_port

    # A port of its own: without one it takes 8000-8002, as tests/deploy/test_infer.py's
    # serve does on another worker, and one of the two would lose them.
    port = str(free_port("127.0.0.1"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "serve", str(path), "--http-port", port],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    while proc.poll() is None and not any("serving;" in ln for ln in lines):
        lines.append(proc.stdout.readline())
    assert any("tiny_python: READY" in ln for ln in lines), lines
    http = next(ln.split()[1] for ln in lines if ln.startswith("HTTP"))
    import urllib.request

    with urllib.request.urlopen(f"{http}/v2/models/tiny_python/ready", timeout=10) as reply:
        assert reply.status == 200
    started = tritonservers() - before
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.OK  # a requested stop is a success
    assert wait_gone(started)


def test_a_stage_server_stopped_at_once_leaves_no_process_and_no_shared_memory(built, tmp_path):
    """A stage's server is idle when its checks end: killed, not asked (Triton's graceful
    stop polls its models once a second), and what its python backend made in /dev/shm,
    which only a graceful stop unlinks, is removed by name."""
    from deploy.serving import tritonserver

    repo = python_only_repo(built, tmp_path)
    spec = tritonserver.ServerSpec()
    assert tritonserver.grace_s(spec, idle_at_end=True) == 0 and tritonserver.grace_s(spec, False) > 0
    with tritonserver.serving(spec, repo, ["tiny_python"], tmp_path, idle_at_end=True) as server:
        assert server.process is not None
        regions = shm_regions({server.process.pid})
        group = server.process.pid
    assert regions and not [r for r in regions if r.exists()]
    assert not alive_in_group(group), "the server or a stub outlived the stop"


def test_existing_server_by_url_gets_models_loaded_and_unloaded(built, tmp_path):
    """A server we don't own (explicit model control, nothing loaded): the stage loads
    the models through the API, checks them, unloads them, and leaves the server up."""
    from deploy.serving import tritonserver
    from deploy.serving.model_state import ModelState

    repo = python_only_repo(built, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    with tritonserver.serving(tritonserver.ServerSpec(), repo, [], outside) as server:
        ctx = smoke_run(
            built,
            repo,
            tmp_path,
            server={"kind": "url", "url": server.http, "grpc_url": server.grpc},
        )
        report = json.loads(ctx.output("smoke").read_text())
        assert report["models"]["tiny_python"]["status"] == "passed"
        assert server.process.poll() is None  # not ours to stop
        deadline = time.monotonic() + 30
        while (
            tritonserver.repository_index(server)["tiny_python"].state is ModelState.UNLOADING
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert (
            tritonserver.repository_index(server)["tiny_python"].state is ModelState.UNAVAILABLE
        )  # unloaded again


def test_default_formats_pass_on_the_default_server_and_say_partial(tmp_path, write_config, cli: Cli):
    """`triton_config: {}` and `smoke: {}` on the wheel's server (python backend only):
    the python model passes; onnx and torchscript are skipped, which every output shows."""
    path = write_config(replace={"stages": {"trace": {}, "export": {}, "triton_config": {}, "smoke": {}}})
    junit = tmp_path / "junit.xml"
    proc = cli("run", str(path), "--junit", str(junit))
    assert proc.returncode == 0, proc.stderr[-3000:]
    note = "passed 1, skipped 2 (no onnxruntime, pytorch backend)"
    smoke_line = next(line for line in proc.stdout.splitlines() if line.startswith("smoke "))
    assert "ran (partial)" in smoke_line and note in smoke_line
    import xml.etree.ElementTree as ET

    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == "smoke")
    assert case.find("system-out").text.startswith(f"PARTIAL: {note}")
    report = (tmp_path / "runs" / "tiny" / "report.html").read_text()
    assert "· partial" in report and note in report
    again = cli("run", str(path))  # cached: still partial
    assert "cached (partial)" in next(line for line in again.stdout.splitlines() if line.startswith("smoke "))


def test_no_testable_model_names_the_missing_backend_and_the_fix(tmp_path, write_config, cli: Cli):
    path = write_config(
        replace={"stages": {"trace": {}, "export": {}, "triton_config": {"formats": ["onnx"]}, "smoke": {}}}
    )
    proc = cli("run", str(path))
    assert proc.returncode == ExitCode.STAGE and "Traceback" not in proc.stderr
    assert "the server has no 'onnxruntime' backend (for tiny_onnx)" in proc.stderr
    assert "add `python` to stages.triton_config.formats" in proc.stderr


def test_a_required_format_that_was_skipped_fails(tmp_path, write_config, cli: Cli):
    stages = {
        "trace": {},
        "export": {},
        "triton_config": {"formats": ["onnx", "python"]},
        "smoke": {"require": ["python", "onnx"]},
    }
    proc = cli("run", str(write_config(replace={"stages": stages})))
    assert proc.returncode == ExitCode.STAGE
    assert (
        "tiny_onnx: required format 'onnx' was skipped: the server has no 'onnxruntime' backend"
        in proc.stderr
    )
    assert "tiny_python" not in proc.stderr.split("server log tail")[0]  # it passed


def servers_on(repository: Path) -> set[int]:
    """Our tritonservers, told apart from any other test's by their repository."""
    import psutil

    found = set()
    for pid in tritonservers():
        try:
            if f"--model-repository={repository}" in psutil.Process(pid).cmdline():
                found.add(pid)
        except psutil.NoSuchProcess:
            continue
    return found


def serve_env(tmpdir: Path) -> dict[str, str]:
    """`deploy serve` in a subprocess whose temp dirs land in `tmpdir`."""
    return {
        **{k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"},
        "COLUMNS": "200",
        "TMPDIR": str(tmpdir),
    }


@pytest.fixture
def published(built, tmp_path):
    """(config, published repository, an empty TMPDIR for `deploy serve`)."""
    path = built[0]
    assert run_cli("run", str(path), "--to", "smoke").returncode == 0  # published once smoke passed
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    return path, load_project(path).config.repository.absolute(), tmpdir


@pytest.mark.parametrize("origin", ["option", "config"])
def test_deploy_serve_on_a_taken_port_exits_4_naming_it(published, tmp_path, origin):
    import yaml

    path, repository, tmpdir = published
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        if origin == "option":
            config, label = path, "--http-port"
            args = ["--http-port", str(port)]
        else:
            data = yaml.safe_load(path.read_text())
            data["stages"]["smoke"]["server"]["http_port"] = port
            config = tmp_path / "port.yaml"
            config.write_text(yaml.safe_dump(data, sort_keys=False))
            label, args = f"stages.smoke.server.http_port in {config}", []
        # A server that moved to another port would serve until killed: the timeout fails the test.
        proc = subprocess.run(
            [sys.executable, "-m", "deploy", "serve", str(config), *args],
            capture_output=True,
            text=True,
            timeout=90,
            env=serve_env(tmpdir),
        )
    assert proc.returncode == ExitCode.ENVIRONMENT, proc.stderr
    assert f"error (PortInUse): port {port} ({label}) is already in use on 127.0.0.1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not servers_on(repository), "a tritonserver was started"
    assert not list(tmpdir.glob("deploy-serve-*"))


class Lines:
    """A process's stdout read on a thread, so that a serve that never prints what a
    test waits for fails the test instead of hanging it."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import queue
        import threading

        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []

        def read() -> None:
            for line in proc.stdout or []:
                self.queue.put(line)

        threading.Thread(target=read, daemon=True).start()

    def until(self, marker: str, timeout: float = 180) -> list[str]:
        import queue

        deadline = time.monotonic() + timeout
        while not any(marker in line for line in self.seen):
            try:
                self.seen.append(self.queue.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"no line with {marker!r} within {timeout} s: {self.seen}")
        return self.seen


def test_deploy_serve_prints_metrics_and_stops_cleanly_on_sigterm(published):
    """SIGTERM (systemd, docker stop, Jenkins aborting a job) stops the server and removes
    the temp dir as Ctrl-C does, and exits 0; the printed metrics address answers."""
    import psutil

    from deploy.serving.ports import free_port

    path, repository, tmpdir = published
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmpdir / f"deploy-serve-{dead.pid}-left"  # what a `deploy serve` killed by SIGKILL left
    stale.mkdir()
    (stale / "tiny_python.log").write_text("a server log nobody removed")
    metrics_port = free_port("127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "serve", str(path), "--metrics-port", str(metrics_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=serve_env(tmpdir),
    )
    try:
        out = Lines(proc)
        lines = out.until("serving;")
        addresses = {w[0]: w[1] for w in (line.split() for line in lines) if len(w) == 2}
        assert addresses["metrics"] == f"http://127.0.0.1:{metrics_port}/metrics", lines
        assert addresses["gRPC"].startswith("127.0.0.1:") and addresses["HTTP"].startswith(
            "http://127.0.0.1:"
        )
        import urllib.request

        with urllib.request.urlopen(addresses["metrics"], timeout=10) as reply:
            assert 'nv_inference_request_success{model="tiny_python"' in reply.read().decode()
        started = servers_on(repository)
        assert started and {p.pid for p in psutil.Process(proc.pid).children()} >= started
        assert len(list(tmpdir.glob("deploy-serve-*"))) == 1  # its own; the stale one removed
        assert not stale.exists() and any(f"removed {stale}" in line for line in lines), lines
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.OK, proc.stderr.read()
    assert wait_gone(started), "tritonserver outlived `deploy serve`"
    assert not list(tmpdir.glob("deploy-serve-*")), "the temp dir was left behind"
    out.until("stopped by SIGTERM; server stopped", timeout=10)


def test_a_foreign_tritonserver_survives_the_orphan_check(tmp_path: Path) -> None:
    """A process named tritonserver that this run did not start (a user's live server) is
    not ours to stop: the fixture's search does not see it, ours it does."""
    from tests.helpers import RUN_MARK

    fake = tmp_path / "tritonserver"
    shutil.copy("/bin/sleep", fake)
    theirs = {k: v for k, v in os.environ.items() if k != RUN_MARK}
    foreign = subprocess.Popen([str(fake), "60"], env=theirs)
    ours = subprocess.Popen([str(fake), "60"])  # inherits this run's mark
    try:
        time.sleep(0.3)
        found = tritonservers()
        assert ours.pid in found and foreign.pid not in found
        assert foreign.poll() is None  # alive
    finally:
        for p in (foreign, ours):
            p.kill()
            p.wait()
