"""A tritonserver for the smoke stage and `deploy serve`: found, started, watched, stopped.

Our own servers bind to loopback, on the ports configured or given (a taken one is an
error: something else answers there) and on free ports for the rest; they run in their
own process group and die with us (PR_SET_PDEATHSIG), so no tritonserver outlives a run:
not on success, failure, Ctrl-C, SIGTERM, nor when the pipeline process itself is killed.
Only stdlib and pydantic at import time; tritonclient is imported by the checks.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from deploy.pipeline.errors import FILE_TOO_LARGE, DiskFull, EnvError, MissingDependency, StageFailed
from deploy.pipeline.process import lifeline
from deploy.serving.locate import Launch, locate
from deploy.serving.model_state import UNKNOWN, LoadState
from deploy.serving.ports import Probe, choose_ports, listens, probe
from deploy.serving.server_spec import ServerKind, ServerSpec

PORT_RETRIES = 3
METRICS_WAIT_S = 3.0  # for the metrics port once HTTP answers (it follows within ~0.05 s)
# Where nothing is in flight at the end (a stage's own checks), a graceful stop only waits:
# Triton polls its live models once a second, which took 2.4 s per resnet50 server here.
GRACE_S = 10.0
_STARTED = itertools.count()  # servers this process started: each names its own /dev/shm regions
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequested(Exception):
    """SIGINT, SIGTERM or SIGHUP while a foreground server runs (`deploy serve`)."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.signal_name}")


@dataclass
class Server:
    http: str  # host:port
    grpc: str
    log_path: Path
    metrics: str | None  # host:port; None: not ours to know (a URL)
    backends: set[str] | None  # None: unknown (a URL or an image)
    process: subprocess.Popen[bytes] | None = None
    container: str | None = None
    notes: list[str] = field(default_factory=list)
    shm: str = ""  # the python backend's /dev/shm regions start with this (ours only)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


# -- starting and stopping -------------------------------------------------------------------
@contextmanager
def serving(
    spec: ServerSpec,
    repo: Path | str,
    models: list[str],
    workdir: Path,
    origins: Mapping[str, str] | None = None,
    idle_at_end: bool = False,
) -> Iterator[Server]:
    """A live server with `models` loading; always stopped (ours) on the way out.
    `origins`: where explicit ports came from, for the error when one is taken.
    `idle_at_end`: the caller has nothing in flight when the block ends (a stage's checks),
    so without a configured stop_grace_s the server is killed at once."""
    deadline = time.monotonic() + spec.startup_timeout_s  # one wait for the start, however it is spent
    server = _start(spec, repo, models, workdir, origins or {}, deadline)
    loaded: list[str] = []
    with lifeline.on_stop(functools.partial(_remove_container, server)):
        try:
            wait_live(server, deadline)
            if spec.kind is ServerKind.URL:
                loaded = _load_into_existing(server, models)
            yield server
        except StopRequested:
            raise
        except Exception as exc:  # a refused connection says less than the server's own end
            ended = exited(server, "while it served")
            if ended is None:
                raise
            raise ended from exc
        finally:
            _unload(server, loaded)
            stop(server, grace_s(spec, idle_at_end))


def grace_s(spec: ServerSpec, idle_at_end: bool) -> float:
    if spec.stop_grace_s is not None:
        return spec.stop_grace_s
    return 0.0 if idle_at_end else GRACE_S


def _remove_container(server: Server) -> None:
    """The stage is being stopped (timeout, interrupt, the run's death): no time for a
    graceful stop, and no `finally` will run; the container goes at once."""
    if server.container is not None:
        subprocess.run(["docker", "rm", "-f", server.container], capture_output=True, timeout=30)


def _load_into_existing(server: Server, models: list[str]) -> list[str]:
    """On a server we did not start, load what isn't loaded yet (explicit mode), and
    remember it, so that exactly those are unloaded afterwards."""
    states = repository_index(server)
    loaded = []
    for model in models:
        if states.get(model, UNKNOWN).ready:
            server.notes.append(f"{model} was already loaded; left as it was")
            continue
        error = _post(server, f"/v2/repository/models/{model}/load")
        if error is None:
            loaded.append(model)
        else:
            server.notes.append(f"could not load {model} through the model-control API: {error}")
    return loaded


def _unload(server: Server, models: list[str]) -> None:
    for model in models:
        _post(server, f"/v2/repository/models/{model}/unload")


def _post(server: Server, path: str) -> str | None:
    """None on success, else the server's error message."""
    request = urllib.request.Request(f"http://{server.http}{path}", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=600):
            return None
    except urllib.error.HTTPError as exc:
        return exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return str(exc)


