"""The server's lifecycle without a model: the binary located and the wheel's python
backend assembled in the work dir; the log's tail; a start that fails or never answers
reported as such; stopping a process group politely, then by force; and the signals
that stop a foreground server. Real processes throughout (no tritonserver: see
tests/serving/test_python_model.py for one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from deploy.pipeline.errors import EnvError, StageFailed
from deploy.serving.locate import locate
from deploy.serving.ports import free_port
from deploy.serving.server_spec import ServerSpec, pytriton_root
from deploy.serving.tritonserver import Server, StopRequested, serving, stop, stop_requests, wait_live


def test_the_wheels_server_gets_a_python_backend_in_the_work_dir(tmp_path: Path) -> None:
    launch = locate(ServerSpec(), tmp_path)
    root = pytriton_root()
    assert root is not None and launch.binary == root / "tritonserver" / "bin" / "tritonserver"
    assert launch.backend_dir == tmp_path / "backends"
    stub = launch.backend_dir / "python" / "triton_python_backend_stub"
    # A wrapper that starts the wheel's stub for this Python on a view of the version dir.
    shipped_stub = (
        root / "tritonserver" / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
    )
    linked = stub.with_name(f"{stub.name}.wheel")
    assert os.access(stub, os.X_OK) and f'exec "{linked}"' in stub.read_text()
    assert linked.resolve() == (shipped_stub / stub.name).resolve()
    # The backend library and its utils module, linked from the wheel (not copied into it).
    shipped = root / "tritonserver" / "backends" / "python"
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        link = launch.backend_dir / "python" / name
        assert link.is_symlink() and link.resolve() == (shipped / name).resolve()
    # The stub imports numpy / onnxruntime from this interpreter's environment.
    assert launch.env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert str(root.parent / "nvidia_pytriton.libs") in launch.env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert locate(ServerSpec(), tmp_path) == launch  # again: the links are there already


def test_a_binary_elsewhere_brings_its_own_backends_dir(tmp_path: Path) -> None:
    binary = tmp_path / "triton" / "bin" / "tritonserver"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    spec = ServerSpec(kind="binary", path=binary)
    assert locate(spec, tmp_path / "work").backend_dir is None
    (tmp_path / "triton" / "backends").mkdir()
    assert locate(spec, tmp_path / "work").backend_dir == tmp_path / "triton" / "backends"


def test_a_named_binary_that_is_not_a_file_is_an_environment_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "tritonserver"
    with pytest.raises(EnvError, match=f"server.path {missing} \\(server kind 'binary'\\) is not a file"):
        locate(ServerSpec(kind="binary", path=missing), tmp_path)


def server(tmp_path: Path, process: subprocess.Popen[bytes] | None = None, http: str | None = None) -> Server:
    http = http or f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    return Server(http, "127.0.0.1:1", tmp_path / "server.log", None, None, process)


def test_the_log_tail_is_its_last_lines(tmp_path: Path) -> None:
    s = server(tmp_path)
    assert s.log_tail() == "(no server log)"
    s.log_path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert s.log_tail(3) == "line 97\nline 98\nline 99"
    assert len(s.log_tail().splitlines()) == 40


def test_a_server_that_exits_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("E0101 error: creating server: Invalid argument\n")
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    process.wait()
    with pytest.raises(
        StageFailed, match=r"exited with code 3 while starting; server log tail:\nE0101 error"
    ):
        wait_live(server(tmp_path, process), time.monotonic() + 5)


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    s = server(tmp_path, process)
    try:
        started = time.monotonic()
        with pytest.raises(StageFailed, match="did not become live within the startup timeout"):
            wait_live(s, started + 0.3)
        assert time.monotonic() - started < 3
    finally:
        stop(s, 1)
    assert process.returncode == -signal.SIGTERM


def test_an_existing_server_that_is_not_there_is_an_environment_error(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    spec = ServerSpec(kind="url", url=f"127.0.0.1:{port}", grpc_url="127.0.0.1:1", startup_timeout_s=0.3)
    with pytest.raises(EnvError, match=f"no Triton server answers at http://127.0.0.1:{port}/v2/health/live"):
        with serving(spec, tmp_path, ["m"], tmp_path):
            pass
    assert (
        tmp_path / "server.log"
    ).read_text() == f"existing server at 127.0.0.1:{port}; its log is not ours\n"


def test_a_docker_server_needs_a_directory_to_mount(tmp_path: Path) -> None:
    spec = ServerSpec(kind="docker", image="nvcr.io/nvidia/tritonserver:24.05-py3")
    with pytest.raises(StageFailed, match="a docker server is given a directory to mount, not s3://b/r"):
        with serving(spec, "s3://b/r", ["m"], tmp_path):
            pass


# -- stopping ----------------------------------------------------------------------------------
CHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
# A polite parent (dies on SIGTERM) whose child ignores SIGTERM, as a stuck backend stub might.
PARENT = (
    "import subprocess, sys; "
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdout=subprocess.PIPE); "
    "child.stdout.readline(); print(child.pid, flush=True); child.wait()"
)


def gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    child = int(process.stdout.readline())
    started = time.monotonic()
    stop(server(tmp_path, process), grace_s=5)
    assert process.returncode == -signal.SIGTERM and time.monotonic() - started < 4
    assert gone(child), "a process left in the group (it ignored SIGTERM) is killed too"
    stop(server(tmp_path, process), grace_s=5)  # an exited server: nothing to do
    stop(server(tmp_path, None), grace_s=5)  # not ours: nothing to do


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
    started = time.monotonic()
    stop(server(tmp_path, process), grace_s=0.5)
    assert process.returncode == -signal.SIGKILL and 0.5 <= time.monotonic() - started < 4


def test_a_stop_signal_raises_once_and_later_ones_are_ignored_until_the_end() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with pytest.raises(StopRequested, match=r"^stopped by SIGTERM$") as raised:
        with stop_requests():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                # Cleanup (stopping the server) must not be cut short by a second Ctrl-C.
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)
    assert raised.value.signal_name == "SIGTERM"
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_off_the_main_thread_no_handler_is_installed() -> None:
    seen: list[object] = []

    def body() -> None:
        with stop_requests():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


def test_a_server_stopped_by_the_file_size_limit_is_the_machine_s_limit(tmp_path: Path) -> None:
    """A server killed by SIGXFSZ (`ulimit -f` on a CI agent) was a failed smoke (exit 1)
    where a stage's own write past the limit says exit 4 and how to get past it."""
    import resource

    from deploy.pipeline.errors import ExitCode
    from deploy.serving.tritonserver import Server, exited

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python's children inherit it ignored

    with (tmp_path / "log").open("wb") as log:  # a writer past the limit, as the server's log was
        writer = subprocess.Popen(["head", "-c", "1000000", "/dev/zero"], stdout=log, preexec_fn=limited)
        writer.wait(timeout=30)
    server = Server("127.0.0.1:1", "127.0.0.1:2", tmp_path / "log", None, None, process=writer)  # type: ignore[arg-type]
    ended = exited(server, "while it served")
    assert writer.returncode == -signal.SIGXFSZ and ended is not None
    assert ended.exit_code == ExitCode.ENVIRONMENT
    assert (
        "the file size limit (ulimit -f) stops tritonserver's writes (it was killed by SIGXFSZ while it served)"
        in str(ended)
    )
