"""A release reaches a live server with no failed request: `deploy serve` serves the
repository (explicit model control), a client sends continuously, `deploy run` releases
a retrained checkpoint, telling the server (stages.release.servers), then `deploy
rollback --server` goes back. Every request is answered: the old version's answers, then
the new one's, then the old one's again."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.serving import releases
from tests.helpers import run_cli, tiny_dict, train_tiny_digits

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


def test_a_release_and_a_rollback_reach_a_live_server_with_no_failed_request(tmp_path: Path) -> None:
    checkpoints = {}
    for epochs in (8, 30):
        (tmp_path / f"e{epochs}").mkdir()
        checkpoints[epochs] = tmp_path / f"e{epochs}" / "tiny_digits.pt"
        assert train_tiny_digits(checkpoints[epochs], epochs) > 0.88
    data = tiny_dict(tmp_path)
    data["model"]["checkpoint"] = str(checkpoints[8])
    formats = {"formats": ["onnx", "python"], "max_batch_size": 16, "publish": "released"}
    data["stages"] = {
        "export": data["stages"]["export"],
        "simplify": {},
        "triton_config": formats,
        "release": {},
    }
    config = tmp_path / "digits.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_cli("run", str(config)).returncode == 0

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
        [sys.executable, "-m", "deploy", "serve", str(config), *ports],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    x = np.load(checkpoints[8].parent / "test.npy")[:4].astype(np.float32)  # real held-out digits
    client = Client(url, x)
    try:
        deadline = time.monotonic() + 180
        while not _ready(f"http://{url}/v2/models/tiny_python/ready"):
            assert time.monotonic() < deadline and server.poll() is None, "the server never became ready"
            time.sleep(0.5)
        client.start()
        time.sleep(1.0)
        data["model"]["checkpoint"] = str(checkpoints[30])
        data["stages"]["release"] = {
            "servers": [f"http://{url}"],
            "accept_regression": "retrained for 30 epochs",
        }
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        released = run_cli("run", str(config))
        assert released.returncode == 0, released.stdout + released.stderr
        time.sleep(1.0)
        switched = len(client.answers)
        rolled = run_cli("rollback", str(config), "--server", f"http://{url}")
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        time.sleep(1.0)
    finally:
        client.stop.set()
        client.join(timeout=30)
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)

    model_dir = tmp_path / "model_repository" / "tiny_python"
    assert releases.versions(model_dir) == [1, 2]
    old, new = _reference(model_dir / "1" / "model.onnx", x), _reference(model_dir / "2" / "model.onnx", x)
    assert not np.allclose(old, new, atol=1e-3)  # the retrained model answers differently
    assert client.errors == []
    which = [
        1 if np.allclose(a, old, atol=1e-4) else 2 if np.allclose(a, new, atol=1e-4) else 0
        for a in client.answers
    ]
    assert 0 not in which  # every answer is one version's
    released, rolled_back = which[:switched], which[switched:]
    assert released[0] == 1 and released[-1] == 2 and released == sorted(released), "one switch, never back"
    assert rolled_back[0] == 2 and rolled_back[-1] == 1 and rolled_back == sorted(rolled_back, reverse=True)
    assert min(which.count(1), which.count(2)) > 10, (which.count(1), which.count(2))
