"""Our tritonserver is the one answering: a real tritonserver binds its ports only once
its models are loaded, so another process that took the free port picked for it answers
first. That server is not taken for ours (its port is picked again), and a server of
ours that dies is named by how it ended, not by a refused connection."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.pipeline.errors import StageFailed
from deploy.serving import tritonserver
from deploy.serving.launch import serve_repository
from deploy.serving.model_state import ModelState
from deploy.serving.ports import Probe, free_port, listens, probe
from deploy.serving.server_spec import ServerSpec
from tests.serving.test_launch import DOUBLE, python_model

pytestmark = pytest.mark.triton

# Answers 200 to every GET, as a live tritonserver's /v2/health/live does.
IMPOSTOR = """
import http.server, sys
class Live(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Live).serve_forever()
"""

SLOW = "import time\ntime.sleep(3)  # Triton binds its ports after this load\n" + DOUBLE


def test_listens_tells_our_listener_from_another_process() -> None:
    with socket.socket() as ours:
        ours.bind(("127.0.0.1", 0))
        ours.listen()
        port = ours.getsockname()[1]
        assert listens(os.getpid(), f"127.0.0.1:{port}")
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not listens(other.pid, f"127.0.0.1:{port}")
        finally:
            other.kill()
            other.wait()


def test_a_port_answered_by_another_process_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tritonclient.http as httpclient

    repo = tmp_path / "repo"
    python_model(repo, "double", SLOW)
    impostors: list[subprocess.Popen[bytes]] = []
    choose = tritonserver.choose_ports

    def taken_first(spec: ServerSpec, origins: dict[str, str]) -> list[int]:
        ports = choose(spec, origins)
        if not impostors:  # the first pick is taken right after it was made
            impostors.append(subprocess.Popen([sys.executable, "-c", IMPOSTOR, str(ports[0])]))
            deadline = time.monotonic() + 30  # it answers before our server starts, loaded or not
            while probe(f"127.0.0.1:{ports[0]}", "/") is not Probe.UP and time.monotonic() < deadline:
                time.sleep(0.05)
        return ports

    monkeypatch.setattr(tritonserver, "choose_ports", taken_first)
    try:
        with serve_repository(ServerSpec(), repo, tmp_path / "work") as served:
            assert served.states["double"].state is ModelState.READY
            assert any("not from our tritonserver" in n for n in served.server.notes), served.server.notes
            assert served.server.process is not None
            assert listens(served.server.process.pid, served.server.http)
            client = httpclient.InferenceServerClient(served.server.http)
            assert client.is_model_ready("double")
        assert impostors[0].poll() is None, "the other process was stopped: it was not ours"
    finally:
        for impostor in impostors:
            impostor.kill()
            impostor.wait()


@pytest.mark.parametrize("index", [0, 2], ids=["http", "metrics"])
def test_a_port_bound_by_another_process_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    """Bound, not listening: nothing answers there, Triton logs 'already in use' and exits
    only after unloading its model, so the retry rests on its log, not on its end. The
    metrics port is bound just after HTTP answers: lost, it is retried all the same."""
    repo = tmp_path / "repo"
    python_model(repo, "double", SLOW)
    holders: list[socket.socket] = []
    choose = tritonserver.choose_ports

    def taken_first(spec: ServerSpec, origins: dict[str, str]) -> list[int]:
        ports = choose(spec, origins)
        if not holders:
            holders.append(socket.socket())
            holders[0].bind((spec.host, ports[index]))  # no SO_REUSEADDR: Triton's bind fails
        return ports

    monkeypatch.setattr(tritonserver, "choose_ports", taken_first)
    try:
        with serve_repository(ServerSpec(), repo, tmp_path / "work") as served:
            assert served.states["double"].state is ModelState.READY
            retried = [n for n in served.server.notes if n.startswith("attempt 1: a port was taken")]
            assert retried, served.server.notes
            taken = f"127.0.0.1:{holders[0].getsockname()[1]}"
            assert taken not in (served.server.http, served.server.metrics)
            assert served.server.process is not None and served.server.metrics is not None
            assert listens(served.server.process.pid, served.server.http)
            assert listens(served.server.process.pid, served.server.metrics)
    finally:
        for holder in holders:
            holder.close()


def test_live_is_only_our_own_listener(tmp_path: Path) -> None:
    """Another process answering live on our server's port is not our server going live."""
    port = free_port("127.0.0.1")
    impostor = subprocess.Popen([sys.executable, "-c", IMPOSTOR, str(port)])
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        server = tritonserver.Server(f"127.0.0.1:{port}", "", tmp_path / "log", None, None, ours)
        deadline = time.monotonic() + 30
        while probe(server.http, "/v2/health/live") is not Probe.UP and time.monotonic() < deadline:
            time.sleep(0.1)
        assert probe(server.http, "/v2/health/live") is Probe.UP  # the impostor answers
        with pytest.raises(StageFailed, match="did not become live within the startup timeout"):
            tritonserver.wait_live(server, time.monotonic() + 1.0)
    finally:
        for process in (impostor, ours):
            process.kill()
            process.wait()


def test_a_server_killed_while_serving_is_named_by_its_end(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    python_model(repo, "double", DOUBLE)
    with pytest.raises(
        StageFailed, match=r"tritonserver was killed by SIGKILL while it served; server log tail"
    ):
        with serve_repository(ServerSpec(), repo, tmp_path / "work") as served:
            assert served.server.process is not None
            served.server.process.send_signal(signal.SIGKILL)
            served.server.process.wait()
            tritonserver.repository_index(served.server)  # refused: nothing listens any more
