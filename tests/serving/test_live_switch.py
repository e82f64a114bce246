"""A release reaches a live server with no failed request: `deploy serve` serves the
repository (explicit model control), a client sends continuously, `deploy run` releases
a retrained checkpoint, telling the server (stages.release.servers), then `deploy
rollback` goes back, telling the same servers. Every request is answered: the old version's answers, then
the new one's, then the old one's again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from deploy.serving import releases
from tests.helpers import Cli, S3Server, shared_digits, tiny_dict

pytestmark = pytest.mark.triton


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _reference(model_file: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["logits"], {"image": x})[0])


class Client(threading.Thread):
    """Sends the same request continuously; keeps every answer and every error, in order."""

    def __init__(self, url: str, x: np.ndarray) -> None:
        super().__init__(daemon=True)
        self.url, self.x = url, x
        self.answers: list[np.ndarray] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        import tritonclient.http as http

        client = http.InferenceServerClient(self.url)
        feed = http.InferInput("image", list(self.x.shape), "FP32")
        feed.set_data_from_numpy(self.x)
        while not self.stop.is_set():
            try:
                self.answers.append(client.infer("tiny_python", [feed]).as_numpy("logits"))
            except Exception as exc:  # every failure is the test's finding
                self.errors.append(repr(exc))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    found = {}
    for epochs in (8, 30):
        found[epochs], accuracy = shared_digits(tmp_path_factory, epochs)
        assert accuracy > 0.88
    return found


@pytest.fixture
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    yield server
    server.stop()


def test_a_release_and_a_rollback_reach_a_live_server_with_no_failed_request(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    client, switched = _release_and_roll_back(tmp_path, checkpoints, {}, {}, cli)
    _check(client, switched, tmp_path / "model_repository" / "tiny_python")


@pytest.mark.matrix  # end to end (deployed, served, timed): `pytest -m matrix`, as .ci/run runs it after the README's command
def test_a_server_reading_s3_switches_with_no_failed_request(
    tmp_path: Path, checkpoints: dict[int, Path], s3: S3Server, cli: Cli
) -> None:
    """The same, the server reading the bucket the release publishes to (moto's S3, real
    HTTP): the versions, records and config reach the bucket before the server is told."""
    s3.client().create_bucket(Bucket="models")
    client, switched = _release_and_roll_back(
        tmp_path, checkpoints, s3.env, {"publish_to": "s3://models/repo"}, cli
    )
    local = tmp_path / "model_repository"
    _check(client, switched, local / "tiny_python")
    remote = {k.removeprefix("repo/") for k in s3.keys("models", "repo/")}
    mine = {
        str(p.relative_to(local)) for p in local.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    assert remote == mine  # v1 and v2, their records, the rolled-back config, stamps, manifest
    for rel in remote:
        body = s3.client().get_object(Bucket="models", Key=f"repo/{rel}")["Body"].read()
        assert body == (local / rel).read_bytes(), rel


@pytest.mark.matrix  # end to end (deployed, served, timed): `pytest -m matrix`, as .ci/run runs it after the README's command
def test_a_server_polling_the_repository_switches_by_itself_with_no_failed_request(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    """A tritonserver in poll mode (no `servers` to tell): the release's new version dir
    appears by one rename and the server moves to it by itself; the rollback's
    config.pbtxt (version_policy) moves it back. Every request is answered meanwhile."""
    from deploy.serving.locate import locate
    from deploy.serving.server_spec import ServerSpec

    config, data = _released_v1(tmp_path, checkpoints, {}, {}, cli)
    http_port, grpc_port, metrics_port = _free_ports(3)
    url = f"127.0.0.1:{http_port}"
    launch = locate(ServerSpec(), tmp_path)
    command = [
        str(launch.binary),
        f"--model-repository={tmp_path / 'model_repository'}",
        "--model-control-mode=poll",
        "--repository-poll-secs=1",
        "--exit-on-error=false",  # tiny_onnx: this server has no onnxruntime backend
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        *([f"--backend-directory={launch.backend_dir}"] if launch.backend_dir else []),
    ]
    log = tmp_path / "poll-server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=launch.env)
    x = np.load(checkpoints[8].parent / "test.npy")[:4].astype(np.float32)
    client = Client(url, x)
    model_dir = tmp_path / "model_repository" / "tiny_python"
    try:
        _wait_ready(url, server)
        client.start()
        time.sleep(1.0)
        data["model"]["checkpoint"] = str(checkpoints[30])
        data["stages"]["release"] |= {"accept_regression": "retrained for 30 epochs"}
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        released = cli("run", str(config))
        assert released.returncode == 0, released.stdout + released.stderr
        _wait_answers(client, _reference(model_dir / "2" / "model.onnx", x))
        switched = len(client.answers)
        rolled = cli("rollback", str(config))
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        _wait_answers(client, _reference(model_dir / "1" / "model.onnx", x))
    finally:
        client.stop.set()
        if client.is_alive():
            client.join(timeout=30)
        server.terminate()
        server.wait(timeout=60)
    _check(client, switched, model_dir)


def _wait_ready(url: str, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 180
    while not _ready(f"http://{url}/v2/models/tiny_python/ready"):
        assert time.monotonic() < deadline and server.poll() is None, "the server never became ready"
        time.sleep(0.5)


def _wait_answers(client: Client, expected: np.ndarray) -> None:
    """Until the client's answers are `expected` (the server polled its way there), and a
    second more of requests after."""
    deadline = time.monotonic() + 120
    while not (client.answers and np.allclose(client.answers[-1], expected, atol=1e-4)):
        assert time.monotonic() < deadline, "the polling server never switched"
        time.sleep(0.2)
    time.sleep(1.0)


def _answers_sent_after(client: Client, count: int) -> int:
    """Waits for answers to requests *sent* after the client had `count` answers: the client
    sends one at a time, so the second answer after that mark was asked for after it (the
    first may have been in flight). A fixed sleep is not enough on a loaded agent, where a
    second can pass without any answer. Returns how many answers there are then."""
    deadline = time.monotonic() + 60
    while len(client.answers) < count + 3:
        assert time.monotonic() < deadline, f"no answers for 60 s after answer {count}: {client.errors[-3:]}"
        time.sleep(0.1)
    return len(client.answers)


def _runs(which: list[int]) -> list[tuple[int, int]]:
    """[1, 1, 2] -> [(1, 2), (2, 1)]: which version answered, and how many times in a row."""
    found: list[list[int]] = []
    for version in which:
        if found and found[-1][0] == version:
            found[-1][1] += 1
        else:
            found.append([version, 1])
    return [(version, count) for version, count in found]


def _released_v1(
    tmp_path: Path, checkpoints: dict[int, Path], env: dict[str, str], triton: dict[str, str], cli: Cli
) -> tuple[Path, dict[str, Any]]:
    """The 8-epoch checkpoint released as v1."""
    data = tiny_dict(tmp_path)
    data["model"]["checkpoint"] = str(checkpoints[8])
    formats = {"formats": ["onnx", "python"], "max_batch_size": 16, "publish": "released", **triton}
    data["stages"] = {
        "export": data["stages"]["export"],
        "simplify": {},
        "triton_config": formats,
        # A loose timing budget: the switch is under test here, not the comparison's timing.
        "release": {"precision": 0.2, "max_s": 2},
    }
    config = tmp_path / "digits.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    first = cli("run", str(config), env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    return config, data


def _release_and_roll_back(
    tmp_path: Path, checkpoints: dict[int, Path], env: dict[str, str], triton: dict[str, str], cli: Cli
) -> tuple[Client, int]:
    """v1 served, a client sending, v2 released to the live server, then rolled back. The
    runs and the rollback go through deploy's CLI in this process; the server is its own."""
    config, data = _released_v1(tmp_path, checkpoints, env, triton, cli)

    http_port, grpc_port, metrics_port = _free_ports(3)
    url = f"127.0.0.1:{http_port}"
    ports = [
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--metrics-port",
        str(metrics_port),
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "deploy", "serve", str(config), *ports, *(["--published"] if triton else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    x = np.load(checkpoints[8].parent / "test.npy")[:4].astype(np.float32)  # real held-out digits
    client = Client(url, x)
    try:
        _wait_ready(url, server)
        client.start()
        time.sleep(1.0)
        data["model"]["checkpoint"] = str(checkpoints[30])
        data["stages"]["release"] |= {
            "servers": [f"http://{url}"],
            "accept_regression": "retrained for 30 epochs",
        }
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        released = cli("run", str(config), env=env)
        assert released.returncode == 0, released.stdout + released.stderr
        switched = _answers_sent_after(client, len(client.answers))
        rolled = cli("rollback", str(config), env=env)  # the config's servers are switched
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        _answers_sent_after(client, len(client.answers))
    finally:
        client.stop.set()
        client.join(timeout=30)
        server.send_signal(signal.SIGTERM)
        log, _ = server.communicate(timeout=60)
    assert f"repository  {triton.get('publish_to', tmp_path / 'model_repository')}" in log, log[-2000:]
    return client, switched


def _check(client: Client, switched: int, model_dir: Path) -> None:
    """No failed request; every answer one version's; v1 then v2, then v2 then v1; and the
    server wrote nothing into the published repository (the python backend's bytecode)."""
    assert releases.versions(model_dir) == [1, 2]
    assert not list(model_dir.rglob("__pycache__"))
    x = client.x
    old, new = _reference(model_dir / "1" / "model.onnx", x), _reference(model_dir / "2" / "model.onnx", x)
    assert not np.allclose(old, new, atol=1e-3)  # the retrained model answers differently
    assert client.errors == []
    which = [
        1 if np.allclose(a, old, atol=1e-4) else 2 if np.allclose(a, new, atol=1e-4) else 0
        for a in client.answers
    ]
    assert 0 not in which  # every answer is one version's
    released, rolled_back = which[:switched], which[switched:]
    said = f"answers (version, in a row): {_runs(released)} | {_runs(rolled_back)}"
    assert released[0] == 1 and released[-1] == 2 and released == sorted(released), (
        f"one switch, never back; {said}"
    )
    assert (
        rolled_back[0] == 2 and rolled_back[-1] == 1 and rolled_back == sorted(rolled_back, reverse=True)
    ), said
    assert min(which.count(1), which.count(2)) > 10, (which.count(1), which.count(2))