def _start(
    spec: ServerSpec,
    repo: Path | str,
    models: list[str],
    workdir: Path,
    origins: Mapping[str, str],
    deadline: float,
) -> Server:
    log = workdir / "server.log"
    if spec.kind is ServerKind.URL:
        log.write_text(f"existing server at {spec.url}; its log is not ours\n")
        return Server(str(spec.url), str(spec.grpc_url), log, None, None)
    if spec.kind is ServerKind.DOCKER:
        if isinstance(repo, str):
            raise StageFailed(f"a docker server is given a directory to mount, not {repo}")
        return _start_docker(spec, repo, models, log, origins)
    launch = locate(spec, workdir)
    notes: list[str] = []
    for attempt in range(PORT_RETRIES):
        # Each attempt checks the explicit ports again: one taken meanwhile is PortInUse,
        # never retried; a retry only ever re-picks the free ones.
        server = _start_local(spec, launch, repo, models, log, origins)
        server.notes[:0] = notes
        try:
            lost = _lost_port_race(server, deadline)
        except BaseException:  # a stop (`deploy serve` told to stop while it loads) takes it along
            stop(server, 0)
            raise
        if not lost:
            return server
        notes = [
            *server.notes,
            f"attempt {attempt + 1}: a port was taken before the server bound it; retrying",
        ]
    return server


def _start_local(
    spec: ServerSpec,
    launch: Launch,
    repo: Path | str,  # a directory, or a URL Triton reads itself (s3://host:port/bucket/path)
    models: list[str],
    log: Path,
    origins: Mapping[str, str],
) -> Server:
    ports = choose_ports(spec, origins)
    command = [str(launch.binary), f"--model-repository={repo}", "--model-control-mode=explicit"]
    command += [f"--load-model={m}" for m in models]
    lifeline.remove_stale_shm()
    shm = f"{lifeline.shm_prefix()}{next(_STARTED)}-"
    command += _network_flags(spec.host, ports) + [
        "--exit-on-error=false",
        f"--log-verbose={spec.log_verbose}",
        f"--backend-config=python,shm-region-prefix-name={shm}",
    ]
    command += _local_cache_flags(spec, Path(launch.binary))
    if launch.backend_dir is not None:
        command.append(f"--backend-directory={launch.backend_dir}")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=launch.env,
            start_new_session=True,
            preexec_fn=lifeline.die_with_parent,  # before exec: the kernel kills it if we die
        )
    backends = {p.name for p in launch.backend_dir.iterdir()} if launch.backend_dir else None
    http, grpc, metrics = (f"{spec.host}:{port}" for port in ports)
    return Server(http, grpc, log, metrics, backends, process, shm=shm)


def _network_flags(host: str, ports: list[int]) -> list[str]:
    return [
        f"--http-address={host}",
        f"--http-port={ports[0]}",
        f"--grpc-address={host}",
        f"--grpc-port={ports[1]}",
        f"--metrics-address={host}",
        f"--metrics-port={ports[2]}",
    ]


def _lost_port_race(server: Server, deadline: float) -> bool:
    """True when a port we picked was taken meanwhile: the server said so (it exits, maybe
    only after unloading its models, so its log is read, not its end), or
    the port answered before our server listened there (Triton binds its ports only once
    its models are loaded, so another tritonserver that picked the same free port answers
    first), or as no tritonserver would (ports.probe). Such a server is stopped; the
    caller picks free ports again. False once ours answers (or at the deadline: wait_live
    says why)."""
    assert server.process is not None
    seen = Probe.DOWN
    while time.monotonic() < deadline and server.process.poll() is None:
        seen = probe(server.http, "/v2/health/live")
        if _bind_refused(server) or seen is not Probe.DOWN:
            break
        time.sleep(0.1)
    if _bind_refused(server):  # it may still be unloading its models on the way out
        stop(server, grace_s=5)
        return True
    if seen is not Probe.DOWN and server.process.poll() is None:
        if seen is Probe.UP and listens(server.process.pid, server.http):
            return _metrics_lost(server)
        server.notes.append(f"{server.http} answered, but not from our tritonserver (a port taken meanwhile)")
        stop(server, grace_s=5)
        return True
    return False


def _metrics_lost(server: Server) -> bool:
    """Triton binds its metrics port just after HTTP (43 ms later here): one taken meanwhile
    shows in its log a moment after HTTP answers. A build without metrics is waited for
    METRICS_WAIT_S at most."""
    assert server.process is not None
    until = time.monotonic() + METRICS_WAIT_S
    while server.metrics is not None and time.monotonic() < until and server.process.poll() is None:
        if listens(server.process.pid, server.metrics):
            return False
        if _bind_refused(server):
            break
        time.sleep(0.02)
    if _bind_refused(server):
        stop(server, grace_s=5)
        return True
    return False


def _bind_refused(server: Server) -> bool:
    """Triton logged that it could not bind a port of ours: it exits, whenever that is
    (after its models' unload lines, so the tail read is long)."""
    return "already in use" in server.log_tail(200)


def _start_docker(
    spec: ServerSpec, repo: Path, models: list[str], log: Path, origins: Mapping[str, str]
) -> Server:
    if shutil.which("docker") is None:
        raise MissingDependency("docker", "a Docker engine, or server kind auto/binary/url")
    ports = choose_ports(spec, origins)
    name = f"deploy-smoke-{os.getpid()}-{int(time.time())}"
    command = ["docker", "run", "-d", "--rm", "--name", name, "-v", f"{repo}:/models:ro"]
    command += [f"-p{spec.host}:{port}:{inner}" for port, inner in zip(ports, (8000, 8001, 8002))]
    command += ["--gpus", "all"] if spec.gpus else []
    command += [
        str(spec.image),
        "tritonserver",
        "--model-repository=/models",
        "--model-control-mode=explicit",
    ]
    command += [f"--load-model={m}" for m in models] + ["--exit-on-error=false", *_cache_flags(spec)]
    started = subprocess.run(command, capture_output=True, text=True)
    if started.returncode != 0:
        raise StageFailed(f"docker run failed: {started.stderr.strip()}")
    http, grpc, metrics = (f"{spec.host}:{port}" for port in ports)
    return Server(http, grpc, log, metrics, None, container=name)


def _cache_flags(spec: ServerSpec) -> list[str]:
    """The local response cache that models with response_cache enabled use."""
    return [f"--cache-config=local,size={spec.cache_mib << 20}"] if spec.cache_mib else []


def _local_cache_flags(spec: ServerSpec, binary: Path) -> list[str]:
    """A local binary looks for its cache library in <root>/caches (the nvidia-pytriton
    wheel ships it there, not in /opt/tritonserver/caches); without one, no cache: a
    server that cannot load a configured cache refuses to start."""
    for caches in (binary.resolve().parent.parent / "caches", Path("/opt/tritonserver/caches")):
        if (caches / "local").is_dir():
            return [*_cache_flags(spec), f"--cache-directory={caches}"] if spec.cache_mib else []
    return []


def stop(server: Server, grace_s: float) -> None:
    if server.container is not None:
        logs = subprocess.run(["docker", "logs", server.container], capture_output=True, text=True)
        server.log_path.write_text(logs.stdout + logs.stderr)
        subprocess.run(["docker", "stop", "-t", str(int(grace_s)), server.container], capture_output=True)
        return
    process = server.process
    if process is None:
        return
    if grace_s > 0 and process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    _signal_group(process, signal.SIGKILL)  # what is left of it: itself, or its stubs
    process.wait()
    if server.shm:  # a graceful stop unlinks its regions; a killed or crashed one leaves them
        lifeline.remove_shm(server.shm)


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


@contextmanager
def stop_requests() -> Iterator[None]:
    """For a foreground server: SIGINT, SIGTERM and SIGHUP raise StopRequested once, so
    that `with` blocks stop the server and remove temp dirs on every polite kill, not
    only on Ctrl-C. Later signals are ignored: they would cut that cleanup short (it is
    bounded by stop_grace_s). Off the main thread, where Python delivers no signals,
    nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_stop(signum: int, frame: FrameType | None) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise StopRequested(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- readiness -------------------------------------------------------------------------------
def exited(server: Server, when: str) -> StageFailed | DiskFull | None:
    """How our server ended, with its log's tail; None while it runs (or is not ours). The
    file size limit's signal is the machine's limit (exit 4, as a stage's write past it)."""
    process = server.process
    if process is None or process.poll() is None:
        return None
    code = process.returncode
    if code == -signal.SIGXFSZ:
        return DiskFull(f"tritonserver's writes (it was killed by SIGXFSZ {when})", FILE_TOO_LARGE)
    how = f"exited with code {code}"
    if code < 0 and -code in signal.valid_signals():
        how = f"was killed by {signal.Signals(-code).name}"
    return StageFailed(f"tritonserver {how} {when}; server log tail:\n{server.log_tail()}")


def wait_live(server: Server, deadline: float) -> None:
    while time.monotonic() < deadline:
        ended = exited(server, "while starting")
        if ended is not None:
            raise ended
        if _answers(server.http, "/v2/health/live") and _ours_listens(server):
            return
        time.sleep(0.1)
    if server.process is None:  # kind url: a server someone else runs is not there
        raise EnvError(
            f"no Triton server answers at http://{server.http}/v2/health/live (server.url): "
            "start it, or fix the url / grpc_url"
        )
    raise StageFailed(
        "tritonserver did not become live within the startup timeout (it loads the models "
        f"before it answers, so a model whose initialization hangs shows up here); server log tail:\n{server.log_tail()}"
    )


def _ours_listens(server: Server) -> bool:
    """A server we started answers only through its own socket: another process that
    holds the port is not it (ours then exits, and says so)."""
    return server.process is None or listens(server.process.pid, server.http)


def _answers(host_port: str, path: str) -> bool:
    """Whether a server there answers `path` with 200 (never raises: anything else is no)."""
    return probe(host_port, path) is Probe.UP


def repository_index(server: Server) -> dict[str, LoadState]:
    """model -> its load state, as the server reports it."""
    request = urllib.request.Request(f"http://{server.http}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return {m["name"]: LoadState.from_index(m) for m in json.loads(reply.read()) if "name" in m}
